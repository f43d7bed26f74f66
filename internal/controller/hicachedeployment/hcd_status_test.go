package hicachedeployment

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/crdvalidation"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// cond is a condition as the tests compare it.
type cond struct {
	Status metav1.ConditionStatus
	Reason string
}

func condsOf(st *hicachev1alpha1.HiCacheDeploymentStatus) map[string]cond {
	out := map[string]cond{}
	for _, c := range st.Conditions {
		out[c.Type] = cond{c.Status, c.Reason}
	}
	return out
}

func message(st *hicachev1alpha1.HiCacheDeploymentStatus, typ string) string {
	if c := meta.FindStatusCondition(st.Conditions, typ); c != nil {
		return c.Message
	}
	return ""
}

// observation builds what one reconcile of h saw: the resolved spec, a ready backend when h has
// storage, and the groups given, whose desired hash is hash.
func observation(t *testing.T, h *hicachev1alpha1.HiCacheDeployment, hash string, groups ...*group) *observed {
	t.Helper()
	obs := &observed{now: testsupport.T0, groups: map[GroupKey]*group{}, desired: map[GroupKey]string{}}
	obs.resolved, obs.served, obs.resolveErr = resolveServing(h)
	if obs.resolveErr != nil {
		return obs
	}
	if h.Spec.Storage != nil {
		obs.backend = testsupport.TestBackend()
	}
	for _, sr := range obs.served {
		for g := range sr.res.Replicas {
			obs.desired[GroupKey{role: sr.role, index: g}] = hash
		}
	}
	for _, g := range groups {
		obs.groups[g.key] = g
	}
	obs.cache, _ = cacheStatus(h, obs)
	return obs
}

