package hicachedeployment

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

func TestBackendInputsChanged(t *testing.T) {
	ready := func(status metav1.ConditionStatus, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: hicachev1alpha1.ConditionReady, Status: status, Reason: "R", Message: msg}}
	}
	base := func() *hicachev1alpha1.CacheBackend {
		return &hicachev1alpha1.CacheBackend{
			ObjectMeta: metav1.ObjectMeta{Name: "mooncake", Generation: 1},
			Status: hicachev1alpha1.CacheBackendStatus{
				Conditions: ready(metav1.ConditionTrue, "Healthy; 12 keys"),
				Endpoints:  &hicachev1alpha1.BackendEndpoints{RPCAddress: "m:50051", MetadataServer: "P2PHANDSHAKE", MetricsPort: 9003},
			},
		}
	}
	for _, c := range []struct {
		name   string
		change func(cb *hicachev1alpha1.CacheBackend)
		want   bool
	}{
		{"nothing", func(*hicachev1alpha1.CacheBackend) {}, false},
		{"a probe's counts and the namespaces in use", func(cb *hicachev1alpha1.CacheBackend) {
			cb.Status.NamespaceCount = 3
			cb.Status.Namespaces = []hicachev1alpha1.NamespaceUsage{{Namespace: "ns", DeploymentCount: 65}}
			cb.Status.ObservedGeneration = 1
		}, false},
		{"the message of a true Ready", func(cb *hicachev1alpha1.CacheBackend) {
			cb.Status.Conditions = ready(metav1.ConditionTrue, "Healthy; 13 keys")
		}, false},
		{"Ready turned false", func(cb *hicachev1alpha1.CacheBackend) {
			cb.Status.Conditions = ready(metav1.ConditionFalse, "the master does not answer")
		}, true},
		{"Ready lost", func(cb *hicachev1alpha1.CacheBackend) { cb.Status.Conditions = nil }, true},
		{"the RPC address", func(cb *hicachev1alpha1.CacheBackend) { cb.Status.Endpoints.RPCAddress = "m2:50051" }, true},
		{"the metrics port", func(cb *hicachev1alpha1.CacheBackend) { cb.Status.Endpoints.MetricsPort = 9004 }, true},
		{"the HA cluster", func(cb *hicachev1alpha1.CacheBackend) { cb.Status.Endpoints.ClusterID = "c2" }, true},
		{"the masters' leader view (a failover)", func(cb *hicachev1alpha1.CacheBackend) { cb.Status.ViewVersion = 3 }, true},
		{"the members' roles alone", func(cb *hicachev1alpha1.CacheBackend) {
			cb.Status.Masters = []hicachev1alpha1.MasterMember{{Name: "m-0", Role: hicachev1alpha1.MasterStandby}}
		}, false},
		{"no endpoints", func(cb *hicachev1alpha1.CacheBackend) { cb.Status.Endpoints = nil }, true},
		{"the spec", func(cb *hicachev1alpha1.CacheBackend) { cb.Generation = 2 }, true},
		{"deleted", func(cb *hicachev1alpha1.CacheBackend) { cb.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }, true},
	} {
		cur := base()
		c.change(cur)
		if got := backendInputsChanged(base(), cur); got != c.want {
			t.Errorf("%s: backendInputsChanged = %v, want %v", c.name, got, c.want)
		}
	}
	// While not Ready, why it is not is quoted in the deployments' BackendReady condition.
	a, b := base(), base()
	a.Status.Conditions, b.Status.Conditions = ready(metav1.ConditionFalse, "connection refused"), ready(metav1.ConditionFalse, "timeout")
	if !backendInputsChanged(a, b) {
		t.Error("a new reason why the backend is not Ready wakes no deployment")
	}
}

