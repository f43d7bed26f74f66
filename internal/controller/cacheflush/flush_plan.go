package cacheflush

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

// The flush lifecycle, decided purely from what was observed (the flush's status, its Jobs, the
// other flushes of its backend, the clock); the CacheFlush reconciler observes and executes.
//
// An attempt is claimed before it executes: status.claim names the process that runs it and
// when the claim lapses, and is written with the object's resourceVersion, so of two processes
// only one gets to run the attempt. The claim goes when the attempt's result is recorded. A
// claim whose holder stopped (it lapsed, or it names this very process, which runs no attempt
// outside the reconcile that claimed it) is recovered: the attempt counts once, and what the
// scope held before it (claim.keysBefore) against what it holds now says what it removed. A
// claim given back before its attempt ran (another flush of the backend held it) is no attempt:
// the process remembers it until it claims the flush again, so that its own claim seen again
// (a give-back refused, or a view older than it) is given back again, not recovered.
//
// On masters with HA an attempt that empties the scope does not complete the flush at once: its
// removal is confirmed with the leader it ran on, or the flush runs again after a failover
// (flush_durability.go).

// flushPolicy bounds a flush's attempts.
type flushPolicy struct {
	// MaxAttempts is how many attempts a flush gets before it is Failed for good.
	MaxAttempts int32
	// AttemptTimeout is the deadline of one attempt (the Job's activeDeadlineSeconds too).
	AttemptTimeout time.Duration
	// ClaimGrace is how long a claim outlives its attempt's deadline, for the record to be
	// written.
	ClaimGrace time.Duration
	// BackoffBase is the wait after the first failed attempt; it doubles after each next one,
	// up to BackoffMax.
	BackoffBase, BackoffMax time.Duration
	// DurabilityWindow is how long after a removal on masters with HA the flush confirms it
	// (flush_durability.go); 0 completes at once.
	DurabilityWindow time.Duration
}

// defaultFlushPolicy is the policy of Options that set none.
var defaultFlushPolicy = flushPolicy{
	MaxAttempts: 5, AttemptTimeout: 3 * time.Minute, ClaimGrace: 30 * time.Second,
	BackoffBase: 10 * time.Second, BackoffMax: 5 * time.Minute, DurabilityWindow: defaultDurabilityWindow,
}

// backoff is the wait after failed attempt n (1-based).
func (p flushPolicy) backoff(n int32) time.Duration {
	d := p.BackoffBase
	for i := int32(1); i < n && d < p.BackoffMax; i++ {
		d *= 2
	}
	return min(d, p.BackoffMax)
}

// claim is a claim of attempt n by holder, taken at now.
func (p flushPolicy) claim(holder string, n int32, now time.Time, keysBefore *int64) *hicachev1alpha1.FlushClaim {
	return &hicachev1alpha1.FlushClaim{
		Holder: holder, Attempt: n, AcquireTime: metav1.NewTime(now),
		ExpiryTime: metav1.NewTime(now.Add(p.AttemptTimeout + p.ClaimGrace)), KeysBefore: keysBefore,
	}
}

// flushStep is what to do next with a flush.
type flushStep int

const (
	// stepDone: the flush reached its end; only its old Jobs may be cleaned up.
	stepDone flushStep = iota
	// stepWaitClaim: another process runs the current attempt; look again at Until.
	stepWaitClaim
	// stepWaitTurn: another flush of the backend (Holder) runs; look again at Until at the latest.
	stepWaitTurn
	// stepWaitJob: a Job of an earlier attempt still runs; it ends by its deadline.
	stepWaitJob
	// stepBackoff: an attempt failed; the next may start at Until.
	stepBackoff
	// stepStart: start attempt Attempt (check it may run, count the scope, claim, execute).
	stepStart
	// stepPoll: attempt Attempt runs in a Job: check on it, record it when it ended.
	stepPoll
	// stepRecover: the holder of attempt Attempt stopped before recording it: account for it.
	stepRecover
	// stepGiveUp: no attempt is left; record the flush as Failed for good.
	stepGiveUp
	// stepGiveBack: this process gave the claim of attempt Attempt back without running it, and
	// the give-back is not stored yet: store it (the attempt did not run and does not count).
	stepGiveBack
	// stepConfirm: attempt Attempt emptied the scope on masters with HA: confirm with the
	// leader it ran on that the removal holds (from status.confirmAfter on), or run again.
	stepConfirm
)

