package reconcile

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// maxRetryDelay caps how long a failed reconcile waits before it is tried again.
const maxRetryDelay = 30 * time.Second

// RetryLimiter is how soon a failed reconcile is tried again: controller-runtime's default (5 ms,
// doubled at every failure in a row; at most 10 retries a second overall, in bursts of 100), with
// the doubling capped at 30 s instead of 1,000 s. An object whose writes were refused for a
// while (an admission policy, an API server outage, a quota) is then tried again within 30 s of
// the cause going away, not up to 16 minutes later; nothing else wakes it, since a refused
// write changes nothing that is watched.
func RetryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
