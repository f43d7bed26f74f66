package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// observed is a fluent builder of what status reads from a cluster, for the pure report.
type observed struct{ obs *observation }

// observe starts from a sample as the API server stores it (defaults applied), with the status
// the operator writes for it.
func observe(t *testing.T, sampleName string) *observed {
	t.Helper()
	items, err := loadDeployments(source{name: sample(sampleName)})
	if err != nil {
		t.Fatal(err)
	}
	h := items[0].hcd
	h.Namespace, h.Generation = "serving", 3
	r := resolveHCD(t, h)
	at := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	h.Status = hicachev1alpha1.HiCacheDeploymentStatus{
		ObservedGeneration: 3,
		Attention:          hicachev1alpha1.AttentionKind(r.Topology.Attention),
		Draft:              r.DraftSummary(),
		Conditions: []metav1.Condition{
			{Type: "Ready", Status: "True", Reason: "AllGroupsReady", Message: "All 1 serving groups are ready", LastTransitionTime: at},
			{Type: "BackendReady", Status: "True", Reason: "BackendReady", Message: `CacheBackend "mooncake" is ready at 10.0.0.9:50051`, LastTransitionTime: at},
		},
		Plan: &hicachev1alpha1.PlanStatus{Ranks: int32(r.Plan.NumRanks()), Nodes: int32(r.Nodes), Writers: int32(r.Writers()), Summary: r.Plan.Summary()},
		Cache: &hicachev1alpha1.CacheStatus{
			LayoutHash: r.Fingerprint, ShortHash: r.ShortHash, Namespace: r.Namespace,
			StaleNamespaces:        []hicachev1alpha1.StaleNamespace{{Namespace: "hc-0123456789", LayoutHash: "0123456789", Since: at, BlockedBy: "still used by HiCacheDeployment other"}},
			DroppedStaleNamespaces: 2,
			LastFlush:              &hicachev1alpha1.FlushRecord{Name: h.Name + "-flush-hc-aaaaaaaaaa", Namespace: "hc-aaaaaaaaaa", Removed: 96, CompletionTime: &at},
		},
	}
	planJSON, err := json.Marshal(r.Plan)
	if err != nil {
		t.Fatal(err)
	}
	return &observed{obs: &observation{
		hcd:       h,
		configMap: &corev1.ConfigMap{Data: map[string]string{"plan.json": string(planJSON)}},
		backend: &hicachev1alpha1.CacheBackend{Status: hicachev1alpha1.CacheBackendStatus{
			Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "Healthy", Message: "Mooncake master at 10.0.0.9:50051 is ready with 96 objects"}},
			KeyCount:   96, UsedBytes: 393216, CapacityBytes: 17179869184, Usage: "384Ki/16Gi (0.0%)",
			Endpoints: &hicachev1alpha1.BackendEndpoints{RPCAddress: "10.0.0.9:50051", AdminURL: "http://10.0.0.9:9003"},
		}},
	}}
}

// Pod adds a rank pod of group g at node rank i.
func (o *observed) Pod(g, i int, node string, ready bool) *observed {
	name := o.obs.hcd.Name + "-" + itoa(g) + "-" + itoa(i)
	status := corev1.ConditionFalse
	phase := corev1.PodPending
	if ready {
		status, phase = corev1.ConditionTrue, corev1.PodRunning
	}
	o.obs.pods = append(o.obs.pods, corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{hicachev1alpha1.LabelDeployment: o.obs.hcd.Name, hicachev1alpha1.LabelGroup: itoa(g), appsv1.PodIndexLabel: itoa(i)}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	})
	return o
}

// Group adds the StatefulSet of group g.
func (o *observed) Group(g int) *observed {
	o.obs.sets = append(o.obs.sets, appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{
		Name: o.obs.hcd.Name + "-" + itoa(g), Labels: map[string]string{hicachev1alpha1.LabelDeployment: o.obs.hcd.Name, hicachev1alpha1.LabelGroup: itoa(g)}}})
	return o
}

func (o *observed) Replicas(n int32) *observed { o.obs.hcd.Spec.Replicas = &n; return o }

func (o *observed) ConfigMap(cm *corev1.ConfigMap) *observed { o.obs.configMap = cm; return o }

func (o *observed) NoBackend() *observed { o.obs.backend = nil; return o }

func (o *observed) Obj() *observation { return o.obs }

func itoa(i int) string { return strconv.Itoa(i) }