func (s flushStep) String() string {
	return [...]string{"Done", "WaitClaim", "WaitTurn", "WaitJob", "Backoff", "Start", "Poll", "Recover", "GiveUp", "GiveBack", "Confirm"}[s]
}

// flushPlan is the next step, with what it needs.
type flushPlan struct {
	Step    flushStep
	Attempt int32
	// Until is when to look again (the waits).
	Until time.Time
	// Holder is the process (stepWaitClaim) or flush (stepWaitTurn) waited for.
	Holder string
}

// attemptJob is an observed Job of one attempt of a flush.
type attemptJob struct {
	Name     string
	Attempt  int32
	Finished bool
}

// backendTurn is the flush that holds a backend: it has an attempt under way.
type backendTurn struct {
	Flush string
	Until time.Time
}

// flushObservation is what planFlush decides from.
type flushObservation struct {
	Status   *hicachev1alpha1.CacheFlushStatus
	Finished bool
	// Identity is this process's; a claim that names it belongs to no running attempt.
	Identity string
	Now      time.Time
	// Jobs are the flush's attempt Jobs.
	Jobs []attemptJob
	// Turn is another flush of the backend with an attempt under way, if any.
	Turn   *backendTurn
	Policy flushPolicy
	// GivenBack is the last claim of this flush that this process gave back without running its
	// attempt. Seen again, that claim was never an attempt: its give-back was not stored
	// (another process wrote the flush meanwhile, or the write failed), or this view of the
	// flush predates it. A claim of this process seen afresh is otherwise one of an
	// interrupted attempt.
	GivenBack *givenBackClaim
}

// givenBackClaim is a claim a process gave back without running its attempt, with the status
// the flush had before it was claimed.
type givenBackClaim struct {
	Claim  hicachev1alpha1.FlushClaim
	Before hicachev1alpha1.CacheFlushStatus
}

// is tells whether c is the claim that was given back (the same holder took the same attempt at
// the same time).
func (g *givenBackClaim) is(c *hicachev1alpha1.FlushClaim) bool {
	return g != nil && c != nil && c.Holder == g.Claim.Holder && c.Attempt == g.Claim.Attempt &&
		c.AcquireTime.Equal(&g.Claim.AcquireTime) && c.ExpiryTime.Equal(&g.Claim.ExpiryTime)
}

// planFlush is the next step of a flush.
func planFlush(o flushObservation) flushPlan {
	if o.Finished {
		return flushPlan{Step: stepDone}
	}
	st := o.Status
	if c := st.Claim; c != nil {
		if c.Holder == o.Identity && o.GivenBack.is(c) {
			// Its attempt never ran (nor its Job was created): not an interrupted attempt.
			return flushPlan{Step: stepGiveBack, Attempt: c.Attempt}
		}
		lapsed := !o.Now.Before(c.ExpiryTime.Time)
		if st.Method == hicachev1alpha1.MethodJob {
			// The attempt runs in its Job, whoever started it: whoever sees the Job ended
			// records it (the record is written with the resourceVersion, once).
			for _, j := range o.Jobs {
				if j.Attempt == c.Attempt {
					return flushPlan{Step: stepPoll, Attempt: c.Attempt}
				}
			}
			if c.Holder == o.Identity {
				return flushPlan{Step: stepPoll, Attempt: c.Attempt} // create the Job
			}
			if !lapsed {
				return flushPlan{Step: stepWaitClaim, Attempt: c.Attempt, Until: c.ExpiryTime.Time, Holder: c.Holder}
			}
			return flushPlan{Step: stepRecover, Attempt: c.Attempt}
		}
		// An attempt run by a process itself lives only inside the reconcile that claimed it:
		// a claim of this process seen afresh is one whose process stopped, or whose record
		// could not be written.
		if c.Holder != o.Identity && !lapsed {
			return flushPlan{Step: stepWaitClaim, Attempt: c.Attempt, Until: c.ExpiryTime.Time, Holder: c.Holder}
		}
		return flushPlan{Step: stepRecover, Attempt: c.Attempt}
	}
	// One live Job per flush: a Job left running (say, by a runner changed under it) ends
	// by its deadline before another attempt starts.
	for _, j := range o.Jobs {
		if !j.Finished {
			return flushPlan{Step: stepWaitJob, Attempt: j.Attempt, Until: o.Now.Add(o.Policy.AttemptTimeout)}
		}
	}
	if st.ConfirmAfter != nil {
		// The last attempt emptied the scope: its removal is confirmed (or the flush runs
		// again after a failover) before anything else.
		return flushPlan{Step: stepConfirm, Attempt: st.Attempts, Until: st.ConfirmAfter.Time}
	}
	if st.Attempts >= o.Policy.MaxAttempts {
		return flushPlan{Step: stepGiveUp, Attempt: st.Attempts}
	}
	if st.NextAttemptTime != nil && o.Now.Before(st.NextAttemptTime.Time) {
		return flushPlan{Step: stepBackoff, Attempt: st.Attempts + 1, Until: st.NextAttemptTime.Time}
	}
	if o.Turn != nil {
		return flushPlan{Step: stepWaitTurn, Attempt: st.Attempts + 1, Until: o.Turn.Until, Holder: o.Turn.Flush}
	}
	return flushPlan{Step: stepStart, Attempt: st.Attempts + 1}
}

