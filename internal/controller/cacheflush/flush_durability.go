package cacheflush

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

// A removal on masters with HA is durable only a moment after it returns: the leader marks the
// objects removed and answers, then writes the removal to etcd in its metadata log; a leader
// that dies in between takes the removal along, and the next leader serves the objects again
// (docs/compatibility.md, "The metadata log, read in the source"). The rule, decided here from
// what was observed:
//
//   - every attempt records the leader view it ran under (status.viewVersion, from the leader's
//     /health right before it);
//   - a flush that removed something under a view completes only once, at least the durability
//     window after the removal returned (status.confirmAfter), the leader of that same view
//     still serves and the scope counted through it is empty;
//   - when another view serves instead (at the confirmation, or at the start of a later
//     attempt), the masters failed over before the removal was known to be durable: the flush
//     runs again against the new leader, once per failover, and what those attempts remove is
//     counted apart (status.removedAgain), since removed counted those objects already.
//
// A removal older than the window under a leader that still serves is taken as durable: on a
// healthy etcd the log's transaction takes milliseconds (at most two round trips).

// defaultDurabilityWindow is how long after a removal returned a flush on masters with HA waits
// before it confirms it. The log's transactions took milliseconds on loopback, and no removed
// object came back when the leader died 0.3 s after the removal; 5 s leaves room for a loaded
// etcd.
const defaultDurabilityWindow = 5 * time.Second

// confirmPoll is how soon a confirmation looks again while no serving leader answers, or the
// scope could not be counted.
const confirmPoll = 2 * time.Second

// removedSoFar is what the flush's attempts removed, after a failover included.
func removedSoFar(st *hicachev1alpha1.CacheFlushStatus) int64 { return st.Removed + st.RemovedAgain }

// addRemoved counts what an attempt removed: in removed, or in removedAgain once the flush runs
// again after a failover.
func addRemoved(st *hicachev1alpha1.CacheFlushStatus, n int64) {
	if n <= 0 {
		return
	}
	if st.RepeatedAfterFailover > 0 {
		st.RemovedAgain += n
		return
	}
	st.Removed += n
}

// noteAttemptView records the leader view an attempt starts under. When the flush removed
// objects under another view and has not completed, the masters failed over since: this attempt
// is a run again after a failover (counted in repeatedAfterFailover, with a Warning Event).
func noteAttemptView(cf *hicachev1alpha1.CacheFlush, view int64, n int32) flushEvent {
	st := &cf.Status
	old := st.ViewVersion
	st.ViewVersion = view
	if old == 0 || view == 0 || view == old || removedSoFar(st) == 0 {
		return flushEvent{}
	}
	st.RepeatedAfterFailover++
	return repeatEvent(cf, old, view, fmt.Sprintf("attempt %d runs against the new leader", n))
}

func repeatEvent(cf *hicachev1alpha1.CacheFlush, was, now int64, what string) flushEvent {
	return flushEvent{Type: "Warning", Reason: hicachev1alpha1.ReasonFlushRepeatedAfterFailover, Action: "Flush", Message: fmt.Sprintf(
		"The masters elected a new leader (view %d, was %d) after this flush removed %d objects of the %s and before it completed: a removal the old leader had not yet written to etcd comes back on the new one, so %s (run again %d time(s) after a failover)",
		now, was, removedSoFar(&cf.Status), describeScope(cf), what, cf.Status.RepeatedAfterFailover)}
}

// needsConfirmation tells whether a flush whose attempt just emptied the scope waits to confirm
// the removal: it removed something, under masters with HA, and the policy has a window.
func needsConfirmation(st *hicachev1alpha1.CacheFlushStatus, p flushPolicy) bool {
	return st.ViewVersion > 0 && removedSoFar(st) > 0 && p.DurabilityWindow > 0
}

// awaitConfirmation records that the flush emptied its scope at now and confirms it after the
// durability window.
func awaitConfirmation(cf *hicachev1alpha1.CacheFlush, p flushPolicy, now time.Time) {
	st := &cf.Status
	t := metav1.NewTime(now.Add(p.DurabilityWindow))
	st.ConfirmAfter, st.NextAttemptTime, st.Claim = &t, nil, nil
	reconcile.ConditionsOf(&st.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonConfirmingRemoval,
		fmt.Sprintf("Removed %d objects (%s); the flush completes at %s if the leader it ran on (view %d) still serves then and the scope is still empty: a leader that dies right after a removal can bring the objects back",
			removedSoFar(st), describeScope(cf), t.UTC().Format(time.RFC3339), st.ViewVersion))
}

// confirmVerdict is what a confirmation found.
type confirmVerdict int

const (
	// confirmWait: look again at Until (the window has not passed, no serving leader answers, or
	// the scope could not be counted).
	confirmWait confirmVerdict = iota
	// confirmDone: the leader of the removal's view serves past the window and the scope is
	// empty: the flush is complete.
	confirmDone
	// confirmRepeat: another leader serves: the flush runs again against it.
	confirmRepeat
	// confirmKeysLeft: the same leader serves, and the scope holds objects again: something
	// wrote it meanwhile.
	confirmKeysLeft
)

