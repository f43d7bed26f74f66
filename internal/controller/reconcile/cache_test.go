package reconcile

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStripPodKeepsWhatIsRead(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "d-0-0", UID: "u", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "sglang", Args: []string{"--tp", "16"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "sglang", RestartCount: 1}}},
	}
	want := p.DeepCopy()
	out, err := stripPod(p)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if got.ManagedFields != nil || len(got.Spec.Containers) != 0 {
		t.Errorf("stripped pod keeps managedFields %v or containers %v", got.ManagedFields, got.Spec.Containers)
	}
	want.ManagedFields, want.Spec = nil, corev1.PodSpec{NodeName: "n"}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("stripped pod = %+v, want %+v", got, want)
	}
	if other, _ := stripPod("not a pod"); other != "not a pod" {
		t.Error("stripPod changed what is not a pod")
	}
}
