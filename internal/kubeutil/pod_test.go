package kubeutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPodReady(t *testing.T) {
	pod := func(phase corev1.PodPhase, conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: phase, Conditions: conds}}
	}
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	notReady := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse}
	scheduled := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}
	cases := map[string]struct {
		p    *corev1.Pod
		want bool
	}{
		"running and ready":           {p: pod(corev1.PodRunning, scheduled, ready), want: true},
		"running, not ready":          {p: pod(corev1.PodRunning, scheduled, notReady)},
		"running, no ready condition": {p: pod(corev1.PodRunning, scheduled)},
		"pending":                     {p: pod(corev1.PodPending, scheduled)},
		"ended with a stale Ready":    {p: pod(corev1.PodSucceeded, ready)},
		"failed with a stale Ready":   {p: pod(corev1.PodFailed, ready)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := PodReady(tc.p); got != tc.want {
				t.Errorf("PodReady = %v, want %v", got, tc.want)
			}
		})
	}
}
