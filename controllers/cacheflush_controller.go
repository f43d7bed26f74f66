package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// CacheFlushReconciler runs flushes of a backend, one at a time, and verifies them.
type CacheFlushReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Options  Options
	Admin    StoreAdmin
	Flusher  NamespaceFlusher
	Clock    clock.PassiveClock

	// running holds one lock per backend: flushes of different backends run side by side (a
	// slow or unreachable store never holds up another), flushes of one backend one at a time.
	running sync.Map // namespace/backend → *sync.Mutex
}

// lockBackend takes the backend's lock if it is free.
func (r *CacheFlushReconciler) lockBackend(cf *hicachev1alpha1.CacheFlush) (unlock func(), ok bool) {
	m, _ := r.running.LoadOrStore(cf.Namespace+"/"+cf.Spec.BackendRef.Name, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	if !mu.TryLock() {
		return nil, false
	}
	return mu.Unlock, true
}

// +kubebuilder:rbac:groups=hicache.io,resources=cacheflushes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=hicache.io,resources=cacheflushes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	flushBackendIndex = "flush.spec.backendRef.name"
	// maxFlushAttempts bounds the retries of a flush that runs but leaves keys behind.
	maxFlushAttempts  = 2
	flushWaitInterval = 5 * time.Second
)

var errTenantsDisabled = errors.New("the backend is not multi-tenant")

// finished tells whether a flush has reached an end: Complete, or Failed for good.
func finished(cf *hicachev1alpha1.CacheFlush) bool {
	if meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete) {
		return true
	}
	c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed)
	return c != nil && c.Status == metav1.ConditionTrue && (c.Reason == hicachev1alpha1.ReasonKeysLeft || c.Reason == hicachev1alpha1.ReasonInvalidScope)
}

// Reconcile runs one CacheFlush when its turn comes and nothing uses what it would remove.
func (r *CacheFlushReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cf hicachev1alpha1.CacheFlush
	if err := r.Get(ctx, req.NamespacedName, &cf); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cf.DeletionTimestamp.IsZero() || finished(&cf) {
		return ctrl.Result{}, nil
	}
	unlock, ok := r.lockBackend(&cf)
	if !ok {
		// Another flush of this backend is being worked on right now.
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	defer unlock()
	orig := cf.DeepCopy()
	now := metav1.NewTime(r.Clock.Now())
	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&cf.Status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: cf.Generation, LastTransitionTime: now})
	}
	cf.Status.ObservedGeneration = cf.Generation
	result, err := r.run(ctx, &cf, set, now)
	if !equality.Semantic.DeepEqual(orig.Status, cf.Status) {
		patch := client.MergeFrom(orig)
		if perr := r.Status().Patch(ctx, &cf, patch); perr != nil {
			return ctrl.Result{}, errors.Join(err, perr)
		}
	}
	return result, err
}

