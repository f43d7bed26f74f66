package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// CacheFlushReconciler runs flushes of a backend, one at a time, and verifies them. What to do
// next is decided by planFlush (flush_plan.go); this file observes and executes.
type CacheFlushReconciler struct {
	client.Client
	// APIReader reads from the API server itself, past the cache: the check that no other
	// process claimed a flush of the same backend must see the latest claims.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Options   Options
	Admin     StoreAdmin
	Flusher   NamespaceFlusher
	Clock     clock.PassiveClock

	// running holds one lock per backend: flushes of different backends run side by side (a
	// slow or unreachable store never holds up another), flushes of one backend one at a time.
	// It only spares this process claims it would give back: across processes the durable
	// claims decide.
	running sync.Map // namespace/backend → *sync.Mutex
	// givenBack holds the last claim of each flush that this process gave back without running
	// its attempt, until it claims the flush again: a write of the flush by another process in
	// between refuses the give-back, and this process's cache may show the claim after the
	// give-back was stored. Either way the claim is given back (again), never recovered.
	givenBack sync.Map // namespace/name → givenBack
}

// givenBack is a claim given back, of the flush with UID.
type givenBack struct {
	UID   types.UID
	Claim *givenBackClaim
}

// givenBackOf is the last claim of cf this process gave back, if it has not claimed cf since.
func (r *CacheFlushReconciler) givenBackOf(cf *hicachev1alpha1.CacheFlush) *givenBackClaim {
	if v, ok := r.givenBack.Load(client.ObjectKeyFromObject(cf)); ok && v.(givenBack).UID == cf.UID {
		return v.(givenBack).Claim
	}
	return nil
}

// storeGiveBack writes the flush with its claim given back; a refused write leaves the claim to
// be given back again by the next look.
func (r *CacheFlushReconciler) storeGiveBack(ctx context.Context, w *flushStatusWriter) (ctrl.Result, error) {
	if err := w.write(ctx); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: time.Second + time.Duration(rand.Int64N(int64(2*time.Second)))}, nil //nolint:gosec // a jitter, not a secret
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
	flushWaitInterval = 5 * time.Second
	// annotationAttempt is the attempt a flush Job runs.
	annotationAttempt = "hicache.io/attempt"
)

// finished tells whether a flush has reached an end: Complete, or Failed for good.
func finished(cf *hicachev1alpha1.CacheFlush) bool {
	if meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete) {
		return true
	}
	c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed)
	if c == nil || c.Status != metav1.ConditionTrue {
		return false
	}
	switch c.Reason {
	case hicachev1alpha1.ReasonKeysLeft, hicachev1alpha1.ReasonInvalidScope, hicachev1alpha1.ReasonAttemptsExhausted:
		return true
	}
	return false
}

// flushStatusWriter writes a flush's status with its resourceVersion: a write over a status
// that changed meanwhile (another process claimed or recorded the flush) is refused.
type flushStatusWriter struct {
	c    client.Client
	cf   *hicachev1alpha1.CacheFlush
	base *hicachev1alpha1.CacheFlush
}

