package cacheflush

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
)

var testPolicy = flushPolicy{MaxAttempts: 5, AttemptTimeout: time.Minute, ClaimGrace: 10 * time.Second, BackoffBase: 10 * time.Second, BackoffMax: time.Minute}

func at(d time.Duration) time.Time { return testsupport.T0.Add(d) }

// claimBy is a claim of attempt n taken at t0 by holder.
func claimBy(holder string, n int32, keysBefore *int64) *hicachev1alpha1.FlushClaim {
	return testPolicy.claim(holder, n, testsupport.T0.Time, keysBefore)
}

func TestPlanFlush(t *testing.T) {
	type obs struct {
		status   hicachev1alpha1.CacheFlushStatus
		finished bool
		jobs     []attemptJob
		turn     *backendTurn
		now      time.Duration // after t0
	}
	expiry := at(time.Minute + 10*time.Second)
	cases := map[string]struct {
		obs  obs
		want flushPlan
	}{
		"finished": {obs: obs{finished: true}, want: flushPlan{Step: stepDone}},
		"new":      {obs: obs{}, want: flushPlan{Step: stepStart, Attempt: 1}},
		"new, another flush of the backend runs": {
			obs:  obs{turn: &backendTurn{Flush: "other", Until: expiry}},
			want: flushPlan{Step: stepWaitTurn, Attempt: 1, Until: expiry, Holder: "other"},
		},
		"another process runs attempt 1 in itself": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Local", Claim: claimBy("b", 1, ptr.To(int64(3)))}, now: 5 * time.Second},
			want: flushPlan{Step: stepWaitClaim, Attempt: 1, Until: expiry, Holder: "b"},
		},
		"its claim lapsed: the process stopped": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Local", Claim: claimBy("b", 1, ptr.To(int64(3)))}, now: 2 * time.Minute},
			want: flushPlan{Step: stepRecover, Attempt: 1},
		},
		"a claim of this very process, seen afresh: it restarted, or the record was lost": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Local", Claim: claimBy("me", 1, nil)}, now: 5 * time.Second},
			want: flushPlan{Step: stepRecover, Attempt: 1},
		},
		"an admin API attempt of this process, seen afresh": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 2, Method: "AdminAPI", Claim: claimBy("me", 2, nil)}},
			want: flushPlan{Step: stepRecover, Attempt: 2},
		},
		"a Job attempt of this process: check on its Job": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Job", Claim: claimBy("me", 1, nil)}, jobs: []attemptJob{{Name: "f-1", Attempt: 1}}},
			want: flushPlan{Step: stepPoll, Attempt: 1},
		},
		"a Job attempt of this process whose Job is not seen yet: create it (by name, once)": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Job", Claim: claimBy("me", 1, nil)}},
			want: flushPlan{Step: stepPoll, Attempt: 1},
		},
		"a Job attempt of another process that ended: whoever sees it records it": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Job", Claim: claimBy("b", 1, nil)}, jobs: []attemptJob{{Name: "f-1", Attempt: 1, Finished: true}}},
			want: flushPlan{Step: stepPoll, Attempt: 1},
		},
		"a Job attempt of another process, its Job still running after the claim lapsed: wait for the Job, never a second one": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Job", Claim: claimBy("b", 1, nil)}, jobs: []attemptJob{{Name: "f-1", Attempt: 1}}, now: time.Hour},
			want: flushPlan{Step: stepPoll, Attempt: 1},
		},
		"a Job attempt of another process, no Job yet": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Job", Claim: claimBy("b", 1, nil)}, now: time.Second},
			want: flushPlan{Step: stepWaitClaim, Attempt: 1, Until: expiry, Holder: "b"},
		},
		"a Job attempt whose holder stopped before creating the Job": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Method: "Job", Claim: claimBy("b", 1, nil)}, now: time.Hour},
			want: flushPlan{Step: stepRecover, Attempt: 1},
		},
		"backing off after a failed attempt": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 2, NextAttemptTime: ptr.To(metav1.NewTime(at(20 * time.Second)))}, now: 5 * time.Second},
			want: flushPlan{Step: stepBackoff, Attempt: 3, Until: at(20 * time.Second)},
		},
		"backoff over: the next attempt": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 2, NextAttemptTime: ptr.To(metav1.NewTime(at(20 * time.Second)))}, now: 20 * time.Second},
			want: flushPlan{Step: stepStart, Attempt: 3},
		},
		"backoff over, but the backend is another flush's": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 2, NextAttemptTime: ptr.To(metav1.NewTime(at(20 * time.Second)))}, now: time.Minute, turn: &backendTurn{Flush: "x", Until: expiry}},
			want: flushPlan{Step: stepWaitTurn, Attempt: 3, Until: expiry, Holder: "x"},
		},
		"every attempt used": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 5}},
			want: flushPlan{Step: stepGiveUp, Attempt: 5},
		},
		"a Job of an earlier attempt still runs, unclaimed: one live Job per flush": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1}, jobs: []attemptJob{{Name: "f-1", Attempt: 1}}},
			want: flushPlan{Step: stepWaitJob, Attempt: 1, Until: at(time.Minute)},
		},
		"the last attempt emptied the scope on masters with HA: confirm its removal first": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 5, ViewVersion: 3, Removed: 9, ConfirmAfter: ptr.To(metav1.NewTime(at(5 * time.Second)))}, turn: &backendTurn{Flush: "x", Until: expiry}},
			want: flushPlan{Step: stepConfirm, Attempt: 5, Until: at(5 * time.Second)},
		},
		"a run again after a failover starts at once": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, ViewVersion: 4, Removed: 9, RepeatedAfterFailover: 1}},
			want: flushPlan{Step: stepStart, Attempt: 2},
		},
		"finished Jobs of earlier attempts do not hold the next": {
			obs:  obs{status: hicachev1alpha1.CacheFlushStatus{Attempts: 1}, jobs: []attemptJob{{Name: "f-1", Attempt: 1, Finished: true}}},
			want: flushPlan{Step: stepStart, Attempt: 2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := tc.obs.status
			got := planFlush(flushObservation{Status: &st, Finished: tc.obs.finished, Identity: "me", Now: at(tc.obs.now),
				Jobs: tc.obs.jobs, Turn: tc.obs.turn, Policy: testPolicy})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackoffDoublesUpToTheMaximum(t *testing.T) {
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute}
	for i, w := range want {
		if got := testPolicy.backoff(int32(i + 1)); got != w {
			t.Errorf("backoff after attempt %d = %s, want %s", i+1, got, w)
		}
	}
}

func TestTurnOf(t *testing.T) {
	flush := func(name string, method string, claim *hicachev1alpha1.FlushClaim, conds ...metav1.Condition) hicachev1alpha1.CacheFlush {
		cf := testsupport.TestFlush(name, hicachev1alpha1.FlushScopeNamespace)
		cf.Status.Method, cf.Status.Claim, cf.Status.Conditions = method, claim, conds
		return *cf
	}
	later := testPolicy.claim("b", 1, at(time.Second), nil)
	cases := map[string]struct {
		others []hicachev1alpha1.CacheFlush
		now    time.Duration
		want   *backendTurn
	}{
		"none":                              {others: []hicachev1alpha1.CacheFlush{flush("a", "", nil)}},
		"itself does not count":             {others: []hicachev1alpha1.CacheFlush{flush("self", "Local", claimBy("b", 1, nil))}},
		"a claimed flush holds the backend": {others: []hicachev1alpha1.CacheFlush{flush("a", "", nil), flush("b", "Local", claimBy("p", 1, nil))}, want: &backendTurn{Flush: "b", Until: at(70 * time.Second)}},
		"a lapsed claim holds nothing":      {others: []hicachev1alpha1.CacheFlush{flush("b", "Local", claimBy("p", 1, nil))}, now: time.Hour},
		"a Job's flush holds it past its claim, until its Job is recorded": {
			others: []hicachev1alpha1.CacheFlush{flush("b", "Job", claimBy("p", 1, nil))}, now: time.Hour, want: &backendTurn{Flush: "b", Until: at(70 * time.Second)},
		},
		"the oldest claim first": {
			others: []hicachev1alpha1.CacheFlush{flush("z", "Local", claimBy("p", 1, nil)), flush("a", "Local", later)},
			want:   &backendTurn{Flush: "z", Until: at(70 * time.Second)},
		},
		"a finished flush holds nothing": {
			others: []hicachev1alpha1.CacheFlush{flush("b", "Local", claimBy("p", 1, nil), metav1.Condition{Type: "Complete", Status: "True", Reason: "Flushed"})},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, turnOf("self", tc.others, at(tc.now))); diff != "" {
				t.Errorf("turn (-want +got):\n%s", diff)
			}
		})
	}
}

