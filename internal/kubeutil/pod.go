// Package kubeutil holds the small questions about Kubernetes objects that the controllers, the
// kubectl plugin and the tests all ask, answered once.
package kubeutil

import corev1 "k8s.io/api/core/v1"

// PodReady tells whether a pod runs and its Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