// run is the flush's phases: wait for its turn, the backend and the namespace to be free; execute;
// verify; record.
func (r *CacheFlushReconciler) run(ctx context.Context, cf *hicachev1alpha1.CacheFlush, set func(string, bool, string, string), now metav1.Time) (ctrl.Result, error) {
	// 1. One flush at a time per backend: the oldest unfinished goes first.
	first, err := r.firstInLine(ctx, cf)
	if err != nil {
		return ctrl.Result{}, err
	}
	if first != cf.Name {
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForTurn,
			fmt.Sprintf("Waiting for CacheFlush %s of the same backend to finish", first))
		return ctrl.Result{}, nil // the other flush's completion wakes this one
	}

	// 2. The backend and where it answers.
	var cb hicachev1alpha1.CacheBackend
	if err := r.Get(ctx, client.ObjectKey{Namespace: cf.Namespace, Name: cf.Spec.BackendRef.Name}, &cb); err != nil {
		if apierrors.IsNotFound(err) {
			set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForBackend,
				fmt.Sprintf("CacheBackend %q does not exist", cf.Spec.BackendRef.Name))
			return ctrl.Result{RequeueAfter: flushWaitInterval}, nil
		}
		return ctrl.Result{}, err
	}
	ep := cb.Status.Endpoints
	if ep == nil || ep.AdminURL == "" {
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForBackend,
			fmt.Sprintf("CacheBackend %q has no endpoints yet", cb.Name))
		return ctrl.Result{RequeueAfter: flushWaitInterval}, nil
	}

	// 3. Safety, checked right before executing: nothing may still use the namespace.
	if cf.Spec.Scope == hicachev1alpha1.FlushScopeNamespace {
		if user, err := r.namespaceUser(ctx, cf); err != nil {
			return ctrl.Result{}, err
		} else if user != "" {
			set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonNamespaceInUse,
				fmt.Sprintf("Namespace %s is still used by %s; the flush runs once nothing uses it", cf.Spec.Namespace, user))
			return ctrl.Result{RequeueAfter: flushWaitInterval}, nil
		}
	}

	// 4. Execute.
	force := cf.Spec.Force == nil || *cf.Spec.Force
	if cf.Status.StartTime == nil {
		cf.Status.StartTime = &now
	}
	// A new attempt starts unless one is still running (a Job that has not finished): an
	// attempt runs from here until it fails or its result is recorded.
	running := false
	if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete); c != nil && c.Reason == hicachev1alpha1.ReasonRunning {
		running = !meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionFailed)
	}
	if !running {
		cf.Status.Attempts++
		if meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed) != nil {
			set(hicachev1alpha1.ConditionFailed, false, hicachev1alpha1.ReasonRunning, fmt.Sprintf("Attempt %d is running", cf.Status.Attempts))
		}
	}
	set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonRunning, fmt.Sprintf("Attempt %d is running", cf.Status.Attempts))
	removed, done, execErr := r.execute(ctx, cf, &cb, *ep, force)
	if errors.Is(execErr, errTenantsDisabled) {
		msg := fmt.Sprintf("CacheBackend %s is not multi-tenant: its master ignores a tenant and would remove every object, so a Tenant flush is refused; use scope Namespace or All", cb.Name)
		set(hicachev1alpha1.ConditionFailed, true, hicachev1alpha1.ReasonInvalidScope, msg)
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonInvalidScope, msg)
		r.Recorder.Eventf(cf, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonInvalidScope, "Flush", "%s", msg)
		return ctrl.Result{}, nil
	}
	if execErr != nil {
		set(hicachev1alpha1.ConditionFailed, true, hicachev1alpha1.ReasonBackendUnreachable,
			fmt.Sprintf("Attempt %d failed and is retried: %v", cf.Status.Attempts, execErr))
		r.Recorder.Eventf(cf, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonBackendUnreachable, "Flush", "Attempt %d failed: %v", cf.Status.Attempts, execErr)
		return ctrl.Result{}, fmt.Errorf("flushing %s: %w", cf.Name, execErr)
	}
	if !done {
		return ctrl.Result{RequeueAfter: flushWaitInterval}, nil
	}
	cf.Status.Removed += removed

	// 5. Verify: list what is left of the scope.
	left, err := r.Admin.CountKeys(ctx, ep.AdminURL, scopePrefix(cf))
	if err != nil {
		set(hicachev1alpha1.ConditionFailed, true, hicachev1alpha1.ReasonBackendUnreachable,
			fmt.Sprintf("The flush ran but its result could not be verified: %v", err))
		return ctrl.Result{}, err
	}
	cf.Status.KeysLeft = left
	if left > 0 && force && cf.Spec.Scope != hicachev1alpha1.FlushScopeTenant {
		if cf.Status.Attempts < maxFlushAttempts {
			set(hicachev1alpha1.ConditionFailed, true, hicachev1alpha1.ReasonKeysLeft+"Retrying",
				fmt.Sprintf("%d objects of the scope are left after attempt %d; retrying once", left, cf.Status.Attempts))
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		msg := fmt.Sprintf("%d objects of the scope are still there after %d forced attempts; something still writes them (check for serving pods outside this operator using the namespace)", left, cf.Status.Attempts)
		set(hicachev1alpha1.ConditionFailed, true, hicachev1alpha1.ReasonKeysLeft, msg)
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonKeysLeft, msg)
		r.Recorder.Eventf(cf, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonKeysLeft, "Verify", "%s", msg)
		return ctrl.Result{}, nil
	}

	// 6. Record.
	cf.Status.CompletionTime = &now
	msg := fmt.Sprintf("Removed %d objects (%s); %d left", cf.Status.Removed, describeScope(cf), left)
	set(hicachev1alpha1.ConditionComplete, true, hicachev1alpha1.ReasonFlushed, msg)
	set(hicachev1alpha1.ConditionFailed, false, hicachev1alpha1.ReasonFlushed, "The flush completed")
	r.Recorder.Eventf(cf, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonFlushed, "Flush", "%s", msg)
	return ctrl.Result{}, nil
}

// execute runs the flush by the path its scope and backend call for.
func (r *CacheFlushReconciler) execute(ctx context.Context, cf *hicachev1alpha1.CacheFlush, cb *hicachev1alpha1.CacheBackend, ep hicachev1alpha1.BackendEndpoints, force bool) (int64, bool, error) {
	switch cf.Spec.Scope {
	case hicachev1alpha1.FlushScopeAll:
		cf.Status.Method = "AdminAPI"
		n, err := r.Admin.RemoveAll(ctx, ep.AdminURL, force, "")
		return n, err == nil, err
	case hicachev1alpha1.FlushScopeTenant:
		cf.Status.Method = "AdminAPI"
		if cb.Spec.Mooncake == nil || !cb.Spec.Mooncake.MultiTenant {
			return 0, false, reconcile.TerminalError(errTenantsDisabled)
		}
		n, err := r.Admin.RemoveAll(ctx, ep.AdminURL, force, cf.Spec.Tenant)
		return n, err == nil, err
	default:
		cf.Status.Method = "Script"
		image := ""
		if cb.Spec.Mooncake != nil && cb.Spec.Mooncake.Managed != nil {
			image = cb.Spec.Mooncake.Managed.Image
		}
		if image == "" {
			image = r.Options.DefaultMooncakeImage
		}
		res, done, err := r.Flusher.FlushNamespace(ctx, NamespaceFlushRequest{
			Flush: cf, Backend: cb, Endpoints: ep, Prefix: cf.Spec.Namespace + "_", Force: force,
			Image: image, Attempt: cf.Status.Attempts,
		})
		return res.Removed, done, err
	}
}

