package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// testScope is a reconcile of a CacheFlush whose observation records the phases that ran. Its
// client is nil: every case below must decide without a request (a request would panic).
type testScope = scope[*hicachev1alpha1.CacheFlush, *[]string]

func newTestScope() *testScope {
	cf := &hicachev1alpha1.CacheFlush{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: "default", Generation: 2}}
	cf.Status.Removed = 7
	return newScope(nil, nil, cf, &[]string{}, t0.Time)
}

// ran is a phase that records its name and returns st and err.
func ran(name string, st step, err error) phase[*testScope] {
	return phase[*testScope]{name: name, run: func(_ context.Context, s *testScope) (step, error) {
		*s.obs = append(*s.obs, name)
		return st, err
	}}
}

func TestRunPhases(t *testing.T) {
	boom := errors.New("boom")
	cases := map[string]struct {
		phases    []phase[*testScope]
		wantRan   []string
		wantAfter time.Duration
		wantErr   error
	}{
		"every phase runs in order": {
			phases:  []phase[*testScope]{ran("a", proceed, nil), ran("b", proceed, nil), ran("c", proceed, nil)},
			wantRan: []string{"a", "b", "c"},
		},
		"a stop ends the list and its wait counts": {
			phases:    []phase[*testScope]{ran("a", proceed, nil), ran("b", stopFor(time.Minute), nil), ran("c", proceed, nil)},
			wantRan:   []string{"a", "b"},
			wantAfter: time.Minute,
		},
		"the soonest wait wins": {
			phases: []phase[*testScope]{
				ran("a", proceedWithin(time.Minute), nil), ran("b", proceed, nil), ran("c", proceedWithin(10*time.Second), nil), ran("d", proceedWithin(time.Hour), nil)},
			wantRan:   []string{"a", "b", "c", "d"},
			wantAfter: 10 * time.Second,
		},
		"a stop with no wait keeps an earlier one": {
			phases:    []phase[*testScope]{ran("a", proceedWithin(time.Minute), nil), ran("b", stopFor(0), nil), ran("c", proceed, nil)},
			wantRan:   []string{"a", "b"},
			wantAfter: time.Minute,
		},
		"an error ends the list and drops the waits": {
			phases:  []phase[*testScope]{ran("a", proceedWithin(time.Minute), nil), ran("b", proceed, boom), ran("c", proceed, nil)},
			wantRan: []string{"a", "b"},
			wantErr: boom,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := newTestScope()
			after, err := runPhases(context.Background(), s, tc.phases)
			if diff := cmp.Diff(tc.wantRan, *s.obs); diff != "" {
				t.Errorf("phases that ran (-want +got):\n%s", diff)
			}
			if after != tc.wantAfter {
				t.Errorf("after = %s, want %s", after, tc.wantAfter)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestKindStepsRun(t *testing.T) {
	boom := errors.New("boom")
	cases := map[string]struct {
		phases []phase[*testScope]
		// cancel cancels the context before the phases run.
		cancel bool
		// wantStatus: the status computation ran, and saw wantFailed.
		wantStatus bool
		wantFailed error
		wantResult ctrl.Result
		wantErr    error
	}{
		"an unchanged status is not written, and the wait is returned": {
			phases:     []phase[*testScope]{ran("a", proceedWithin(time.Minute), nil)},
			wantStatus: true,
			wantResult: ctrl.Result{RequeueAfter: time.Minute},
		},
		"the status computation sees the error a phase stopped on": {
			phases:     []phase[*testScope]{ran("a", proceed, boom)},
			wantStatus: true,
			wantFailed: boom,
			wantErr:    boom,
		},
		"after an error that leaves the status unknown, nothing is computed or written": {
			phases:  []phase[*testScope]{ran("a", proceed, statusUnknown(boom))},
			wantErr: boom,
		},
		"a stopping manager writes nothing and reports nothing": {
			phases: []phase[*testScope]{ran("a", proceed, boom)},
			cancel: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			s := newTestScope()
			computed, announced := false, false
			var failed error
			res, err := kindSteps[*hicachev1alpha1.CacheFlush, *[]string]{
				phases: tc.phases,
				// The computed status equals the stored one: nothing to write.
				status:   func(_ *testScope, err error) { computed, failed = true, err },
				announce: func(*testScope) { announced = true },
			}.run(ctx, s)
			if computed != tc.wantStatus || announced != tc.wantStatus {
				t.Errorf("status computed %t, announced %t; want %t", computed, announced, tc.wantStatus)
			}
			if !errors.Is(failed, tc.wantFailed) || (tc.wantFailed == nil && failed != nil) {
				t.Errorf("the status computation saw %v, want %v", failed, tc.wantFailed)
			}
			if res != tc.wantResult {
				t.Errorf("result = %+v, want %+v", res, tc.wantResult)
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestWriteStatusSkipsAnUnchangedStatus(t *testing.T) {
	s := newTestScope()
	// Equal values in other allocations, and a time to the nanosecond that the API stores to the
	// second: the write would store nothing new, so none is sent (the client is nil).
	s.stored.Status.StartTime = &metav1.Time{Time: t0.Time}
	s.obj.Status.StartTime = &metav1.Time{Time: t0.Add(300 * time.Millisecond)}
	if err := s.writeStatus(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestConditionsCarryGenerationAndKeepTransitionTime(t *testing.T) {
	var list []metav1.Condition
	conditionsOf(&list, 3, t0.Time).set(hicachev1alpha1.ConditionReady, false, "Waiting", "not yet")
	later := t0.Add(time.Minute)
	conditionsOf(&list, 4, later).set(hicachev1alpha1.ConditionReady, false, "StillWaiting", "still not")
	c := meta.FindStatusCondition(list, hicachev1alpha1.ConditionReady)
	want := metav1.Condition{Type: hicachev1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "StillWaiting", Message: "still not",
		ObservedGeneration: 4, LastTransitionTime: t0}
	if diff := cmp.Diff(want, *c); diff != "" {
		t.Errorf("a condition whose status holds (-want +got):\n%s", diff)
	}
	conditionsOf(&list, 4, later).set(hicachev1alpha1.ConditionReady, true, "Ready", "ready")
	if c := meta.FindStatusCondition(list, hicachev1alpha1.ConditionReady); !c.LastTransitionTime.Time.Equal(later) || c.Status != metav1.ConditionTrue {
		t.Errorf("a condition that turned true: %+v, want status True since %s", c, later)
	}
}