func TestComputeStatus(t *testing.T) {
	const (
		T = metav1.ConditionTrue
		F = metav1.ConditionFalse
	)
	withStorage := testsupport.MakeHCD("q").TP(4).Storage("mooncake").Replicas(2)
	r := testsupport.MustResolve(t, withStorage.Obj())
	cases := map[string]struct {
		hcd *hicachev1alpha1.HiCacheDeployment
		obs func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed
		// want are the conditions; wantMessages phrases their messages must hold.
		want         map[string]cond
		wantMessages map[string][]string
		wantReady    string
		wantCounts   [3]int32 // replicas, ready, updated
	}{
		"invalid spec": {
			hcd: testsupport.MakeHCD("q").TP(12).Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed { return observation(t, h, "h") },
			want: map[string]cond{
				"Ready":       {F, hicachev1alpha1.ReasonInvalidSpec},
				"Progressing": {F, hicachev1alpha1.ReasonInvalidSpec},
			},
			wantMessages: map[string][]string{"Ready": {"spec.topology", "12 GPUs", "until the spec is fixed"}},
			wantReady:    "0/1",
		},
		"an image whose SGLang release is not read": {
			hcd: testsupport.MakeHCD("q").TP(4).Image("registry.example/team/sglang:abc").Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed { return observation(t, h, "h") },
			want: map[string]cond{
				"Ready":       {F, hicachev1alpha1.ReasonInvalidSpec},
				"Progressing": {F, hicachev1alpha1.ReasonInvalidSpec},
			},
			wantMessages: map[string][]string{"Ready": {"spec.sglang.image", "the SGLang release is not read from registry.example/team/sglang:abc", "spec.sglang.compatibleRelease", "until the spec is fixed"}},
			wantReady:    "0/1",
		},
		"unknown profile": {
			hcd: testsupport.MakeHCD("q").Profile("Nope").Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed { return observation(t, h, "h") },
			want: map[string]cond{
				"Ready":       {F, hicachev1alpha1.ReasonUnknownProfile},
				"Progressing": {F, hicachev1alpha1.ReasonUnknownProfile},
			},
			wantMessages: map[string][]string{"Ready": {"Nope", "DeepSeekV4"}},
			wantReady:    "0/1",
		},
		"backend missing": {
			hcd: withStorage.Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				obs := observation(t, h, "h")
				obs.backend, obs.desired = nil, map[GroupKey]string{}
				obs.backendErr = &conditionError{hicachev1alpha1.ReasonBackendNotFound, `CacheBackend "mooncake" does not exist in namespace default`}
				return obs
			},
			want: map[string]cond{
				"BackendReady":       {F, hicachev1alpha1.ReasonBackendNotFound},
				"Ready":              {F, hicachev1alpha1.ReasonBackendNotFound},
				"Progressing":        {F, hicachev1alpha1.ReasonBackendNotFound},
				"CacheLayoutCurrent": {T, hicachev1alpha1.ReasonLayoutCurrent},
			},
			wantMessages: map[string][]string{"BackendReady": {`"mooncake" does not exist`}, "Progressing": {"Waiting for the cache backend"}},
			wantReady:    "0/2",
		},
		"scaled to zero": {
			hcd: testsupport.MakeHCD("q").TP(4).Storage("mooncake").Replicas(0).Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed { return observation(t, h, "h") },
			want: map[string]cond{
				"BackendReady":       {T, hicachev1alpha1.ReasonBackendReady},
				"Ready":              {T, hicachev1alpha1.ReasonScaledToZero},
				"Progressing":        {F, hicachev1alpha1.ReasonUpToDate},
				"CacheLayoutCurrent": {T, hicachev1alpha1.ReasonLayoutCurrent},
			},
			wantReady: "0/0",
		},
		"rolling": {
			hcd: withStorage.Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				obs := observation(t, h, "new", readyGroup(0, 1, "new", r), readyGroup(1, 1, "old", r))
				obs.rolling = []GroupKey{{index: 1}}
				return obs
			},
			want: map[string]cond{
				"BackendReady":       {T, hicachev1alpha1.ReasonBackendReady},
				"Ready":              {F, hicachev1alpha1.ReasonGroupsNotReady},
				"Progressing":        {T, hicachev1alpha1.ReasonRollingOut},
				"CacheLayoutCurrent": {T, hicachev1alpha1.ReasonLayoutCurrent},
			},
			wantMessages: map[string][]string{"Ready": {"1 of 2"}, "Progressing": {"1 of 2 serving groups run the current spec, 1 ready"}},
			wantReady:    "1/2",
			wantCounts:   [3]int32{2, 1, 1},
		},
		"all ready": {
			hcd: withStorage.Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				return observation(t, h, "h", readyGroup(0, 1, "h", r), readyGroup(1, 1, "h", r))
			},
			want: map[string]cond{
				"BackendReady":       {T, hicachev1alpha1.ReasonBackendReady},
				"Ready":              {T, hicachev1alpha1.ReasonAllGroupsReady},
				"Progressing":        {F, hicachev1alpha1.ReasonUpToDate},
				"CacheLayoutCurrent": {T, hicachev1alpha1.ReasonLayoutCurrent},
			},
			wantMessages: map[string][]string{"CacheLayoutCurrent": {r.Namespace, r.ShortHash}, "BackendReady": {testsupport.TestBackend().RPCAddress}},
			wantReady:    "2/2",
			wantCounts:   [3]int32{2, 2, 2},
		},
		"a group on an older layout": {
			hcd: withStorage.Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				old := readyGroup(1, 1, "h", r)
				old.pods[0].Labels[hicachev1alpha1.LabelCacheNamespace] = "hc-0000000000"
				return observation(t, h, "h", readyGroup(0, 1, "h", r), old)
			},
			want: map[string]cond{
				"BackendReady":       {T, hicachev1alpha1.ReasonBackendReady},
				"Ready":              {T, hicachev1alpha1.ReasonAllGroupsReady},
				"Progressing":        {F, hicachev1alpha1.ReasonUpToDate},
				"CacheLayoutCurrent": {F, hicachev1alpha1.ReasonLayoutChanging},
			},
			wantMessages: map[string][]string{"CacheLayoutCurrent": {"Serving groups 1 still write under an older layout"}},
			wantReady:    "2/2",
			wantCounts:   [3]int32{2, 2, 2},
		},
		"draining a fixed namespace": {
			hcd: withStorage.Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				obs := observation(t, h, "h")
				obs.drain = &drainState{wait: drainStopping, namespace: "hc-0000000000", pods: 2}
				return obs
			},
			want: map[string]cond{
				"BackendReady":       {T, hicachev1alpha1.ReasonBackendReady},
				"Ready":              {F, hicachev1alpha1.ReasonGroupsNotReady},
				"Progressing":        {T, hicachev1alpha1.ReasonWaitingForFlush},
				"CacheLayoutCurrent": {F, hicachev1alpha1.ReasonWaitingForFlush},
			},
			wantMessages: map[string][]string{"CacheLayoutCurrent": {"stopping 2 rank pods that write namespace hc-0000000000"}},
			wantReady:    "0/2",
		},
		"a fixed layout change while the backend is not ready: not current": {
			hcd: testsupport.MakeHCD("q").TP(4).KVDType("fp8_e4m3").Storage("mooncake").Fixed("team").Cache(&hicachev1alpha1.CacheStatus{
				LayoutHash: r.Fingerprint, ShortHash: r.ShortHash, Namespace: "team"}).Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				obs := observation(t, h, "h")
				obs.backend, obs.desired = nil, map[GroupKey]string{}
				obs.backendErr = &conditionError{hicachev1alpha1.ReasonBackendNotReady, `CacheBackend "mooncake" is not ready`}
				return obs
			},
			want: map[string]cond{
				"BackendReady":       {F, hicachev1alpha1.ReasonBackendNotReady},
				"Ready":              {F, hicachev1alpha1.ReasonBackendNotReady},
				"Progressing":        {F, hicachev1alpha1.ReasonBackendNotReady},
				"CacheLayoutCurrent": {F, hicachev1alpha1.ReasonWaitingForFlush},
			},
			wantMessages: map[string][]string{"CacheLayoutCurrent": {r.ShortHash + " → ", "fixed namespace team", `once CacheBackend mooncake is ready`}},
			wantReady:    "0/1",
		},
		"a flushed fixed namespace waits for the leader of the flush's view": {
			hcd: withStorage.Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				obs := observation(t, h, "h")
				obs.drain = &drainState{wait: drainLeader, namespace: "team", flush: "default/f-1",
					failure: "CacheFlush f-1 emptied it under the masters' view 2, and the new layout starts once the leader of that view answers that it still serves: the master at http://m:9003 does not answer"}
				return obs
			},
			want: map[string]cond{
				"BackendReady":       {T, hicachev1alpha1.ReasonBackendReady},
				"Ready":              {F, hicachev1alpha1.ReasonGroupsNotReady},
				"Progressing":        {T, hicachev1alpha1.ReasonWaitingForFlush},
				"CacheLayoutCurrent": {F, hicachev1alpha1.ReasonWaitingForFlush},
			},
			wantMessages: map[string][]string{"CacheLayoutCurrent": {"namespace team is flushed", "view 2", "http://m:9003 does not answer"}},
			wantReady:    "0/2",
		},
		"apply error": {
			hcd: withStorage.Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				obs := observation(t, h, "h", readyGroup(0, 1, "h", r), readyGroup(1, 1, "h", r))
				obs.failed = fmt.Errorf("applying StatefulSet q-1: forbidden")
				return obs
			},
			want: map[string]cond{
				"BackendReady":       {T, hicachev1alpha1.ReasonBackendReady},
				"Ready":              {T, hicachev1alpha1.ReasonAllGroupsReady},
				"Progressing":        {F, hicachev1alpha1.ReasonReconcileError},
				"CacheLayoutCurrent": {T, hicachev1alpha1.ReasonLayoutCurrent},
			},
			wantMessages: map[string][]string{"Progressing": {"forbidden"}},
			wantReady:    "2/2",
			wantCounts:   [3]int32{2, 2, 2},
		},
		"no storage": {
			hcd: testsupport.MakeHCD("q").TP(4).Obj(),
			obs: func(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *observed {
				return observation(t, h, "h", readyGroup(0, 1, "h", testsupport.MustResolve(t, h)))
			},
			want: map[string]cond{
				"BackendReady": {T, hicachev1alpha1.ReasonNoStorage},
				"Ready":        {T, hicachev1alpha1.ReasonAllGroupsReady},
				"Progressing":  {F, hicachev1alpha1.ReasonUpToDate},
			},
			wantReady:  "1/1",
			wantCounts: [3]int32{1, 1, 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := computeStatus(tc.hcd, tc.obs(t, tc.hcd))
			if diff := cmp.Diff(tc.want, condsOf(st)); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			for typ, phrases := range tc.wantMessages {
				for _, p := range phrases {
					if m := message(st, typ); !strings.Contains(m, p) {
						t.Errorf("%s message %q does not say %q", typ, m, p)
					}
				}
			}
			if st.Ready != tc.wantReady {
				t.Errorf("ready = %q, want %q", st.Ready, tc.wantReady)
			}
			if got := [3]int32{st.Replicas, st.ReadyReplicas, st.UpdatedReplicas}; got != tc.wantCounts {
				t.Errorf("replicas, ready, updated = %v, want %v", got, tc.wantCounts)
			}
			if st.ObservedGeneration != tc.hcd.Generation {
				t.Errorf("observedGeneration = %d, want %d", st.ObservedGeneration, tc.hcd.Generation)
			}
			for _, c := range st.Conditions {
				if c.ObservedGeneration != tc.hcd.Generation || !c.LastTransitionTime.Equal(&testsupport.T0) || c.Message == "" {
					t.Errorf("condition %s: generation %d, transition %v, message %q", c.Type, c.ObservedGeneration, c.LastTransitionTime, c.Message)
				}
			}
		})
	}
}