// condition is the reason and message of a flush's condition, "" when absent.
func condition(cf *hicachev1alpha1.CacheFlush, typ string) (metav1.ConditionStatus, string, string) {
	c := meta.FindStatusCondition(cf.Status.Conditions, typ)
	if c == nil {
		return "", "", ""
	}
	return c.Status, c.Reason, c.Message
}

func TestAttemptLifecycle(t *testing.T) {
	t.Run("claimed before it runs, recorded after", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		ev := startAttempt(cf, testPolicy, "me", "Local", 1, ptr.To(int64(32)), testsupport.T0.Time)
		c := cf.Status.Claim
		if cf.Status.Attempts != 1 || c == nil || c.Holder != "me" || c.Attempt != 1 || *c.KeysBefore != 32 || !c.ExpiryTime.Time.Equal(at(70*time.Second)) {
			t.Fatalf("status after the claim: %+v, claim %+v", cf.Status, c)
		}
		if ev.Reason != "AttemptStarted" || ev.Type != "Normal" {
			t.Errorf("event %+v", ev)
		}
		ev = recordAttempt(cf, testPolicy, 1, attemptOutcome{Removed: 32, Left: ptr.To(int64(0))}, true, at(time.Second))
		if s, r, _ := condition(cf, "Complete"); s != "True" || r != "Flushed" || cf.Status.Removed != 32 || cf.Status.Claim != nil || !storeuse.Finished(cf) {
			t.Errorf("complete %s %s removed %d claim %+v", s, r, cf.Status.Removed, cf.Status.Claim)
		}
		if ev.Reason != "Flushed" {
			t.Errorf("event %+v", ev)
		}
	})
	t.Run("an empty scope is recorded as such", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		startAttempt(cf, testPolicy, "me", "Local", 1, ptr.To(int64(0)), testsupport.T0.Time)
		recordAttempt(cf, testPolicy, 1, attemptOutcome{Left: ptr.To(int64(0))}, true, testsupport.T0.Time)
		if s, r, m := condition(cf, "Complete"); s != "True" || r != "AlreadyEmpty" || !strings.Contains(m, "held no objects") {
			t.Errorf("Complete %s %s %q", s, r, m)
		}
	})
	t.Run("failures back off, doubling, and give up after the last attempt with its reason", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		now := testsupport.T0.Time
		var waits []time.Duration
		for n := int32(1); n <= 5; n++ {
			startAttempt(cf, testPolicy, "me", "Job", n, ptr.To(int64(4)), now)
			ev := recordAttempt(cf, testPolicy, n, attemptOutcome{Err: errors.New("flush job f-1 failed: no output"), Reason: "JobFailed"}, true, now)
			if cf.Status.Claim != nil {
				t.Fatalf("attempt %d: the claim outlives the record", n)
			}
			if n < 5 {
				if ev.Type != "Warning" || ev.Reason != "JobFailed" || storeuse.Finished(cf) {
					t.Fatalf("attempt %d: event %+v, finished %v", n, ev, storeuse.Finished(cf))
				}
				if s, r, _ := condition(cf, "Complete"); s != "False" || r != "BackingOff" {
					t.Errorf("attempt %d: Complete %s %s", n, s, r)
				}
				next := cf.Status.NextAttemptTime.Time
				waits = append(waits, next.Sub(now))
				now = next
				continue
			}
			if ev.Reason != "AttemptsExhausted" || !storeuse.Finished(cf) || cf.Status.NextAttemptTime != nil {
				t.Errorf("after the last attempt: event %+v, finished %v", ev, storeuse.Finished(cf))
			}
			if _, r, m := condition(cf, "Failed"); r != "AttemptsExhausted" || !strings.Contains(m, "JobFailed") || !strings.Contains(m, "no output") || !strings.Contains(m, "5 attempts") {
				t.Errorf("Failed %s %q, want the last attempt's reason and words", r, m)
			}
		}
		if diff := cmp.Diff([]time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute}, waits); diff != "" {
			t.Errorf("backoffs (-want +got):\n%s", diff)
		}
		if cf.Status.Attempts != 5 {
			t.Errorf("attempts = %d", cf.Status.Attempts)
		}
	})
	t.Run("keys left: retried once, then final", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		startAttempt(cf, testPolicy, "me", "Local", 1, ptr.To(int64(10)), testsupport.T0.Time)
		recordAttempt(cf, testPolicy, 1, attemptOutcome{Removed: 10, Left: ptr.To(int64(2))}, true, testsupport.T0.Time)
		if _, r, _ := condition(cf, "Failed"); r != "KeysLeftRetrying" || storeuse.Finished(cf) {
			t.Fatalf("after attempt 1: Failed %s", r)
		}
		startAttempt(cf, testPolicy, "me", "Local", 2, ptr.To(int64(2)), at(20*time.Second))
		if s, r, _ := condition(cf, "Failed"); s != "False" || r != "Running" {
			t.Errorf("while attempt 2 runs: Failed %s %s, want False: the failure was attempt 1's", s, r)
		}
		recordAttempt(cf, testPolicy, 2, attemptOutcome{Removed: 2, Left: ptr.To(int64(1))}, true, at(20*time.Second))
		if _, r, _ := condition(cf, "Failed"); r != "KeysLeft" || !storeuse.Finished(cf) || cf.Status.Removed != 12 {
			t.Errorf("after attempt 2: Failed %s finished %v removed %d", r, storeuse.Finished(cf), cf.Status.Removed)
		}
	})
	t.Run("a flush that ran but could not be verified keeps what it removed", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		startAttempt(cf, testPolicy, "me", "Local", 1, ptr.To(int64(7)), testsupport.T0.Time)
		recordAttempt(cf, testPolicy, 1, attemptOutcome{Removed: 7, Err: errors.New("count failed"), Reason: "BackendUnreachable"}, true, testsupport.T0.Time)
		startAttempt(cf, testPolicy, "me", "Local", 2, ptr.To(int64(0)), at(time.Minute))
		recordAttempt(cf, testPolicy, 2, attemptOutcome{Left: ptr.To(int64(0))}, true, at(time.Minute))
		if s, r, _ := condition(cf, "Complete"); s != "True" || r != "Flushed" || cf.Status.Removed != 7 || cf.Status.Attempts != 2 {
			t.Errorf("Complete %s %s removed %d attempts %d; want Flushed, 7 removed by the first of 2 attempts", s, r, cf.Status.Removed, cf.Status.Attempts)
		}
	})
}

