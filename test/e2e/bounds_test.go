package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// More deployments on one namespace than the backend's status names: the backend's status keeps
// updating (its probe results still reach it) and counts them all.
func TestBackendStatusUpdatesPastItsListBound(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	const n = hicachev1alpha1.MaxListedDeployments + 1
	for i := range n {
		h := hcd(t, ns, qwen3)
		h.Name = fmt.Sprintf("qwen3-%02d", i)
		h.Spec.Replicas = ptr.To(int32(0))
		create(t, h)
	}
	eventually(t, 60*time.Second, "every deployment counted on the backend", func() (bool, string) {
		cb := getCB(t, ns, "mooncake")
		if len(cb.Status.Namespaces) != 1 {
			return false, fmt.Sprintf("namespaces %d", len(cb.Status.Namespaces))
		}
		u := cb.Status.Namespaces[0]
		return u.DeploymentCount == n && len(u.Deployments) == hicachev1alpha1.MaxListedDeployments && cb.Status.NamespaceCount == 1,
			fmt.Sprintf("%d named, deploymentCount %d, namespaceCount %d", len(u.Deployments), u.DeploymentCount, cb.Status.NamespaceCount)
	})
	if c := countEvents(t, ns, "mooncake", hicachev1alpha1.ReasonListTruncated); c == 0 {
		t.Errorf("no %s event on the backend", hicachev1alpha1.ReasonListTruncated)
	}

	// The backend's probe results still reach its status.
	m.putKeys(t, keysUnder("hc-bound", 3), 4096)
	eventually(t, 30*time.Second, "the new key count in the backend's status", func() (bool, string) {
		cb := getCB(t, ns, "mooncake")
		return cb.Status.KeyCount >= 3, fmt.Sprintf("keys %d", cb.Status.KeyCount)
	})
}

// A deployment that leaves more stale namespaces than its status holds keeps the newest, counts
// the one it dropped and names it in an Event that says how to remove what it holds.
func TestStaleNamespacesPastTheirBoundAreCountedAndNamed(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	h := hcd(t, ns, qwen3)
	h.Spec.Replicas = ptr.To(int32(0))
	h.Spec.Storage.FlushPolicy = hicachev1alpha1.FlushManual
	create(t, h)
	var first string
	// Each revision is a breaking change: one more stale namespace, kept by the Manual policy.
	for i := 0; i <= hicachev1alpha1.MaxStaleNamespaces+1; i++ {
		if i > 0 {
			update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Model.Revision = fmt.Sprintf("%040x", i) }) // a commit of the hub model
		}
		eventually(t, 20*time.Second, fmt.Sprintf("revision %d recorded", i), func() (bool, string) {
			h := getHCD(t, ns, "qwen3")
			return h.Status.ObservedGeneration == h.Generation && h.Status.Cache != nil && h.Status.Cache.Namespace != "",
				fmt.Sprintf("observed %d of %d", h.Status.ObservedGeneration, h.Generation)
		})
		if i == 0 {
			first = getHCD(t, ns, "qwen3").Status.Cache.Namespace
		}
	}
	cs := getHCD(t, ns, "qwen3").Status.Cache
	if len(cs.StaleNamespaces) != hicachev1alpha1.MaxStaleNamespaces || cs.DroppedStaleNamespaces != 1 {
		t.Fatalf("%d stale namespaces listed, %d dropped; want %d listed and 1 dropped", len(cs.StaleNamespaces), cs.DroppedStaleNamespaces, hicachev1alpha1.MaxStaleNamespaces)
	}
	for _, s := range cs.StaleNamespaces {
		if s.Namespace == first {
			t.Errorf("the oldest stale namespace %s is still listed: want it dropped", first)
		}
	}
	var events corev1.EventList
	if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, e := range events.Items {
		if e.Reason == hicachev1alpha1.ReasonStaleNamespaceDropped && e.InvolvedObject.Name == "qwen3" {
			said = append(said, e.Message)
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], first) || !strings.Contains(said[0], "kubectl hicache flush mooncake --prefix "+first) {
		t.Errorf("%s events %q; want one naming %s and how to flush it", hicachev1alpha1.ReasonStaleNamespaceDropped, said, first)
	}
}