func TestGroupUpdateMatters(t *testing.T) {
	base := func() *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "d-0", Generation: 1, ResourceVersion: "1",
			Labels:          map[string]string{hicachev1alpha1.LabelDeployment: "d"},
			Annotations:     map[string]string{hicachev1alpha1.AnnotationTemplateHash: "h1"},
			OwnerReferences: []metav1.OwnerReference{{UID: "u", Name: "d", Controller: ptr.To(true)}}}}
	}
	for _, c := range []struct {
		name   string
		change func(*appsv1.StatefulSet)
		want   bool
	}{
		{"status only", func(s *appsv1.StatefulSet) {
			s.ResourceVersion = "2"
			s.Status = appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, CurrentRevision: "r"}
		}, false},
		{"the group's history the controller records", func(s *appsv1.StatefulSet) {
			s.Annotations[hicachev1alpha1.AnnotationMembers] = "0=a,1=b"
			s.Annotations[hicachev1alpha1.AnnotationRecreations] = "1"
		}, false},
		{"the spec", func(s *appsv1.StatefulSet) { s.Generation = 2 }, true},
		{"the template hash", func(s *appsv1.StatefulSet) { s.Annotations[hicachev1alpha1.AnnotationTemplateHash] = "h2" }, true},
		{"another annotation", func(s *appsv1.StatefulSet) { s.Annotations["x"] = "y" }, true},
		{"a label", func(s *appsv1.StatefulSet) { s.Labels["x"] = "y" }, true},
		{"owner references stripped", func(s *appsv1.StatefulSet) { s.OwnerReferences = nil }, true},
		{"deleted", func(s *appsv1.StatefulSet) { s.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }, true},
		{"a finalizer", func(s *appsv1.StatefulSet) { s.Finalizers = []string{"f"} }, true},
	} {
		cur := base()
		c.change(cur)
		if got := groupUpdateMatters(base(), cur); got != c.want {
			t.Errorf("%s: groupUpdateMatters = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPodUpdateMatters(t *testing.T) {
	base := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d-0-0", UID: "p", ResourceVersion: "1",
			Labels:      map[string]string{hicachev1alpha1.LabelDeployment: "d", appsv1.PodIndexLabel: "0"},
			Annotations: map[string]string{hicachev1alpha1.AnnotationTemplateHash: "h1"}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}
	}
	running := func(p *corev1.Pod, ready corev1.ConditionStatus) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: ready})
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", Ready: ready == corev1.ConditionTrue}}
	}
	for _, c := range []struct {
		name   string
		change func(*corev1.Pod)
		want   bool
	}{
		{"bound to a node", func(p *corev1.Pod) {
			p.ResourceVersion = "2"
			p.Spec.NodeName = "n"
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		}, false},
		{"an IP, a start time, containers being created", func(p *corev1.Pod) {
			p.Status.PodIP, p.Status.StartTime = "10.0.0.1", &metav1.Time{Time: time.Unix(1, 0)}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		}, false},
		{"running, not ready", func(p *corev1.Pod) { running(p, corev1.ConditionFalse) }, true},
		{"ready", func(p *corev1.Pod) { running(p, corev1.ConditionTrue) }, true},
		{"cannot be scheduled", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/4 nodes"}}
		}, true},
		{"an image that cannot be pulled", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}}}}
		}, true},
		{"a restart", func(p *corev1.Pod) {
			running(p, corev1.ConditionTrue)
			p.Status.ContainerStatuses[0].RestartCount = 1
		}, true},
		{"failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, true},
		{"a role label", func(p *corev1.Pod) { p.Labels["role"] = "leader" }, true},
		{"an annotation", func(p *corev1.Pod) { p.Annotations[hicachev1alpha1.AnnotationRankRoleHash] = "r" }, true},
		{"being deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }, true},
		{"replaced under the same name", func(p *corev1.Pod) { p.UID = types.UID("q") }, true},
	} {
		cur := base()
		c.change(cur)
		if got := podUpdateMatters(base(), cur); got != c.want {
			t.Errorf("%s: podUpdateMatters = %v, want %v", c.name, got, c.want)
		}
	}
	old, cur := base(), base()
	running(old, corev1.ConditionFalse)
	running(cur, corev1.ConditionTrue)
	if !becameReady(old, cur) || becameReady(cur, cur) || becameReady(cur, old) {
		t.Error("becameReady is wrong")
	}
}

