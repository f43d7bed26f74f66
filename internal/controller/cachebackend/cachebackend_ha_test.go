package cachebackend

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
)

func TestHAMasterDeployment(t *testing.T) {
	cb := testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "etcd-0.etcd:2379", "etcd-1.etcd:2379")
	d := BuildMasterDeployment(cb, "img")
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("strategy %+v: HA members must roll with a standby always there", d.Spec.Strategy)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--rpc_address=$(POD_IP)", "--enable_ha=true", "--ha_backend_type=etcd",
		"--ha_backend_connstring=etcd-0.etcd:2379;etcd-1.etcd:2379", "--cluster_id=default.mc", "--enable_oplog=true"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	if d.Spec.Template.Spec.Affinity == nil || d.Spec.Template.Spec.Affinity.PodAntiAffinity == nil {
		t.Error("HA members are not spread over nodes")
	}

	off := testsupport.WithHA(testsupport.ManagedBackend("mc"), 2, "e:2379")
	off.Spec.Mooncake.Managed.HA.ReplicateMetadata = ptr.To(false)
	off.Spec.Mooncake.Managed.HA.Etcd.ClusterID = "shared-7"
	args = BuildMasterDeployment(off, "img").Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--enable_oplog=false") || !slices.Contains(args, "--cluster_id=shared-7") {
		t.Errorf("args %v: replicateMetadata false and the spec's cluster id must reach the master", args)
	}

	single := BuildMasterDeployment(testsupport.ManagedBackend("mc"), "img")
	if *single.Spec.Replicas != 1 || single.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("a master without HA: replicas %d strategy %s, want 1 and Recreate", *single.Spec.Replicas, single.Spec.Strategy.Type)
	}
	for _, a := range single.Spec.Template.Spec.Containers[0].Args {
		if strings.Contains(a, "ha") && strings.HasPrefix(a, "--enable_ha") {
			t.Errorf("a master without HA got %s", a)
		}
	}
	if _, ok := buildMasterService(testsupport.ManagedBackend("mc")).Spec.Selector[hicachev1alpha1.LabelMasterRole]; ok {
		t.Error("the Service of a master without HA must not wait for a leader label")
	}
	if got := buildMasterService(cb).Spec.Selector[hicachev1alpha1.LabelMasterRole]; got != "leader" {
		t.Errorf("the HA master Service selects role %q, want the leader alone", got)
	}
}