func TestComputeStatusResolvedFields(t *testing.T) {
	h := testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Draft("DSPARK").Storage("mooncake").Segment("16Gi").Obj()
	r := testsupport.MustResolve(t, h)
	st := computeStatus(h, observation(t, h, "h"))
	if st.Attention != hicachev1alpha1.AttentionDSV4 || st.Draft != "DSPARK (packed, 3 layers)" || st.Selector != hicachev1alpha1.LabelDeployment+"=d" {
		t.Errorf("attention %s, draft %q, selector %q", st.Attention, st.Draft, st.Selector)
	}
	// Each rank lends 16Gi; the group's 16 ranks 256Gi.
	wantPlan := &hicachev1alpha1.PlanStatus{Ranks: 16, Nodes: 2, Writers: 1, Summary: r.Plan.Summary(),
		StoreMemoryPerRank: ptr.To(resource.MustParse("16Gi")), StoreMemoryPerGroup: ptr.To(resource.MustParse("256Gi"))}
	if diff := cmp.Diff(wantPlan, st.Plan); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if st.Cache == nil || st.Cache.Namespace != r.Namespace || st.Cache.LayoutHash != r.Fingerprint {
		t.Errorf("cache = %+v, want namespace %s and fingerprint %s", st.Cache, r.Namespace, r.Fingerprint)
	}

	// Without a store nothing writes to L3, whatever the plan says.
	h.Spec.Storage = nil
	h.Status.Conditions = []metav1.Condition{{Type: hicachev1alpha1.ConditionCacheLayoutCurrent, Status: metav1.ConditionTrue, Reason: "LayoutCurrent"}}
	st = computeStatus(h, observation(t, h, "h"))
	if st.Plan.Writers != 0 || !strings.Contains(st.Plan.Summary, "No L3 store") {
		t.Errorf("without storage: writers %d, summary %q", st.Plan.Writers, st.Plan.Summary)
	}
	if meta.FindStatusCondition(st.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent) != nil {
		t.Error("CacheLayoutCurrent is kept after the storage was removed")
	}
	if st.Cache == nil || st.Cache.Namespace != "" {
		t.Errorf("cache namespace without storage = %+v, want empty", st.Cache)
	}
}