func TestWakesWriter(t *testing.T) {
	writer := func(uid, layout string, current bool) *hicachev1alpha1.HiCacheDeployment {
		status := metav1.ConditionTrue
		if !current {
			status = metav1.ConditionFalse
		}
		return &hicachev1alpha1.HiCacheDeployment{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)},
			Status: hicachev1alpha1.HiCacheDeploymentStatus{
				Cache:      &hicachev1alpha1.CacheStatus{Namespace: "ns", Backend: "mooncake", LayoutHash: layout},
				Conditions: []metav1.Condition{{Type: hicachev1alpha1.ConditionCacheLayoutCurrent, Status: status}},
			}}
	}
	changed := writer("a", "L1", true)
	for _, c := range []struct {
		name string
		w    *hicachev1alpha1.HiCacheDeployment
		want bool
	}{
		{"itself", writer("a", "L2", true), false},
		{"a writer of the same layout", writer("b", "L1", true), false},
		{"a writer of the same layout that waits", writer("b", "L1", false), true},
		{"a writer of another layout", writer("b", "L2", true), true},
		{"a writer with no cache status", &hicachev1alpha1.HiCacheDeployment{ObjectMeta: metav1.ObjectMeta{UID: "b"}}, true},
	} {
		if got := wakesWriter(changed, c.w); got != c.want {
			t.Errorf("%s: wakesWriter = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPodWakeOf(t *testing.T) {
	pod := func(index int, ready bool) corev1.Pod {
		b := makePod("d-0", index).UID(fmt.Sprintf("u%d", index))
		if ready {
			b = b.Ready()
		} else {
			b = b.Running()
		}
		return b.Obj()
	}
	ptrTo := func(p corev1.Pod) *corev1.Pod { return &p }
	deleting := func(p corev1.Pod) corev1.Pod { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}; return p }
	now := podWake{}
	ready := podWake{priority: readyPriority}
	later := podWake{after: coalesceDelay}
	tests := map[string]struct {
		old, cur *corev1.Pod
		group    []corev1.Pod
		size     int
		want     podWake
	}{
		"a pod created": {cur: ptrTo(pod(0, false)), group: []corev1.Pod{pod(0, false)}, size: 2, want: later},
		"the first rank of two Ready": {old: ptrTo(pod(0, false)), cur: ptrTo(pod(0, true)),
			group: []corev1.Pod{pod(0, true), pod(1, false)}, size: 2, want: later},
		"the first rank Ready, the other not created yet": {old: ptrTo(pod(0, false)), cur: ptrTo(pod(0, true)),
			group: []corev1.Pod{pod(0, true)}, size: 2, want: later},
		"the last rank Ready": {old: ptrTo(pod(1, false)), cur: ptrTo(pod(1, true)),
			group: []corev1.Pod{pod(0, true), pod(1, true)}, size: 2, want: ready},
		"the last rank Ready, the cache not yet": {old: ptrTo(pod(1, false)), cur: ptrTo(pod(1, true)),
			group: []corev1.Pod{pod(0, true), pod(1, false)}, size: 2, want: ready},
		"the only rank Ready": {old: ptrTo(pod(0, false)), cur: ptrTo(pod(0, true)),
			group: []corev1.Pod{pod(0, true)}, size: 1, want: ready},
		"the last rank Ready beside one being deleted": {old: ptrTo(pod(1, false)), cur: ptrTo(pod(1, true)),
			group: []corev1.Pod{deleting(pod(0, true)), pod(1, true)}, size: 2, want: later},
		"a rank no longer Ready": {old: ptrTo(pod(0, true)), cur: ptrTo(pod(0, false)),
			group: []corev1.Pod{pod(0, false), pod(1, true)}, size: 2, want: now},
		"a restart": {old: ptrTo(pod(0, true)), cur: ptrTo(makePod("d-0", 0).UID("u0").Ready().Restarted(1).Obj()),
			group: []corev1.Pod{pod(0, true), pod(1, true)}, size: 2, want: now},
		"failed": {old: ptrTo(pod(0, false)), cur: ptrTo(makePod("d-0", 0).UID("u0").Failed().Obj()),
			group: []corev1.Pod{pod(0, false), pod(1, false)}, size: 2, want: now},
		"replaced under the same name": {old: ptrTo(pod(1, false)), cur: ptrTo(makePod("d-0", 1).UID("v1").Ready().Obj()),
			group: []corev1.Pod{pod(0, true), makePod("d-0", 1).UID("v1").Ready().Obj()}, size: 2, want: now},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := podWakeOf(tc.old, tc.cur, tc.group, tc.size); got != tc.want {
				t.Errorf("podWakeOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