func TestPlanHAView(t *testing.T) {
	h := func(role hicachev1alpha1.MasterRole, leader string, view int64) storeuse.MasterHealth {
		return storeuse.MasterHealth{Role: role, Leader: leader, ViewVersion: view}
	}
	o := func(name, ip string, mh storeuse.MasterHealth, err error) observedMaster {
		return observedMaster{masterTarget: masterTarget{Name: name, IP: ip}, Health: mh, Err: err}
	}
	down := errors.New("connection refused")
	cases := map[string]struct {
		obs  []observedMaster
		want haView
	}{
		"a leader and two standbys; the leader first": {
			obs: []observedMaster{
				o("m-a", "10.0.0.1", h(hicachev1alpha1.MasterStandby, "10.0.0.2:50051", 4), nil),
				o("m-b", "10.0.0.2", h(hicachev1alpha1.MasterLeader, "10.0.0.2:50051", 4), nil),
				o("m-c", "10.0.0.3", h(hicachev1alpha1.MasterStandby, "10.0.0.2:50051", 4), nil),
			},
			want: haView{LeaderPod: "m-b", LeaderIP: "10.0.0.2", Leader: "10.0.0.2:50051", ViewVersion: 4, Standbys: 2, Members: []hicachev1alpha1.MasterMember{
				{Name: "m-b", Address: "10.0.0.2:50051", Role: hicachev1alpha1.MasterLeader},
				{Name: "m-a", Address: "10.0.0.1:50051", Role: hicachev1alpha1.MasterStandby},
				{Name: "m-c", Address: "10.0.0.3:50051", Role: hicachev1alpha1.MasterStandby},
			}},
		},
		"the leader died: an election, no leader yet": {
			obs: []observedMaster{
				o("m-a", "10.0.0.1", h(hicachev1alpha1.MasterStarting, "", 4), nil),
				o("m-c", "10.0.0.3", h(hicachev1alpha1.MasterStandby, "10.0.0.2:50051", 4), nil),
			},
			want: haView{ViewVersion: 4, Standbys: 1, Members: []hicachev1alpha1.MasterMember{
				{Name: "m-a", Address: "10.0.0.1:50051", Role: hicachev1alpha1.MasterStarting},
				{Name: "m-c", Address: "10.0.0.3:50051", Role: hicachev1alpha1.MasterStandby},
			}},
		},
		"two claim to lead for a moment: the newer view wins": {
			obs: []observedMaster{
				o("m-a", "10.0.0.1", h(hicachev1alpha1.MasterLeader, "10.0.0.1:50051", 5), nil),
				o("m-b", "10.0.0.2", h(hicachev1alpha1.MasterLeader, "10.0.0.2:50051", 4), nil),
				o("m-c", "10.0.0.3", storeuse.MasterHealth{}, down),
			},
			want: haView{LeaderPod: "m-a", LeaderIP: "10.0.0.1", Leader: "10.0.0.1:50051", ViewVersion: 5, Members: []hicachev1alpha1.MasterMember{
				{Name: "m-a", Address: "10.0.0.1:50051", Role: hicachev1alpha1.MasterLeader},
				{Name: "m-b", Address: "10.0.0.2:50051", Role: hicachev1alpha1.MasterStarting},
				{Name: "m-c", Address: "10.0.0.3:50051", Role: hicachev1alpha1.MasterUnreachable},
			}},
		},
		"a leader naming no address: its pod's": {
			obs:  []observedMaster{o("m-a", "10.0.0.1", h(hicachev1alpha1.MasterLeader, "", 2), nil)},
			want: haView{LeaderPod: "m-a", LeaderIP: "10.0.0.1", Leader: "10.0.0.1:50051", ViewVersion: 2, Members: []hicachev1alpha1.MasterMember{{Name: "m-a", Address: "10.0.0.1:50051", Role: hicachev1alpha1.MasterLeader}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, planHAView(tc.obs, 50051)); diff != "" {
				t.Errorf("planHAView (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetStandbyCondition(t *testing.T) {
	ha := testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "e:2379")
	ext := &hicachev1alpha1.CacheBackend{Spec: hicachev1alpha1.CacheBackendSpec{Mooncake: &hicachev1alpha1.MooncakeSpec{
		External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "m:50051", AdminURL: "http://m:9003"}}}}
	cases := map[string]struct {
		cb         *hicachev1alpha1.CacheBackend
		view       *haView
		want       metav1.ConditionStatus
		reason     string
		msgContain string
	}{
		"one master without HA":      {cb: testsupport.ManagedBackend("mc"), want: metav1.ConditionFalse, reason: hicachev1alpha1.ReasonSingleMaster, msgContain: "spec.mooncake.managed.ha"},
		"HA with two standbys":       {cb: ha, view: &haView{LeaderPod: "m-a", Standbys: 2}, want: metav1.ConditionTrue, reason: hicachev1alpha1.ReasonStandbyReady},
		"HA whose standbys are down": {cb: ha, view: &haView{LeaderPod: "m-a", Members: []hicachev1alpha1.MasterMember{{Name: "m-a", Role: hicachev1alpha1.MasterLeader}, {Name: "m-b", Role: hicachev1alpha1.MasterUnreachable}}}, want: metav1.ConditionFalse, reason: hicachev1alpha1.ReasonNoStandby, msgContain: "1 answered of 3"},
		"HA not deployed yet":        {cb: ha, want: metav1.ConditionFalse, reason: hicachev1alpha1.ReasonNoStandby},
		"external: none":             {cb: ext, want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := &hicachev1alpha1.CacheBackendStatus{Conditions: []metav1.Condition{{Type: hicachev1alpha1.ConditionStandbyAvailable, Status: metav1.ConditionTrue}}}
			setStandbyCondition(st, tc.cb, tc.view, metav1.Now())
			c := meta.FindStatusCondition(st.Conditions, hicachev1alpha1.ConditionStandbyAvailable)
			if tc.want == "" {
				if c != nil {
					t.Fatalf("condition %+v, want none", c)
				}
				return
			}
			if c == nil || c.Status != tc.want || c.Reason != tc.reason || !strings.Contains(c.Message, tc.msgContain) {
				t.Errorf("condition %+v, want %s/%s mentioning %q", c, tc.want, tc.reason, tc.msgContain)
			}
		})
	}
}

func TestMasterHealthOf(t *testing.T) {
	v := uint64(7)
	cases := map[string]struct {
		in   mooncake.Health
		want storeuse.MasterHealth
	}{
		"leader":                        {mooncake.Health{Status: "ok", Role: "leader", HAState: "serving", ServiceReady: true, LeaderAddress: "10.0.0.2:50051", ViewVersion: &v}, storeuse.MasterHealth{Role: hicachev1alpha1.MasterLeader, Leader: "10.0.0.2:50051", ViewVersion: 7}},
		"standby":                       {mooncake.Health{Status: "ok", Role: "standby", HAState: "standby", LeaderAddress: "10.0.0.2:50051"}, storeuse.MasterHealth{Role: hicachev1alpha1.MasterStandby, Leader: "10.0.0.2:50051"}},
		"warming up after the election": {mooncake.Health{Status: "ok", Role: "leader", HAState: "leader_warmup"}, storeuse.MasterHealth{Role: hicachev1alpha1.MasterStarting}},
		"a leader address that is not one is not shown": {mooncake.Health{Status: "ok", Role: "standby", LeaderAddress: "<script>:1"}, storeuse.MasterHealth{Role: hicachev1alpha1.MasterStandby}},
	}
	for name, tc := range cases {
		if diff := cmp.Diff(tc.want, storeuse.MasterHealthOf(tc.in)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

func TestAdminURLAt(t *testing.T) {
	cases := map[string]struct{ url, host, want string }{
		"same port":        {"http://m-0.m:9003", "10.0.0.2", "http://10.0.0.2:9003"},
		"a path is kept":   {"https://m:8443/admin", "10.0.0.2", "https://10.0.0.2:8443/admin"},
		"default port":     {"http://m", "10.0.0.2", "http://10.0.0.2:80"},
		"IPv6":             {"http://m:9003", "fd00::2", "http://[fd00::2]:9003"},
		"no host to go to": {"http://m:9003", "", ""},
	}
	for name, tc := range cases {
		if got := adminURLAt(tc.url, tc.host); got != tc.want {
			t.Errorf("%s: adminURLAt(%q, %q) = %q, want %q", name, tc.url, tc.host, got, tc.want)
		}
	}
}

func TestLeaderChange(t *testing.T) {
	st := func(leader string, view int64) *hicachev1alpha1.CacheBackendStatus {
		return &hicachev1alpha1.CacheBackendStatus{Leader: leader, ViewVersion: view}
	}
	cases := map[string]struct {
		old, now *hicachev1alpha1.CacheBackendStatus
		want     bool
	}{
		"a failover":                       {st("10.0.0.1:50051", 4), st("10.0.0.2:50051", 6), true},
		"the same view":                    {st("10.0.0.1:50051", 4), st("10.0.0.1:50051", 4), false},
		"the first leader seen":            {st("", 0), st("10.0.0.1:50051", 4), false},
		"no leader now (election running)": {st("10.0.0.1:50051", 4), st("", 4), false},
		"not HA":                           {st("", 0), st("", 0), false},
	}
	for name, tc := range cases {
		msg, got := leaderChange(tc.old, tc.now)
		if got != tc.want {
			t.Errorf("%s: leaderChange = %v, want %v", name, got, tc.want)
		}
		if got && (!strings.Contains(msg, tc.now.Leader) || !strings.Contains(msg, "cold")) {
			t.Errorf("%s: message %q names neither the new leader nor what it costs", name, msg)
		}
	}
}

// Through an election (no master serves) the status keeps the last leader, so that the next one
// is a change: the Event of a failover depends on it.
func TestHAStatusKeepsTheLastLeaderThroughAnElection(t *testing.T) {
	cb := testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "e:2379")
	st := &hicachev1alpha1.CacheBackendStatus{}
	now := metav1.Now()
	steps := []struct {
		view       haView
		wantLeader string
		wantView   int64
		event      bool
	}{
		{haView{LeaderPod: "m-a", Leader: "10.0.0.1:50051", ViewVersion: 4, Standbys: 2}, "10.0.0.1:50051", 4, false},
		{haView{ViewVersion: 6, Standbys: 1}, "10.0.0.1:50051", 4, false}, // the new leader warms up at view 6
		{haView{LeaderPod: "m-b", Leader: "10.0.0.2:50051", ViewVersion: 6, Standbys: 1}, "10.0.0.2:50051", 6, true},
		{haView{LeaderPod: "m-b", Leader: "10.0.0.2:50051", ViewVersion: 6, Standbys: 2}, "10.0.0.2:50051", 6, false},
	}
	for i, s := range steps {
		old := st.DeepCopy()
		v := s.view
		setHAStatus(st, cb, true, probeRecord{HA: &v}, now)
		if st.Leader != s.wantLeader || st.ViewVersion != s.wantView {
			t.Errorf("step %d: leader %q view %d, want %q %d", i, st.Leader, st.ViewVersion, s.wantLeader, s.wantView)
		}
		if _, ev := leaderChange(old, st); ev != s.event {
			t.Errorf("step %d: leader change event %v, want %v", i, ev, s.event)
		}
	}
}

func TestHARequeue(t *testing.T) {
	external := func(rpc string) *hicachev1alpha1.CacheBackend {
		return &hicachev1alpha1.CacheBackend{Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: rpc, AdminURL: "http://m:9003"}}}}
	}
	serving := probeRecord{Probe: storeuse.BackendProbe{ServiceReady: true, ViewVersion: 2}}
	const poll = 15 * time.Second
	for _, c := range []struct {
		name string
		cb   *hicachev1alpha1.CacheBackend
		rec  probeRecord
		want time.Duration
	}{
		{"a lone master that does not answer waits for the poll", testsupport.ManagedBackend("mc"), probeRecord{Err: errors.New("refused")}, poll},
		{"managed HA with a leader", testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "e:2379"), probeRecord{HA: &haView{LeaderPod: "mc-master-0"}}, poll},
		{"managed HA electing", testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "e:2379"), probeRecord{HA: &haView{}}, haRequeueAfter},
		{"external on etcd:// whose leader serves", external("etcd://e:2379"), serving, poll},
		{"external on etcd:// whose leader died", external("etcd://e:2379"), probeRecord{Err: errors.New("refused")}, haRequeueAfter},
		{"external on etcd:// answering as a standby", external("etcd://e:2379"), probeRecord{Probe: storeuse.BackendProbe{Standby: true}}, haRequeueAfter},
		{"external without HA that does not answer", external("m:50051"), probeRecord{Err: errors.New("refused")}, poll},
	} {
		if got := haRequeue(c.cb, c.rec, poll); got != c.want {
			t.Errorf("%s: next probe in %v, want %v", c.name, got, c.want)
		}
	}
	if got := haRequeue(external("etcd://e:2379"), probeRecord{Err: errors.New("refused")}, time.Second); got != time.Second {
		t.Errorf("a poll shorter than the election's wait is kept: got %v", got)
	}
}