// holdsBackend tells whether a flush has an attempt under way, and until when at most.
func holdsBackend(cf *hicachev1alpha1.CacheFlush, now time.Time) (bool, time.Time) {
	c := cf.Status.Claim
	if c == nil || storeuse.Finished(cf) || !cf.DeletionTimestamp.IsZero() {
		return false, time.Time{}
	}
	if cf.Status.Method == hicachev1alpha1.MethodJob {
		return true, c.ExpiryTime.Time // its Job may outlive the claim; it ends by its deadline
	}
	return now.Before(c.ExpiryTime.Time), c.ExpiryTime.Time
}

// turnOf is the other flush of a backend that holds it, the oldest claim first.
func turnOf(self string, others []hicachev1alpha1.CacheFlush, now time.Time) *backendTurn {
	var best *backendTurn
	var bestTime time.Time
	for i := range others {
		o := &others[i]
		if o.Name == self {
			continue
		}
		held, until := holdsBackend(o, now)
		if !held {
			continue
		}
		at := o.Status.Claim.AcquireTime.Time
		if best == nil || at.Before(bestTime) || at.Equal(bestTime) && o.Name < best.Flush {
			best, bestTime = &backendTurn{Flush: o.Name, Until: until}, at
		}
	}
	return best
}

// attemptOutcome is what one attempt did.
type attemptOutcome struct {
	// Removed is what the attempt reports it removed.
	Removed int64
	// Left is what the scope held after it (nil: not counted, scope Tenant).
	Left *int64
	// Err is why it failed; Reason classifies it (a CacheFlush reason).
	Err    error
	Reason string
	// Final failures are not retried (a Tenant flush on a master without tenants).
	Final bool
}

// flushEvent is an Event to emit for a recorded step.
type flushEvent struct {
	Type, Reason, Action, Message string
}

// startAttempt writes the claim of attempt n into the status: nothing of the attempt runs
// before this status is stored.
func startAttempt(cf *hicachev1alpha1.CacheFlush, p flushPolicy, holder, method string, n int32, keysBefore *int64, now time.Time) flushEvent {
	st := &cf.Status
	st.Attempts = n
	st.Claim = p.claim(holder, n, now, keysBefore)
	st.Method = method
	st.NextAttemptTime = nil
	if st.StartTime == nil {
		t := metav1.NewTime(now)
		st.StartTime = &t
	}
	msg := fmt.Sprintf("Attempt %d of %d is running (%s)", n, p.MaxAttempts, holder)
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonRunning, msg)
	if meta.IsStatusConditionTrue(st.Conditions, hicachev1alpha1.ConditionFailed) {
		// The failure was the previous attempt's; the Events keep it.
		reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionFailed, false, hicachev1alpha1.ReasonRunning, msg)
	}
	return flushEvent{Type: "Normal", Reason: "AttemptStarted", Action: "Flush", Message: msg}
}