// scopePrefix is the key prefix verification counts.
func scopePrefix(cf *hicachev1alpha1.CacheFlush) string {
	switch cf.Spec.Scope {
	case hicachev1alpha1.FlushScopeNamespace:
		return cf.Spec.Namespace + "_"
	case hicachev1alpha1.FlushScopeTenant:
		return cf.Spec.Tenant + "_"
	}
	return ""
}

func describeScope(cf *hicachev1alpha1.CacheFlush) string {
	switch cf.Spec.Scope {
	case hicachev1alpha1.FlushScopeNamespace:
		return "namespace " + cf.Spec.Namespace
	case hicachev1alpha1.FlushScopeTenant:
		return "tenant " + cf.Spec.Tenant
	}
	return "the whole store"
}

// firstInLine names the flush of the same backend that holds the backend: one with an attempt
// under way (started and not finished), else this one. Flushes that wait (for their namespace to
// be free, for the backend) hold nothing, so one that cannot run never blocks the others.
func (r *CacheFlushReconciler) firstInLine(ctx context.Context, cf *hicachev1alpha1.CacheFlush) (string, error) {
	var list hicachev1alpha1.CacheFlushList
	if err := r.List(ctx, &list, client.InNamespace(cf.Namespace), client.MatchingFields{flushBackendIndex: cf.Spec.BackendRef.Name}); err != nil {
		return "", err
	}
	var holders []*hicachev1alpha1.CacheFlush
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name == cf.Name || finished(o) || !o.DeletionTimestamp.IsZero() {
			continue
		}
		if c := meta.FindStatusCondition(o.Status.Conditions, hicachev1alpha1.ConditionComplete); c != nil && c.Reason == hicachev1alpha1.ReasonRunning {
			holders = append(holders, o)
		}
	}
	if len(holders) == 0 {
		return cf.Name, nil
	}
	sort.Slice(holders, func(i, j int) bool { return holders[i].Name < holders[j].Name })
	return holders[0].Name, nil
}

// namespaceUser names what still uses a flush's namespace: a serving pod labelled with it, or a
// HiCacheDeployment whose current layout writes it (other than the deployment that asked for
// this flush while its writers are stopped).
func (r *CacheFlushReconciler) namespaceUser(ctx context.Context, cf *hicachev1alpha1.CacheFlush) (string, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(cf.Namespace), client.MatchingLabels{
		LabelCacheNamespace: cf.Spec.Namespace, LabelBackend: cf.Spec.BackendRef.Name}); err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil || len(p.Finalizers) > 0 {
			return "pod " + p.Name, nil
		}
	}
	var hcds hicachev1alpha1.HiCacheDeploymentList
	if err := r.List(ctx, &hcds, client.InNamespace(cf.Namespace), client.MatchingFields{backendRefIndex: cf.Spec.BackendRef.Name}); err != nil {
		return "", err
	}
	owner := metav1.GetControllerOf(cf)
	for i := range hcds.Items {
		h := &hcds.Items[i]
		if owner != nil && owner.UID == h.UID {
			continue
		}
		if h.Status.Cache != nil && h.Status.Cache.Namespace == cf.Spec.Namespace {
			return "HiCacheDeployment " + h.Name, nil
		}
	}
	return "", nil
}

// SetupWithManager registers the controller.
func (r *CacheFlushReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Flusher == nil {
		r.Flusher = JobFlusher{Client: mgr.GetClient()}
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hicachev1alpha1.CacheFlush{}, flushBackendIndex,
		func(o client.Object) []string { return []string{o.(*hicachev1alpha1.CacheFlush).Spec.BackendRef.Name} }); err != nil {
		return err
	}
	// A flush that finishes lets the next of its backend go.
	sameBackend := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		cf := o.(*hicachev1alpha1.CacheFlush)
		var list hicachev1alpha1.CacheFlushList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(cf.Namespace), client.MatchingFields{flushBackendIndex: cf.Spec.BackendRef.Name}); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if !finished(&list.Items[i]) && list.Items[i].Name != cf.Name {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return reqs
	})
	// The spec is immutable: only a new flush bumps a generation. A flush's own status writes do
	// not wake it, so a failing attempt is retried with the controller's backoff rather than at
	// once; other flushes of its backend are woken by its changes.
	return ctrl.NewControllerManagedBy(mgr).
		For(&hicachev1alpha1.CacheFlush{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}).
		Watches(&hicachev1alpha1.CacheFlush{}, sameBackend).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("cacheflush").
		Complete(r)
}
