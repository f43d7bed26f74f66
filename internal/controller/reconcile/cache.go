package reconcile

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions are the manager's cache options with what the controllers never read left out of
// the informers' objects: every object's managedFields (the operator applies server-side and
// never reads them), and the spec of pods (the controllers read a pod's metadata and status
// only; the spec, a rank's whole command line, is most of a pod's size). At a thousand
// deployments these are most of the manager's heap.
func CacheOptions(o cache.Options) cache.Options {
	o.DefaultTransform = cache.TransformStripManagedFields()
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&corev1.Pod{}] = cache.ByObject{Transform: stripPod}
	return o
}

// stripPod keeps what the controllers read of a pod: its metadata but managedFields, the node it
// is bound to, and its status.
func stripPod(in any) (any, error) {
	p, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	p.ManagedFields = nil
	p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName}
	return p, nil
}
