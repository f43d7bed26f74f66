package reconcile

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The reconcile skeleton of every kind: a scope holds the object as read, what the phases
// observed and the time of the reconcile; the phases run in order, and each may stop the ones
// after it and say when to look again; the status is then computed once from the scope and
// written once, only when it differs from the status that was read.

// Load reads the object of req into obj. It tells whether there is something to reconcile: not
// when the object is gone (gone, when set, forgets what the reconciler keeps of it) or being
// deleted.
//
// An object whose status this reconciler wrote is read as the write left it while the cache still
// holds the version the write replaced (see statusWrites).
func Load[T client.Object](ctx context.Context, c client.Reader, writes *StatusWrites, req ctrl.Request, obj T, gone func()) (bool, error) {
	if err := c.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			if gone != nil {
				gone()
			}
			writes.forget(req.NamespacedName)
			return false, nil
		}
		return false, fmt.Errorf("reading %s: %w", req.NamespacedName, err)
	}
	writes.readYourWrite(obj)
	return obj.GetDeletionTimestamp().IsZero(), nil
}

// StatusWrites remembers a reconciler's last status write of each object of its kind until the
// cache holds that write: the resource versions it replaced and the object as the write returned
// it. The cache catches up a moment after a write; a reconcile in between would otherwise compare
// its new status with the one before the write, find them equal and write nothing, leaving the
// stored status at what the write set (a status change wakes no reconcile).
//
// An entry goes when the cache holds anything but a version the write replaced (the cache's event
// handler sees it, or the next reconcile does) and when the object is gone, so at rest nothing is
// kept. A nil *statusWrites remembers nothing.
type StatusWrites struct {
	// cache is what the reconciler reads; a write the cache already holds is not remembered.
	cache client.Reader
	Mu    sync.Mutex
	M     map[types.NamespacedName]statusWrite
}

type statusWrite struct {
	// replaced are the resource versions the writes replaced: one, or more when one reconcile
	// wrote twice before the cache caught up.
	replaced []string
	obj      client.Object
}

// NewStatusWrites remembers the status writes of kind obj until c, the reconciler's cache, holds
// them.
func NewStatusWrites(ctx context.Context, c cache.Cache, obj client.Object) (*StatusWrites, error) {
	w := &StatusWrites{cache: c, M: map[types.NamespacedName]statusWrite{}}
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("watching the %T the status writes of which are remembered: %w", obj, err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.cached(o) },
		UpdateFunc: func(_, o any) { w.cached(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if o, ok := o.(client.Object); ok {
				w.forget(client.ObjectKeyFromObject(o))
			}
		},
	}); err != nil {
		return nil, err
	}
	return w, nil
}

