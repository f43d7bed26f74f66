package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

func conditionIs(conds []metav1.Condition, typ string, want metav1.ConditionStatus) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Status == want
}

// The master's pod is killed: the backend goes NotReady and back to Ready once the Deployment
// has replaced the pod; the deployment using it keeps serving (Ready) meanwhile, and says
// BackendReady=False with an Event.
func TestKilledMasterPodIsReplacedAndServingStaysReady(t *testing.T) {
	ns := newNamespace(t, "master", baseline)
	managedBackend(t, ns, 1, "32Mi")
	h := qwen3(t, ns)

	old := backendPods(t, ns, "master")[0]
	killed := time.Now()
	if err := k8s.Delete(context.Background(), &old, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	sawBackendDown, sawHCDBackendDown, hcdNotReady := false, false, ""
	testutil.Eventually(t, 2*time.Minute, "the backend NotReady, then Ready again on a new master pod", func() (bool, string) {
		cb := getBackend(t, ns)
		hcd := getHCD(t, ns, h.Name)
		if !conditionIs(hcd.Status.Conditions, hicachev1alpha1.ConditionReady, metav1.ConditionTrue) && hcdNotReady == "" {
			hcdNotReady = fmt.Sprintf("%+v", meta.FindStatusCondition(hcd.Status.Conditions, hicachev1alpha1.ConditionReady))
		}
		if conditionIs(hcd.Status.Conditions, hicachev1alpha1.ConditionBackendReady, metav1.ConditionFalse) {
			sawHCDBackendDown = true
		}
		if conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionReady, metav1.ConditionFalse) {
			sawBackendDown = true
			return false, "backend not ready"
		}
		pods := backendPods(t, ns, "master")
		replaced := len(pods) == 1 && pods[0].UID != old.UID && kubeutil.PodReady(&pods[0])
		back := sawBackendDown && replaced && conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionReady, metav1.ConditionTrue) &&
			conditionIs(hcd.Status.Conditions, hicachev1alpha1.ConditionBackendReady, metav1.ConditionTrue)
		return back, fmt.Sprintf("saw the backend down %v, master replaced %v, backend %+v", sawBackendDown, replaced, cb.Status.Conditions)
	})
	logf("%s: master pod killed; backend Ready again on its replacement after %s", ns, time.Since(killed).Round(time.Millisecond))
	if hcdNotReady != "" {
		t.Errorf("the deployment stopped being Ready while its backend was down: %s", hcdNotReady)
	}
	if !sawHCDBackendDown {
		t.Error("the deployment never said BackendReady=False while its backend was down")
	}
	if got := getHCD(t, ns, h.Name); got.Status.ReadyReplicas != ptr.Deref(got.Spec.Replicas, 1) {
		t.Errorf("%d of %d serving groups Ready after the master came back", got.Status.ReadyReplicas, ptr.Deref(got.Spec.Replicas, 1))
	}
	testutil.Eventually(t, 30*time.Second, "a Warning Event on the deployment for the backend", func() (bool, string) {
		var evs eventsv1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "HiCacheDeployment" && e.Regarding.Name == h.Name && e.Reason == hicachev1alpha1.ReasonBackendNotReady && e.Type == "Warning" {
				return true, ""
			}
			seen = append(seen, e.Regarding.Name+":"+e.Reason)
		}
		return false, fmt.Sprintf("%v", seen)
	})
}