func TestStatusReportGroups(t *testing.T) {
	type pod struct {
		name, node string
		ready      bool
		nodeRank   int
		ranks      [2]int
		writers    int
	}
	type grp struct {
		index            int
		desired, ready   bool
		readyPods, total int
		sts              string
		pods             []pod
	}
	tests := map[string]struct {
		obs       *observation
		wantReady string
		want      []grp
	}{
		"two-node group, ready": {
			obs:       observe(t, "deepseek_v4").Group(0).Pod(0, 1, "gpu-1", true).Pod(0, 0, "gpu-0", true).Obj(),
			wantReady: "1/1",
			want: []grp{{index: 0, desired: true, ready: true, readyPods: 2, total: 2, sts: "deepseek-v4-0", pods: []pod{
				{name: "deepseek-v4-0-0", node: "gpu-0", ready: true, nodeRank: 0, ranks: [2]int{0, 7}, writers: 1},
				{name: "deepseek-v4-0-1", node: "gpu-1", ready: true, nodeRank: 1, ranks: [2]int{8, 15}, writers: 0},
			}}},
		},
		"a pod missing, a pod pending, a group above replicas": {
			obs: observe(t, "deepseek_v4").Replicas(2).Group(0).Group(2).
				Pod(0, 0, "gpu-0", true).Pod(0, 1, "", false).Pod(2, 0, "gpu-3", true).Obj(),
			wantReady: "0/2",
			want: []grp{
				{index: 0, desired: true, readyPods: 1, total: 2, sts: "deepseek-v4-0", pods: []pod{
					{name: "deepseek-v4-0-0", node: "gpu-0", ready: true, nodeRank: 0, ranks: [2]int{0, 7}, writers: 1},
					{name: "deepseek-v4-0-1", nodeRank: 1, ranks: [2]int{8, 15}},
				}},
				{index: 1, desired: true, total: 2},
				{index: 2, readyPods: 1, total: 2, sts: "deepseek-v4-2", pods: []pod{
					{name: "deepseek-v4-2-0", node: "gpu-3", ready: true, nodeRank: 0, ranks: [2]int{0, 7}, writers: 1},
				}},
			},
		},
		"every rank of one pod writes": {
			obs:       observe(t, "qwen3").Pod(0, 0, "gpu-0", true).Obj(),
			wantReady: "1/1",
			want: []grp{{index: 0, desired: true, ready: true, readyPods: 1, total: 1, pods: []pod{
				{name: "qwen3-0-0", node: "gpu-0", ready: true, nodeRank: 0, ranks: [2]int{0, 3}, writers: 4},
			}}},
		},
		"scaled to zero": {obs: observe(t, "qwen3").Replicas(0).Obj(), wantReady: "0/0", want: []grp{}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rep := newStatusReport(tt.obs)
			if rep.Ready != tt.wantReady {
				t.Errorf("ready %s, want %s", rep.Ready, tt.wantReady)
			}
			got := []grp{}
			for _, g := range rep.Groups {
				gg := grp{index: g.Index, desired: g.Desired, ready: g.Ready, readyPods: g.ReadyPods, total: g.Pods, sts: g.StatefulSet}
				for _, p := range g.Members {
					gg.pods = append(gg.pods, pod{name: p.Name, node: p.Node, ready: p.Ready, nodeRank: p.NodeRank, ranks: [2]int{p.FirstRank, p.LastRank}, writers: p.Writers})
				}
				got = append(got, gg)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(grp{}, pod{})); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusReportDuties(t *testing.T) {
	// A plan in the ConfigMap that differs from the spec's, to tell which one was used.
	marked := func(t *testing.T) *corev1.ConfigMap {
		r := resolveHCD(t, observe(t, "deepseek_v4").Obj().hcd)
		p := r.Plan
		ranks := append([]cache.RankDuty(nil), p.Ranks()...)
		ranks[9].Writes = []cache.PoolKeys{{Pool: "swa", KeySuffixes: []string{"_swa"}}}
		p = p.WithRanks(ranks)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.ConfigMap{Data: map[string]string{"plan.json": string(b), "plan.txt": p.String()}}
	}
	tests := map[string]struct {
		cm                   *corev1.ConfigMap
		wantSource, wantNote string
		wantRank9Writes      bool
	}{
		"from the ConfigMap": {cm: marked(t), wantSource: "ConfigMap deepseek-v4-hicache", wantRank9Writes: true},
		"no ConfigMap": {wantSource: "recomputed from the spec",
			wantNote: "ConfigMap deepseek-v4-hicache does not exist (yet)"},
		"no plan.json": {cm: &corev1.ConfigMap{Data: map[string]string{"plan.txt": "x"}}, wantSource: "recomputed from the spec",
			wantNote: "ConfigMap deepseek-v4-hicache holds no plan.json"},
		"plan.json broken": {cm: &corev1.ConfigMap{Data: map[string]string{"plan.json": "{"}}, wantSource: "recomputed from the spec",
			wantNote: "plan.json of ConfigMap deepseek-v4-hicache is not a rank plan: unexpected end of JSON input"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			obs := observe(t, "deepseek_v4").ConfigMap(tt.cm).Pod(0, 1, "gpu-1", true).Obj()
			rep := newStatusReport(obs)
			d := rep.Duties
			if d.Source != tt.wantSource || d.Note != tt.wantNote {
				t.Errorf("source %q note %q, want %q and %q", d.Source, d.Note, tt.wantSource, tt.wantNote)
			}
			if d.Plan == nil || d.Plan.NumRanks() != 16 {
				t.Fatalf("plan %+v, want 16 ranks", d.Plan)
			}
			if got := d.Plan.Rank(9).HasDuties(); got != tt.wantRank9Writes {
				t.Errorf("rank 9 writes: %v, want %v", got, tt.wantRank9Writes)
			}
			// The pod of node rank 1 runs ranks 8-15: its writers follow the plan used.
			wantWriters := 0
			if tt.wantRank9Writes {
				wantWriters = 1
			}
			if w := rep.Groups[0].Members[0].Writers; w != wantWriters {
				t.Errorf("node rank 1 has %d writers, want %d", w, wantWriters)
			}
		})
	}
}

func TestStatusReportBackend(t *testing.T) {
	rep := newStatusReport(observe(t, "qwen3").NoBackend().Obj())
	if diff := cmp.Diff(&backendReport{Name: "mooncake"}, rep.Backend); diff != "" {
		t.Errorf("missing backend (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := writeStatus(&out, &rep); err != nil {
		t.Fatal(err)
	}
	if want := "CacheBackend mooncake:\n  not found: create it, or fix spec.storage.backendRef.name\n"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}

	h := observe(t, "qwen3").Obj()
	h.hcd.Spec.Storage = nil
	rep = newStatusReport(h)
	if rep.Backend != nil || rep.Storage != nil {
		t.Errorf("no spec.storage, yet backend %+v and storage %+v", rep.Backend, rep.Storage)
	}
}

// The text of status for a two-node DeepSeek-V4 group, against a golden file (-update rewrites it).
func TestStatusText(t *testing.T) {
	obs := observe(t, "deepseek_v4").Group(0).Pod(0, 0, "gpu-0", true).Pod(0, 1, "gpu-1", false).Obj()
	rep := newStatusReport(obs)
	var out bytes.Buffer
	if err := writeStatus(&out, &rep); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "status_deepseek_v4.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), out.String()); diff != "" {
		t.Errorf("status text (-golden +got):\n%s", diff)
	}
	for _, line := range []string{
		"Ready:      0/1 serving groups",
		"  0 (1/2 ready)  deepseek-v4-0-0  gpu-0  yes           0          0-7    1",
		"                 deepseek-v4-0-1  gpu-1  no (Pending)  1          8-15   0",
		"L3 duties of one serving group (writers: 1 of 16 ranks; ConfigMap deepseek-v4-hicache):",
		"  hc-0123456789  0123456789  2026-11-29T12:00:00Z  -      still used by HiCacheDeployment other",
		"  2 older stale namespaces were dropped from this list (it holds 32) and are no longer flushed by the operator:",
		"Last flush: CacheFlush deepseek-v4-flush-hc-aaaaaaaaaa removed 96 objects of namespace hc-aaaaaaaaaa, completed 2026-11-29T12:00:00Z",
		"  Ready:        True (Healthy) Mooncake master at 10.0.0.9:50051 is ready with 96 objects",
		"  Objects:      96",
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("output lacks the line %q", line)
		}
	}
}