func TestRecoverAttempt(t *testing.T) {
	claimed := func(before *int64, n int32) *hicachev1alpha1.CacheFlush {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		startAttempt(cf, testPolicy, "dead", "Local", n, before, testsupport.T0.Time)
		return cf
	}
	t.Run("the attempt did its work before its process stopped", func(t *testing.T) {
		cf := claimed(ptr.To(int64(32)), 1)
		ev := recoverAttempt(cf, testPolicy, 1, ptr.To(int64(0)), at(2*time.Minute))
		s, r, m := condition(cf, "Complete")
		if s != "True" || r != "Flushed" || cf.Status.Removed != 32 || cf.Status.Attempts != 1 || cf.Status.Claim != nil {
			t.Errorf("Complete %s %s removed %d attempts %d; want Flushed, the 32 objects the scope held before attempt 1, in 1 attempt", s, r, cf.Status.Removed, cf.Status.Attempts)
		}
		if !strings.Contains(m, "dead") || !strings.Contains(m, "32") {
			t.Errorf("message %q does not say what happened", m)
		}
		if ev.Reason != "Flushed" {
			t.Errorf("event %+v", ev)
		}
	})
	t.Run("the scope was empty before the attempt", func(t *testing.T) {
		cf := claimed(ptr.To(int64(0)), 1)
		recoverAttempt(cf, testPolicy, 1, ptr.To(int64(0)), at(2*time.Minute))
		if s, r, _ := condition(cf, "Complete"); s != "True" || r != "AlreadyEmpty" || cf.Status.Removed != 0 {
			t.Errorf("Complete %s %s removed %d", s, r, cf.Status.Removed)
		}
	})
	t.Run("the attempt stopped half way: what it removed counts, the next attempt follows at once", func(t *testing.T) {
		cf := claimed(ptr.To(int64(32)), 1)
		ev := recoverAttempt(cf, testPolicy, 1, ptr.To(int64(15)), at(2*time.Minute))
		if cf.Status.Removed != 17 || cf.Status.Attempts != 1 || cf.Status.Claim != nil || storeuse.Finished(cf) || cf.Status.NextAttemptTime != nil {
			t.Errorf("status %+v", cf.Status)
		}
		if _, r, _ := condition(cf, "Failed"); r != "AttemptInterrupted" || ev.Reason != "AttemptInterrupted" {
			t.Errorf("Failed %s, event %+v", r, ev)
		}
		if p := planFlush(flushObservation{Status: &cf.Status, Now: at(2 * time.Minute), Policy: testPolicy}); p.Step != stepStart || p.Attempt != 2 {
			t.Errorf("then %+v, want attempt 2", p)
		}
		startAttempt(cf, testPolicy, "me", "Local", 2, ptr.To(int64(15)), at(2*time.Minute))
		recordAttempt(cf, testPolicy, 2, attemptOutcome{Removed: 15, Left: ptr.To(int64(0))}, true, at(2*time.Minute))
		if cf.Status.Removed != 32 || cf.Status.Attempts != 2 {
			t.Errorf("removed %d in %d attempts, want 32 in 2", cf.Status.Removed, cf.Status.Attempts)
		}
	})
	t.Run("a scope that cannot be counted runs again", func(t *testing.T) {
		cf := claimed(nil, 1)
		recoverAttempt(cf, testPolicy, 1, nil, at(2*time.Minute))
		if storeuse.Finished(cf) || cf.Status.Attempts != 1 {
			t.Errorf("status %+v", cf.Status)
		}
	})
	t.Run("the last attempt interrupted with objects left: failed for good", func(t *testing.T) {
		cf := claimed(ptr.To(int64(4)), 5)
		recoverAttempt(cf, testPolicy, 5, ptr.To(int64(4)), at(2*time.Minute))
		if _, r, m := condition(cf, "Failed"); r != "AttemptsExhausted" || !storeuse.Finished(cf) || !strings.Contains(m, "AttemptInterrupted") {
			t.Errorf("Failed %s %q", r, m)
		}
	})
}

