package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

// namespaceFlush is a CacheFlush of one L3 namespace of backend "mooncake".
func namespaceFlush(ns, name, namespace string) *hicachev1alpha1.CacheFlush {
	return &hicachev1alpha1.CacheFlush{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: "mooncake"},
			Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: namespace, Force: ptr.To(true)},
	}
}

// keysUnder are n keys of an L3 namespace.
func keysUnder(namespace string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s_model_%064x__k", namespace, i)
	}
	return keys
}

func getFlush(t *testing.T, ns, name string) *hicachev1alpha1.CacheFlush {
	t.Helper()
	var cf hicachev1alpha1.CacheFlush
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cf); err != nil {
		t.Fatal(err)
	}
	return &cf
}

// Two operators without leader election (a second replica, a lease hand-over) and ten flushes of
// one backend: each flush runs exactly once, never beside another flush of its backend, and
// records what its namespace held.
func TestTwoOperatorsRunEachFlushOnce(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	startSecondManager(t, "e2e-second-operator")
	want := map[string]int{}
	var all []string
	for i := range 10 {
		namespace := fmt.Sprintf("two-%d", i)
		want[namespace] = 3 + 3*i // 3 … 30 objects
		all = append(all, keysUnder(namespace, want[namespace])...)
	}
	m.putKeys(t, all, 1024)
	for namespace := range want {
		create(t, namespaceFlush(ns, "flush-"+namespace, namespace))
	}
	for namespace, n := range want {
		cf := waitFlushComplete(t, ns, "flush-"+namespace)
		runs := flushRuns.of(cf.UID)
		if len(runs) != 1 || cf.Status.Attempts != 1 || cf.Status.Removed != int64(n) || cf.Status.KeysLeft != 0 {
			t.Errorf("CacheFlush %s: ran %d times, %d attempts, removed %d, left %d; want once, 1 attempt, %d removed, 0 left",
				cf.Name, len(runs), cf.Status.Attempts, cf.Status.Removed, cf.Status.KeysLeft, n)
		}
		if got := countPrefix(t, m, namespace); got != 0 {
			t.Errorf("%d objects left under %s", got, namespace)
		}
	}
	// One flush of a backend at a time, across the two processes.
	var runs []flushRun
	for namespace := range want {
		runs = append(runs, flushRuns.of(getFlush(t, ns, "flush-"+namespace).UID)...)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Start.Before(runs[j].Start) })
	for i := 1; i < len(runs); i++ {
		if runs[i].Start.Before(runs[i-1].End) {
			t.Errorf("%s ran from %s while %s ran until %s, on the same backend",
				runs[i].Name, runs[i].Start.Format("15:04:05.000"), runs[i-1].Name, runs[i-1].End.Format("15:04:05.000"))
		}
	}
}

// An operator that stops after a flush ran and before it recorded it: the operator that takes
// over records what the flush removed, and does not count a second run.
func TestFlushInterruptedBeforeItsRecordIsRecordedTruthfully(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	m.putKeys(t, keysUnder("crash", 32), 1024)
	ran := make(chan struct{}, 1)
	unhook := flushRuns.hook(nil, func(ctx context.Context, req storeuse.NamespaceFlushRequest) error {
		if req.Flush.Namespace != ns {
			return nil
		}
		ran <- struct{}{}
		<-ctx.Done() // the process stops here: nothing after the run is written
		return ctx.Err()
	})
	defer unhook()
	create(t, namespaceFlush(ns, "crash", "crash"))
	select {
	case <-ran:
	case <-time.After(90 * time.Second):
		t.Fatal("the flush did not run")
	}
	if got := countPrefix(t, m, "crash"); got != 0 {
		t.Fatalf("%d objects left after the run", got)
	}
	unhook()
	restartManager(t)
	cf := waitFlushComplete(t, ns, "crash")
	c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete)
	if cf.Status.Removed != 32 || cf.Status.Attempts != 1 || c.Reason != hicachev1alpha1.ReasonFlushed {
		t.Errorf("recorded %d removed in %d attempts (%s: %s); want the 32 objects the run removed, in 1 attempt", cf.Status.Removed, cf.Status.Attempts, c.Reason, c.Message)
	}
	if runs := flushRuns.of(cf.UID); len(runs) != 1 {
		t.Errorf("the flush ran %d times, want once", len(runs))
	}
}

