package hicachedeployment

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// stuckWaiting are the waiting reasons of a container that will not start without a change: a
// missing Secret or key, an image that cannot be pulled, a container that keeps failing.
var stuckWaiting = []string{
	"CreateContainerConfigError", "CreateContainerError", "ErrImagePull", "ImagePullBackOff",
	"InvalidImageName", "CrashLoopBackOff", "RunContainerError",
}

// rankPodProblem is, in words, why the first rank pod that does not run is stuck ("" when none
// is, as far as its status says): a pod the scheduler cannot place (a missing claim, no node
// with the GPUs), an init container (the model download) that failed or cannot start, or a
// serving container that cannot start. Only the kubelet's and the scheduler's own words are
// quoted, which name objects (a Secret, a claim) but never their contents.
func rankPodProblem(groups map[GroupKey]*group) string {
	keys := make([]GroupKey, 0, len(groups))
	for g := range groups {
		keys = append(keys, g)
	}
	slices.SortFunc(keys, compareKeys)
	for _, g := range keys {
		pods := slices.Clone(groups[g].pods)
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		for i := range pods {
			if p := podProblem(&pods[i]); p != "" {
				return "pod " + pods[i].Name + ": " + p
			}
		}
	}
	return ""
}

func podProblem(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return "cannot be scheduled: " + oneLine(c.Message)
		}
	}
	for _, s := range p.Status.InitContainerStatuses {
		if msg := containerProblem(s); msg != "" {
			return "init container " + s.Name + " " + msg
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if msg := containerProblem(s); msg != "" {
			return "container " + s.Name + " " + msg
		}
	}
	return ""
}

func containerProblem(s corev1.ContainerStatus) string {
	if w := s.State.Waiting; w != nil && slices.Contains(stuckWaiting, w.Reason) {
		msg := w.Reason
		if w.Message != "" {
			msg += ": " + oneLine(w.Message)
		}
		if t := s.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
			msg += fmt.Sprintf(" (last exit code %d, %d restarts)", t.ExitCode, s.RestartCount)
		}
		return "is waiting: " + msg
	}
	if t := s.State.Terminated; t != nil && t.ExitCode != 0 {
		return fmt.Sprintf("failed with exit code %d (%s)", t.ExitCode, t.Reason)
	}
	return ""
}

// oneLine keeps a status message short and on one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
