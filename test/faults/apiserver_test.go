package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The API server is killed and started again (same address, certificates and etcd) while ten
// deployments roll out: at once, a 5–10 s outage here (kube-apiserver takes about 5 s to serve
// again), shorter than the manager's lease renew deadline (10 s); and after 25 s, longer than it,
// after which the manager may exit, and is then started again as the kubelet would. Either way
// every deployment converges, each child created once.
func TestAPIServerRestartUnderLoad(t *testing.T) {
	for _, outage := range []struct {
		name string
		down time.Duration
	}{{"short", 0}, {"long", 25 * time.Second}} {
		t.Run(outage.name, func(t *testing.T) {
			const n = 10
			ctx := context.Background()
			ns := newNamespace(t)
			withBackend(t, ns)
			mgr := startManager(t, ns, "apiserver-"+outage.name)
			mgr.waitLeading(time.Minute)
			mark := auditMark(t)
			names := createDeployments(t, ns, "dsv4", n)
			testutil.Eventually(t, 60*time.Second, "the rollout under way", func() (bool, string) {
				return countStatefulSets(ctx, ns) > 0, "no StatefulSet yet"
			})
			done, _ := allConverged(ctx, ns, same(names, want{replicas: 1}))
			groups := countStatefulSets(ctx, ns)
			took, err := cluster.RestartAPIServer(ctx, outage.down)
			if err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			conv, restarts := waitConverged(t, ns, same(names, want{replicas: 1}), 3*time.Minute, mgr)
			led, _ := mgr.ledAt()
			how := "the manager rode it out"
			if restarts > 0 {
				how = fmt.Sprintf("the manager exited and was started again %d times, the last process leading %s after the API server was back", restarts, led.Sub(back).Round(100*time.Millisecond))
			}
			logf("API server down %s (killed with %d StatefulSets and %d of %d deployments Ready): %s; all converged %s after the API server was back",
				took.Round(time.Millisecond), groups, done, n, how, conv.Round(time.Millisecond))
			checkChildren(t, ns, replicasOf(names, 1))
			logf("the controller-manager's garbage collector worked again %s after the API server was back", gcRecovered(t, ns, back).Round(100*time.Millisecond))
			if twice := createdTwice(byUsers(auditSince(t, mark, ns), mgr.user)); len(twice) > 0 {
				t.Errorf("the manager created these objects more than once: %v", twice)
			}
		})
	}
}

// gcRecovered waits until the controller-manager's garbage collector deletes a dependent of a
// deleted owner again (after an outage it rebuilds its graph of owners first), so that the next
// test starts on a control plane that works, and returns how long after since that was.
func gcRecovered(t *testing.T, ns string, since time.Time) time.Duration {
	t.Helper()
	ctx := context.Background()
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-owner-", Namespace: ns}}
	if err := k8s.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-dependent-", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	if err := k8s.Create(ctx, dependent); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, owner); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Minute, "the garbage collector deleting a dependent", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), fmt.Sprintf("ConfigMap %s still there (%v)", dependent.Name, err)
	})
	return time.Since(since)
}