// The same, when another process takes over (a new pod after the old one died): it waits for the
// dead holder's claim to lapse, then records what the run removed.
func TestFlushOfAStoppedOperatorIsTakenOverWhenItsClaimLapses(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	m.putKeys(t, keysUnder("handover", 12), 1024)
	ran := make(chan struct{}, 1)
	unhook := flushRuns.hook(nil, func(ctx context.Context, req storeuse.NamespaceFlushRequest) error {
		if req.Flush.Namespace != ns {
			return nil
		}
		ran <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	defer unhook()
	create(t, namespaceFlush(ns, "handover", "handover"))
	select {
	case <-ran:
	case <-time.After(90 * time.Second):
		t.Fatal("the flush did not run")
	}
	unhook()
	restartManagerAs(t, "e2e-successor")
	claim := getFlush(t, ns, "handover").Status.Claim
	if claim == nil || claim.Holder == "e2e-successor" {
		t.Fatalf("claim %+v, want the stopped operator's", claim)
	}
	eventually(t, 30*time.Second, "the successor waits for the claim", func() (bool, string) {
		c := meta.FindStatusCondition(getFlush(t, ns, "handover").Status.Conditions, hicachev1alpha1.ConditionComplete)
		return c != nil && c.Reason == hicachev1alpha1.ReasonClaimedElsewhere && strings.Contains(c.Message, claim.Holder), fmt.Sprintf("%+v", c)
	})
	var cf *hicachev1alpha1.CacheFlush
	eventually(t, time.Until(claim.ExpiryTime.Time)+60*time.Second, "the flush recorded after the claim lapsed", func() (bool, string) {
		cf = getFlush(t, ns, "handover")
		return meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete), fmt.Sprintf("%+v", cf.Status.Conditions)
	})
	if cf.Status.CompletionTime.Before(&claim.ExpiryTime) {
		t.Errorf("completed at %s, before the claim lapsed at %s", cf.Status.CompletionTime, claim.ExpiryTime)
	}
	if cf.Status.Removed != 12 || cf.Status.Attempts != 1 || len(flushRuns.of(cf.UID)) != 1 {
		t.Errorf("removed %d in %d attempts, %d runs; want 12 in 1, one run", cf.Status.Removed, cf.Status.Attempts, len(flushRuns.of(cf.UID)))
	}
}

// A Job attempt outlives the operator that started it: a successor records it from its Job as
// soon as the Job ended, without waiting for the claim to lapse, and starts no second Job for it.
func TestJobAttemptOfAStoppedOperatorIsRecordedFromItsJob(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	defer flushRuns.useJobs(ns)()
	stopped := make(chan struct{}, 1)
	unhook := flushRuns.hook(nil, func(ctx context.Context, req storeuse.NamespaceFlushRequest) error {
		if req.Flush.Namespace != ns {
			return nil
		}
		stopped <- struct{}{}
		<-ctx.Done() // the operator stops right after creating the Job
		return ctx.Err()
	})
	defer unhook()
	create(t, namespaceFlush(ns, "jobhandover", "jobhandover"))
	select {
	case <-stopped:
	case <-time.After(90 * time.Second):
		t.Fatal("the flush did not start")
	}
	unhook()
	restartManagerAs(t, "e2e-job-successor")
	claim := getFlush(t, ns, "jobhandover").Status.Claim
	if claim == nil || claim.Attempt != 1 {
		t.Fatalf("claim %+v, want attempt 1's", claim)
	}
	// The record of attempt 1 is read from its Event, which stays: the status's Failed condition
	// holds it only until attempt 2 claims, a second later. The stopping operator records
	// nothing: its attempt was not over, only its process.
	fromJob := "Attempt 1 failed: flush job jobhandover-1 failed"
	var recorded time.Time
	var others []string
	eventually(t, 30*time.Second, "attempt 1 recorded from its Job", func() (bool, string) {
		var evs eventsv1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		others = nil
		for _, e := range evs.Items {
			if e.Regarding.Kind != "CacheFlush" || e.Regarding.Name != "jobhandover" {
				continue
			}
			line := fmt.Sprintf("%s %s %s: %s", e.EventTime.UTC().Format(time.StampMilli), e.Type, e.Reason, e.Note)
			seen = append(seen, line)
			switch {
			case e.Type == corev1.EventTypeWarning && e.Reason == hicachev1alpha1.ReasonJobFailed && strings.HasPrefix(e.Note, fromJob):
				recorded = e.EventTime.Time
			case strings.HasPrefix(e.Note, "Attempt 1 failed"):
				others = append(others, line)
			}
		}
		return !recorded.IsZero(), fmt.Sprintf("the flush's Events: %s; its conditions: %+v", strings.Join(seen, " | "), getFlush(t, ns, "jobhandover").Status.Conditions)
	})
	if recorded.After(claim.ExpiryTime.Time) {
		t.Errorf("attempt 1 was recorded at %s, after its claim lapsed (%s): the successor waited for it", recorded.UTC().Format(time.StampMilli), claim.ExpiryTime)
	}
	for _, o := range others {
		t.Errorf("attempt 1 was also reported otherwise than from its Job: %s", o)
	}
	var jobs batchv1.JobList
	if err := k8s.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.Name != "jobhandover-1" && j.Name != "jobhandover-2" {
			t.Errorf("Job %s", j.Name)
		}
	}
}