// write stores the status if it changed.
func (w *flushStatusWriter) write(ctx context.Context) error {
	if equality.Semantic.DeepEqual(w.base.Status, w.cf.Status) {
		return nil
	}
	if err := w.c.Status().Patch(ctx, w.cf, client.MergeFromWithOptions(w.base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	w.base = w.cf.DeepCopy()
	return nil
}

// Reconcile takes one step of a CacheFlush: the one planFlush names.
func (r *CacheFlushReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cf hicachev1alpha1.CacheFlush
	if err := r.Get(ctx, req.NamespacedName, &cf); err != nil {
		if apierrors.IsNotFound(err) {
			r.givenBack.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cf.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if finished(&cf) {
		r.givenBack.Delete(req.NamespacedName)
		return ctrl.Result{}, r.cleanupJobs(ctx, &cf)
	}
	unlock, ok := r.lockBackend(&cf)
	if !ok {
		// Another flush of this backend is being worked on right now.
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	defer unlock()
	w := &flushStatusWriter{c: r.Client, cf: &cf, base: cf.DeepCopy()}
	cf.Status.ObservedGeneration = cf.Generation
	result, err := r.run(ctx, w)
	if perr := w.write(ctx); perr != nil {
		if apierrors.IsConflict(perr) && err == nil {
			// Someone else wrote the flush meanwhile: look again at what it says now.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, errors.Join(err, perr)
	}
	return result, err
}

func (r *CacheFlushReconciler) policy() flushPolicy { return r.Options.flushPolicy() }

func (r *CacheFlushReconciler) event(cf *hicachev1alpha1.CacheFlush, ev flushEvent) {
	if ev.Reason != "" {
		r.Recorder.Eventf(cf, nil, ev.Type, ev.Reason, ev.Action, "%s", ev.Message)
	}
}

// requeueAt looks again at t, or after flushWaitInterval if t has passed.
func (r *CacheFlushReconciler) requeueAt(t time.Time) ctrl.Result {
	d := t.Sub(r.Clock.Now())
	if d <= 0 {
		d = time.Second
	}
	return ctrl.Result{RequeueAfter: d}
}

// run observes the flush, plans its next step and takes it.
func (r *CacheFlushReconciler) run(ctx context.Context, w *flushStatusWriter) (ctrl.Result, error) {
	cf := w.cf
	now := r.Clock.Now()
	jobs, err := r.attemptJobs(ctx, cf)
	if err != nil {
		return ctrl.Result{}, err
	}
	var others hicachev1alpha1.CacheFlushList
	if err := r.List(ctx, &others, client.InNamespace(cf.Namespace), client.MatchingFields{flushBackendIndex: cf.Spec.BackendRef.Name}); err != nil {
		return ctrl.Result{}, err
	}
	p := r.policy()
	plan := planFlush(flushObservation{
		Status: &cf.Status, Finished: finished(cf), Identity: r.Options.Identity, Now: now,
		Jobs: jobs, Turn: turnOf(cf.Name, others.Items, now), Policy: p, GivenBack: r.givenBackOf(cf),
	})
	switch plan.Step {
	case stepDone:
		return ctrl.Result{}, nil
	case stepWaitClaim:
		setFlushCondition(cf, hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonClaimedElsewhere,
			fmt.Sprintf("Attempt %d is run by %s; its claim lapses at %s", plan.Attempt, plan.Holder, plan.Until.UTC().Format(time.RFC3339)), now)
		return r.requeueAt(plan.Until), nil
	case stepWaitTurn:
		setFlushCondition(cf, hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForTurn,
			fmt.Sprintf("Waiting for CacheFlush %s of the same backend to finish", plan.Holder), now)
		return r.requeueAt(plan.Until), nil // the other flush's changes wake this one sooner
	case stepWaitJob:
		return ctrl.Result{RequeueAfter: flushWaitInterval}, nil
	case stepBackoff:
		return r.requeueAt(plan.Until), nil
	case stepGiveUp:
		reason, msg := "", ""
		if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
			reason, msg = c.Reason, c.Message
		}
		r.event(cf, giveUp(cf, p, reason, msg, now))
		return ctrl.Result{}, nil
	case stepGiveBack:
		giveBack(cf, &r.givenBackOf(cf).Before, "", now)
		return r.storeGiveBack(ctx, w)
	case stepRecover:
		return r.recover(ctx, w, plan.Attempt)
	case stepPoll:
		return r.poll(ctx, w, plan.Attempt)
	}
	return r.start(ctx, w, plan.Attempt)
}

// backend reads the flush's CacheBackend and its endpoints; nil when the flush must wait for them.
func (r *CacheFlushReconciler) backend(ctx context.Context, cf *hicachev1alpha1.CacheFlush, now time.Time) (*hicachev1alpha1.CacheBackend, error) {
	var cb hicachev1alpha1.CacheBackend
	if err := r.Get(ctx, client.ObjectKey{Namespace: cf.Namespace, Name: cf.Spec.BackendRef.Name}, &cb); err != nil {
		if apierrors.IsNotFound(err) {
			setFlushCondition(cf, hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForBackend,
				fmt.Sprintf("CacheBackend %q does not exist", cf.Spec.BackendRef.Name), now)
			return nil, nil
		}
		return nil, err
	}
	if ep := cb.Status.Endpoints; ep == nil || ep.AdminURL == "" {
		setFlushCondition(cf, hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForBackend,
			fmt.Sprintf("CacheBackend %q has no endpoints yet", cb.Name), now)
		return nil, nil
	}
	return &cb, nil
}

// countable tells whether the scope's objects can be counted (a tenant's cannot).
func countable(cf *hicachev1alpha1.CacheFlush) bool {
	return cf.Spec.Scope != hicachev1alpha1.FlushScopeTenant
}

// start runs the flush's phases for attempt n: the backend and where it answers; safety; count
// what the scope holds; claim; execute; verify; record.
func (r *CacheFlushReconciler) start(ctx context.Context, w *flushStatusWriter, n int32) (ctrl.Result, error) {
	cf := w.cf
	now := r.Clock.Now()
	p := r.policy()

	// 2. The backend and where it answers.
	cb, err := r.backend(ctx, cf, now)
	if err != nil || cb == nil {
		return ctrl.Result{RequeueAfter: flushWaitInterval}, err
	}
	ep := *cb.Status.Endpoints

	// 3. Safety, checked right before executing: nothing may still use what the flush removes.
	if held, err := r.checkInUse(ctx, cf, cb, now); err != nil {
		return ctrl.Result{}, err
	} else if held {
		return ctrl.Result{RequeueAfter: flushWaitInterval}, nil
	}

	// 4. What the scope holds right before the attempt: the claim keeps it, so that whoever
	// records the attempt knows what it removed even if its process stops.
	actx, cancel := context.WithTimeout(ctx, p.AttemptTimeout)
	defer cancel()
	var before *int64
	if countable(cf) {
		k, err := r.Admin.CountKeys(actx, ep.AdminURL, scopePrefix(cf))
		if err != nil {
			cf.Status.Attempts = n
			r.event(cf, failAttempt(cf, p, n, hicachev1alpha1.ReasonBackendUnreachable,
				fmt.Sprintf("Attempt %d failed: counting the objects of the %s before flushing: %v", n, describeScope(cf), attemptErr(actx, err, p)), now))
			return r.requeueAt(r.Clock.Now().Add(p.backoff(n))), nil
		}
		before = &k
	}

	// 5. Claim, with the resourceVersion: a conflict means another process claimed it.
	unclaimed := cf.Status.DeepCopy()
	started := startAttempt(cf, p, r.Options.Identity, r.method(cf), n, before, now)
	if err := w.write(ctx); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	// One flush of a backend at a time, across processes too: another process may have claimed
	// another flush of this backend at the same moment. Both claims are stored before either
	// reads the other, so at least one of the two sees the other and gives its claim back.
	// A claim given back is remembered until its give-back is stored: this process's claim of an
	// attempt that never ran must not be taken for an interrupted one (counted, or its Job
	// created) by the next look.
	r.givenBack.Delete(client.ObjectKeyFromObject(cf)) // the claim given back earlier is gone
	if other, err := r.claimedElsewhere(ctx, cf, now); err != nil || other != "" {
		r.givenBack.Store(client.ObjectKeyFromObject(cf), givenBack{UID: cf.UID,
			Claim: &givenBackClaim{Claim: *cf.Status.Claim.DeepCopy(), Before: *unclaimed}})
		if err != nil {
			return ctrl.Result{}, err // the next look gives the claim back
		}
		giveBack(cf, unclaimed, other, now)
		return r.storeGiveBack(ctx, w)
	}

	// 6. Execute.
	r.event(cf, started)
	out, done := r.execute(actx, cf, cb, ep, n)
	if !done {
		return ctrl.Result{RequeueAfter: flushWaitInterval}, nil // the Job's changes wake it sooner
	}
	return r.verifyAndRecord(ctx, w, n, ep, out)
}

// verifyAndRecord counts what is left of the scope after an attempt that ran, and records the
// attempt.
func (r *CacheFlushReconciler) verifyAndRecord(ctx context.Context, w *flushStatusWriter, n int32, ep hicachev1alpha1.BackendEndpoints, out attemptOutcome) (ctrl.Result, error) {
	cf := w.cf
	p := r.policy()
	if out.Err == nil && countable(cf) {
		left, err := r.Admin.CountKeys(ctx, ep.AdminURL, scopePrefix(cf))
		if err != nil {
			out.Err, out.Reason = fmt.Errorf("the flush ran (%d objects removed) but what is left could not be counted: %w", out.Removed, err), hicachev1alpha1.ReasonBackendUnreachable
		} else {
			out.Left = &left
		}
	}
	force := cf.Spec.Force == nil || *cf.Spec.Force
	now := r.Clock.Now()
	r.event(cf, recordAttempt(cf, p, n, out, force, now))
	if err := w.write(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.cleanupJobs(ctx, cf); err != nil {
		return ctrl.Result{}, err
	}
	if cf.Status.NextAttemptTime != nil {
		return r.requeueAt(cf.Status.NextAttemptTime.Time), nil
	}
	return ctrl.Result{}, nil
}

// poll checks on the Job of attempt n, creating it if it is missing, and records the attempt
// when the Job ended.
func (r *CacheFlushReconciler) poll(ctx context.Context, w *flushStatusWriter, n int32) (ctrl.Result, error) {
	cf := w.cf
	cb, err := r.backend(ctx, cf, r.Clock.Now())
	if err != nil || cb == nil {
		return ctrl.Result{RequeueAfter: flushWaitInterval}, err
	}
	ep := *cb.Status.Endpoints
	out, done := r.execute(ctx, cf, cb, ep, n)
	if !done {
		return ctrl.Result{RequeueAfter: flushWaitInterval}, nil
	}
	return r.verifyAndRecord(ctx, w, n, ep, out)
}

// recover accounts for attempt n, whose process stopped before recording it.
func (r *CacheFlushReconciler) recover(ctx context.Context, w *flushStatusWriter, n int32) (ctrl.Result, error) {
	cf := w.cf
	var keysNow *int64
	if countable(cf) {
		cb, err := r.backend(ctx, cf, r.Clock.Now())
		if err != nil || cb == nil {
			return ctrl.Result{RequeueAfter: flushWaitInterval}, err
		}
		k, err := r.Admin.CountKeys(ctx, cb.Status.Endpoints.AdminURL, scopePrefix(cf))
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("counting the objects of the %s left by interrupted attempt %d: %w", describeScope(cf), n, err)
		}
		keysNow = &k
	}
	// The Event follows the stored record: a refused write (a view of the flush already out of
	// date) recovered nothing.
	ev := recoverAttempt(cf, r.policy(), n, keysNow, r.Clock.Now())
	if err := w.write(ctx); err != nil {
		return ctrl.Result{}, err
	}
	r.event(cf, ev)
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// claimedElsewhere names another flush of the same backend with an attempt under way, as the
// API server has it now.
func (r *CacheFlushReconciler) claimedElsewhere(ctx context.Context, cf *hicachev1alpha1.CacheFlush, now time.Time) (string, error) {
	var list hicachev1alpha1.CacheFlushList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(cf.Namespace)); err != nil {
		return "", err
	}
	same := list.Items[:0]
	for _, o := range list.Items {
		if o.Spec.BackendRef.Name == cf.Spec.BackendRef.Name {
			same = append(same, o)
		}
	}
	if t := turnOf(cf.Name, same, now); t != nil {
		return t.Flush, nil
	}
	return "", nil
}

// method is how a flush runs.
func (r *CacheFlushReconciler) method(cf *hicachev1alpha1.CacheFlush) string {
	if cf.Spec.Scope != hicachev1alpha1.FlushScopeNamespace {
		return hicachev1alpha1.MethodAdminAPI
	}
	return r.Flusher.Method(cf)
}

// attemptErr names a deadline an attempt ran into.
func attemptErr(actx context.Context, err error, p flushPolicy) error {
	if errors.Is(actx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: it did not finish within %s and was stopped (%v)", errAttemptTimedOut, p.AttemptTimeout, err)
	}
	return err
}

// execute runs attempt n by the path its scope and backend call for; done is false while its
// Job runs.
func (r *CacheFlushReconciler) execute(ctx context.Context, cf *hicachev1alpha1.CacheFlush, cb *hicachev1alpha1.CacheBackend, ep hicachev1alpha1.BackendEndpoints, n int32) (attemptOutcome, bool) {
	force := cf.Spec.Force == nil || *cf.Spec.Force
	p := r.policy()
	fail := func(err error, reason string) (attemptOutcome, bool) {
		if err = attemptErr(ctx, err, p); errors.Is(err, errAttemptTimedOut) {
			reason = hicachev1alpha1.ReasonAttemptTimedOut
		}
		return attemptOutcome{Err: err, Reason: reason}, true
	}
	switch cf.Spec.Scope {
	case hicachev1alpha1.FlushScopeAll, hicachev1alpha1.FlushScopeTenant:
		tenant := ""
		if cf.Spec.Scope == hicachev1alpha1.FlushScopeTenant {
			if cb.Spec.Mooncake == nil || !cb.Spec.Mooncake.MultiTenant {
				return attemptOutcome{Final: true, Reason: hicachev1alpha1.ReasonInvalidScope, Err: fmt.Errorf(
					"CacheBackend %s is not multi-tenant: its master ignores a tenant and would remove every object, so a Tenant flush is refused; use scope Namespace or All", cb.Name)}, true
			}
			tenant = cf.Spec.Tenant
		}
		k, err := r.Admin.RemoveAll(ctx, ep.AdminURL, force, tenant)
		if err != nil {
			return fail(err, hicachev1alpha1.ReasonBackendUnreachable)
		}
		return attemptOutcome{Removed: k}, true
	}
	image := ""
	if cb.Spec.Mooncake != nil && cb.Spec.Mooncake.Managed != nil {
		image = cb.Spec.Mooncake.Managed.Image
	}
	if image == "" {
		image = r.Options.DefaultMooncakeImage
	}
	res, done, err := r.Flusher.FlushNamespace(ctx, NamespaceFlushRequest{
		Flush: cf, Backend: cb, Endpoints: ep, Prefix: cf.Spec.Namespace + "_", Force: force,
		Image: image, Attempt: n, Deadline: p.AttemptTimeout,
	})
	if err != nil {
		reason := hicachev1alpha1.ReasonBackendUnreachable
		if cf.Status.Method == hicachev1alpha1.MethodJob {
			reason = hicachev1alpha1.ReasonJobFailed
		}
		return fail(err, reason)
	}
	return attemptOutcome{Removed: res.Removed}, done
}

// attemptJobs lists the flush's attempt Jobs.
func (r *CacheFlushReconciler) attemptJobs(ctx context.Context, cf *hicachev1alpha1.CacheFlush) ([]attemptJob, error) {
	var list batchv1.JobList
	if err := r.List(ctx, &list, client.InNamespace(cf.Namespace), client.MatchingLabels{"app.kubernetes.io/name": "mooncake-flush"}); err != nil {
		return nil, err
	}
	var jobs []attemptJob
	for i := range list.Items {
		j := &list.Items[i]
		if o := metav1.GetControllerOf(j); o == nil || o.UID != cf.UID || !j.DeletionTimestamp.IsZero() {
			continue
		}
		n, _ := strconv.Atoi(j.Annotations[annotationAttempt])
		jobs = append(jobs, attemptJob{Name: j.Name, Attempt: int32(n), Finished: jobFinished(j)}) //nolint:gosec // attempts are small
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].Attempt < jobs[b].Attempt })
	return jobs, nil
}

// cleanupJobs deletes the Jobs of attempts whose result is recorded. The last one stays while
// the flush is unfinished or Failed, for its logs; none stays once the flush is Complete.
func (r *CacheFlushReconciler) cleanupJobs(ctx context.Context, cf *hicachev1alpha1.CacheFlush) error {
	jobs, err := r.attemptJobs(ctx, cf)
	if err != nil {
		return err
	}
	var claimed int32
	if cf.Status.Claim != nil {
		claimed = cf.Status.Claim.Attempt
	}
	done := meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete)
	for i, j := range jobs {
		last := i == len(jobs)-1
		if !j.Finished || j.Attempt == claimed || last && !done {
			continue
		}
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: cf.Namespace}}
		if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func jobFinished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return true
		}
	}
	return false
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

