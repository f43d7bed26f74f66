package cachebackend

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
)

func TestMasterArgs(t *testing.T) {
	base := []string{"--rpc_port=50051", "--rpc_address=$(POD_IP)", "--metrics_port=9003", "--enable_metric_reporting=true"}
	cases := map[string]struct {
		m    hicachev1alpha1.ManagedMooncake
		want []string
	}{
		"defaults only": {m: hicachev1alpha1.ManagedMooncake{RPCPort: 50051, AdminPort: 9003}, want: base},
		"other ports": {
			m:    hicachev1alpha1.ManagedMooncake{RPCPort: 6000, AdminPort: 6001},
			want: []string{"--rpc_port=6000", "--rpc_address=$(POD_IP)", "--metrics_port=6001", "--enable_metric_reporting=true"},
		},
		"eviction and lease": {
			m: hicachev1alpha1.ManagedMooncake{RPCPort: 50051, AdminPort: 9003, EvictionHighWatermarkRatio: "0.9", EvictionRatio: "0.05", LeaseTTLMillis: 5000},
			want: append(append([]string{}, base...),
				"--eviction_high_watermark_ratio=0.9", "--eviction_ratio=0.05", "--default_kv_lease_ttl=5000"),
		},
		"only the lease": {
			m:    hicachev1alpha1.ManagedMooncake{RPCPort: 50051, AdminPort: 9003, LeaseTTLMillis: 1},
			want: append(append([]string{}, base...), "--default_kv_lease_ttl=1"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, masterArgs(&tc.m)); diff != "" {
				t.Errorf("masterArgs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildMasterDeployment(t *testing.T) {
	cb := testsupport.ManagedBackend("mc")
	dep := BuildMasterDeployment(cb, "mooncake:test")
	if dep.Name != "mc-master" || ptr.Deref(dep.Spec.Replicas, 0) != 1 || dep.Spec.Strategy.Type != "Recreate" {
		t.Errorf("deployment %s, %v replicas, strategy %s; want mc-master, one master, Recreate", dep.Name, dep.Spec.Replicas, dep.Spec.Strategy.Type)
	}
	if sel, _ := metav1.LabelSelectorAsSelector(dep.Spec.Selector); !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("the selector %s misses the template labels", sel)
	}
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if diff := cmp.Diff(masterArgs(cb.Spec.Mooncake.Managed), c.Args); diff != "" {
		t.Errorf("args (-masterArgs +got):\n%s", diff)
	}
	if ip, ok := testsupport.EnvValue(c.Env, "POD_IP"); !ok || ip.ValueFrom == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("POD_IP (for --rpc_address) = %+v", ip)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if diff := cmp.Diff(map[string]int32{"rpc": 50051, "admin": 9003}, ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.StrVal != "admin" {
			t.Errorf("%s probe %+v, want GET /health on the admin port", name, p)
		}
	}
	if diff := cmp.Diff(cb.Spec.Mooncake.Managed.Resources, c.Resources); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	if !ptr.Deref(pod.SecurityContext.RunAsNonRoot, false) || ptr.Deref(c.SecurityContext.AllowPrivilegeEscalation, true) {
		t.Error("the master pod is not restricted")
	}
	if o := dep.OwnerReferences; len(o) != 1 || o[0].Kind != "CacheBackend" || o[0].UID != cb.UID {
		t.Errorf("owner references %+v", o)
	}

	svc := buildMasterService(cb)
	if sel := labels.SelectorFromSet(svc.Spec.Selector); svc.Name != dep.Name || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("service %s selects %s, want the master pods", svc.Name, sel)
	}
	for _, p := range svc.Spec.Ports {
		if ports[p.TargetPort.StrVal] != p.Port {
			t.Errorf("service port %s %d targets %q, whose container port is %d", p.Name, p.Port, p.TargetPort.StrVal, ports[p.TargetPort.StrVal])
		}
	}
}

func TestUsage(t *testing.T) {
	cases := map[string]struct {
		used, capacity int64
		want           string
	}{
		"no capacity known": {used: 1 << 30, want: "1Gi"},
		"a quarter":         {used: 4 << 30, capacity: 16 << 30, want: "4Gi/16Gi (25%)"},
		"empty":             {used: 0, capacity: 16 << 30, want: "0/16Gi (0%)"},
		"full":              {used: 16 << 30, capacity: 16 << 30, want: "16Gi/16Gi (100%)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := usage(tc.used, tc.capacity); got != tc.want {
				t.Errorf("usage(%d, %d) = %q, want %q", tc.used, tc.capacity, got, tc.want)
			}
		})
	}
}

