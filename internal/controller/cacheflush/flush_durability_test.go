package cacheflush

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
)

// haPolicy is testPolicy on masters with HA: removals are confirmed 5 s after they return.
var haPolicy = func() flushPolicy { p := testPolicy; p.DurabilityWindow = 5 * time.Second; return p }()

func TestPlanConfirm(t *testing.T) {
	leader := func(view int64) *storeuse.MasterHealth {
		return &storeuse.MasterHealth{Role: hicachev1alpha1.MasterLeader, ViewVersion: view}
	}
	after := at(5 * time.Second)
	cases := map[string]struct {
		obs  confirmObservation
		want confirmVerdict
		// until is when to look again, for confirmWait.
		until time.Time
	}{
		"no master answers (the leader died, the Service has no endpoint yet)": {
			obs: confirmObservation{View: 7, After: after, Now: at(6 * time.Second), Countable: true, Left: ptr.To(int64(0))}, want: confirmWait, until: at(8 * time.Second),
		},
		"a standby answers at the admin URL": {
			obs:  confirmObservation{View: 7, After: after, Now: at(6 * time.Second), Leader: &storeuse.MasterHealth{Role: hicachev1alpha1.MasterStandby, ViewVersion: 8}, Countable: true},
			want: confirmWait, until: at(8 * time.Second),
		},
		"the masters elected another leader before the window passed: run again at once": {
			obs: confirmObservation{View: 7, After: after, Now: at(time.Second), Leader: leader(8), Countable: true}, want: confirmRepeat,
		},
		"another leader, even with the scope empty on it": {
			obs: confirmObservation{View: 7, After: after, Now: at(time.Minute), Leader: leader(8), Countable: true, Left: ptr.To(int64(0))}, want: confirmRepeat,
		},
		"the same leader, the window not passed": {
			obs: confirmObservation{View: 7, After: after, Now: at(time.Second), Leader: leader(7), Countable: true}, want: confirmWait, until: after,
		},
		"the same leader past the window, the scope empty": {
			obs: confirmObservation{View: 7, After: after, Now: after, Leader: leader(7), Countable: true, Left: ptr.To(int64(0))}, want: confirmDone,
		},
		"the same leader past the window, the scope not counted": {
			obs: confirmObservation{View: 7, After: after, Now: at(6 * time.Second), Leader: leader(7), Countable: true}, want: confirmWait, until: at(8 * time.Second),
		},
		"the same leader past the window, objects in the scope: written meanwhile": {
			obs: confirmObservation{View: 7, After: after, Now: at(6 * time.Second), Leader: leader(7), Countable: true, Left: ptr.To(int64(3))}, want: confirmKeysLeft,
		},
		"a tenant's scope cannot be counted: the leader past the window is enough": {
			obs: confirmObservation{View: 7, After: after, Now: at(6 * time.Second), Leader: leader(7)}, want: confirmDone,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := planConfirm(tc.obs)
			if got.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s (%+v)", got.Verdict, tc.want, got)
			}
			if tc.want == confirmWait && (!got.Until.Equal(tc.until) || got.Why == "") {
				t.Errorf("wait until %s (%q), want %s and a reason", got.Until, got.Why, tc.until)
			}
			if tc.want == confirmRepeat && got.ServingView != tc.obs.Leader.ViewVersion {
				t.Errorf("serving view %d, want %d", got.ServingView, tc.obs.Leader.ViewVersion)
			}
		})
	}
}

func TestNoteAttemptView(t *testing.T) {
	cases := map[string]struct {
		status     hicachev1alpha1.CacheFlushStatus
		view       int64
		wantRepeat bool
	}{
		"a first attempt":                     {view: 7},
		"a master without HA":                 {status: hicachev1alpha1.CacheFlushStatus{Removed: 5}},
		"the same leader as the last attempt": {status: hicachev1alpha1.CacheFlushStatus{ViewVersion: 7, Removed: 5}, view: 7},
		"another leader, nothing removed yet": {status: hicachev1alpha1.CacheFlushStatus{ViewVersion: 7}, view: 8},
		"another leader after a removal":      {status: hicachev1alpha1.CacheFlushStatus{ViewVersion: 7, Removed: 5}, view: 8, wantRepeat: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
			cf.Status = tc.status
			ev := noteAttemptView(cf, tc.view, 2)
			if cf.Status.ViewVersion != tc.view {
				t.Errorf("viewVersion %d, want the attempt's %d", cf.Status.ViewVersion, tc.view)
			}
			repeated := cf.Status.RepeatedAfterFailover == tc.status.RepeatedAfterFailover+1
			if repeated != tc.wantRepeat || (ev.Reason == hicachev1alpha1.ReasonFlushRepeatedAfterFailover) != tc.wantRepeat {
				t.Errorf("repeatedAfterFailover %d, event %+v; want a repeat: %v", cf.Status.RepeatedAfterFailover, ev, tc.wantRepeat)
			}
			if tc.wantRepeat && (ev.Type != "Warning" || !strings.Contains(ev.Message, "view 8, was 7") || !strings.Contains(ev.Message, "etcd")) {
				t.Errorf("event %+v does not say what happened", ev)
			}
		})
	}
}