// AnnotationDrainedFor marks a flush asked for by a deployment that stopped its writers to flush
// its Fixed namespace: the UID of that deployment, whose status claim on the namespace does not
// count as a use while it drains (its pods do).
const AnnotationDrainedFor = "hicache.io/drained-for"

// checkInUse holds a flush while any deployment of the store uses its scope, unless
// spec.allowInUse overrides it (admission lets only holders of the override verb set it).
func (r *CacheFlushReconciler) checkInUse(ctx context.Context, cf *hicachev1alpha1.CacheFlush, cb *hicachev1alpha1.CacheBackend, now time.Time) (bool, error) {
	scope := storeScope{store: storeIDOf(cb), draining: types.UID(cf.Annotations[AnnotationDrainedFor])}
	if cf.Spec.Scope == hicachev1alpha1.FlushScopeNamespace {
		scope.namespace = cf.Spec.Namespace
	}
	use, err := storeUsers(ctx, r.Client, scope)
	if err != nil {
		return false, err
	}
	if !use.inUse() {
		return false, nil
	}
	what := describeScope(cf)
	if cf.Spec.AllowInUse {
		if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete); c == nil || c.Reason != hicachev1alpha1.ReasonRunning {
			r.Recorder.Eventf(cf, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonInUse, "Flush",
				"spec.allowInUse is set: flushing %s although %s uses it; their cache starts cold", what, use.describe(cf.Namespace))
		}
		return false, nil
	}
	msg := truncate(fmt.Sprintf("%s is in use by %s; the flush runs once nothing uses it (spec.allowInUse overrides this, for holders of the override verb)",
		inUseSubject(cf, scope.store), use.describe(cf.Namespace)), 1024)
	if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete); c == nil || c.Reason != hicachev1alpha1.ReasonInUse {
		r.Recorder.Eventf(cf, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonInUse, "Flush", "%s", msg)
	}
	setFlushCondition(cf, hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonInUse, msg, now)
	return true, nil
}