func TestReuseProbe(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	last := probeRecord{AdminURL: "http://m:9003", Generation: 2, At: t0}
	interval := 15 * time.Second
	cases := map[string]struct {
		last       probeRecord
		ok         bool
		url        string
		generation int64
		now        time.Time
		reuse      bool
		after      time.Duration
	}{
		"never probed":                {ok: false, url: "http://m:9003", generation: 2, now: t0, after: interval},
		"an event right after":        {last: last, ok: true, url: "http://m:9003", generation: 2, now: t0.Add(time.Second), reuse: true, after: 14 * time.Second},
		"just before the next poll":   {last: last, ok: true, url: "http://m:9003", generation: 2, now: t0.Add(interval - time.Millisecond), reuse: true, after: time.Millisecond},
		"the poll is due":             {last: last, ok: true, url: "http://m:9003", generation: 2, now: t0.Add(interval), after: interval},
		"long overdue":                {last: last, ok: true, url: "http://m:9003", generation: 2, now: t0.Add(time.Hour), after: interval},
		"another URL":                 {last: last, ok: true, url: "http://n:9003", generation: 2, now: t0.Add(time.Second), after: interval},
		"the spec changed":            {last: last, ok: true, url: "http://m:9003", generation: 3, now: t0.Add(time.Second), after: interval},
		"a clock that went backwards": {last: last, ok: true, url: "http://m:9003", generation: 2, now: t0.Add(-time.Second), after: interval},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reuse, after := reuseProbe(tc.last, tc.ok, tc.url, tc.generation, tc.now, interval)
			if reuse != tc.reuse || after != tc.after {
				t.Errorf("reuseProbe = %v, %v; want %v, %v", reuse, after, tc.reuse, tc.after)
			}
		})
	}
}

