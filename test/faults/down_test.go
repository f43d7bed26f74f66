package faults

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// While the manager is stopped, the world changes: a deployment is scaled from one group to two,
// another loses one of its two groups (its StatefulSet deleted), a third gets a new image. The
// manager started again applies all of it within 30 s of its start.
func TestChangesWhileDownAreAppliedWithin30s(t *testing.T) {
	const bound = 30 * time.Second
	ctx := context.Background()
	ns := newNamespace(t)
	withBackend(t, ns)
	mgr := startManager(t, ns, "down")
	createDeployment(t, ns, "scaled", 1)
	createDeployment(t, ns, "lost-group", 2)
	createDeployment(t, ns, "new-image", 1)
	before := map[string]want{"scaled": {replicas: 1}, "lost-group": {replicas: 2}, "new-image": {replicas: 1}}
	waitConverged(t, ns, before, 2*time.Minute)
	mark := auditMark(t)
	mgr.stop()

	editDeployment(t, ns, "scaled", func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Replicas = ptr.To(int32(2)) })
	lost := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost-group-1"}}
	if err := k8s.Delete(ctx, lost, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	editDeployment(t, ns, "new-image", func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.SGLang.Image = rolledImage })

	mgr.start()
	after := map[string]want{"scaled": {replicas: 2}, "lost-group": {replicas: 2}, "new-image": {replicas: 1, image: rolledImage}}
	waitConverged(t, ns, after, 2*time.Minute)
	took := time.Since(mgr.started)
	lease := mgr.waitLeading(time.Second)
	logf("the changes made while the manager was down were applied %s after its start (it led after %s)", took.Round(time.Millisecond), lease.Round(time.Millisecond))
	if took > bound {
		t.Errorf("the changes made while the manager was down took %s after its start, want within %s", took.Round(time.Millisecond), bound)
	}
	checkChildren(t, ns, map[string]int32{"scaled": 2, "lost-group": 2, "new-image": 1})
	if twice := createdTwice(byUsers(auditSince(t, mark, ns), mgr.user)); len(twice) > 0 {
		t.Errorf("the manager created these objects more than once: %v", twice)
	}
}
