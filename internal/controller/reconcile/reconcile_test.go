package reconcile

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
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
)

// testScope is a reconcile of a CacheFlush whose observation records the phases that ran. Its
// client is nil: every case below must decide without a request (a request would panic).
type testScope = Scope[*hicachev1alpha1.CacheFlush, *[]string]

func newTestScope() *testScope {
	cf := &hicachev1alpha1.CacheFlush{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: "default", Generation: 2}}
	cf.Status.Removed = 7
	return NewScope(nil, nil, cf, &[]string{}, testsupport.T0.Time)
}

// ran is a phase that records its name and returns st and err.
func ran(name string, st Step, err error) Phase[*testScope] {
	return Phase[*testScope]{Name: name, Run: func(_ context.Context, s *testScope) (Step, error) {
		*s.Obs = append(*s.Obs, name)
		return st, err
	}}
}

func TestRunPhases(t *testing.T) {
	boom := errors.New("boom")
	cases := map[string]struct {
		phases    []Phase[*testScope]
		wantRan   []string
		wantAfter time.Duration
		wantErr   error
	}{
		"every phase runs in order": {
			phases:  []Phase[*testScope]{ran("a", Proceed, nil), ran("b", Proceed, nil), ran("c", Proceed, nil)},
			wantRan: []string{"a", "b", "c"},
		},
		"a stop ends the list and its wait counts": {
			phases:    []Phase[*testScope]{ran("a", Proceed, nil), ran("b", StopFor(time.Minute), nil), ran("c", Proceed, nil)},
			wantRan:   []string{"a", "b"},
			wantAfter: time.Minute,
		},
		"the soonest wait wins": {
			phases: []Phase[*testScope]{
				ran("a", ProceedWithin(time.Minute), nil), ran("b", Proceed, nil), ran("c", ProceedWithin(10*time.Second), nil), ran("d", ProceedWithin(time.Hour), nil)},
			wantRan:   []string{"a", "b", "c", "d"},
			wantAfter: 10 * time.Second,
		},
		"a stop with no wait keeps an earlier one": {
			phases:    []Phase[*testScope]{ran("a", ProceedWithin(time.Minute), nil), ran("b", StopFor(0), nil), ran("c", Proceed, nil)},
			wantRan:   []string{"a", "b"},
			wantAfter: time.Minute,
		},
		"an error ends the list and drops the waits": {
			phases:  []Phase[*testScope]{ran("a", ProceedWithin(time.Minute), nil), ran("b", Proceed, boom), ran("c", Proceed, nil)},
			wantRan: []string{"a", "b"},
			wantErr: boom,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := newTestScope()
			after, err := RunPhases(context.Background(), s, tc.phases)
			if diff := cmp.Diff(tc.wantRan, *s.Obs); diff != "" {
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
		phases []Phase[*testScope]
		// cancel cancels the context before the phases run.
		cancel bool
		// wantStatus: the status computation ran, and saw wantFailed.
		wantStatus bool
		wantFailed error
		wantResult ctrl.Result
		wantErr    error
	}{
		"an unchanged status is not written, and the wait is returned": {
			phases:     []Phase[*testScope]{ran("a", ProceedWithin(time.Minute), nil)},
			wantStatus: true,
			wantResult: ctrl.Result{RequeueAfter: time.Minute},
		},
		"the status computation sees the error a phase stopped on": {
			phases:     []Phase[*testScope]{ran("a", Proceed, boom)},
			wantStatus: true,
			wantFailed: boom,
			wantErr:    boom,
		},
		"after an error that leaves the status unknown, nothing is computed or written": {
			phases:  []Phase[*testScope]{ran("a", Proceed, StatusUnknown(boom))},
			wantErr: boom,
		},
		"a stopping manager writes nothing and reports nothing": {
			phases: []Phase[*testScope]{ran("a", Proceed, boom)},
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
			res, err := KindSteps[*hicachev1alpha1.CacheFlush, *[]string]{
				Phases: tc.phases,
				// The computed status equals the stored one: nothing to write.
				Status:   func(_ *testScope, err error) { computed, failed = true, err },
				Announce: func(*testScope) { announced = true },
			}.Run(ctx, s)
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
	s.Stored.Status.StartTime = &metav1.Time{Time: testsupport.T0.Time}
	s.Obj.Status.StartTime = &metav1.Time{Time: testsupport.T0.Add(300 * time.Millisecond)}
	if err := s.WriteStatus(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestConditionsCarryGenerationAndKeepTransitionTime(t *testing.T) {
	var list []metav1.Condition
	ConditionsOf(&list, 3, testsupport.T0.Time).Set(hicachev1alpha1.ConditionReady, false, "Waiting", "not yet")
	later := testsupport.T0.Add(time.Minute)
	ConditionsOf(&list, 4, later).Set(hicachev1alpha1.ConditionReady, false, "StillWaiting", "still not")
	c := meta.FindStatusCondition(list, hicachev1alpha1.ConditionReady)
	want := metav1.Condition{Type: hicachev1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "StillWaiting", Message: "still not",
		ObservedGeneration: 4, LastTransitionTime: testsupport.T0}
	if diff := cmp.Diff(want, *c); diff != "" {
		t.Errorf("a condition whose status holds (-want +got):\n%s", diff)
	}
	ConditionsOf(&list, 4, later).Set(hicachev1alpha1.ConditionReady, true, "Ready", "ready")
	if c := meta.FindStatusCondition(list, hicachev1alpha1.ConditionReady); !c.LastTransitionTime.Time.Equal(later) || c.Status != metav1.ConditionTrue {
		t.Errorf("a condition that turned true: %+v, want status True since %s", c, later)
	}
}