func (v confirmVerdict) String() string {
	return [...]string{"Wait", "Done", "Repeat", "KeysLeft"}[v]
}

// confirmObservation is what planConfirm decides from.
type confirmObservation struct {
	// View is the view the removal ran under; After is when it may be confirmed.
	View  int64
	After time.Time
	Now   time.Time
	// Leader is what the master at the backend's admin URL says of itself, nil when it did not
	// answer.
	Leader *storeuse.MasterHealth
	// Countable is false for a scope that cannot be counted (a tenant's).
	Countable bool
	// Left is what the scope holds, counted through that master once the window passed; nil
	// when it was not counted.
	Left *int64
}

// confirmPlan is a confirmation's verdict, with when to look again and why it waits.
type confirmPlan struct {
	Verdict confirmVerdict
	Until   time.Time
	Why     string
	// ServingView is the view of the leader that answered (confirmRepeat).
	ServingView int64
}

// planConfirm decides a confirmation. A change of leader decides at once, even before the
// window passed: the flush runs again. Otherwise the flush waits for the window, then for the
// same leader to count the scope empty.
func planConfirm(o confirmObservation) confirmPlan {
	if o.Leader == nil || o.Leader.Role != hicachev1alpha1.MasterLeader {
		why := "no master answers at the backend's admin URL"
		if o.Leader != nil {
			why = fmt.Sprintf("the master at the backend's admin URL is %s, not the serving leader", o.Leader.Role)
		}
		return confirmPlan{Verdict: confirmWait, Until: o.Now.Add(confirmPoll), Why: why}
	}
	if o.Leader.ViewVersion != o.View {
		return confirmPlan{Verdict: confirmRepeat, ServingView: o.Leader.ViewVersion}
	}
	if o.Now.Before(o.After) {
		return confirmPlan{Verdict: confirmWait, Until: o.After, Why: "the removal is younger than the durability window"}
	}
	if !o.Countable {
		return confirmPlan{Verdict: confirmDone}
	}
	if o.Left == nil {
		return confirmPlan{Verdict: confirmWait, Until: o.Now.Add(confirmPoll), Why: "the scope could not be counted through the leader"}
	}
	if *o.Left > 0 {
		return confirmPlan{Verdict: confirmKeysLeft}
	}
	return confirmPlan{Verdict: confirmDone}
}

// applyConfirm writes a confirmation's verdict into the status and returns its Event (none
// while it waits).
func applyConfirm(cf *hicachev1alpha1.CacheFlush, p flushPolicy, plan confirmPlan, left *int64, force bool, now time.Time) flushEvent {
	st := &cf.Status
	switch plan.Verdict {
	case confirmWait:
		if st.ConfirmAfter != nil && !now.Before(st.ConfirmAfter.Time) {
			reconcile.ConditionsOf(&st.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonConfirmingRemoval,
				fmt.Sprintf("Removed %d objects (%s); waiting to confirm the removal with the leader it ran on (view %d): %s",
					removedSoFar(st), describeScope(cf), st.ViewVersion, plan.Why))
		}
		return flushEvent{}
	case confirmRepeat:
		// The next attempt starts under the new view: noteAttemptView does not count this
		// failover twice.
		was := st.ViewVersion
		st.ConfirmAfter, st.ViewVersion = nil, plan.ServingView
		st.RepeatedAfterFailover++
		ev := repeatEvent(cf, was, plan.ServingView, "it runs again against the new leader")
		reconcile.ConditionsOf(&st.Conditions, cf.Generation, now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonFlushRepeatedAfterFailover, ev.Message)
		return ev
	case confirmKeysLeft:
		st.ConfirmAfter = nil
		return keysLeftOutcome(cf, p, st.Attempts, *left, st.KeysLeft, force, now)
	}
	st.ConfirmAfter = nil
	st.KeysLeft = 0
	return complete(cf, hicachev1alpha1.ReasonFlushed, completionMessage(cf, fmt.Sprintf(
		"; confirmed with the leader it ran on (view %d) %s after the removal", st.ViewVersion, p.DurabilityWindow)), now)
}

// completionMessage is the Complete condition's message of a flush that emptied its scope.
func completionMessage(cf *hicachev1alpha1.CacheFlush, suffix string) string {
	st := &cf.Status
	msg := fmt.Sprintf("Removed %d objects (%s); %d left%s", st.Removed, describeScope(cf), st.KeysLeft, suffix)
	if st.RepeatedAfterFailover > 0 {
		msg += fmt.Sprintf(". Ran again %d time(s) after the masters failed over, removing %d more (objects that came back with the failover, or written since)",
			st.RepeatedAfterFailover, st.RemovedAgain)
	}
	return msg
}