// giveBack returns a claim whose attempt did not run (another flush of the backend holds it):
// the status is what it was before the claim, waiting for its turn; attempts counts only
// attempts that ran. What else changed meanwhile (another process's view of the flush) goes.
func giveBack(cf *hicachev1alpha1.CacheFlush, before *hicachev1alpha1.CacheFlushStatus, other string, now time.Time) {
	st := &cf.Status
	st.Claim = nil
	st.Attempts = before.Attempts
	st.StartTime = before.StartTime.DeepCopy()
	st.NextAttemptTime = before.NextAttemptTime.DeepCopy()
	st.Method = before.Method
	st.ViewVersion, st.RepeatedAfterFailover = before.ViewVersion, before.RepeatedAfterFailover
	if c := meta.FindStatusCondition(before.Conditions, hicachev1alpha1.ConditionFailed); c != nil {
		meta.SetStatusCondition(&st.Conditions, *c)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, hicachev1alpha1.ConditionFailed)
	}
	msg := "Waiting for another CacheFlush of the same backend to finish"
	if other != "" {
		msg = fmt.Sprintf("Waiting for CacheFlush %s of the same backend to finish", other)
	}
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForTurn, msg)
}

// recordAttempt writes the outcome of attempt n: complete, retried after a backoff, or failed
// for good.
func recordAttempt(cf *hicachev1alpha1.CacheFlush, p flushPolicy, n int32, out attemptOutcome, force bool, now time.Time) flushEvent {
	st := &cf.Status
	var keysBefore *int64
	if st.Claim != nil {
		keysBefore = st.Claim.KeysBefore
	}
	st.Claim = nil
	if st.Attempts < n {
		st.Attempts = n
	}
	// An attempt that ran but could not be verified removed what it reports all the same.
	addRemoved(st, out.Removed)
	if out.Err != nil {
		if out.Final {
			msg := out.Err.Error()
			reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionFailed, true, out.Reason, msg)
			reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, out.Reason, msg)
			return flushEvent{Type: "Warning", Reason: out.Reason, Action: "Flush", Message: msg}
		}
		return failAttempt(cf, p, n, out.Reason, fmt.Sprintf("Attempt %d failed: %v", n, out.Err), now)
	}
	var left int64
	if out.Left != nil {
		left = *out.Left
	}
	if removedSoFar(st) == 0 && keysBefore != nil && *keysBefore == 0 && !(left > 0 && force && countable(cf)) {
		st.KeysLeft = left
		return complete(cf, hicachev1alpha1.ReasonAlreadyEmpty, fmt.Sprintf("The %s held no objects when the flush ran; nothing was removed", describeScope(cf)), now)
	}
	return keysLeftOutcome(cf, p, n, left, st.KeysLeft, force, now)
}

// keysLeftOutcome records what a flush found in its scope after attempt n: objects left, tried
// once more and then final (forced flushes of a countable scope); none, complete, once its
// removal is confirmed on masters with HA. leftBefore is what an earlier attempt left.
func keysLeftOutcome(cf *hicachev1alpha1.CacheFlush, p flushPolicy, n int32, left, leftBefore int64, force bool, now time.Time) flushEvent {
	st := &cf.Status
	st.KeysLeft = left
	if st.KeysLeft > 0 && force && countable(cf) {
		// Something wrote the scope while it was flushed: tried once more, then final.
		if leftBefore == 0 {
			if n < p.MaxAttempts {
				return failAttempt(cf, p, n, hicachev1alpha1.ReasonKeysLeftRetrying,
					fmt.Sprintf("%d objects of the scope are left after attempt %d; retrying once", st.KeysLeft, n), now)
			}
		}
		msg := fmt.Sprintf("%d objects of the scope are still there after %d forced attempts; something still writes them (check for serving pods outside this operator using the namespace)", st.KeysLeft, n)
		reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionFailed, true, hicachev1alpha1.ReasonKeysLeft, msg)
		reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonKeysLeft, msg)
		return flushEvent{Type: "Warning", Reason: hicachev1alpha1.ReasonKeysLeft, Action: "Verify", Message: msg}
	}
	if st.KeysLeft == 0 && needsConfirmation(st, p) {
		awaitConfirmation(cf, p, now)
		return flushEvent{}
	}
	return complete(cf, hicachev1alpha1.ReasonFlushed, completionMessage(cf, ""), now)
}

func complete(cf *hicachev1alpha1.CacheFlush, reason, msg string, now time.Time) flushEvent {
	st := &cf.Status
	t := metav1.NewTime(now)
	st.CompletionTime, st.NextAttemptTime, st.Claim = &t, nil, nil
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, true, reason, msg)
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionFailed, false, reason, "The flush completed")
	return flushEvent{Type: "Normal", Reason: reason, Action: "Flush", Message: msg}
}

