package cacheflush

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	recon "github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// CacheFlushReconciler runs flushes of a backend, one at a time, and verifies them. What to do
// next is decided by planFlush (flush_plan.go); this file observes and executes.
type CacheFlushReconciler struct {
	client.Client
	// APIReader reads from the API server itself, past the cache: the check that no other
	// process claimed a flush of the same backend must see the latest claims.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Options   storeuse.Options

	// override caches whether the admission policy of spec.allowInUse is bound.
	override overridePolicy
	Admin    storeuse.StoreAdmin
	Flusher  storeuse.NamespaceFlusher
	Clock    clock.PassiveClock

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
	// writes remembers this reconciler's status writes until its cache holds them.
	writes *recon.StatusWrites
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

// lockBackend takes the backend's lock if it is free.
func (r *CacheFlushReconciler) lockBackend(cf *hicachev1alpha1.CacheFlush) (unlock func(), ok bool) {
	m, _ := r.running.LoadOrStore(cf.Namespace+"/"+cf.Spec.BackendRef.Name, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	if !mu.TryLock() {
		return nil, false
	}
	return mu.Unlock, true
}

// +kubebuilder:rbac:groups=hicache.io,resources=cacheflushes,verbs=get;list;watch
// +kubebuilder:rbac:groups=hicache.io,resources=cacheflushes/status,verbs=patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	flushBackendIndex = "flush.spec.backendRef.name"
	flushWaitInterval = 5 * time.Second
)

// flushObs is what one reconcile of a CacheFlush observed and did.
type flushObs struct {
	policy flushPolicy
	// plan is the step planFlush chose.
	plan flushPlan
	// backend and ep are the flush's CacheBackend and its endpoints, once read.
	backend *hicachev1alpha1.CacheBackend
	ep      hicachev1alpha1.BackendEndpoints
	// attempt bounds a started attempt by its deadline, from counting the scope to its result;
	// cancel releases it.
	attempt context.Context
	cancel  context.CancelFunc
	// keysBefore is what the scope held right before the attempt (nil: not counted).
	keysBefore *int64
	// view is the masters' leader view right before the attempt (0: a master without HA).
	view int64
	// started is the Event of the attempt's start, emitted once its claim stands.
	started flushEvent
	// out is what the attempt did, once it ran.
	out attemptOutcome
}

// flushScope is one reconcile of a CacheFlush.
type flushScope = recon.Scope[*hicachev1alpha1.CacheFlush, *flushObs]

// Reconcile takes one step of a CacheFlush: the one planFlush names.
func (r *CacheFlushReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cf hicachev1alpha1.CacheFlush
	if ok, err := recon.Load(ctx, r.Client, r.writes, req, &cf, func() { r.givenBack.Delete(req.NamespacedName) }); !ok {
		return ctrl.Result{}, err
	}
	if storeuse.Finished(&cf) {
		r.givenBack.Delete(req.NamespacedName)
		return ctrl.Result{}, r.cleanupJobs(ctx, &cf)
	}
	unlock, ok := r.lockBackend(&cf)
	if !ok {
		// Another flush of this backend is being worked on right now.
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	defer unlock()
	// Every status write carries the resourceVersion it read: a write over a status another
	// process changed meanwhile (it claimed or recorded the flush) is refused.
	s := recon.NewScope(r.Client, r.writes, &cf, &flushObs{policy: r.policy()}, r.Clock.Now())
	s.OptimisticLock = true
	defer s.Obs.release()
	cf.Status.ObservedGeneration = cf.Generation
	// The planner's functions write the status as they decide; the skeleton stores it once at
	// the end, and the claim and the record of an attempt are stored by their phases first.
	return recon.KindSteps[*hicachev1alpha1.CacheFlush, *flushObs]{
		Phases: []recon.Phase[*flushScope]{
			{Name: "plan", Run: r.plan},
			{Name: "take the step", Run: r.takeStep},
		},
	}.Run(ctx, s)
}

// release ends the attempt's deadline.
func (o *flushObs) release() {
	if o.cancel != nil {
		o.cancel()
	}
}

// plan observes the flush's attempt Jobs and the other flushes of its backend, and plans the next
// step.
func (r *CacheFlushReconciler) plan(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf := s.Obj
	jobs, err := r.attemptJobs(ctx, cf)
	if err != nil {
		return recon.Proceed, err
	}
	var others hicachev1alpha1.CacheFlushList
	if err := r.List(ctx, &others, client.InNamespace(cf.Namespace), client.MatchingFields{flushBackendIndex: cf.Spec.BackendRef.Name}); err != nil {
		return recon.Proceed, fmt.Errorf("listing the flushes of CacheBackend %s: %w", cf.Spec.BackendRef.Name, err)
	}
	s.Obs.plan = planFlush(flushObservation{
		Status: &cf.Status, Finished: storeuse.Finished(cf), Identity: r.Options.Identity, Now: s.Now,
		Jobs: jobs, Turn: turnOf(cf.Name, others.Items, s.Now), Policy: s.Obs.policy, GivenBack: r.givenBackOf(cf),
	})
	return recon.Proceed, nil
}

// takeStep takes the planned step: a wait, a give-up or a give-back here, the phases of an
// attempt (start, poll, recover) in their own list.
func (r *CacheFlushReconciler) takeStep(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf, plan := s.Obj, s.Obs.plan
	set := recon.ConditionsOf(&cf.Status.Conditions, cf.Generation, s.Now).Set
	switch plan.Step {
	case stepDone:
		return recon.StopFor(0), nil
	case stepWaitClaim:
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonClaimedElsewhere,
			fmt.Sprintf("Attempt %d is run by %s; its claim lapses at %s", plan.Attempt, plan.Holder, plan.Until.UTC().Format(time.RFC3339)))
		return recon.StopFor(r.until(plan.Until)), nil
	case stepWaitTurn:
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForTurn,
			fmt.Sprintf("Waiting for CacheFlush %s of the same backend to finish", plan.Holder))
		return recon.StopFor(r.until(plan.Until)), nil // the other flush's changes wake this one sooner
	case stepWaitJob:
		return recon.StopFor(flushWaitInterval), nil
	case stepBackoff:
		return recon.StopFor(r.until(plan.Until)), nil
	case stepGiveUp:
		reason, msg := "", ""
		if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
			reason, msg = c.Reason, c.Message
		}
		r.event(cf, giveUp(cf, s.Obs.policy, reason, msg, s.Now))
		return recon.StopFor(0), nil
	case stepGiveBack:
		giveBack(cf, &r.givenBackOf(cf).Before, "", s.Now)
		return recon.StopFor(giveBackWait()), nil
	}
	after, err := recon.RunPhases(ctx, s, r.attemptPhases(cf, plan.Step))
	return recon.StopFor(after), err
}

