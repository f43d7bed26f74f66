package hicachedeployment

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
)

func TestBuildFlush(t *testing.T) {
	home := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "oldest", Namespace: "team-a", UID: "cb-uid"}}
	h := testsupport.MakeHCD("q").TP(4).Storage("mooncake").Obj()
	cf := buildFlush(flushRequest{storeID: "10.0.0.1:50051", namespace: "hc-1", layout: "abc", home: home,
		reason: strings.Repeat("x", 2000), drainedFor: h, requester: "default/q"}, 2)
	if cf.Namespace != "team-a" || cf.Spec.BackendRef.Name != "oldest" || cf.Spec.Scope != hicachev1alpha1.FlushScopeNamespace || cf.Spec.Namespace != "hc-1" {
		t.Errorf("flush %s/%s of %s %s %s; want it beside the store's oldest backend", cf.Namespace, cf.Name, cf.Spec.BackendRef.Name, cf.Spec.Scope, cf.Spec.Namespace)
	}
	if !ptr.Deref(cf.Spec.Force, false) || cf.Spec.AllowInUse {
		t.Error("a layout flush is not forced, or overrides the in-use check")
	}
	if len(cf.Spec.Reason) > 1024 || !strings.HasSuffix(cf.Spec.Reason, "...") {
		t.Errorf("reason of %d characters, want it cut to the API's 1024 with an ellipsis", len(cf.Spec.Reason))
	}
	if o := cf.OwnerReferences; len(o) != 1 || o[0].UID != home.UID || o[0].Kind != "CacheBackend" {
		t.Errorf("owner references %+v, want the home backend (an owner must be in the same namespace)", o)
	}
	want := map[string]string{hicachev1alpha1.LabelStore: storeuse.StoreHash("10.0.0.1:50051"), hicachev1alpha1.LabelCacheNamespace: "hc-1", hicachev1alpha1.LabelLayout: "abc", "app.kubernetes.io/managed-by": storeuse.FieldOwner}
	if diff := cmp.Diff(want, cf.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if cf.Annotations[hicachev1alpha1.AnnotationFlushSequence] != "2" || cf.Annotations[hicachev1alpha1.AnnotationDrainedFor] != string(h.UID) || cf.Annotations[hicachev1alpha1.AnnotationRequestedBy] != "default/q" {
		t.Errorf("annotations %v", cf.Annotations)
	}
}

func TestPickFlush(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(testsupport.T0.Add(time.Duration(sec) * time.Second)) }
	flush := func(name string, created int, seq string, state string) hicachev1alpha1.CacheFlush {
		cf := hicachev1alpha1.CacheFlush{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created),
			Annotations: map[string]string{hicachev1alpha1.AnnotationFlushSequence: seq}}}
		switch state {
		case "complete":
			cf.Status.Conditions = []metav1.Condition{{Type: hicachev1alpha1.ConditionComplete, Status: metav1.ConditionTrue, Reason: hicachev1alpha1.ReasonFlushed}}
		case "failed":
			cf.Status.Conditions = []metav1.Condition{{Type: hicachev1alpha1.ConditionFailed, Status: metav1.ConditionTrue, Reason: hicachev1alpha1.ReasonKeysLeft}}
		}
		return cf
	}
	since := func(sec int) *metav1.Time { v := at(sec); return &v }
	underView := func(cf hicachev1alpha1.CacheFlush, view int64, done int) hicachev1alpha1.CacheFlush {
		cf.Status.ViewVersion, cf.Status.CompletionTime = view, ptr.To(at(done))
		return cf
	}
	cases := map[string]struct {
		existing []hicachev1alpha1.CacheFlush
		since    *metav1.Time
		view     int64
		want     string
		next     int
		outdated string
	}{
		"none": {since: since(0), next: 1},
		"one created after writing started covers it (the other deployment's)": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 50, "1", "complete")}, since: since(10), want: "f1", next: 2},
		"one created in the same second covers it": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 10, "1", "")}, since: since(10), want: "f1", next: 2},
		"an older generation does not: a return to the layout is flushed anew": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 5, "1", "complete")}, since: since(10), next: 2},
		"complete is preferred to running, running to failed": {
			existing: []hicachev1alpha1.CacheFlush{flush("f3", 30, "3", "failed"), flush("f2", 20, "2", ""), flush("f4", 40, "4", "complete")}, since: since(10), want: "f4", next: 5},
		"running before failed": {
			existing: []hicachev1alpha1.CacheFlush{flush("f3", 30, "3", "failed"), flush("f2", 20, "2", "")}, since: since(10), want: "f2", next: 4},
		"no start recorded: only an unfinished flush counts": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 5, "1", "complete"), flush("f2", 6, "2", "")}, want: "f2", next: 3},
		"no start recorded and all finished: a new one": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 5, "1", "complete")}, next: 2},
		"a sequence that is not a number is skipped": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 5, "x", "complete"), flush("f7", 6, "7", "complete")}, since: since(100), next: 8},
		"completed under the leader that serves now: it covers": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 7, 60)}, since: since(10), view: 7, want: "f1", next: 2},
		"completed under an older leader: counted and flushed again": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 7, 60)}, since: since(10), view: 8, next: 2, outdated: "f1"},
		"the flush again covers, under the new leader": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 7, 60), underView(flush("f2", 70, "2", "complete"), 8, 80)},
			since:    since(10), view: 8, want: "f2", next: 3, outdated: "f1"},
		"a flush still running covers under any leader: it confirms with its own": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", ""), 7, 60)}, since: since(10), view: 8, want: "f1", next: 2},
		"without HA any completed flush covers": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 50, "1", "complete")}, since: since(10), view: 8, want: "f1", next: 2},
		"the status lags the failover: of two completed flushes, the recount under the newer view covers": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 7, 60), underView(flush("f2", 70, "2", "complete"), 8, 80)},
			since:    since(10), view: 7, want: "f2", next: 3},
		"the last of the outdated ones is named": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 6, 60), underView(flush("f2", 70, "2", "complete"), 7, 80)},
			since:    since(10), view: 9, next: 3, outdated: "f2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, next, outdated := pickFlush(tc.existing, tc.since, tc.view)
			gotName, outName := "", ""
			if got != nil {
				gotName = got.Name
			}
			if outdated != nil {
				outName = outdated.Name
			}
			if gotName != tc.want || next != tc.next || outName != tc.outdated {
				t.Errorf("pickFlush = %q, next %d, outdated %q; want %q, next %d, outdated %q", gotName, next, outName, tc.want, tc.next, tc.outdated)
			}
		})
	}
}

