package hicachedeployment

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
)

func TestRankPodProblem(t *testing.T) {
	pod := func(name string, mutate func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		mutate(&p)
		return p
	}
	running := func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	cases := map[string]struct {
		pods []corev1.Pod
		want string
	}{
		"all running, starting up": {pods: []corev1.Pod{pod("d-0-0", running), pod("d-0-1", running)}},
		"a claim that does not exist": {
			pods: []corev1.Pod{pod("d-0-0", func(p *corev1.Pod) {
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
					Message: `0/6 nodes are available: persistentvolumeclaim "dsv4-weights" not found.`}}
			})},
			want: `pod d-0-0: cannot be scheduled: 0/6 nodes are available: persistentvolumeclaim "dsv4-weights" not found.`,
		},
		"the token's Secret is missing": {
			pods: []corev1.Pod{pod("d-0-0", running), pod("d-0-1", func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "model-download", State: corev1.ContainerState{
					Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "hf-token" not found`}}}}
			})},
			want: `pod d-0-1: init container model-download is waiting: CreateContainerConfigError: secret "hf-token" not found`,
		},
		"the download keeps failing": {
			pods: []corev1.Pod{pod("d-0-0", func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "model-download", RestartCount: 4,
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 1m20s\nrestarting"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}
			})},
			want: "pod d-0-0: init container model-download is waiting: CrashLoopBackOff: back-off 1m20s restarting (last exit code 1, 4 restarts)",
		},
		"the serving image cannot be pulled": {
			pods: []corev1.Pod{pod("d-0-0", func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", State: corev1.ContainerState{
					Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "sglang:nope"`}}}}
			})},
			want: `pod d-0-0: container sglang is waiting: ImagePullBackOff: Back-off pulling image "sglang:nope"`,
		},
		"still creating is not stuck": {
			pods: []corev1.Pod{pod("d-0-0", func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "model-download", State: corev1.ContainerState{
					Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
			})},
		},
		"a pod going away is not reported": {
			pods: []corev1.Pod{pod("d-0-0", func(p *corev1.Pod) {
				p.DeletionTimestamp = &testsupport.T0
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}}}
			})},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := rankPodProblem(map[GroupKey]*group{{}: {pods: tc.pods}})
			if got != tc.want {
				t.Errorf("problem\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
	// Groups in order, pods by name: the first stuck pod of the lowest group is named.
	two := map[GroupKey]*group{
		{index: 1}: {key: GroupKey{index: 1}, pods: []corev1.Pod{pod("d-1-0", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}}}
		})}},
		{index: 0}: {pods: []corev1.Pod{pod("d-0-1", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}
		}), pod("d-0-0", running)}},
	}
	if got := rankPodProblem(two); !strings.HasPrefix(got, "pod d-0-1: container sglang failed with exit code 1") {
		t.Errorf("problem %q, want group 0's pod d-0-1 first", got)
	}
}