func TestFinishedReasons(t *testing.T) {
	for reason, want := range map[string]bool{
		"KeysLeft": true, "InvalidScope": true, "AttemptsExhausted": true,
		"KeysLeftRetrying": false, "BackendUnreachable": false, "AttemptTimedOut": false, "JobFailed": false, "AttemptInterrupted": false,
	} {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeAll)
		cf.Status.Conditions = []metav1.Condition{{Type: "Failed", Status: "True", Reason: reason}}
		if got := storeuse.Finished(cf); got != want {
			t.Errorf("Failed %s: finished = %v, want %v", reason, got, want)
		}
	}
}

// A process that claimed a flush and found another flush of its backend claimed gives its claim
// back; when another process wrote the flush in between (say, that it waits for the claim), the
// give-back is refused and the claim stays stored. The attempt never ran: the process gives the
// claim back again, and attempts counts only the attempt that then runs.
func TestClaimGivenBackIsNotAnAttempt(t *testing.T) {
	run := func(t *testing.T, cf *hicachev1alpha1.CacheFlush, method string, n int32) {
		t.Helper()
		before := cf.Status.DeepCopy()
		startAttempt(cf, testPolicy, "me", method, n, ptr.To(int64(12)), testsupport.T0.Time)
		given := &givenBackClaim{Claim: *cf.Status.Claim.DeepCopy(), Before: *before}
		// The other process's write: the claim is stored, the give-back is not.
		reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, at(time.Second)).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonClaimedElsewhere, "Attempt 1 is run by me")

		plan := planFlush(flushObservation{Status: &cf.Status, Identity: "me", Now: at(2 * time.Second), Policy: testPolicy, GivenBack: given})
		if plan.Step != stepGiveBack || plan.Attempt != n {
			t.Fatalf("plan of a claim given back whose give-back was not stored: %s %d, want GiveBack %d", plan.Step, plan.Attempt, n)
		}
		giveBack(cf, &given.Before, "", at(2*time.Second))
		if cf.Status.Claim != nil || cf.Status.Attempts != before.Attempts {
			t.Fatalf("after the give-back: claim %+v, attempts %d; want no claim, %d attempts", cf.Status.Claim, cf.Status.Attempts, before.Attempts)
		}
		if s, r, _ := condition(cf, "Complete"); s != "False" || r != hicachev1alpha1.ReasonWaitingForTurn {
			t.Errorf("Complete %s %s, want False WaitingForTurn", s, r)
		}
		plan = planFlush(flushObservation{Status: &cf.Status, Identity: "me", Now: at(3 * time.Second), Policy: testPolicy})
		if plan.Step != stepStart || plan.Attempt != n {
			t.Fatalf("next plan: %s %d, want Start %d", plan.Step, plan.Attempt, n)
		}
		startAttempt(cf, testPolicy, "me", method, n, ptr.To(int64(12)), at(3*time.Second))
		recordAttempt(cf, testPolicy, n, attemptOutcome{Removed: 12, Left: ptr.To(int64(0))}, true, at(4*time.Second))
		if s, r, _ := condition(cf, "Complete"); s != "True" || r != "Flushed" || cf.Status.Attempts != n || cf.Status.Removed != 12 {
			t.Errorf("Complete %s %s, attempts %d, removed %d; want Flushed by attempt %d, 12 removed", s, r, cf.Status.Attempts, cf.Status.Removed, n)
		}
	}
	t.Run("in-process attempt", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		run(t, cf, "Local", 1)
		if cf.Status.StartTime == nil || !cf.Status.StartTime.Time.Equal(at(3*time.Second)) {
			t.Errorf("startTime %v, want the attempt that ran's", cf.Status.StartTime)
		}
	})
	t.Run("Job attempt: no Job is created for a claim given back", func(t *testing.T) {
		run(t, testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), "Job", 1)
	})
	t.Run("after a failed attempt: its failure and backoff come back with the give-back", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		startAttempt(cf, testPolicy, "me", "Local", 1, ptr.To(int64(12)), at(-time.Minute))
		recordAttempt(cf, testPolicy, 1, attemptOutcome{Err: errors.New("connection refused"), Reason: "BackendUnreachable"}, true, at(-time.Minute))
		cf.Status.NextAttemptTime = nil // the backoff is over
		before := cf.Status.DeepCopy()
		startAttempt(cf, testPolicy, "me", "Local", 2, ptr.To(int64(12)), testsupport.T0.Time)
		giveBack(cf, before, "other", at(time.Second))
		if s, r, _ := condition(cf, "Failed"); s != "True" || r != "BackendUnreachable" || cf.Status.Attempts != 1 || !cf.Status.StartTime.Time.Equal(at(-time.Minute)) {
			t.Errorf("Failed %s %s, attempts %d, startTime %v; want attempt 1's failure, 1 attempt, attempt 1's start", s, r, cf.Status.Attempts, cf.Status.StartTime)
		}
		if _, _, m := condition(cf, "Complete"); !strings.Contains(m, "CacheFlush other") {
			t.Errorf("Complete %q, want the flush waited for", m)
		}
		run(t, cf, "Local", 2)
	})
	t.Run("a claim of this process other than the one given back is an interrupted attempt", func(t *testing.T) {
		cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
		given := &givenBackClaim{Claim: *claimBy("me", 1, nil)}
		startAttempt(cf, testPolicy, "me", "Local", 1, ptr.To(int64(12)), at(10*time.Second))
		if plan := planFlush(flushObservation{Status: &cf.Status, Identity: "me", Now: at(11 * time.Second), Policy: testPolicy, GivenBack: given}); plan.Step != stepRecover {
			t.Errorf("plan %s, want Recover", plan.Step)
		}
	})
}