// failAttempt records failed attempt n: the next after a backoff, or none when it was the last.
func failAttempt(cf *hicachev1alpha1.CacheFlush, p flushPolicy, n int32, reason, msg string, now time.Time) flushEvent {
	st := &cf.Status
	st.Claim = nil
	if n >= p.MaxAttempts {
		return giveUp(cf, p, reason, msg, now)
	}
	next := metav1.NewTime(now.Add(p.backoff(n)))
	st.NextAttemptTime = &next
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionFailed, true, reason, msg)
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonBackingOff,
		fmt.Sprintf("Attempt %d failed (%s); attempt %d of %d starts at %s", n, reason, n+1, p.MaxAttempts, next.UTC().Format(time.RFC3339)))
	return flushEvent{Type: "Warning", Reason: reason, Action: "Flush", Message: msg}
}

// giveUp records the flush as Failed for good, with the last attempt's reason.
func giveUp(cf *hicachev1alpha1.CacheFlush, p flushPolicy, lastReason, lastMsg string, now time.Time) flushEvent {
	cf.Status.Claim, cf.Status.NextAttemptTime = nil, nil
	msg := fmt.Sprintf("Gave up after %d attempts; the last failed (%s): %s. Delete this CacheFlush to try again", cf.Status.Attempts, lastReason, lastMsg)
	if lastReason == "" {
		msg = fmt.Sprintf("Gave up after %d attempts. Delete this CacheFlush to try again", cf.Status.Attempts)
	}
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionFailed, true, hicachev1alpha1.ReasonAttemptsExhausted, msg)
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonAttemptsExhausted, msg)
	return flushEvent{Type: "Warning", Reason: hicachev1alpha1.ReasonAttemptsExhausted, Action: "Flush", Message: msg}
}

// recoverAttempt accounts for attempt n, whose holder stopped before recording it, from what
// the scope holds now (nil: it cannot be counted). When the claim recorded what the scope held
// before, the difference is what the attempt removed; a scope now empty means it did its work,
// and the flush is complete without running again. Otherwise the next attempt follows at once:
// the interruption says nothing about the store.
func recoverAttempt(cf *hicachev1alpha1.CacheFlush, p flushPolicy, n int32, keysNow *int64, now time.Time) flushEvent {
	st := &cf.Status
	c := st.Claim
	if st.Attempts < n {
		st.Attempts = n
	}
	holder := ""
	var before *int64
	if c != nil {
		holder, before = c.Holder, c.KeysBefore
	}
	st.Claim = nil
	if before != nil && keysNow != nil {
		addRemoved(st, *before-*keysNow)
		if *keysNow == 0 {
			st.KeysLeft = 0
			if *before == 0 && removedSoFar(st) == 0 {
				return complete(cf, hicachev1alpha1.ReasonAlreadyEmpty, fmt.Sprintf(
					"The %s held no objects when attempt %d ran; nothing was removed (its process %s stopped before recording it)",
					describeScope(cf), n, holder), now)
			}
			if needsConfirmation(st, p) {
				awaitConfirmation(cf, p, now)
				return flushEvent{Type: "Normal", Reason: hicachev1alpha1.ReasonConfirmingRemoval, Action: "Flush", Message: fmt.Sprintf(
					"Attempt %d was recorded after its process %s stopped: the scope held %d objects before it and none after; the removal is confirmed next", n, holder, *before)}
			}
			return complete(cf, hicachev1alpha1.ReasonFlushed, fmt.Sprintf(
				"Removed %d objects (%s); 0 left. Attempt %d was recorded after its process %s stopped: the scope held %d objects before it and none after",
				st.Removed, describeScope(cf), n, holder, *before), now)
		}
	}
	msg := fmt.Sprintf("The process %s running attempt %d stopped before recording it", holder, n)
	if n >= p.MaxAttempts {
		return giveUp(cf, p, hicachev1alpha1.ReasonAttemptInterrupted, msg, now)
	}
	st.NextAttemptTime = nil
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionFailed, true, hicachev1alpha1.ReasonAttemptInterrupted, msg)
	reconcile.ConditionsOf(&cf.Status.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonPending,
		fmt.Sprintf("Attempt %d of %d starts next", n+1, p.MaxAttempts))
	return flushEvent{Type: "Warning", Reason: hicachev1alpha1.ReasonAttemptInterrupted, Action: "Flush", Message: msg}
}