// wrote records that obj's status was written over resource version replaced, unless the cache
// holds the write already.
func (w *StatusWrites) wrote(ctx context.Context, obj client.Object, replaced string) {
	if w == nil {
		return
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	older := []string{replaced}
	if last, ok := w.M[key]; ok && last.obj.GetUID() == obj.GetUID() && last.obj.GetResourceVersion() == replaced {
		older = append(last.replaced, replaced)
	}
	// The cache's event of the write may have come before the write returned: then no event
	// comes to forget it. The cache is read under the lock the event handler takes, so an event
	// after the read finds the entry.
	if w.cache != nil {
		cached := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
		if err := w.cache.Get(ctx, key, cached); err != nil || caughtUp(cached, obj.GetUID(), older) {
			delete(w.M, key)
			return
		}
	}
	kept := obj.DeepCopyObject().(client.Object)
	kept.SetManagedFields(nil) // as the cache holds objects: the reconcilers never read them
	w.M[key] = statusWrite{replaced: older, obj: kept}
}

// caughtUp tells whether cached, as the cache holds an object, is past writes of object uid that
// replaced the resource versions replaced.
func caughtUp(cached client.Object, uid types.UID, replaced []string) bool {
	return cached.GetUID() != uid || !slices.Contains(replaced, cached.GetResourceVersion())
}

// cached forgets the write of an object the cache now holds past it.
func (w *StatusWrites) cached(o any) {
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	if last, ok := w.M[key]; ok && caughtUp(obj, last.obj.GetUID(), last.replaced) {
		delete(w.M, key)
	}
}

// readYourWrite replaces obj, as read from the cache, with the object as the last status write
// left it when the cache still holds the version that write replaced; it forgets the write once
// the cache holds anything else.
func (w *StatusWrites) readYourWrite(obj client.Object) {
	if w == nil {
		return
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	last, ok := w.M[key]
	if !ok {
		return
	}
	if caughtUp(obj, last.obj.GetUID(), last.replaced) {
		delete(w.M, key)
		return
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(last.obj.DeepCopyObject()).Elem())
}

// forget forgets the write of an object that is gone.
func (w *StatusWrites) forget(key types.NamespacedName) {
	if w == nil {
		return
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	delete(w.M, key)
}

// Scope is one reconcile of one object.
type Scope[T client.Object, O any] struct {
	// Obj is the object as read; the phases and the status computation write its status.
	Obj T
	// Stored is the object as the API server last had it: as read, then as each status write
	// left it. The status is written only when obj's differs from it.
	Stored T
	// Obs is what the phases observed and did.
	Obs O
	// Now is the time of this reconcile.
	Now time.Time

	c client.Client
	// writes remembers the status writes until the cache holds them (nil: not at all).
	writes *StatusWrites
	// OptimisticLock makes a status write fail with a conflict when the stored status changed
	// since it was read (another process wrote it).
	OptimisticLock bool
}

// NewScope starts the reconcile of obj at now; its status writes are remembered in writes.
func NewScope[T client.Object, O any](c client.Client, writes *StatusWrites, obj T, obs O, now time.Time) *Scope[T, O] {
	return &Scope[T, O]{Obj: obj, Stored: obj.DeepCopyObject().(T), Obs: obs, Now: now, c: c, writes: writes}
}

// WriteStatus writes obj's status when it differs from the stored one. Most kinds write only at
// the end of the reconcile; a phase writes earlier only what must be stored before it acts (a
// flush's claim of an attempt).
func (s *Scope[T, O]) WriteStatus(ctx context.Context) error {
	changed := client.MergeFrom(s.Stored)
	data, err := changed.Data(s.Obj)
	if err != nil {
		return fmt.Errorf("computing the status patch of %s: %w", klog.KObj(s.Obj), err)
	}
	if string(data) == "{}" {
		return nil
	}
	patch := changed
	if s.OptimisticLock {
		patch = client.MergeFromWithOptions(s.Stored, client.MergeFromWithOptimisticLock{})
	}
	replaced := s.Stored.GetResourceVersion()
	if err := s.c.Status().Patch(ctx, s.Obj, patch); err != nil {
		return fmt.Errorf("writing the status of %s: %w", klog.KObj(s.Obj), err)
	}
	s.Stored = s.Obj.DeepCopyObject().(T)
	s.writes.wrote(ctx, s.Obj, replaced)
	return nil
}

// Step is what a phase tells the reconcile.
type Step struct {
	// stop: the phases after this one do not run this time.
	stop bool
	// after: look again after this long at the latest (0: when a watch says so).
	after time.Duration
}

// Proceed runs the next phase.
var Proceed = Step{}

// ProceedWithin runs the next phase, and asks to look again within d.
func ProceedWithin(d time.Duration) Step { return Step{after: d} }

// StopFor stops the phases here and asks to look again after d (0: when a watch says so).
func StopFor(d time.Duration) Step { return Step{stop: true, after: d} }

// Phase is one step of a reconcile, named by what it does.
type Phase[S any] struct {
	Name string
	Run  func(ctx context.Context, s S) (Step, error)
}

// RunPhases runs phases in order until one stops them or fails, and returns the soonest time
// to look again that any asked for.
func RunPhases[S any](ctx context.Context, s S, phases []Phase[S]) (time.Duration, error) {
	log := ctrl.LoggerFrom(ctx)
	var after time.Duration
	for _, p := range phases {
		st, err := p.Run(ctx, s)
		if err != nil {
			log.V(1).Info("A phase failed", "phase", p.Name)
			return 0, err
		}
		after = MinPositive(after, st.after)
		if st.stop {
			log.V(1).Info("A phase stopped the reconcile", "phase", p.Name, "requeueAfter", st.after)
			return after, nil
		}
	}
	return after, nil
}

// KindSteps is how one kind is reconciled.
type KindSteps[T client.Object, O any] struct {
	Phases []Phase[*Scope[T, O]]
	// Status computes obj's new status from what was observed; failed is the error a phase
	// stopped on, which the kind reports in a condition or not. Nil when the phases write the
	// status themselves.
	Status func(s *Scope[T, O], failed error)
	// Announce emits the Events of what changed between the stored status and the new one, before
	// it is written. Optional.
	Announce func(s *Scope[T, O])
}

// statusUnknownError is a phase's error after which the status cannot be computed: what it is
// computed from was not observed. The stored status stays.
type statusUnknownError struct{ err error }

func (e statusUnknownError) Error() string { return e.err.Error() }

func (e statusUnknownError) Unwrap() error { return e.err }

// StatusUnknown marks err as one after which the status stays as it is stored.
func StatusUnknown(err error) error { return statusUnknownError{err} }

// Run reconciles s: the phases, the status, one write. A phase's error is returned (to retry
// with backoff), never logged here: the controller logs what Reconcile returns. A status that
// another process changed meanwhile is looked at again in a second.
func (k KindSteps[T, O]) Run(ctx context.Context, s *Scope[T, O]) (ctrl.Result, error) {
	after, err := RunPhases(ctx, s, k.Phases)
	if ctx.Err() != nil {
		return ctrl.Result{}, nil // the manager is stopping: no verdict on anything
	}
	if errors.As(err, new(statusUnknownError)) {
		return ctrl.Result{}, err
	}
	if k.Status != nil {
		k.Status(s, err)
	}
	if k.Announce != nil {
		k.Announce(s)
	}
	if werr := s.WriteStatus(ctx); werr != nil {
		if err == nil && apierrors.IsConflict(werr) {
			ctrl.LoggerFrom(ctx).V(1).Info("The status changed meanwhile; looking again", "error", werr.Error())
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, errors.Join(err, werr)
	}
	return ctrl.Result{RequeueAfter: after}, err
}

// conditions sets the conditions of one object: every condition it sets carries the object's
// generation and keeps its transition time while its status holds.
type conditions struct {
	list       *[]metav1.Condition
	generation int64
	now        metav1.Time
}

// ConditionsOf sets conditions in list for generation, at now.
func ConditionsOf(list *[]metav1.Condition, generation int64, now time.Time) conditions {
	return conditions{list: list, generation: generation, now: metav1.NewTime(now)}
}

// Set sets condition typ to true or false with its reason and message.
func (c conditions) Set(typ string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(c.list, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: c.generation, LastTransitionTime: c.now})
}

func MinPositive(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