// inUseSubject names what a held flush would remove, for its condition.
func inUseSubject(cf *hicachev1alpha1.CacheFlush, id string) string {
	switch cf.Spec.Scope {
	case hicachev1alpha1.FlushScopeNamespace:
		return fmt.Sprintf("Namespace %s of store %s", cf.Spec.Namespace, id)
	case hicachev1alpha1.FlushScopeTenant:
		return fmt.Sprintf("Store %s (tenant %s; which tenant a deployment writes is not known, so every writer counts)", id, cf.Spec.Tenant)
	}
	return fmt.Sprintf("Store %s", id)
}

// SetupWithManager registers the controller.
func (r *CacheFlushReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Flusher == nil {
		r.Flusher = JobFlusher{Client: mgr.GetClient()}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Options.Identity == "" {
		r.Options.Identity = DefaultIdentity()
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
	// not wake it: each step says when to look again (the next attempt at status.nextAttemptTime,
	// a claim at its expiry), its Jobs wake it when they change, and the other flushes of its
	// backend are woken by its changes.
	return ctrl.NewControllerManagedBy(mgr).
		For(&hicachev1alpha1.CacheFlush{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}).
		Watches(&hicachev1alpha1.CacheFlush{}, sameBackend).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("cacheflush").
		Complete(r)
}
