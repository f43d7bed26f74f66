package hicachedeployment

import (
	"context"
	"maps"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
)

// Which changes of what a HiCacheDeployment watches wake it: only those that change something its
// reconcile reads. At a thousand deployments every other event is a reconcile that changes
// nothing, and each one delays the reconciles that do (a Ready status waits behind them).

// backendInputsChanged tells whether an update of a CacheBackend changes what its deployments
// read of it: its spec (the store it reaches), whether it is Ready (and why not, which their
// condition quotes), the endpoints it publishes, the masters' leader view (a flush under an older
// one is done again before a new layout starts), its deletion. Its probe results (key counts,
// capacity, namespaces in use) are read by no deployment.
func backendInputsChanged(old, cur *hicachev1alpha1.CacheBackend) bool {
	if old.Generation != cur.Generation || old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() || old.Status.ViewVersion != cur.Status.ViewVersion {
		return true
	}
	if backendReadiness(old) != backendReadiness(cur) {
		return true
	}
	return !equality.Semantic.DeepEqual(old.Status.Endpoints, cur.Status.Endpoints)
}

// backendReadiness is what a deployment reads of a backend's Ready condition: whether it is true,
// and the message it quotes when it is not.
func backendReadiness(cb *hicachev1alpha1.CacheBackend) string {
	c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
	switch {
	case c == nil:
		return ""
	case c.Status == metav1.ConditionTrue:
		return "True"
	}
	return string(c.Status) + ": " + c.Message
}

// groupHistoryAnnotations are what the controller records on a group's StatefulSet itself, in the
// reconcile that decides it: their change tells that reconcile nothing new.
var groupHistoryAnnotations = []string{
	hicachev1alpha1.AnnotationMembers, hicachev1alpha1.AnnotationRecreations, hicachev1alpha1.AnnotationRecreatedAt,
}

// groupUpdateMatters tells whether an update of a serving group's StatefulSet changes what the
// deployment's reconcile reads of it: its spec (generation), labels, annotations but the group's
// history, owners, finalizers or deletion. Its status, which the StatefulSet controller updates
// as pods come and go, is never read: the reconcile reads the pods themselves.
func groupUpdateMatters(old, cur *appsv1.StatefulSet) bool {
	if old.Generation != cur.Generation || old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() ||
		!maps.Equal(old.Labels, cur.Labels) || !equality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences) ||
		!equality.Semantic.DeepEqual(old.Finalizers, cur.Finalizers) {
		return true
	}
	a, b := maps.Clone(old.Annotations), maps.Clone(cur.Annotations)
	for _, k := range groupHistoryAnnotations {
		delete(a, k)
		delete(b, k)
	}
	return !maps.Equal(a, b)
}

// podFacts is what a deployment's reconcile reads of one rank pod's status.
type podFacts struct {
	phase     corev1.PodPhase
	ready     bool
	restarted bool
	// problem is why the pod is stuck, in the words the status quotes.
	problem string
}

func factsOf(p *corev1.Pod) podFacts {
	f := podFacts{phase: p.Status.Phase, ready: kubeutil.PodReady(p), problem: podProblem(p)}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount > 0 {
			f.restarted = true
		}
	}
	return f
}

// podUpdateMatters tells whether an update of a rank pod changes what the deployment's reconcile
// reads of it: its labels and annotations (index, template, layout, role), its deletion, and its
// status facts (phase, Ready, a restart, a stuck container or scheduling). A pod being bound to a
// node, getting an IP or a start time, or its containers being created changes none of them.
func podUpdateMatters(old, cur *corev1.Pod) bool {
	return old.UID != cur.UID || old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() ||
		!maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
		factsOf(old) != factsOf(cur)
}

// becameReady: the update made the pod Ready, the change a deployment's Ready status waits for.
func becameReady(old, cur *corev1.Pod) bool {
	return !kubeutil.PodReady(old) && kubeutil.PodReady(cur)
}

// readyPriority is the queue priority of a deployment whose serving group just became Ready:
// above the reconciles of new deployments (priority 0), so that a Ready status does not wait
// behind a queue of creations.
const readyPriority = 10

// coalesceDelay is how long a step of a group towards Ready (a rank pod created, or Ready while
// another rank is not) waits before it wakes the deployment: the group's other ranks take the
// same step moments later, and one reconcile then sees them all. Without it a group of two pods
// costs a reconcile and a status write for each of its pods' steps.
const coalesceDelay = time.Second

