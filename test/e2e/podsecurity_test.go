package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// In a namespace that enforces the restricted Pod Security level, the API server admits the
// rank pods of a deployment whose ranks run as a user other than root, with nothing else set:
// the operator completes the serving container's security context (no privilege escalation,
// every capability dropped, the RuntimeDefault seccomp profile). A deployment that runs as root,
// as the upstream image does, is refused there, and says so in the StatefulSet's events.
func TestRankPodsMeetRestrictedWhenTheyRunAsNonRoot(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	var n corev1.Namespace
	if err := k8s.Get(ctx, types.NamespacedName{Name: ns}, &n); err != nil {
		t.Fatal(err)
	}
	n.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	n.Labels["pod-security.kubernetes.io/enforce-version"] = "latest"
	if err := k8s.Update(ctx, &n); err != nil {
		t.Fatal(err)
	}
	m := startMaster(t)
	externalBackend(t, ns, "mooncake", m.RPCAddr, m.AdminURL)

	h := hcd(t, ns, qwen3)
	h.Spec.Template.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(1000))}
	create(t, h)
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "qwen3", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 90*time.Second)
	for _, p := range rankPods(t, ns, "qwen3") {
		for _, c := range p.Spec.Containers {
			if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
				t.Errorf("pod %s container %s: security context %+v, want every capability dropped", p.Name, c.Name, sc)
			}
		}
	}

	root := hcd(t, ns, qwen3)
	root.Name = "qwen3-root"
	create(t, root)
	waitWarningEvent(t, ns, "StatefulSet", "FailedCreate", "the root deployment's pods refused by Pod Security")
	if pods := rankPods(t, ns, "qwen3-root"); len(pods) != 0 {
		t.Errorf("%d pods of a root deployment in a restricted namespace", len(pods))
	}
}