func TestRequestProbe(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(testsupport.T0.Time)
	r := &CacheBackendReconciler{Clock: clk, probeNow: make(chan event.GenericEvent, 1)}
	key := client.ObjectKey{Namespace: "ns", Name: "mc"}
	r.probes.put(key, probeRecord{At: testsupport.T0.Time})
	r.RequestProbe(key)
	if _, ok := r.probes.get(key); !ok || len(r.probeNow) != 0 {
		t.Fatalf("a probe younger than %v was dropped, or the backend woken for another", reprobeAfter)
	}
	clk.SetTime(testsupport.T0.Add(reprobeAfter))
	r.RequestProbe(key)
	if _, ok := r.probes.get(key); ok || len(r.probeNow) != 1 {
		t.Fatalf("an older probe was kept (%v), or the backend not woken (%d queued)", ok, len(r.probeNow))
	}
	if e := <-r.probeNow; e.Object.GetNamespace() != "ns" || e.Object.GetName() != "mc" {
		t.Errorf("woke %s/%s", e.Object.GetNamespace(), e.Object.GetName())
	}
	// A full queue never blocks the deployment that asks: the probe is dropped, the next
	// reconcile probes.
	r.probeNow <- event.GenericEvent{Object: &hicachev1alpha1.CacheBackend{}}
	r.probes.put(key, probeRecord{At: testsupport.T0.Time})
	r.RequestProbe(key)
	if _, ok := r.probes.get(key); ok {
		t.Error("the probe stands although its backend was asked for again")
	}
}
