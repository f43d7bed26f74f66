package localcluster

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// FailPodLabel, set to "true" on a pod, makes kwok fail it (hack/kwok/pod-fail.yaml): once
// the pod is Running, its containers terminate with exit code 1, Ready and ContainersReady
// turn False and the phase becomes Failed. It is the label of kwok's own chaos stage.
const FailPodLabel = "pod-container-running-failed.stage.kwok.x-k8s.io"

// FailPod labels the pod with FailPodLabel, so kwok fails it as a crashed kubelet-run pod
// would: phase Failed, containers terminated, not Ready. A pod that is not Running yet fails
// as soon as it is. Controllers react as to a real failure: a StatefulSet, for example,
// deletes the failed pod and creates it again.
func (c *Cluster) FailPod(ctx context.Context, namespace, name string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{FailPodLabel: "true"}},
	})
	if err != nil {
		return err
	}
	if _, err := c.client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label pod %s/%s to fail: %w", namespace, name, err)
	}
	return nil
}