// A flush of an empty namespace says so.
func TestFlushOfAnEmptyNamespaceSaysSo(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	create(t, namespaceFlush(ns, "empty", "nothing-here"))
	cf := waitFlushComplete(t, ns, "empty")
	c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete)
	if c.Reason != hicachev1alpha1.ReasonAlreadyEmpty || cf.Status.Removed != 0 || cf.Status.Attempts != 1 {
		t.Errorf("Complete %s (%s), removed %d in %d attempts; want AlreadyEmpty, 0 in 1", c.Reason, c.Message, cf.Status.Removed, cf.Status.Attempts)
	}
}

// A master that hangs (SIGSTOP) while a flush runs: the attempt ends at its deadline, with the
// reason, the backend's turn is given back, and the next attempt completes once the master
// answers again.
func TestFrozenMasterEndsTheAttemptAtItsDeadline(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	m.putKeys(t, keysUnder("frozen", 5), 1024)
	froze := make(chan time.Time, 1)
	unhook := flushRuns.hook(func(req storeuse.NamespaceFlushRequest) {
		if req.Flush.Namespace == ns && req.Attempt == 1 {
			m.Freeze()
			froze <- time.Now()
		}
	}, nil)
	defer unhook()
	create(t, namespaceFlush(ns, "frozen", "frozen"))
	var frozenAt time.Time
	select {
	case frozenAt = <-froze:
	case <-time.After(90 * time.Second):
		t.Fatal("the flush did not start")
	}
	var failedAt time.Time
	eventually(t, flushAttemptTimeout+20*time.Second, "attempt 1 recorded as timed out", func() (bool, string) {
		cf := getFlush(t, ns, "frozen")
		c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("%+v", cf.Status.Conditions)
		}
		failedAt = time.Now()
		ok := c.Reason == hicachev1alpha1.ReasonAttemptTimedOut && cf.Status.Attempts == 1 && cf.Status.Claim == nil && cf.Status.NextAttemptTime != nil
		if ok {
			m.Thaw() // before the next attempt, a second from now
		}
		return ok, fmt.Sprintf("%s: %s; attempts %d, claim %+v, next %v", c.Reason, c.Message, cf.Status.Attempts, cf.Status.Claim, cf.Status.NextAttemptTime)
	})
	if took := failedAt.Sub(frozenAt); took > flushAttemptTimeout+10*time.Second {
		t.Errorf("the attempt against the frozen master was recorded after %s; its deadline is %s", took.Round(time.Second), flushAttemptTimeout)
	}
	unhook()
	cf := waitFlushComplete(t, ns, "frozen")
	if cf.Status.Removed != 5 || cf.Status.Attempts != 2 {
		t.Errorf("removed %d in %d attempts, want 5 in 2", cf.Status.Removed, cf.Status.Attempts)
	}
}