// podWake is when a change of a rank pod wakes its deployment: after after (0: at once), at
// priority.
type podWake struct {
	priority int
	after    time.Duration
}

// podWakeOf decides when a rank pod's creation (old nil) or an update that podUpdateMatters lets
// through wakes its deployment, given the pods of its group as the cache holds them now (cur's
// update among them) and the group's size:
//   - an update that leaves every rank of the group Ready: at once, at readyPriority;
//   - a creation, or an update that makes one rank Ready while another is not: after
//     coalesceDelay;
//   - anything else (a rank no longer Ready, failed, restarted, stuck, relabelled): at once.
func podWakeOf(old, cur *corev1.Pod, group []corev1.Pod, size int) podWake {
	if old == nil {
		return podWake{after: coalesceDelay}
	}
	if !becameReady(old, cur) || old.UID != cur.UID {
		return podWake{}
	}
	ready := 0
	for i := range group {
		p := &group[i]
		if p.UID == cur.UID {
			p = cur // the update, whatever the cache holds
		}
		if p.DeletionTimestamp.IsZero() && kubeutil.PodReady(p) {
			ready++
		}
	}
	if ready >= size {
		return podWake{priority: readyPriority}
	}
	return podWake{after: coalesceDelay}
}

// groupPodsOf reads from c the StatefulSet of pod's serving group and the pods it runs (named
// after it, by ordinal); ok is false when the group is not found.
func groupPodsOf(ctx context.Context, c client.Reader, pod *corev1.Pod) (pods []corev1.Pod, size int, ok bool) {
	k, found := groupKeyOf(pod.Labels)
	if !found {
		return nil, 0, false
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: groupName(pod.Labels[hicachev1alpha1.LabelDeployment], k)}, &sts); err != nil {
		return nil, 0, false
	}
	size = int(ptr.Deref(sts.Spec.Replicas, 1))
	for i := range size {
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: sts.Name + "-" + strconv.Itoa(i)}, &p); err == nil {
			pods = append(pods, p)
		}
	}
	return pods, size, true
}

// podToDeployment wakes a rank pod's deployment on its creation, deletion and the updates
// podUpdateMatters lets through, when podWakeOf says (c is the cache the pods of its group are read
// from; a group not found there wakes it at once).
func podToDeployment(c client.Reader) handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object, w podWake) {
		name := o.GetLabels()[hicachev1alpha1.LabelDeployment]
		if name == "" {
			return
		}
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}
		if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(w.priority), After: w.after}, req)
			return
		}
		if w.after > 0 {
			q.AddAfter(req, w.after)
			return
		}
		q.Add(req)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object, podWakeOf(nil, nil, nil, 0))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, okOld := e.ObjectOld.(*corev1.Pod)
			cur, okCur := e.ObjectNew.(*corev1.Pod)
			if !okOld || !okCur {
				add(q, e.ObjectNew, podWake{})
				return
			}
			if !podUpdateMatters(old, cur) {
				return
			}
			if old.Labels[hicachev1alpha1.LabelDeployment] != cur.Labels[hicachev1alpha1.LabelDeployment] {
				add(q, old, podWake{})
				add(q, cur, podWake{})
				return
			}
			w := podWake{}
			if becameReady(old, cur) {
				if pods, size, ok := groupPodsOf(ctx, c, cur); ok {
					w = podWakeOf(old, cur, pods, size)
				} else {
					w = podWake{priority: readyPriority}
				}
			}
			add(q, cur, w)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object, podWake{})
		},
	}
}

// childChanged lets through the events of a deployment's children that may need it to act: a
// child deleted (it is made again), or changed by someone (it is restored); not their creation,
// which the reconcile that wrote them made, and for serving groups not their status.
func childChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*appsv1.StatefulSet)
			cur, okCur := e.ObjectNew.(*appsv1.StatefulSet)
			if okOld && okCur {
				return groupUpdateMatters(old, cur)
			}
			return true
		},
	}
}

// wakesWriter tells whether a change of deployment changed's claim on an L3 namespace may change
// the decision of another writer w of that namespace: only a writer of another layout may have to
// yield it or be freed, or one that waits (its layout is not current); writers of the same layout
// share the namespace whatever the other does.
func wakesWriter(changed, w *hicachev1alpha1.HiCacheDeployment) bool {
	if w.UID == changed.UID {
		return false
	}
	a, b := changed.Status.Cache, w.Status.Cache
	if a == nil || b == nil || a.LayoutHash != b.LayoutHash {
		return true
	}
	return !meta.IsStatusConditionTrue(w.Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
}