func TestComputeStatusKeepsTransitionTimes(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Obj()
	r := testsupport.MustResolve(t, h)
	earlier := metav1.NewTime(testsupport.T0.Add(-time.Hour))
	h.Status.Conditions = []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllGroupsReady", Message: "old words", LastTransitionTime: earlier},
		{Type: "Progressing", Status: metav1.ConditionTrue, Reason: "RollingOut", LastTransitionTime: earlier},
	}
	st := computeStatus(h, observation(t, h, "h", readyGroup(0, 1, "h", r)))
	ready := meta.FindStatusCondition(st.Conditions, "Ready")
	if !ready.LastTransitionTime.Equal(&earlier) {
		t.Errorf("Ready stayed True but its transition time moved to %v", ready.LastTransitionTime)
	}
	if ready.Message == "old words" {
		t.Error("Ready's message was not refreshed")
	}
	prog := meta.FindStatusCondition(st.Conditions, "Progressing")
	if prog.Status != metav1.ConditionFalse || !prog.LastTransitionTime.Equal(&testsupport.T0) {
		t.Errorf("Progressing flipped to %s at %v, want False at %v", prog.Status, prog.LastTransitionTime, testsupport.T0)
	}
	// computeStatus works on a copy.
	if c := meta.FindStatusCondition(h.Status.Conditions, "Progressing"); c.Status != metav1.ConditionTrue {
		t.Error("computeStatus changed the deployment's own status")
	}
	// The same observation gives the same status.
	h.Status = *st
	again := computeStatus(h, observation(t, h, "h", readyGroup(0, 1, "h", r)))
	if diff := cmp.Diff(st, again); diff != "" {
		t.Errorf("a second reconcile of the same state changed the status:\n%s", diff)
	}
}

// sized sets the number of ranks a group's StatefulSet runs.
func sized(g *group, n int32) *group {
	g.sts.Spec.Replicas = &n
	return g
}

func TestCountGroups(t *testing.T) {
	h := testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Replicas(3).Obj()
	r := testsupport.MustResolve(t, h)
	full := func(g int, hash string) *group { return readyGroup(g, 2, hash, r) }
	cases := map[string]struct {
		groups    []*group
		rolling   []GroupKey
		recreated []GroupKey
		want      [3]int32 // existing, ready, updated
	}{
		"none":      {want: [3]int32{0, 0, 0}},
		"all ready": {groups: []*group{full(0, "h"), full(1, "h"), full(2, "h")}, want: [3]int32{3, 3, 3}},
		"groups beyond the desired count are not counted": {
			groups: []*group{full(0, "h"), full(3, "h"), full(4, "h")}, want: [3]int32{1, 1, 1},
		},
		"a rolling group exists but is neither ready nor updated": {
			groups: []*group{full(0, "h"), full(1, "h")}, rolling: []GroupKey{{index: 1}}, want: [3]int32{2, 1, 1},
		},
		"a recreated group likewise": {
			groups: []*group{full(0, "h"), full(1, "h")}, recreated: []GroupKey{{index: 0}}, want: [3]int32{2, 1, 1},
		},
		"a group missing a rank is not updated": {
			groups: []*group{sized(groupOf(0, "h", "", makePod("g0", 0).Ready().Hash("h").Obj()), 2)}, want: [3]int32{1, 0, 0},
		},
		"an old template is ready but not updated": {
			groups: []*group{full(0, "old")}, want: [3]int32{1, 1, 0},
		},
		"pods of an old template under a current StatefulSet": {
			groups: []*group{groupOf(0, "h", "", makePod("g0", 0).Ready().Hash("h").Obj(), makePod("g0", 1).Ready().Hash("old").Obj())},
			want:   [3]int32{1, 1, 0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obs := observation(t, h, "h", tc.groups...)
			obs.rolling, obs.recreated = tc.rolling, tc.recreated
			var st hicachev1alpha1.HiCacheDeploymentStatus
			countGroups(h, &st, obs, 3)
			if got := [3]int32{st.Replicas, st.ReadyReplicas, st.UpdatedReplicas}; got != tc.want {
				t.Errorf("existing, ready, updated = %v, want %v", got, tc.want)
			}
			if want := fmt.Sprintf("%d/3", tc.want[1]); st.Ready != want {
				t.Errorf("ready = %q, want %q", st.Ready, want)
			}
		})
	}
}