// attemptPhases are the phases of an attempt: starting it (the backend and where it answers;
// safety; what the scope holds; the claim; execute; verify and record), checking on its Job, or
// accounting for one whose process stopped.
func (r *CacheFlushReconciler) attemptPhases(cf *hicachev1alpha1.CacheFlush, st flushStep) []recon.Phase[*flushScope] {
	readBackend := recon.Phase[*flushScope]{Name: "read the backend", Run: r.readBackend}
	execute := recon.Phase[*flushScope]{Name: "execute the attempt", Run: r.executeAttempt}
	record := recon.Phase[*flushScope]{Name: "verify and record the attempt", Run: r.verifyAndRecord}
	switch st {
	case stepPoll:
		return []recon.Phase[*flushScope]{readBackend, execute, record}
	case stepRecover:
		recover := recon.Phase[*flushScope]{Name: "recover the interrupted attempt", Run: r.recoverAttempt}
		if !countable(cf) {
			return []recon.Phase[*flushScope]{recover}
		}
		return []recon.Phase[*flushScope]{readBackend, recover}
	case stepConfirm:
		return []recon.Phase[*flushScope]{readBackend, {Name: "confirm the removal with the leader", Run: r.confirmRemoval}}
	}
	return []recon.Phase[*flushScope]{
		readBackend,
		{Name: "check that nothing uses the scope", Run: r.checkInUse},
		{Name: "count the scope", Run: r.countBefore},
		{Name: "claim the attempt", Run: r.claim},
		execute,
		record,
	}
}