// -o json of status is the report, and -o yaml the same document.
func TestStatusStructuredRoundTrip(t *testing.T) {
	rep := newStatusReport(observe(t, "qwen3").Pod(0, 0, "gpu-0", true).Obj())
	var js, ym bytes.Buffer
	if err := writeStructured(&js, outputJSON, rep); err != nil {
		t.Fatal(err)
	}
	if err := writeStructured(&ym, outputYAML, rep); err != nil {
		t.Fatal(err)
	}
	var fromJSON, fromYAML statusReport
	if err := json.Unmarshal(js.Bytes(), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(ym.Bytes(), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, fromJSON); diff != "" {
		t.Errorf("JSON round trip (-report +decoded):\n%s", diff)
	}
	if diff := cmp.Diff(fromJSON, fromYAML); diff != "" {
		t.Errorf("YAML differs from JSON (-json +yaml):\n%s", diff)
	}
}

func TestStatusRefusesBadArgs(t *testing.T) {
	empty := writeFile(t, "empty-kubeconfig", "")
	oneContext := writeFile(t, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: here, context: {cluster: c, user: u}}]
current-context: here
`)
	tests := map[string]struct {
		args []string
		want string
	}{
		"no name":          {args: []string{"status"}, want: "status takes one HiCacheDeployment name, got 0"},
		"two names":        {args: []string{"status", "a", "b"}, want: "status takes one HiCacheDeployment name, got 2"},
		"bad output":       {args: []string{"status", "a", "-o", "wide", "--kubeconfig", oneContext}, want: `-o "wide" is not an output format: use table, json, yaml`},
		"empty kubeconfig": {args: []string{"status", "a", "--kubeconfig", empty}, want: "no cluster to talk to: no kubeconfig found; set --kubeconfig or KUBECONFIG, or create ~/.kube/config"},
		"unknown context":  {args: []string{"status", "a", "--kubeconfig", oneContext, "--context", "elsewhere"}, want: `reading the kubeconfig: context "elsewhere" does not exist`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := runPlugin(t, "", tt.args...)
			if r.code != 1 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit code %d, stderr:\n%s\nwant code 1 and %q", r.code, r.stderr, tt.want)
			}
		})
	}
}

// A deployment with roles: each role's groups, named by role, with the ranks and writers of its
// own plan (plan.json is the prefill's, decode-plan.json the decode's, as the operator stores
// them).
func TestStatusReportRoles(t *testing.T) {
	items, err := loadDeployments(source{name: pdSample})
	if err != nil {
		t.Fatal(err)
	}
	h := items[0].hcd
	h.Namespace = "serving"
	roles, err := resolve.RolesOf(h)
	if err != nil {
		t.Fatal(err)
	}
	h.Status.Roles = &hicachev1alpha1.RolesStatus{
		Prefill: hicachev1alpha1.RoleStatus{Replicas: 2, ReadyReplicas: 2, DesiredReplicas: 2, Ready: "2/2"},
		Decode:  hicachev1alpha1.RoleStatus{Replicas: 1, ReadyReplicas: 0, DesiredReplicas: 1, Ready: "0/1"},
	}
	data := map[string]string{}
	for key, plan := range map[string]cache.RankPlan{"plan.json": roles.Prefill.Plan, "decode-plan.json": roles.Decode.Plan} {
		b, err := json.Marshal(plan)
		if err != nil {
			t.Fatal(err)
		}
		data[key] = string(b)
	}
	obs := &observation{hcd: h, configMap: &corev1.ConfigMap{Data: data}}
	add := func(role string, g, i int, ready bool) {
		l := map[string]string{hicachev1alpha1.LabelDeployment: h.Name, hicachev1alpha1.LabelRole: role, hicachev1alpha1.LabelGroup: itoa(g)}
		if i == 0 {
			obs.sets = append(obs.sets, appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: h.Name + "-" + role + "-" + itoa(g), Labels: l}})
		}
		pl := map[string]string{appsv1.PodIndexLabel: itoa(i)}
		for k, v := range l {
			pl[k] = v
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		obs.pods = append(obs.pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: h.Name + "-" + role + "-" + itoa(g) + "-" + itoa(i), Labels: pl},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}})
	}
	add("prefill", 0, 0, true)
	add("prefill", 1, 0, true)
	add("decode", 0, 0, true)
	add("decode", 0, 1, false)
	rep := newStatusReport(obs)
	if rep.Ready != "2/3" || rep.DesiredGroups != 3 {
		t.Errorf("ready %s of %d groups, want 2/3", rep.Ready, rep.DesiredGroups)
	}
	type grp struct {
		name             string
		ready            bool
		pods, writers    int
		lastRankOfLeader int
	}
	var got []grp
	for _, g := range rep.Groups {
		gg := grp{name: g.Role + "-" + itoa(g.Index), ready: g.Ready, pods: g.Pods}
		for _, p := range g.Members {
			gg.writers += p.Writers
			if p.NodeRank == 0 {
				gg.lastRankOfLeader = p.LastRank
			}
		}
		got = append(got, gg)
	}
	want := []grp{{"prefill-0", true, 1, 1, 7}, {"prefill-1", true, 1, 1, 7}, {"decode-0", false, 2, 0, 7}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(grp{})); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if len(rep.Roles) != 2 || rep.Roles[1].Duties.Source != "ConfigMap "+resolve.ConfigMapName(h.Name) || rep.Roles[1].Duties.Plan.NumRanks() != 16 {
		t.Errorf("role duties %+v, want the decode's 16 ranks from the ConfigMap", rep.Roles)
	}
	var out bytes.Buffer
	if err := writeStatus(&out, &rep); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Serving groups: 2/3 ready (prefill 2/2, decode 0/1)", "prefill-1 (1/1 ready)", "decode-0 (1/2 ready)",
		"L3 duties of one prefill group", "L3 duties of one decode group"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("status output lacks %q:\n%s", s, out.String())
		}
	}
}