// A namespace flush run as Jobs that keeps failing (kwok runs no container: the Job's pod ends
// without the script's result line): attempts are capped, the waits between them grow, never
// more than one Job of the flush is alive, and the Jobs of recorded attempts are removed.
func TestJobRunnerBoundsAFailingFlush(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	defer flushRuns.useJobs(ns)()
	create(t, namespaceFlush(ns, "jobs", "jobs"))
	created := map[string]time.Time{}
	maxLive := 0
	var cf *hicachev1alpha1.CacheFlush
	eventually(t, 120*time.Second, "the flush failed for good", func() (bool, string) {
		var jobs batchv1.JobList
		if err := k8s.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		live := 0
		for _, j := range jobs.Items {
			if _, seen := created[j.Name]; !seen {
				created[j.Name] = j.CreationTimestamp.Time
			}
			if j.DeletionTimestamp == nil && !jobEnded(&j) {
				live++
			}
		}
		maxLive = max(maxLive, live)
		cf = getFlush(t, ns, "jobs")
		c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed)
		return c != nil && c.Reason == hicachev1alpha1.ReasonAttemptsExhausted, fmt.Sprintf("attempts %d, %d Jobs so far, conditions %+v", cf.Status.Attempts, len(created), cf.Status.Conditions)
	})
	c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed)
	if cf.Status.Attempts != 5 || len(created) != 5 || !strings.Contains(c.Message, hicachev1alpha1.ReasonJobFailed) {
		t.Errorf("%d attempts, %d Jobs created, %q; want 5 attempts, one Job each, and the last failure's reason", cf.Status.Attempts, len(created), c.Message)
	}
	if maxLive > 1 {
		t.Errorf("%d Jobs of the flush were alive at once, want at most 1", maxLive)
	}
	var times []time.Time
	for _, at := range created {
		times = append(times, at)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	if total := times[len(times)-1].Sub(times[0]); total < 14*time.Second {
		t.Errorf("5 attempts within %s; the backoffs alone (1+2+4+8 s) take 15 s", total)
	}
	// The waits grow: the last (8 s) is well above the first (1 s), whatever each Job takes.
	if first, last := times[1].Sub(times[0]), times[4].Sub(times[3]); last < first+4*time.Second {
		t.Errorf("the wait before attempt 2 was %s, before attempt 5 %s; want it to grow", first, last)
	}
	// The Jobs of recorded attempts go; the last failed one stays, for its logs.
	eventually(t, 30*time.Second, "old attempt Jobs removed", func() (bool, string) {
		var jobs batchv1.JobList
		if err := k8s.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var names []string
		for _, j := range jobs.Items {
			if j.DeletionTimestamp == nil {
				names = append(names, j.Name)
			}
		}
		return len(names) == 1 && names[0] == "jobs-5", fmt.Sprintf("Jobs %v", names)
	})
	eventually(t, 30*time.Second, "Events for the attempts and the end", func() (bool, string) {
		var evs eventsv1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		seen := map[string]int{}
		for _, e := range evs.Items {
			if e.Regarding.Name == "jobs" {
				seen[e.Reason]++
			}
		}
		return seen["AttemptStarted"] >= 1 && seen[hicachev1alpha1.ReasonJobFailed] >= 1 && seen[hicachev1alpha1.ReasonAttemptsExhausted] == 1, fmt.Sprintf("%v", seen)
	})
}

func jobEnded(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return true
		}
	}
	return false
}