// durableFlush runs attempt n of cf on masters at view: it starts, removes removed objects and
// leaves left, recorded at now.
func durableFlush(cf *hicachev1alpha1.CacheFlush, p flushPolicy, n int32, view, before, removed, left int64, now time.Time) (started, recorded flushEvent) {
	started = noteAttemptView(cf, view, n)
	startAttempt(cf, p, "me", "Local", n, ptr.To(before), now)
	return started, recordAttempt(cf, p, n, attemptOutcome{Removed: removed, Left: ptr.To(left)}, true, now)
}

func confirmAt(cf *hicachev1alpha1.CacheFlush, p flushPolicy, leaderView int64, left int64, now time.Time) (confirmPlan, flushEvent) {
	o := confirmObservation{View: cf.Status.ViewVersion, After: cf.Status.ConfirmAfter.Time, Now: now, Countable: true,
		Leader: &storeuse.MasterHealth{Role: hicachev1alpha1.MasterLeader, ViewVersion: leaderView}, Left: ptr.To(left)}
	plan := planConfirm(o)
	return plan, applyConfirm(cf, p, plan, o.Left, true, now)
}

func TestDurableFlush(t *testing.T) {
	t.Run("on masters with HA a removal is confirmed with its leader after the window", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		_, ev := durableFlush(cf, haPolicy, 1, 7, 300, 300, 0, at(time.Second))
		if s, r, m := condition(cf, "Complete"); s != "False" || r != hicachev1alpha1.ReasonConfirmingRemoval || !strings.Contains(m, "view 7") || storeuse.Finished(cf) {
			t.Fatalf("after the removal: Complete %s %s %q, finished %v; want it confirming", s, r, m, storeuse.Finished(cf))
		}
		if ev.Reason != "" || cf.Status.ConfirmAfter == nil || !cf.Status.ConfirmAfter.Time.Equal(at(6*time.Second)) || cf.Status.Claim != nil {
			t.Fatalf("event %+v, confirmAfter %v, claim %+v", ev, cf.Status.ConfirmAfter, cf.Status.Claim)
		}
		if p := planFlush(flushObservation{Status: &cf.Status, Identity: "me", Now: at(2 * time.Second), Policy: haPolicy}); p.Step != stepConfirm {
			t.Fatalf("plan %+v, want the confirmation", p)
		}
		if plan, _ := confirmAt(cf, haPolicy, 7, 0, at(2*time.Second)); plan.Verdict != confirmWait || storeuse.Finished(cf) {
			t.Fatalf("inside the window: %+v, finished %v", plan, storeuse.Finished(cf))
		}
		plan, ev := confirmAt(cf, haPolicy, 7, 0, at(6*time.Second))
		if s, r, m := condition(cf, "Complete"); plan.Verdict != confirmDone || s != "True" || r != "Flushed" || !strings.Contains(m, "confirmed") {
			t.Fatalf("past the window: %+v, Complete %s %s %q", plan, s, r, m)
		}
		if ev.Reason != "Flushed" || cf.Status.Removed != 300 || cf.Status.RemovedAgain != 0 || cf.Status.RepeatedAfterFailover != 0 || cf.Status.ConfirmAfter != nil {
			t.Errorf("event %+v, status %+v", ev, cf.Status)
		}
	})
	t.Run("the leader died before the window passed: run again against the new one, counted once", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		durableFlush(cf, haPolicy, 1, 7, 300, 300, 0, testsupport.T0.Time)
		// 299 of the 300 came back on the new leader.
		plan, ev := confirmAt(cf, haPolicy, 8, 299, at(3*time.Second))
		if plan.Verdict != confirmRepeat || ev.Type != "Warning" || ev.Reason != hicachev1alpha1.ReasonFlushRepeatedAfterFailover || storeuse.Finished(cf) {
			t.Fatalf("after the failover: %+v, event %+v, finished %v", plan, ev, storeuse.Finished(cf))
		}
		if s, r, _ := condition(cf, "Complete"); s != "False" || r != hicachev1alpha1.ReasonFlushRepeatedAfterFailover || cf.Status.RepeatedAfterFailover != 1 || cf.Status.ConfirmAfter != nil {
			t.Fatalf("Complete %s %s, status %+v", s, r, cf.Status)
		}
		if p := planFlush(flushObservation{Status: &cf.Status, Identity: "me", Now: at(3 * time.Second), Policy: haPolicy}); p.Step != stepStart || p.Attempt != 2 {
			t.Fatalf("plan %+v, want attempt 2 at once", p)
		}
		started, _ := durableFlush(cf, haPolicy, 2, 8, 299, 299, 0, at(4*time.Second))
		if started.Reason != "" || cf.Status.RepeatedAfterFailover != 1 {
			t.Errorf("the failover was counted twice: event %+v, repeated %d", started, cf.Status.RepeatedAfterFailover)
		}
		if plan, _ := confirmAt(cf, haPolicy, 8, 0, at(9*time.Second)); plan.Verdict != confirmDone || !storeuse.Finished(cf) {
			t.Fatalf("the run again: %+v, finished %v", plan, storeuse.Finished(cf))
		}
		_, _, m := condition(cf, "Complete")
		if cf.Status.Removed != 300 || cf.Status.RemovedAgain != 299 || cf.Status.Attempts != 2 || !strings.Contains(m, "299 more") {
			t.Errorf("removed %d, removed again %d, attempts %d, %q: want 300, 299 and 2", cf.Status.Removed, cf.Status.RemovedAgain, cf.Status.Attempts, m)
		}
	})
	t.Run("a failover seen when the next attempt starts is a run again too", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		noteAttemptView(cf, 7, 1)
		startAttempt(cf, haPolicy, "me", "Local", 1, ptr.To(int64(300)), testsupport.T0.Time)
		// The removal ran; the leader died before the count after it.
		recordAttempt(cf, haPolicy, 1, attemptOutcome{Removed: 300, Err: errors.New("connection refused"), Reason: "BackendUnreachable"}, true, testsupport.T0.Time)
		started, _ := durableFlush(cf, haPolicy, 2, 8, 299, 299, 0, at(20*time.Second))
		if started.Reason != hicachev1alpha1.ReasonFlushRepeatedAfterFailover || cf.Status.RepeatedAfterFailover != 1 {
			t.Fatalf("event %+v, repeated %d", started, cf.Status.RepeatedAfterFailover)
		}
		if cf.Status.Removed != 300 || cf.Status.RemovedAgain != 299 || cf.Status.ConfirmAfter == nil {
			t.Errorf("removed %d, removed again %d, confirmAfter %v", cf.Status.Removed, cf.Status.RemovedAgain, cf.Status.ConfirmAfter)
		}
	})
	t.Run("objects in the scope under the same leader: written meanwhile, retried once", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		durableFlush(cf, haPolicy, 1, 7, 10, 10, 0, testsupport.T0.Time)
		confirmAt(cf, haPolicy, 7, 2, at(5*time.Second))
		if _, r, _ := condition(cf, "Failed"); r != hicachev1alpha1.ReasonKeysLeftRetrying || cf.Status.KeysLeft != 2 || cf.Status.NextAttemptTime == nil || cf.Status.RepeatedAfterFailover != 0 {
			t.Errorf("Failed %s, status %+v", r, cf.Status)
		}
	})
	t.Run("without HA, or with nothing removed, a flush completes at once", func(t *testing.T) {
		for name, view := range map[string]int64{"no HA": 0, "HA, scope empty": 7} {
			cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
			removed := int64(4)
			if view != 0 {
				removed = 0
			}
			durableFlush(cf, haPolicy, 1, view, removed, removed, 0, testsupport.T0.Time)
			if !storeuse.Finished(cf) || cf.Status.ConfirmAfter != nil {
				_, r, m := condition(cf, "Complete")
				t.Errorf("%s: not complete at once: %s %q", name, r, m)
			}
		}
	})
	t.Run("an interrupted attempt that emptied the scope is confirmed too", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		noteAttemptView(cf, 7, 1)
		startAttempt(cf, haPolicy, "dead", "Local", 1, ptr.To(int64(32)), testsupport.T0.Time)
		recoverAttempt(cf, haPolicy, 1, ptr.To(int64(0)), at(2*time.Minute))
		if cf.Status.Removed != 32 || cf.Status.ConfirmAfter == nil || storeuse.Finished(cf) {
			t.Errorf("status %+v", cf.Status)
		}
	})
	t.Run("a claim given back leaves the view and the count of runs as they were", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		cf.Status.ViewVersion, cf.Status.Removed, cf.Status.RepeatedAfterFailover = 7, 5, 0
		before := cf.Status.DeepCopy()
		noteAttemptView(cf, 8, 2)
		startAttempt(cf, haPolicy, "me", "Local", 2, ptr.To(int64(5)), testsupport.T0.Time)
		giveBack(cf, before, "other", at(time.Second))
		if diff := cmp.Diff([]int64{7, 0}, []int64{cf.Status.ViewVersion, int64(cf.Status.RepeatedAfterFailover)}); diff != "" {
			t.Errorf("view and runs again (-want +got):\n%s", diff)
		}
	})
}