func (r *CacheFlushReconciler) policy() flushPolicy { return optionsPolicy(r.Options) }

func (r *CacheFlushReconciler) event(cf *hicachev1alpha1.CacheFlush, ev flushEvent) {
	if ev.Reason != "" {
		r.Recorder.Eventf(cf, nil, ev.Type, ev.Reason, ev.Action, "%s", ev.Message)
	}
}

// until is how long until t, or a second if t has passed.
func (r *CacheFlushReconciler) until(t time.Time) time.Duration {
	d := t.Sub(r.Clock.Now())
	if d <= 0 {
		d = time.Second
	}
	return d
}

// giveBackWait is when a flush that gave its claim back looks again: one to three seconds, so
// that two processes that gave back at once do not claim at once again.
func giveBackWait() time.Duration {
	return time.Second + time.Duration(rand.Int64N(int64(2*time.Second))) //nolint:gosec // a jitter, not a secret
}

// readBackend reads the flush's CacheBackend and its endpoints; the attempt waits while it has
// none.
func (r *CacheFlushReconciler) readBackend(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf := s.Obj
	set := recon.ConditionsOf(&cf.Status.Conditions, cf.Generation, s.Now).Set
	var cb hicachev1alpha1.CacheBackend
	if err := r.Get(ctx, client.ObjectKey{Namespace: cf.Namespace, Name: cf.Spec.BackendRef.Name}, &cb); err != nil {
		if apierrors.IsNotFound(err) {
			set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForBackend,
				fmt.Sprintf("CacheBackend %q does not exist", cf.Spec.BackendRef.Name))
			return recon.StopFor(flushWaitInterval), nil
		}
		return recon.Proceed, fmt.Errorf("reading CacheBackend %s: %w", cf.Spec.BackendRef.Name, err)
	}
	if c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionStoreAuthorized); c != nil && c.Status == metav1.ConditionFalse {
		// A refused backend publishes no endpoints: say why rather than that there are none.
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonStoreRefused,
			storeuse.Truncate(fmt.Sprintf("CacheBackend %q is refused, so the operator calls no admin URL of it: %s", cb.Name, c.Message), 1024))
		return recon.StopFor(flushWaitInterval), nil
	}
	if ep := cb.Status.Endpoints; ep == nil || ep.AdminURL == "" {
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForBackend,
			fmt.Sprintf("CacheBackend %q has no endpoints yet", cb.Name))
		return recon.StopFor(flushWaitInterval), nil
	}
	if a := r.Options.Authority(r.Client).Authorize(ctx, &cb, cb.Status.Endpoints.AdminURL); !a.Allowed {
		set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonStoreRefused,
			storeuse.Truncate(fmt.Sprintf("CacheBackend %q: the operator does not call its admin URL %s: %s", cb.Name, cb.Status.Endpoints.AdminURL, a.Message), 1024))
		return recon.StopFor(flushWaitInterval), nil
	}
	s.Obs.backend, s.Obs.ep = &cb, *cb.Status.Endpoints
	return recon.Proceed, nil
}

// countable tells whether the scope's objects can be counted (a tenant's cannot).
func countable(cf *hicachev1alpha1.CacheFlush) bool {
	return cf.Spec.Scope != hicachev1alpha1.FlushScopeTenant
}