func TestGroupsOffLayout(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Storage("mc").Replicas(4).Obj()
	r := testsupport.MustResolve(t, h)
	current := func(g int) *group { return readyGroup(g, 1, "h", r) }
	offNS := readyGroup(3, 1, "h", r)
	offNS.pods[0].Labels[hicachev1alpha1.LabelCacheNamespace] = "hc-old"
	offHash := readyGroup(1, 1, "h", r)
	offHash.pods[0].Annotations[hicachev1alpha1.AnnotationLayoutHash] = "0000000000"
	empty := groupOf(2, "h", "")
	obs := observation(t, h, "h", current(0), offHash, empty, offNS)
	if diff := cmp.Diff([]GroupKey{{index: 1}, {index: 3}}, groupsOffLayout(obs, r), cmp.AllowUnexported(GroupKey{})); diff != "" {
		t.Errorf("groupsOffLayout (-want +got):\n%s", diff)
	}
	if got := groupsOffLayout(observation(t, h, "h", current(0), current(1)), r); got != nil {
		t.Errorf("groupsOffLayout of current groups = %v", got)
	}
}

func TestSetReady(t *testing.T) {
	cases := map[string]struct {
		replicas, ready, desired int32
		want                     cond
	}{
		"all ready":            {replicas: 3, ready: 3, desired: 3, want: cond{metav1.ConditionTrue, hicachev1alpha1.ReasonAllGroupsReady}},
		"one not ready":        {replicas: 3, ready: 2, desired: 3, want: cond{metav1.ConditionFalse, hicachev1alpha1.ReasonGroupsNotReady}},
		"a group is missing":   {replicas: 2, ready: 2, desired: 3, want: cond{metav1.ConditionFalse, hicachev1alpha1.ReasonGroupsNotReady}},
		"a single ready group": {replicas: 1, ready: 1, desired: 1, want: cond{metav1.ConditionTrue, hicachev1alpha1.ReasonAllGroupsReady}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := &hicachev1alpha1.HiCacheDeploymentStatus{Replicas: tc.replicas, ReadyReplicas: tc.ready}
			var got cond
			var msg string
			setReady(func(typ string, ok bool, reason, m string) {
				if typ != hicachev1alpha1.ConditionReady {
					t.Errorf("setReady set %s", typ)
				}
				s := metav1.ConditionFalse
				if ok {
					s = metav1.ConditionTrue
				}
				got, msg = cond{s, reason}, m
			}, st, tc.desired, "")
			if got != tc.want {
				t.Errorf("Ready = %+v, want %+v", got, tc.want)
			}
			if !strings.Contains(msg, fmt.Sprint(tc.desired)) {
				t.Errorf("message %q does not name the %d desired groups", msg, tc.desired)
			}
		})
	}
}

