package reconcile

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A reconcile that keeps failing backs off from 5 ms, doubling, to 30 s and no further; one that
// succeeds starts again from 5 ms.
func TestRetryLimiterBacksOffToThirtySeconds(t *testing.T) {
	l := RetryLimiter()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "d"}}
	other := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "e"}}
	if d := l.When(req); d != 5*time.Millisecond {
		t.Fatalf("first retry after %v, want 5ms", d)
	}
	var last time.Duration
	for range 40 { // 40 failures in a row: 5 ms × 2^40 is far past any cap
		last = l.When(req)
	}
	if last != maxRetryDelay {
		t.Errorf("after 41 failures in a row the retry waits %v, want %v", last, maxRetryDelay)
	}
	if d := l.When(other); d > 5*time.Millisecond {
		t.Errorf("another object's first retry waits %v: the back-off is per object", d)
	}
	l.Forget(req)
	if d := l.When(req); d != 5*time.Millisecond {
		t.Errorf("after a success the next retry waits %v, want 5ms", d)
	}
}