// countBefore starts the attempt's deadline, asks the master which leader view it serves (the
// status keeps it: a flush on masters with HA confirms its removal with that leader), and counts
// what the scope holds right before the attempt: the claim keeps it, so that whoever records the
// attempt knows what it removed even if its process stops. A master that does not serve (a
// standby the backend's status still names, during a failover) runs no attempt: the flush waits.
func (r *CacheFlushReconciler) countBefore(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf, p, n := s.Obj, s.Obs.policy, s.Obs.plan.Attempt
	s.Obs.attempt, s.Obs.cancel = context.WithTimeout(ctx, p.AttemptTimeout)
	h, err := r.Admin.MasterHealth(s.Obs.attempt, s.Obs.ep.AdminURL)
	if err != nil {
		cf.Status.Attempts = n
		r.event(cf, failAttempt(cf, p, n, hicachev1alpha1.ReasonBackendUnreachable,
			fmt.Sprintf("Attempt %d failed: asking the master at %s whether it serves: %v", n, s.Obs.ep.AdminURL, attemptErr(s.Obs.attempt, err, p)), s.Now))
		return recon.StopFor(r.until(r.Clock.Now().Add(p.backoff(n)))), nil
	}
	if h.Role != hicachev1alpha1.MasterLeader {
		recon.ConditionsOf(&cf.Status.Conditions, cf.Generation, s.Now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonWaitingForBackend,
			fmt.Sprintf("The master at %s is %s, not the serving leader (the masters are electing one, or the backend's status has not followed the new leader yet); the flush runs once a leader serves there", s.Obs.ep.AdminURL, h.Role))
		return recon.StopFor(confirmPoll), nil
	}
	s.Obs.view = h.ViewVersion
	if !countable(cf) {
		return recon.Proceed, nil
	}
	k, err := r.Admin.CountKeys(s.Obs.attempt, s.Obs.ep.AdminURL, scopePrefix(cf))
	if err != nil {
		cf.Status.Attempts = n
		r.event(cf, failAttempt(cf, p, n, hicachev1alpha1.ReasonBackendUnreachable,
			fmt.Sprintf("Attempt %d failed: counting the objects of the %s before flushing: %v", n, describeScope(cf), attemptErr(s.Obs.attempt, err, p)), s.Now))
		return recon.StopFor(r.until(r.Clock.Now().Add(p.backoff(n)))), nil
	}
	s.Obs.keysBefore = &k
	return recon.Proceed, nil
}

// claim stores the claim of the attempt, with the resourceVersion: a conflict means another
// process claimed it. One flush of a backend runs at a time, across processes too: another
// process may have claimed another flush of this backend at the same moment. Both claims are
// stored before either reads the other, so at least one of the two sees the other and gives its
// claim back. A claim given back is remembered until its give-back is stored: this process's
// claim of an attempt that never ran must not be taken for an interrupted one (counted, or its
// Job created) by the next look.
func (r *CacheFlushReconciler) claim(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf, n := s.Obj, s.Obs.plan.Attempt
	unclaimed := cf.Status.DeepCopy()
	repeat := noteAttemptView(cf, s.Obs.view, n)
	s.Obs.started = startAttempt(cf, s.Obs.policy, r.Options.Identity, r.method(cf), n, s.Obs.keysBefore, s.Now)
	if err := s.WriteStatus(ctx); err != nil {
		if apierrors.IsConflict(err) {
			return recon.StopFor(time.Second), nil
		}
		return recon.Proceed, fmt.Errorf("claiming attempt %d: %w", n, err)
	}
	key := client.ObjectKeyFromObject(cf)
	r.givenBack.Delete(key) // the claim given back earlier is gone
	other, err := r.claimedElsewhere(ctx, cf, s.Now)
	if err != nil || other != "" {
		r.givenBack.Store(key, givenBack{UID: cf.UID,
			Claim: &givenBackClaim{Claim: *cf.Status.Claim.DeepCopy(), Before: *unclaimed}})
		if err != nil {
			return recon.Proceed, err // the next look gives the claim back
		}
		giveBack(cf, unclaimed, other, s.Now)
		return recon.StopFor(giveBackWait()), nil
	}
	r.event(cf, repeat)
	r.event(cf, s.Obs.started)
	return recon.Proceed, nil
}