func TestConflictWith(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(testsupport.T0.Add(time.Duration(sec) * time.Second)) }
	// writer is a deployment whose status records namespace "shared" under layout, since the
	// given second (-1: recorded before since was kept; nil status with layout "").
	writer := func(ns, name string, created int, layout string, since int) hicachev1alpha1.HiCacheDeployment {
		h := hicachev1alpha1.HiCacheDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), CreationTimestamp: at(created)}}
		if layout != "" {
			h.Status.Cache = &hicachev1alpha1.CacheStatus{Namespace: "shared", LayoutHash: layout, ShortHash: layout[:1]}
			if since >= 0 {
				s := at(since)
				h.Status.Cache.Since = &s
			}
		}
		return h
	}
	cases := map[string]struct {
		self    hicachev1alpha1.HiCacheDeployment
		layout  string
		writers []hicachev1alpha1.HiCacheDeployment
		want    string
	}{
		"alone": {self: writer("a", "me", 0, "", 0), layout: "A"},
		"the same layout shares": {self: writer("a", "me", 0, "", 0), layout: "A",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", 10)}},
		"a newcomer yields to a recorded writer, however old it is": {self: writer("a", "me", 0, "", 0), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", 10)}, want: "b/other"},
		"the first to record keeps it": {self: writer("a", "me", 0, "B", 20), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", 10)}, want: "b/other"},
		"the later recorder yields": {self: writer("a", "me", 50, "B", 5), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", 10)}},
		"recorded in the same second: the older deployment keeps it": {self: writer("a", "me", 3, "B", 10), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 2, "A", 10)}, want: "b/other"},
		"then the smaller namespace/name": {self: writer("b", "me", 2, "B", 10), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("a", "other", 2, "A", 10)}, want: "a/other"},
		"recorded before since was kept counts as first": {self: writer("a", "me", 0, "B", 1), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", -1)}, want: "b/other"},
		"the strongest of several is named": {self: writer("z", "me", 0, "", 0), layout: "C",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "late", 1, "A", 30), writer("c", "early", 5, "B", 20), writer("d", "same", 0, "C", 1)}, want: "c/early"},
		"a writer whose claim is another namespace is not a conflict": {self: writer("a", "me", 0, "", 0), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{func() hicachev1alpha1.HiCacheDeployment {
				w := writer("b", "other", 0, "A", 0)
				w.Status.Cache.Namespace = "elsewhere"
				return w
			}()}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if w := conflictWith(&tc.self, "shared", tc.layout, tc.writers); w != nil {
				got = w.Namespace + "/" + w.Name
			}
			if got != tc.want {
				t.Errorf("conflictWith = %q, want %q", got, tc.want)
			}
		})
	}
	// Decided alike from either side: of two writers of different layouts exactly one yields.
	a, b := writer("a", "x", 5, "A", 7), writer("b", "y", 5, "B", 7)
	if (conflictWith(&a, "shared", "A", []hicachev1alpha1.HiCacheDeployment{b}) == nil) == (conflictWith(&b, "shared", "B", []hicachev1alpha1.HiCacheDeployment{a}) == nil) {
		t.Error("two writers of one namespace under different layouts both keep it, or both yield")
	}
}

func TestHeldCacheDropsTheClaim(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Storage("mc").Obj()
	since := testsupport.T0
	old := &hicachev1alpha1.CacheStatus{Namespace: "shared", LayoutHash: "abc", ShortHash: "a", Backend: "mc", Since: &since,
		StaleNamespaces: []hicachev1alpha1.StaleNamespace{{Namespace: "older"}}}
	got := heldCache(old, h, "shared")
	if got.Namespace != "" || got.LayoutHash != "" || got.Since != nil || len(got.StaleNamespaces) != 1 || old.Namespace != "shared" {
		t.Errorf("held cache %+v (old %+v): want the claim on shared dropped, the stale list kept, old untouched", got, old)
	}
	if got := heldCache(old, h, "other"); got.Namespace != "shared" {
		t.Errorf("a claim on another namespace was dropped: %+v", got)
	}
	if got := heldCache(nil, h, "shared"); got.Backend != "mc" || got.Namespace != "" {
		t.Errorf("held cache of a new deployment %+v", got)
	}
}