func TestSetBackendConditions(t *testing.T) {
	ep := &hicachev1alpha1.BackendEndpoints{RPCAddress: "m:50051", AdminURL: "http://m:9003"}
	type cond struct{ Status, Reason, Message string }
	cases := map[string]struct {
		deployed bool
		rec      probeRecord
		want     map[string]cond
		keys     int64
	}{
		"no master pod yet": {
			want: map[string]cond{
				hicachev1alpha1.ConditionReady:           {"False", hicachev1alpha1.ReasonMasterNotDeployed, "The managed Mooncake master has no available pod yet"},
				hicachev1alpha1.ConditionMasterReachable: {"False", hicachev1alpha1.ReasonMasterNotDeployed, "The managed Mooncake master has no available pod yet"},
			},
		},
		"serving": {
			deployed: true,
			rec:      probeRecord{Probe: storeuse.BackendProbe{ServiceReady: true, KeyCount: 7, CapacityBytes: 4 << 30, UsedBytes: 1 << 30, SegmentCount: 2}},
			keys:     7,
			want: map[string]cond{
				hicachev1alpha1.ConditionReady:        {"True", hicachev1alpha1.ReasonHealthy, "Mooncake master at m:50051 is ready with 7 objects"},
				hicachev1alpha1.ConditionServiceReady: {"True", hicachev1alpha1.ReasonServiceReady, "The master reports service_ready"},
			},
		},
		"an HA standby": {
			deployed: true,
			rec:      probeRecord{Probe: storeuse.BackendProbe{Standby: true}},
			want: map[string]cond{
				hicachev1alpha1.ConditionReady:           {"False", hicachev1alpha1.ReasonServiceNotReady, "The master at http://m:9003 answers but is an HA standby, which does not serve: point the backend at the leader"},
				hicachev1alpha1.ConditionMasterReachable: {"True", hicachev1alpha1.ReasonMasterReachable, "The admin API at http://m:9003 answers"},
			},
		},
		"starting": {
			deployed: true,
			want: map[string]cond{
				hicachev1alpha1.ConditionReady: {"False", hicachev1alpha1.ReasonServiceNotReady, "The master at http://m:9003 answers but its service is not ready yet (service_ready is false)"},
			},
		},
		"a failed probe": {
			deployed: true,
			rec:      probeRecord{Err: &mooncake.HTTPError{Method: "GET", URL: "http://m:9003/health", StatusCode: 500}},
			want: map[string]cond{
				hicachev1alpha1.ConditionReady:        {"False", hicachev1alpha1.ReasonMasterUnreachable, "The Mooncake master's admin API at http://m:9003 fails its probe: the Mooncake master answered GET http://m:9003/health with HTTP 500"},
				hicachev1alpha1.ConditionServiceReady: {"False", hicachev1alpha1.ReasonMasterUnreachable, "Unknown while the master is unreachable"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := &hicachev1alpha1.CacheBackendStatus{Endpoints: ep}
			setBackendConditions(st, 3, testsupport.T0.Time, tc.deployed, tc.rec)
			for typ, want := range tc.want {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil {
					t.Fatalf("no %s condition", typ)
				}
				if got := (cond{string(c.Status), c.Reason, c.Message}); got != want || c.ObservedGeneration != 3 {
					t.Errorf("%s = %+v (generation %d), want %+v (generation 3)", typ, got, c.ObservedGeneration, want)
				}
			}
			if st.KeyCount != tc.keys {
				t.Errorf("keyCount %d, want %d", st.KeyCount, tc.keys)
			}
		})
	}
}

func TestExplicitPort(t *testing.T) {
	for in, want := range map[string]int32{
		"http://m:9003":              9003,
		"https://proxy/mooncake":     0,
		"http://[::1]:9004/x":        9004,
		"http://m:70000":             0,
		"not a url at all: %zz":      0,
		"http://m.ns.svc.cluster:80": 80,
	} {
		if got := storeuse.ExplicitPort(in); got != want {
			t.Errorf("explicitPort(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestNamespaceUsageOf(t *testing.T) {
	writer := func(ns, name, l3 string) hicachev1alpha1.HiCacheDeployment {
		return hicachev1alpha1.HiCacheDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status: hicachev1alpha1.HiCacheDeploymentStatus{Cache: &hicachev1alpha1.CacheStatus{Namespace: l3, Backend: "mc"}}}
	}
	many := func(n int, l3 string) []hicachev1alpha1.HiCacheDeployment {
		var out []hicachev1alpha1.HiCacheDeployment
		for i := range n {
			out = append(out, writer("default", fmt.Sprintf("d%03d", i), l3))
		}
		return out
	}
	names := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("d%03d", i))
		}
		return out
	}
	cases := map[string]struct {
		writers   []hicachev1alpha1.HiCacheDeployment
		want      []hicachev1alpha1.NamespaceUsage
		wantCount int32
	}{
		"none": {},
		"names relative to the backend, sorted": {
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-b", "q", "hc-b"), writer("default", "z", "hc-a"), writer("default", "a", "hc-a")},
			want: []hicachev1alpha1.NamespaceUsage{
				{Namespace: "hc-a", Deployments: []string{"a", "z"}, DeploymentCount: 2},
				{Namespace: "hc-b", Deployments: []string{"team-b/q"}, DeploymentCount: 1},
			},
			wantCount: 2,
		},
		"64 users: all named": {
			writers:   many(64, "hc-a"),
			want:      []hicachev1alpha1.NamespaceUsage{{Namespace: "hc-a", Deployments: names(64), DeploymentCount: 64}},
			wantCount: 1,
		},
		"65 users: 64 named, all counted": {
			writers:   many(65, "hc-a"),
			want:      []hicachev1alpha1.NamespaceUsage{{Namespace: "hc-a", Deployments: names(64), DeploymentCount: 65}},
			wantCount: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, count := namespaceUsageOf(tc.writers, "default")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			if count != tc.wantCount {
				t.Errorf("namespaceCount %d, want %d", count, tc.wantCount)
			}
		})
	}

	// 300 namespaces: the first 256 listed, every one counted.
	var writers []hicachev1alpha1.HiCacheDeployment
	for i := range 300 {
		writers = append(writers, writer("default", "d", fmt.Sprintf("hc-%03d", i)))
	}
	got, count := namespaceUsageOf(writers, "default")
	if len(got) != hicachev1alpha1.MaxListedNamespaces || count != 300 || got[255].Namespace != "hc-255" {
		t.Errorf("%d namespaces listed (last %s), %d counted; want 256 listed up to hc-255 and 300 counted", len(got), got[len(got)-1].Namespace, count)
	}
}