// executeAttempt runs the attempt, or checks on its Job; the phases after it wait while the Job
// runs (its changes wake the flush sooner).
func (r *CacheFlushReconciler) executeAttempt(ctx context.Context, s *flushScope) (recon.Step, error) {
	if s.Obs.attempt != nil {
		ctx = s.Obs.attempt
	}
	out, done := r.execute(ctx, s.Obj, s.Obs.backend, s.Obs.ep, s.Obs.plan.Attempt)
	if !done {
		return recon.StopFor(flushWaitInterval), nil
	}
	s.Obs.out = out
	return recon.Proceed, nil
}

// verifyAndRecord counts what is left of the scope after an attempt that ran, and records the
// attempt; the Jobs of recorded attempts go once the record is stored.
func (r *CacheFlushReconciler) verifyAndRecord(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf, p, n, out := s.Obj, s.Obs.policy, s.Obs.plan.Attempt, s.Obs.out
	if ctx.Err() != nil {
		// The operator is stopping, not the attempt: its claim stays for whoever takes over, who
		// records it from its Job, or accounts for it as interrupted.
		return recon.StopFor(0), nil
	}
	if out.Err == nil && countable(cf) {
		left, err := r.Admin.CountKeys(ctx, s.Obs.ep.AdminURL, scopePrefix(cf))
		if err != nil {
			out.Err, out.Reason = fmt.Errorf("the flush ran (%d objects removed) but what is left could not be counted: %w", out.Removed, err), hicachev1alpha1.ReasonBackendUnreachable
		} else {
			out.Left = &left
		}
	}
	force := cf.Spec.Force == nil || *cf.Spec.Force
	// The Event follows the stored record.
	ev := recordAttempt(cf, p, n, out, force, r.Clock.Now())
	if err := s.WriteStatus(ctx); err != nil {
		return recon.Proceed, fmt.Errorf("recording attempt %d: %w", n, err)
	}
	r.event(cf, ev)
	if err := r.cleanupJobs(ctx, cf); err != nil {
		return recon.Proceed, err
	}
	if cf.Status.NextAttemptTime != nil {
		return recon.StopFor(r.until(cf.Status.NextAttemptTime.Time)), nil
	}
	if cf.Status.ConfirmAfter != nil {
		return recon.StopFor(r.until(cf.Status.ConfirmAfter.Time)), nil
	}
	return recon.StopFor(0), nil
}

// confirmRemoval confirms, with the leader the last attempt ran on, that its removal holds: the
// flush completes, runs again after a failover, or waits (planConfirm decides).
func (r *CacheFlushReconciler) confirmRemoval(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf, p := s.Obj, s.Obs.policy
	o := confirmObservation{View: cf.Status.ViewVersion, After: cf.Status.ConfirmAfter.Time, Now: s.Now, Countable: countable(cf)}
	if h, err := r.Admin.MasterHealth(ctx, s.Obs.ep.AdminURL); err == nil {
		o.Leader = &h
	}
	if o.Leader != nil && o.Leader.Role == hicachev1alpha1.MasterLeader && o.Leader.ViewVersion == o.View && !s.Now.Before(o.After) && o.Countable {
		if k, err := r.Admin.CountKeys(ctx, s.Obs.ep.AdminURL, scopePrefix(cf)); err == nil {
			o.Left = &k
		}
	}
	plan := planConfirm(o)
	force := cf.Spec.Force == nil || *cf.Spec.Force
	ev := applyConfirm(cf, p, plan, o.Left, force, r.Clock.Now())
	if plan.Verdict == confirmWait {
		return recon.StopFor(r.until(plan.Until)), nil
	}
	// The Event follows the stored record.
	if err := s.WriteStatus(ctx); err != nil {
		return recon.Proceed, fmt.Errorf("recording the confirmation of attempt %d: %w", cf.Status.Attempts, err)
	}
	r.event(cf, ev)
	if err := r.cleanupJobs(ctx, cf); err != nil {
		return recon.Proceed, err
	}
	if cf.Status.NextAttemptTime != nil {
		return recon.StopFor(r.until(cf.Status.NextAttemptTime.Time)), nil
	}
	return recon.StopFor(time.Millisecond), nil
}