func TestCacheStatus(t *testing.T) {
	base := testsupport.MakeHCD("q").TP(4).Storage("mc")
	r1 := testsupport.MustResolve(t, base.Obj())
	r2 := testsupport.MustResolve(t, testsupport.MakeHCD("q").TP(4).KVDType("fp8_e4m3").Storage("mc").Obj())
	if r1.Namespace == r2.Namespace {
		t.Fatal("the KV dtype change kept the namespace")
	}
	earlier := metav1.NewTime(testsupport.T0.Add(-time.Hour))
	flush := &hicachev1alpha1.FlushRecord{Name: "q-flush-hc-x", Namespace: "hc-x", Removed: 7}
	current := func(r *resolve.Resolved) *hicachev1alpha1.CacheStatus {
		return &hicachev1alpha1.CacheStatus{LayoutHash: r.Fingerprint, ShortHash: r.ShortHash, Namespace: r.Namespace, Backend: "mc",
			Facts: r.FactList(), FactCount: int32(len(r.FactList())), Since: &testsupport.T0}
	}
	cases := map[string]struct {
		hcd  *hicachev1alpha1.HiCacheDeployment
		want func() *hicachev1alpha1.CacheStatus
	}{
		"first reconcile": {
			hcd:  base.Obj(),
			want: func() *hicachev1alpha1.CacheStatus { return current(r1) },
		},
		"no storage has no namespace": {
			hcd: testsupport.MakeHCD("q").TP(4).Obj(),
			want: func() *hicachev1alpha1.CacheStatus {
				cs := current(r1)
				cs.Namespace, cs.Backend, cs.Since = "", "", nil
				return cs
			},
		},
		"the namespace moved: the old one is stale": {
			hcd: testsupport.MakeHCD("q").TP(4).KVDType("fp8_e4m3").Storage("mc").Cache(&hicachev1alpha1.CacheStatus{
				LayoutHash: r1.Fingerprint, ShortHash: r1.ShortHash, Namespace: r1.Namespace, LastFlush: flush}).Obj(),
			want: func() *hicachev1alpha1.CacheStatus {
				cs := current(r2)
				cs.LastFlush = flush
				cs.StaleNamespaces = []hicachev1alpha1.StaleNamespace{{Namespace: r1.Namespace, Backend: "mc", LayoutHash: r1.ShortHash, Since: testsupport.T0}}
				return cs
			},
		},
		"the same layout keeps when it started writing": {
			hcd: withCache(base, &hicachev1alpha1.CacheStatus{
				LayoutHash: r1.Fingerprint, ShortHash: r1.ShortHash, Namespace: r1.Namespace, Backend: "mc", Since: &earlier}),
			want: func() *hicachev1alpha1.CacheStatus {
				cs := current(r1)
				cs.Since = &earlier
				return cs
			},
		},
		"a stale namespace records since when it was written": {
			hcd: testsupport.MakeHCD("q").TP(4).KVDType("fp8_e4m3").Storage("mc").Cache(&hicachev1alpha1.CacheStatus{
				LayoutHash: r1.Fingerprint, ShortHash: r1.ShortHash, Namespace: r1.Namespace, Backend: "mc", Since: &earlier}).Obj(),
			want: func() *hicachev1alpha1.CacheStatus {
				cs := current(r2)
				cs.StaleNamespaces = []hicachev1alpha1.StaleNamespace{{Namespace: r1.Namespace, Backend: "mc", LayoutHash: r1.ShortHash, Since: testsupport.T0, WrittenSince: &earlier}}
				return cs
			},
		},
		"a stale namespace is recorded once": {
			hcd: testsupport.MakeHCD("q").TP(4).KVDType("fp8_e4m3").Storage("mc").Cache(&hicachev1alpha1.CacheStatus{
				LayoutHash: r2.Fingerprint, ShortHash: r2.ShortHash, Namespace: r2.Namespace,
				StaleNamespaces: []hicachev1alpha1.StaleNamespace{{Namespace: r1.Namespace, Backend: "mc", LayoutHash: r1.ShortHash, Since: earlier, Flush: "f"}}}).Obj(),
			want: func() *hicachev1alpha1.CacheStatus {
				cs := current(r2)
				cs.StaleNamespaces = []hicachev1alpha1.StaleNamespace{{Namespace: r1.Namespace, Backend: "mc", LayoutHash: r1.ShortHash, Since: earlier, Flush: "f"}}
				return cs
			},
		},
		"back to a stale namespace: it is current again": {
			hcd: withCache(base, &hicachev1alpha1.CacheStatus{
				LayoutHash: r2.Fingerprint, ShortHash: r2.ShortHash, Namespace: r2.Namespace,
				StaleNamespaces: []hicachev1alpha1.StaleNamespace{{Namespace: r1.Namespace, Backend: "mc", LayoutHash: r1.ShortHash, Since: earlier}}}),
			want: func() *hicachev1alpha1.CacheStatus {
				cs := current(r1)
				cs.StaleNamespaces = []hicachev1alpha1.StaleNamespace{{Namespace: r2.Namespace, Backend: "mc", LayoutHash: r2.ShortHash, Since: testsupport.T0}}
				return cs
			},
		},
		"a Fixed layout change keeps the running layout until the flush": {
			hcd: testsupport.MakeHCD("q").TP(4).KVDType("fp8_e4m3").Storage("mc").Fixed("team").Cache(&hicachev1alpha1.CacheStatus{
				LayoutHash: r1.Fingerprint, ShortHash: r1.ShortHash, Namespace: "team", Facts: r1.FactList()}).Obj(),
			want: func() *hicachev1alpha1.CacheStatus {
				return &hicachev1alpha1.CacheStatus{LayoutHash: r1.Fingerprint, ShortHash: r1.ShortHash, Namespace: "team", Facts: r1.FactList()}
			},
		},
		"a new Fixed namespace leaves the old one stale": {
			hcd: testsupport.MakeHCD("q").TP(4).Storage("mc").Fixed("team-b").Cache(&hicachev1alpha1.CacheStatus{
				LayoutHash: r1.Fingerprint, ShortHash: r1.ShortHash, Namespace: "team-a"}).Obj(),
			want: func() *hicachev1alpha1.CacheStatus {
				cs := current(r1)
				cs.Namespace = "team-b"
				cs.StaleNamespaces = []hicachev1alpha1.StaleNamespace{{Namespace: "team-a", Backend: "mc", LayoutHash: r1.ShortHash, Since: testsupport.T0}}
				return cs
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.hcd.Status.DeepCopy()
			obs := &observed{now: testsupport.T0, resolved: testsupport.MustResolve(t, tc.hcd)}
			got, dropped := cacheStatus(tc.hcd, obs)
			if len(dropped) != 0 {
				t.Errorf("dropped %+v, want nothing dropped", dropped)
			}
			if diff := cmp.Diff(tc.want(), got); diff != "" {
				t.Errorf("cache status (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, &tc.hcd.Status); diff != "" {
				t.Errorf("cacheStatus changed the deployment's status:\n%s", diff)
			}
		})
	}
}

func TestCacheStatusKeepsTheNewest32Stale(t *testing.T) {
	r := testsupport.MustResolve(t, testsupport.MakeHCD("q").TP(4).Storage("mc").Obj())
	var stale []hicachev1alpha1.StaleNamespace
	for i := range 32 {
		stale = append(stale, hicachev1alpha1.StaleNamespace{Namespace: fmt.Sprintf("hc-%010d", i)})
	}
	h := testsupport.MakeHCD("q").TP(4).Storage("mc").Cache(&hicachev1alpha1.CacheStatus{Namespace: "hc-previous", StaleNamespaces: stale, DroppedStaleNamespaces: 2}).Obj()
	cs, dropped := cacheStatus(h, &observed{now: testsupport.T0, resolved: r})
	got := cs.StaleNamespaces
	if len(got) != 32 {
		t.Fatalf("%d stale namespaces, want the API's maximum of 32", len(got))
	}
	if got[0].Namespace != "hc-0000000001" || got[31].Namespace != "hc-previous" {
		t.Errorf("kept %s … %s; want the oldest dropped and the newest kept", got[0].Namespace, got[31].Namespace)
	}
	if len(dropped) != 1 || dropped[0].Namespace != "hc-0000000000" {
		t.Errorf("dropped %+v, want the oldest, hc-0000000000", dropped)
	}
	if cs.DroppedStaleNamespaces != 3 {
		t.Errorf("droppedStaleNamespaces %d, want the 2 dropped before and this one", cs.DroppedStaleNamespaces)
	}
	// A reconcile that changes nothing drops nothing more.
	h.Status.Cache = cs
	if again, dropped := cacheStatus(h, &observed{now: testsupport.T0, resolved: r}); len(dropped) != 0 || again.DroppedStaleNamespaces != 3 {
		t.Errorf("the next reconcile dropped %+v (count %d), want nothing more", dropped, again.DroppedStaleNamespaces)
	}
}

func TestCacheStatusCountsEveryFact(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Storage("mc").Obj()
	r := testsupport.MustResolve(t, h)
	for i := range 70 {
		r.Facts[fmt.Sprintf("zz.extra%02d", i)] = "x"
	}
	cs, _ := cacheStatus(h, &observed{now: testsupport.T0, resolved: r})
	if want := len(r.FactList()); int(cs.FactCount) != want || len(cs.Facts) != hicachev1alpha1.MaxListedFacts {
		t.Errorf("%d facts listed, factCount %d; want %d listed and all %d counted", len(cs.Facts), cs.FactCount, hicachev1alpha1.MaxListedFacts, want)
	}
}

func TestDroppedStaleMessage(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Storage("mc").Obj()
	h.Namespace = "team-a"
	cases := map[string]struct {
		s    hicachev1alpha1.StaleNamespace
		want []string
	}{
		"no flush yet: how to remove it": {
			s:    hicachev1alpha1.StaleNamespace{Namespace: "hc-0123456789", LayoutHash: "0123456789", Backend: "mc"},
			want: []string{"hc-0123456789", "no longer flushes it", "kubectl hicache flush mc --prefix hc-0123456789 -n team-a"},
		},
		"a flush requested: it still runs": {
			s:    hicachev1alpha1.StaleNamespace{Namespace: "hc-0123456789", LayoutHash: "0123456789", Backend: "mc", Flush: "q-flush"},
			want: []string{"hc-0123456789", "CacheFlush q-flush, already requested"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			msg := droppedStaleMessage(h, tc.s)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
		})
	}
}

// withCache is b's deployment with a status cache record, for cases that go back to b's layout.
func withCache(b *testutil.HCDBuilder, cs *hicachev1alpha1.CacheStatus) *hicachev1alpha1.HiCacheDeployment {
	h := b.Obj()
	h.Status.Cache = cs
	return h
}

func TestFormedGroupsStatus(t *testing.T) {
	grp := func(index int, uid string) *group {
		g := groupOf(index, "h", "", makePod("g"+strconv.Itoa(index), 0).Ready().Obj())
		g.sts.UID = types.UID(uid)
		return g
	}
	record := func(g *group, pods string) hicachev1alpha1.FormedGroup {
		return hicachev1alpha1.FormedGroup{Name: g.sts.Name, Revision: groupRevision(g.sts), Pods: pods}
	}
	g0, g1, g2 := grp(0, "u0"), grp(1, "u1"), grp(2, "u2")
	stale := record(g1, "0=old")
	stale.Revision = "another"
	cases := map[string]struct {
		stored  []hicachev1alpha1.FormedGroup
		groups  []*group
		formed  map[GroupKey]hicachev1alpha1.FormedGroup
		rolling []GroupKey
		want    []hicachev1alpha1.FormedGroup
	}{
		"formed this reconcile": {groups: []*group{g0}, formed: map[GroupKey]hicachev1alpha1.FormedGroup{g0.key: record(g0, "0=a")},
			want: []hicachev1alpha1.FormedGroup{record(g0, "0=a")}},
		"formed anew over a stored record": {stored: []hicachev1alpha1.FormedGroup{record(g0, "0=old")}, groups: []*group{g0},
			formed: map[GroupKey]hicachev1alpha1.FormedGroup{g0.key: record(g0, "0=a")}, want: []hicachev1alpha1.FormedGroup{record(g0, "0=a")}},
		"stored records of the groups' revisions stay, in order": {stored: []hicachev1alpha1.FormedGroup{record(g2, "0=c"), record(g0, "0=a")},
			groups: []*group{g0, g1, g2}, want: []hicachev1alpha1.FormedGroup{record(g0, "0=a"), record(g2, "0=c")}},
		"a record of another revision goes": {stored: []hicachev1alpha1.FormedGroup{record(g0, "0=a"), stale}, groups: []*group{g0, g1},
			want: []hicachev1alpha1.FormedGroup{record(g0, "0=a")}},
		"the record of a group whose pods were just replaced goes": {stored: []hicachev1alpha1.FormedGroup{record(g0, "0=a"), record(g1, "0=b")},
			groups: []*group{g0, g1}, rolling: []GroupKey{g1.key}, want: []hicachev1alpha1.FormedGroup{record(g0, "0=a")}},
		"the record of a group that is gone goes": {stored: []hicachev1alpha1.FormedGroup{record(g0, "0=a"), record(g1, "0=b")},
			groups: []*group{g1}, want: []hicachev1alpha1.FormedGroup{record(g1, "0=b")}},
		"no group": {stored: []hicachev1alpha1.FormedGroup{record(g0, "0=a")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := &hicachev1alpha1.HiCacheDeployment{Status: hicachev1alpha1.HiCacheDeploymentStatus{FormedGroups: tc.stored}}
			obs := &observed{groups: map[GroupKey]*group{}, formed: tc.formed, rolling: tc.rolling}
			for _, g := range tc.groups {
				obs.groups[g.key] = g
			}
			if diff := cmp.Diff(tc.want, formedGroups(h, obs)); diff != "" {
				t.Errorf("formedGroups (-want +got):\n%s", diff)
			}
		})
	}
}

// The layout facts recorded in status fit the schema (status.cache.facts: 64 items of 256
// characters) however many and however long the facts are: a list the API server refuses would
// get every status write of the deployment refused. 60 layout variables, one of them 400
// characters long, and the topology make over 64 facts; what setFacts records is admitted, the
// list as resolved is not.
func TestRecordedFactsFitTheSchema(t *testing.T) {
	rules, err := sglang.EnvRules()
	if err != nil {
		t.Fatal(err)
	}
	var kv []string
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		if rules[name].Class == sglang.ArgLayout && strings.HasPrefix(name, "SGLANG_") && len(kv) < 120 {
			v := "1"
			if len(kv) == 0 {
				v = strings.Repeat("x", 400)
			}
			kv = append(kv, name, v)
		}
	}
	h := testsupport.MakeHCD("facts").TP(4).Env(kv...).Obj()
	res, err := resolve.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.FactList()); n <= hicachev1alpha1.MaxListedFacts {
		t.Fatalf("only %d facts: the test would prove nothing", n)
	}
	v, err := crdvalidation.Default()
	if err != nil {
		t.Fatal(err)
	}
	admit := func(cs *hicachev1alpha1.CacheStatus) string {
		t.Helper()
		h := h.DeepCopy()
		h.TypeMeta = metav1.TypeMeta{APIVersion: hicachev1alpha1.GroupVersion.String(), Kind: "HiCacheDeployment"}
		h.Status.Cache = cs
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(h)
		if err != nil {
			t.Fatal(err)
		}
		_, errs, err := v.AdmitStatus(context.Background(), obj, "default")
		if err != nil {
			t.Fatal(err)
		}
		return crdvalidation.Message(errs)
	}
	if msg := admit(&hicachev1alpha1.CacheStatus{Facts: res.FactList()}); !strings.Contains(msg, "facts") {
		t.Fatalf("the facts as resolved are admitted (%q): the schema does not bound them, and the test would prove nothing", msg)
	}
	cs := &hicachev1alpha1.CacheStatus{}
	setFacts(cs, res)
	if msg := admit(cs); msg != "" {
		t.Errorf("the recorded facts are refused: %s", msg)
	}
	if int(cs.FactCount) != len(res.FactList()) || len(cs.Facts) != hicachev1alpha1.MaxListedFacts {
		t.Errorf("recorded %d of %d facts, counted %d", len(cs.Facts), len(res.FactList()), cs.FactCount)
	}
}

// setFacts is the only writer of status.cache.facts in the controller: no other function of
// the package assigns the field anything but nil, or sets it in a literal. (The Fixed-namespace
// drain once wrote the facts unbounded, and every later status write was refused.)
func TestFactsAreWrittenOnlyBySetFacts(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	writers := 0
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for i, l := range n.Lhs {
						sel, ok := l.(*ast.SelectorExpr)
						if !ok || sel.Sel.Name != "Facts" {
							continue
						}
						if id, ok := n.Rhs[min(i, len(n.Rhs)-1)].(*ast.Ident); ok && id.Name == "nil" && len(n.Rhs) == len(n.Lhs) {
							continue
						}
						writers++
						if fn.Name.Name != "setFacts" {
							t.Errorf("%s: %s writes .Facts; record the facts with setFacts, which bounds them as the schema does", fset.Position(n.Pos()), fn.Name.Name)
						}
					}
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Facts" {
						t.Errorf("%s: %s sets Facts in a literal; record the facts with setFacts", fset.Position(n.Pos()), fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	if writers != 1 {
		t.Errorf("%d writes of .Facts found, want the one in setFacts: the check would prove nothing", writers)
	}
}