// errAttemptTimedOut marks an attempt stopped at its deadline.
var errAttemptTimedOut = errors.New("attempt timed out")

// overrideInput is what decides whether spec.allowInUse may flush a scope in use.
type overrideInput struct {
	// AllowInUse is the flush's spec.allowInUse.
	AllowInUse bool
	// FlushNamespace is the flush's Kubernetes namespace.
	FlushNamespace string
	// UserNamespaces are the Kubernetes namespaces of every user of the scope, on any backend
	// of the store (empty: nothing uses it).
	UserNamespaces []string
	// PolicyBound says the admission policy that lets only holders of the override verb set
	// spec.allowInUse, and its binding, were found (the manager looks at startup and every poll).
	PolicyBound bool
	// PolicyWhy says why it was not found.
	PolicyWhy string
	// ClusterGrant says a cluster administrator granted this flush's namespace overrides of
	// users in other namespaces: a ClusterCacheStoreGrant (or --store-grant) of the store with
	// allowCrossNamespaceOverride that lists the flush's and the users' namespaces.
	ClusterGrant bool
	// ClusterGrantName names that grant; ClusterGrantWhy says why none covers them.
	ClusterGrantName, ClusterGrantWhy string
}

// overrideVerdict is what planOverride decided.
type overrideVerdict struct {
	// Run says the flush may run now.
	Run bool
	// Overridden says it runs although the scope is in use.
	Overridden bool
	// Why is the condition's message when it waits.
	Why string
}

// planOverride decides whether a flush runs over a scope in use. Nothing in use: it runs. In use
// without spec.allowInUse: it waits. With it, the controller does not take the admission
// policy's word alone: the override runs only when the policy and its binding are present (a
// flush created without them was never checked for the verb) and every user is in the flush's
// own namespace (the verb was checked there only), or a cluster administrator's grant covers
// users in other namespaces.
func planOverride(in overrideInput) overrideVerdict {
	if len(in.UserNamespaces) == 0 {
		return overrideVerdict{Run: true}
	}
	if !in.AllowInUse {
		return overrideVerdict{Why: "the flush runs once nothing uses it (spec.allowInUse overrides this, for holders of the override verb)"}
	}
	if !in.PolicyBound {
		why := in.PolicyWhy
		if why == "" {
			why = "it was not found"
		}
		return overrideVerdict{Why: fmt.Sprintf("spec.allowInUse is not honoured: the ValidatingAdmissionPolicy flush-override and its binding, which check the override verb, are not both present (%s), so nothing checked that the flush's creator holds it; install config/admission (the chart installs it), or let the flush wait until nothing uses the scope", why)}
	}
	var others []string
	for _, ns := range in.UserNamespaces {
		if ns != in.FlushNamespace {
			others = append(others, ns)
		}
	}
	if len(others) > 0 && !in.ClusterGrant {
		return overrideVerdict{Why: fmt.Sprintf("spec.allowInUse is not honoured: users in namespaces %s are not the flush's namespace %s, where alone the override verb was checked; a cluster-wide override needs a cluster-scoped grant: a ClusterCacheStoreGrant of the store with allowCrossNamespaceOverride listing these namespaces (%s), or the flush waits until nothing there uses the scope", strings.Join(others, ", "), in.FlushNamespace, grantWhy(in.ClusterGrantWhy))}
	}
	return overrideVerdict{Run: true, Overridden: true}
}

func grantWhy(why string) string {
	if why == "" {
		return "none was found"
	}
	return why
}

// optionsPolicy is the bounds of flush attempts the options set.
func optionsPolicy(o storeuse.Options) flushPolicy {
	p := defaultFlushPolicy
	if o.FlushAttemptTimeout > 0 {
		p.AttemptTimeout = o.FlushAttemptTimeout
	}
	if o.FlushMaxAttempts > 0 {
		p.MaxAttempts = o.FlushMaxAttempts
	}
	if o.FlushBackoff > 0 {
		p.BackoffBase = o.FlushBackoff
	}
	if o.FlushBackoffMax > 0 {
		p.BackoffMax = o.FlushBackoffMax
	}
	if o.FlushDurabilityWindow > 0 {
		p.DurabilityWindow = o.FlushDurabilityWindow
	}
	p.BackoffMax = max(p.BackoffMax, p.BackoffBase)
	return p
}