// recoverAttempt accounts for an attempt whose process stopped before recording it.
func (r *CacheFlushReconciler) recoverAttempt(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf, n := s.Obj, s.Obs.plan.Attempt
	var keysNow *int64
	if countable(cf) {
		k, err := r.Admin.CountKeys(ctx, s.Obs.ep.AdminURL, scopePrefix(cf))
		if err != nil {
			return recon.Proceed, fmt.Errorf("counting the objects of the %s left by interrupted attempt %d: %w", describeScope(cf), n, err)
		}
		keysNow = &k
	}
	// The Event follows the stored record: a refused write (a view of the flush already out of
	// date) recovered nothing.
	ev := recoverAttempt(cf, s.Obs.policy, n, keysNow, r.Clock.Now())
	if err := s.WriteStatus(ctx); err != nil {
		return recon.Proceed, fmt.Errorf("recording interrupted attempt %d: %w", n, err)
	}
	r.event(cf, ev)
	return recon.StopFor(time.Millisecond), nil
}

// claimedElsewhere names another flush of the same backend with an attempt under way, as the
// API server has it now.
func (r *CacheFlushReconciler) claimedElsewhere(ctx context.Context, cf *hicachev1alpha1.CacheFlush, now time.Time) (string, error) {
	var list hicachev1alpha1.CacheFlushList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(cf.Namespace)); err != nil {
		return "", fmt.Errorf("reading the claims of the other flushes of CacheBackend %s: %w", cf.Spec.BackendRef.Name, err)
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
	res, done, err := r.Flusher.FlushNamespace(ctx, storeuse.NamespaceFlushRequest{
		Flush: cf, Backend: cb, Endpoints: ep, Prefix: cf.Spec.Namespace + "_", Force: force,
		Image: image, EtcdImage: storeuse.ManagedEtcdImage(cb, r.Options.DefaultEtcdImage), Attempt: n, Deadline: p.AttemptTimeout,
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
		return nil, fmt.Errorf("listing the flush Jobs: %w", err)
	}
	var jobs []attemptJob
	for i := range list.Items {
		j := &list.Items[i]
		if o := metav1.GetControllerOf(j); o == nil || o.UID != cf.UID || !j.DeletionTimestamp.IsZero() {
			continue
		}
		n, _ := strconv.Atoi(j.Annotations[hicachev1alpha1.AnnotationAttempt])
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
			return fmt.Errorf("deleting the Job %s of a recorded attempt: %w", j.Name, err)
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

// checkInUse holds a flush while any deployment of the store uses its scope, unless
// spec.allowInUse overrides it (admission lets only holders of the override verb set it). It is
// checked right before the attempt.
func (r *CacheFlushReconciler) checkInUse(ctx context.Context, s *flushScope) (recon.Step, error) {
	cf := s.Obj
	scope := storeuse.StoreScope{Store: storeuse.StoreIDOf(s.Obs.backend), Draining: types.UID(cf.Annotations[hicachev1alpha1.AnnotationDrainedFor])}
	if cf.Spec.Scope == hicachev1alpha1.FlushScopeNamespace {
		scope.Namespace = cf.Spec.Namespace
	}
	use, err := storeuse.StoreUsers(ctx, r.Client, scope)
	if err != nil {
		return recon.Proceed, fmt.Errorf("finding who uses the %s: %w", describeScope(cf), err)
	}
	if !use.InUse() {
		return recon.Proceed, nil
	}
	what := describeScope(cf)
	in := overrideInput{AllowInUse: cf.Spec.AllowInUse, FlushNamespace: cf.Namespace, UserNamespaces: use.Namespaces()}
	if in.AllowInUse {
		in.PolicyBound, in.PolicyWhy = r.override.get(ctx, r.APIReader, s.Now)
		if rpc := storeuse.RPCAddressOf(s.Obs.backend); rpc != "" && slices.ContainsFunc(in.UserNamespaces, func(ns string) bool { return ns != cf.Namespace }) {
			grants, err := r.Options.Authority(r.Client).Grants(ctx)
			if err != nil {
				return recon.Proceed, err
			}
			in.ClusterGrantName, in.ClusterGrantWhy = store.CrossNamespaceOverride(grants, rpc, cf.Namespace, "", in.UserNamespaces)
			in.ClusterGrant = in.ClusterGrantName != ""
		}
	}
	v := planOverride(in)
	if v.Run {
		if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete); c == nil || c.Reason != hicachev1alpha1.ReasonRunning {
			by := ""
			if in.ClusterGrant {
				by = " (users in other namespaces: " + in.ClusterGrantName + " sets allowCrossNamespaceOverride)"
			}
			r.Recorder.Eventf(cf, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonInUse, "Flush",
				"spec.allowInUse is set: flushing %s although %s uses it; their cache starts cold%s", what, use.Describe(cf.Namespace), by)
		}
		return recon.Proceed, nil
	}
	msg := storeuse.Truncate(fmt.Sprintf("%s is in use by %s; %s", inUseSubject(cf, scope.Store), use.Describe(cf.Namespace), v.Why), 1024)
	if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete); c == nil || c.Reason != hicachev1alpha1.ReasonInUse {
		r.Recorder.Eventf(cf, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonInUse, "Flush", "%s", msg)
	}
	recon.ConditionsOf(&cf.Status.Conditions, cf.Generation, s.Now).Set(hicachev1alpha1.ConditionComplete, false, hicachev1alpha1.ReasonInUse, msg)
	return recon.StopFor(flushWaitInterval), nil
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
	var err error
	if r.writes, err = recon.NewStatusWrites(context.Background(), mgr.GetCache(), &hicachev1alpha1.CacheFlush{}); err != nil {
		return err
	}
	if r.Flusher == nil {
		r.Flusher = JobFlusher{Client: mgr.GetClient()}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if !r.Options.NoClusterScopedReads {
		if err := mgr.Add(overridePolicyWatch{policy: &r.override, reader: r.APIReader, log: mgr.GetLogger().WithName("flush-override")}); err != nil {
			return err
		}
	}
	if r.Options.Identity == "" {
		r.Options.Identity = storeuse.DefaultIdentity()
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hicachev1alpha1.CacheFlush{}, flushBackendIndex,
		func(o client.Object) []string { return []string{o.(*hicachev1alpha1.CacheFlush).Spec.BackendRef.Name} }); err != nil {
		return err
	}
	// A flush that finishes lets the next of its backend go.
	log := mgr.GetLogger().WithValues("controller", "cacheflush")
	sameBackend := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		cf := o.(*hicachev1alpha1.CacheFlush)
		var list hicachev1alpha1.CacheFlushList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(cf.Namespace), client.MatchingFields{flushBackendIndex: cf.Spec.BackendRef.Name}); err != nil {
			log.Error(err, "Listing the flushes of a backend failed: they are not woken by a flush's change", "cacheFlush", klog.KObj(o))
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if !storeuse.Finished(&list.Items[i]) && list.Items[i].Name != cf.Name {
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
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, RateLimiter: recon.RetryLimiter()}).
		Named("cacheflush").
		Complete(r)
}
