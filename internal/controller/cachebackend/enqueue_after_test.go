package cachebackend

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// Changes of a store's use within the delay are one request, added once the delay has passed.
func TestEnqueueAfterCoalesces(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	toBackend := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: "mooncake"}}}
	})
	h := enqueueAfter(200*time.Millisecond, toBackend)
	ctx := context.Background()
	for i := range 50 {
		d := &hicachev1alpha1.HiCacheDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d", ResourceVersion: string(rune('a' + i%26))}}
		h.Update(ctx, event.UpdateEvent{ObjectOld: d, ObjectNew: d.DeepCopy()}, q)
		h.Create(ctx, event.CreateEvent{Object: d}, q)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d requests queued at once, want none before the delay", n)
	}
	time.Sleep(600 * time.Millisecond)
	if n := q.Len(); n != 1 {
		t.Fatalf("%d requests queued after the delay, want 1", n)
	}
}
