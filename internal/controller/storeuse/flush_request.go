package storeuse

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake/flushjob"
)

// Finished tells whether a flush has reached an end: Complete, or Failed for good.
func Finished(cf *hicachev1alpha1.CacheFlush) bool {
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

// NamespaceFlushRequest is one run of the namespace flush script.
type NamespaceFlushRequest struct {
	Flush     *hicachev1alpha1.CacheFlush
	Backend   *hicachev1alpha1.CacheBackend
	Endpoints hicachev1alpha1.BackendEndpoints
	Prefix    string
	Force     bool
	Image     string
	// EtcdImage runs the proxy to a managed etcd (etcdProxyContainer).
	EtcdImage string
	Attempt   int32
	// Deadline bounds the attempt: the Job's activeDeadlineSeconds, or the local script's run.
	Deadline time.Duration
}

// NamespaceFlusher removes every object under one key prefix of a store without multi-tenancy.
// Mooncake's admin API cannot do that, so the Mooncake client does it, through flush.py.
type NamespaceFlusher interface {
	// Method says where the flusher runs a flush's attempts: MethodJob (a Job, which outlives
	// the operator process that created it) or MethodLocal (inside the operator process).
	Method(cf *hicachev1alpha1.CacheFlush) string
	// FlushNamespace runs (or checks on) an attempt of a flush; done is false while it still
	// runs. It returns when ctx is done, at the latest.
	FlushNamespace(ctx context.Context, req NamespaceFlushRequest) (res flushjob.Result, done bool, err error)
}
