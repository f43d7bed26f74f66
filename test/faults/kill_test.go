package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The manager is SIGKILLed three times while 20 deployments roll out: right after its first
// StatefulSet, as soon as a deployment is Ready, and in the middle of rolling them all to a new
// image. Each time it is started again at once (as the kubelet restarts the container) and
// must take the lease (it was never released) and go on: every deployment converges, each child
// is created once and owned by its deployment, no StatefulSet is recreated, and each rank pod
// is replaced once by the roll, never twice.
func TestKilledMidRolloutConverges(t *testing.T) {
	const n = 20
	ctx := context.Background()
	ns := newNamespace(t)
	withBackend(t, ns)
	mark := auditMark(t)
	mgr := startManager(t, ns, "killed")
	began := time.Now()
	names := createDeployments(t, ns, "dsv4", n)

	killAndRestart := func(moment string) {
		t.Helper()
		mgr.kill()
		done, _ := allConverged(ctx, ns, same(names, want{replicas: 1}))
		logf("SIGKILL %s (%s after the deployments were created; %d StatefulSets, %d of %d deployments Ready)",
			moment, time.Since(began).Round(time.Millisecond), countStatefulSets(ctx, ns), done, n)
		mgr.start()
	}

	testutil.Eventually(t, 60*time.Second, "the first StatefulSet", func() (bool, string) {
		return countStatefulSets(ctx, ns) > 0, "none yet"
	})
	killAndRestart("after the first StatefulSet")
	testutil.Eventually(t, 3*time.Minute, "a deployment Ready", func() (bool, string) {
		done, why := allConverged(ctx, ns, same(names, want{replicas: 1}))
		return done > 0, why
	})
	killAndRestart("once a deployment was Ready")
	lease := mgr.waitLeading(time.Minute)
	waitConverged(t, ns, same(names, want{replicas: 1}), 3*time.Minute)
	logf("all %d deployments converged %s after the last restart (%s of it waiting for the killed process's lease to expire), %s after they were created",
		n, time.Since(mgr.started).Round(time.Millisecond), lease.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	checkChildren(t, ns, replicasOf(names, 1))
	uids := statefulSetUIDs(t, ns)

	// Roll every deployment to a new image and kill the manager once it has replaced some pods.
	rollMark := auditMark(t)
	rolled := time.Now()
	for _, name := range names {
		editDeployment(t, ns, name, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.SGLang.Image = rolledImage })
	}
	testutil.Eventually(t, 60*time.Second, "the roll under way", func() (bool, string) {
		replaced := deletions(byUsers(auditSince(t, rollMark, ns), mgr.user))
		for o := range replaced {
			if strings.HasPrefix(o, "pods/") {
				return true, ""
			}
		}
		return false, "no rank pod deleted yet"
	})
	killAndRestart("in the middle of the roll")
	lease = mgr.waitLeading(time.Minute)
	waitConverged(t, ns, same(names, want{replicas: 1, image: rolledImage}), 3*time.Minute)
	logf("the roll of %d deployments converged %s after the restart (%s of it waiting for the lease), %s after the edit",
		n, time.Since(mgr.started).Round(time.Millisecond), lease.Round(time.Millisecond), time.Since(rolled).Round(time.Millisecond))
	checkChildren(t, ns, replicasOf(names, 1))

	for name, uid := range statefulSetUIDs(t, ns) {
		if uids[name] != uid {
			t.Errorf("StatefulSet %s was recreated (uid %s → %s); a roll replaces the pods only", name, uids[name], uid)
		}
	}
	ops := byUsers(auditSince(t, mark, ns), mgr.user)
	if twice := createdTwice(ops); len(twice) > 0 {
		t.Errorf("the manager created these objects more than once: %v", twice)
	}
	// The roll replaces each group's pods together, once: a group whose pods the killed process
	// deleted is left alone after the restart; one it had not reached, or left half done (killed
	// between two deletes), has all its pods replaced by the restarted process, the rule for
	// pods of an older template.
	roll := byUsers(auditSince(t, rollMark, ns), mgr.user)
	var before, after []auditEvent
	for _, e := range roll {
		if e.StageTimestamp.Time.Before(mgr.started) {
			before = append(before, e)
		} else {
			after = append(after, e)
		}
	}
	deletedBefore, deletedAfter := deletions(before), deletions(after)
	uncertainBefore := uncertainDeletions(before)
	halfDone := 0
	for _, name := range names {
		pods := []string{"pods/" + name + "-0-0", "pods/" + name + "-0-1"}
		var a, b int
		for _, p := range pods {
			n := min(deletedBefore[p], 1)
			// A delete the API server answered 5xx (504: it may still be processing the request)
			// may have taken effect: it did when nobody deleted the pod again, since the roll
			// converged with every pod on the new template.
			if n == 0 && deletedAfter[p] == 0 && uncertainBefore[p] > 0 {
				n = 1
			}
			a += n
			b += min(deletedAfter[p], 1)
			if deletedBefore[p] > 1 || deletedAfter[p] > 1 {
				t.Errorf("%s was deleted more than once by one process: %s", p, requestsTo(roll, p))
			}
		}
		switch {
		case a == len(pods) && b == 0, a == 0 && b == len(pods):
		case a > 0 && a < len(pods) && b == len(pods):
			halfDone++
		default:
			t.Errorf("deployment %s: %d of its rank pods deleted before the kill, %d after the restart; want all before and none after, or all after (the manager restarted at %s): %s; %s",
				name, a, b, mgr.started.Format("15:04:05.000"), requestsTo(roll, pods[0]), requestsTo(roll, pods[1]))
		}
	}
	logf("the killed process had replaced the pods of %d deployments, the restarted one of %d (%d of them left half done by the kill)",
		countGroups(deletedBefore, names, 2), countGroups(deletedAfter, names, 2), halfDone)
	for o := range deletedBefore {
		if !strings.HasPrefix(o, "pods/") {
			t.Errorf("the manager deleted %s during the roll; want rank pods only", o)
		}
	}
	for o := range deletedAfter {
		if !strings.HasPrefix(o, "pods/") {
			t.Errorf("the manager deleted %s during the roll; want rank pods only", o)
		}
	}
}

// countGroups counts the deployments all of whose group's pods (the first serving group's, size
// nodes) were deleted in deleted.
func countGroups(deleted map[string]int, names []string, nodes int) int {
	n := 0
	for _, name := range names {
		all := true
		for i := range nodes {
			if deleted[fmt.Sprintf("pods/%s-0-%d", name, i)] == 0 {
				all = false
			}
		}
		if all {
			n++
		}
	}
	return n
}