func TestTruncatedUsage(t *testing.T) {
	cases := map[string]struct {
		st   hicachev1alpha1.CacheBackendStatus
		want []string
	}{
		"nothing truncated": {
			st: hicachev1alpha1.CacheBackendStatus{NamespaceCount: 1, Namespaces: []hicachev1alpha1.NamespaceUsage{{Namespace: "hc-a", Deployments: []string{"a"}, DeploymentCount: 1}}},
		},
		"a namespace with more users than named": {
			st:   hicachev1alpha1.CacheBackendStatus{NamespaceCount: 1, Namespaces: []hicachev1alpha1.NamespaceUsage{{Namespace: "hc-a", Deployments: []string{"a"}, DeploymentCount: 65}}},
			want: []string{"namespace hc-a is used by 65 HiCacheDeployments", "deploymentCount"},
		},
		"more namespaces than listed": {
			st:   hicachev1alpha1.CacheBackendStatus{NamespaceCount: 300, Namespaces: make([]hicachev1alpha1.NamespaceUsage, 256)},
			want: []string{"300 namespaces are in use", "first 256", "namespaceCount"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := truncatedUsage(&tc.st)
			if len(tc.want) == 0 && got != "" {
				t.Errorf("%q, want nothing", got)
			}
			if len(tc.want) > 0 && got == "" {
				t.Error("nothing said, want the bound reported")
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not say %q", got, w)
				}
			}
		})
	}
}

func TestNamespaceUseChanged(t *testing.T) {
	base := func() *hicachev1alpha1.HiCacheDeployment {
		h := testsupport.MakeHCD("q").TP(4).Storage("mc").Obj()
		h.Status = hicachev1alpha1.HiCacheDeploymentStatus{
			ReadyReplicas: 1,
			Conditions:    []metav1.Condition{{Type: hicachev1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AllGroupsReady"}},
			Cache: &hicachev1alpha1.CacheStatus{Namespace: "hc-a", Backend: "mc", LayoutHash: "aaaa", ShortHash: "aa",
				StaleNamespaces: []hicachev1alpha1.StaleNamespace{{Namespace: "hc-old", Backend: "mc", LayoutHash: "0ld"}}},
		}
		return h
	}
	cases := map[string]struct {
		change func(h *hicachev1alpha1.HiCacheDeployment)
		want   bool
	}{
		"nothing":                      {change: func(*hicachev1alpha1.HiCacheDeployment) {}},
		"ready groups":                 {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.ReadyReplicas = 0 }},
		"a condition":                  {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.Conditions[0].Status = metav1.ConditionFalse }},
		"replicas in the spec":         {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Replicas = ptr.To(int32(3)) }},
		"what a stale namespace waits": {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.Cache.StaleNamespaces[0].BlockedBy = "in use" }},
		"its flush recorded":           {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.Cache.StaleNamespaces[0].Flush = "f" }},
		"the namespace written":        {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.Cache.Namespace = "hc-b" }, want: true},
		"the layout written":           {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.Cache.LayoutHash = "bbbb" }, want: true},
		"the backend written":          {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.Cache.Backend = "other" }, want: true},
		"the backend referred to":      {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Storage.BackendRef.Name = "other" }, want: true},
		"storage removed":              {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Storage = nil }, want: true},
		"no cache status any more":     {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.Cache = nil }, want: true},
		"a stale namespace added": {change: func(h *hicachev1alpha1.HiCacheDeployment) {
			h.Status.Cache.StaleNamespaces = append(h.Status.Cache.StaleNamespaces, hicachev1alpha1.StaleNamespace{Namespace: "hc-a", Backend: "mc"})
		}, want: true},
		"a stale namespace flushed and gone": {change: func(h *hicachev1alpha1.HiCacheDeployment) { h.Status.Cache.StaleNamespaces = nil }, want: true},
		"deletion begins": {change: func(h *hicachev1alpha1.HiCacheDeployment) {
			h.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			old, cur := base(), base()
			tc.change(cur)
			if got := namespaceUseChanged(old, cur); got != tc.want {
				t.Errorf("namespaceUseChanged = %v, want %v", got, tc.want)
			}
			if got := namespaceUseChanged(cur, old); got != tc.want {
				t.Errorf("namespaceUseChanged back = %v, want %v", got, tc.want)
			}
		})
	}
	// A deployment with no cache status yet and one with an empty one are the same use.
	a, b := base(), base()
	a.Status.Cache, b.Status.Cache = nil, &hicachev1alpha1.CacheStatus{}
	if namespaceUseChanged(a, b) {
		t.Error("an empty cache status counts as a change from none")
	}
}
