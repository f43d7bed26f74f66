package faults

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// Two managers run with leader election, as two replicas of the chart's Deployment. Five
// deployments are Ready; five more are created, and the leader is SIGKILLed as soon as it has
// started on them. The standby takes the lease once it expires and finishes the rollout: nothing
// is created twice, and it writes nothing to the five deployments that were Ready before the
// kill, whose children were already right.
func TestLeaderFailover(t *testing.T) {
	const n = 5
	ctx := context.Background()
	ns := newNamespace(t)
	withBackend(t, ns)
	leader := startManager(t, ns, "failover-a")
	leader.waitLeading(time.Minute)
	standby := startManager(t, ns, "failover-b")
	mark := auditMark(t)
	readyBefore := createDeployments(t, ns, "ready", n)
	waitConverged(t, ns, same(readyBefore, want{replicas: 1}), 2*time.Minute)
	if standby.leads() {
		t.Fatalf("the standby leads while the leader runs")
	}
	rolling := createDeployments(t, ns, "rolling", n)
	names := append(slices.Clone(readyBefore), rolling...)
	testutil.Eventually(t, time.Minute, "the leader at work on the new deployments", func() (bool, string) {
		return countStatefulSets(ctx, ns) > n, "no StatefulSet of the new ones yet"
	})
	holder, err := leaseHolder(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	killMark := auditMark(t)
	killed := time.Now()
	leader.kill()
	stsAtKill := countStatefulSets(ctx, ns)
	var handover time.Duration
	testutil.Eventually(t, time.Minute, "the standby leading", func() (bool, string) {
		h, err := leaseHolder(ctx, ns)
		handover = time.Since(killed)
		return err == nil && h != "" && h != holder && standby.leads(), "lease held by " + h
	})
	took, _ := waitConverged(t, ns, same(names, want{replicas: 1}), 3*time.Minute)
	after := byUsers(auditSince(t, killMark, ns), standby.user)
	first := firstWrite(after)
	logf("leader SIGKILLed with %d StatefulSets of the %d new deployments: the standby led %s after the kill, wrote first %s after it; all converged %s after it led",
		stsAtKill-n, n, handover.Round(100*time.Millisecond), first.Sub(killed).Round(100*time.Millisecond), took.Round(100*time.Millisecond))
	if first.IsZero() {
		t.Errorf("the standby wrote nothing after it led: the rollout was over before the kill")
	}

	all := byUsers(auditSince(t, mark, ns), leader.user, standby.user)
	if twice := createdTwice(all); len(twice) > 0 {
		t.Errorf("the two managers created these objects more than once between them: %v", twice)
	}
	var beforeKill []auditEvent
	for _, e := range byUsers(auditSince(t, mark, ""), standby.user) {
		if e.StageTimestamp.Time.Before(killed) && (e.ObjectRef == nil || e.ObjectRef.Resource != "leases") {
			beforeKill = append(beforeKill, e)
		}
	}
	if w, what := writesOf(beforeKill); w > 0 {
		t.Errorf("the standby wrote %d times before it led: %s", w, what)
	}
	var untouched []auditEvent
	for _, e := range after {
		if e.ObjectRef == nil || e.ObjectRef.Resource == "events" {
			continue
		}
		for _, name := range readyBefore {
			if e.ObjectRef.Name == name || strings.HasPrefix(e.ObjectRef.Name, name+"-") {
				untouched = append(untouched, e)
			}
		}
	}
	if w, what := writesOf(untouched); w > 0 {
		t.Errorf("the new leader wrote %d times to deployments that were Ready before the failover (%v), whose children were right: %s", w, readyBefore, what)
	}
	checkChildren(t, ns, replicasOf(names, 1))
}
