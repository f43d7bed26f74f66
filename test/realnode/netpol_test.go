package realnode

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The NetworkPolicies the operator creates, read back from the API server, select exactly the
// pods they are for and admit exactly the intended peers, evaluated with Kubernetes' own label
// selector code against the real pods of a running deployment (ranks on the kwok nodes), its
// managed backend (master and store pods on the real node), the operator's pod from the chart
// and the real labels of their namespaces. The local node's bridge CNI does not enforce
// NetworkPolicies, so this checks what a CNI that does would be told, not the traffic itself.
func TestNetworkPoliciesSelectTheRunningPods(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "netpol", baseline)
	managedBackend(t, ns, 1, "64Mi")
	h := qwen3(t, ns)

	role := func(p *corev1.Pod) string {
		switch {
		case p.Namespace == operatorNS:
			return "operator"
		case p.Labels[hicachev1alpha1.LabelDeployment] != "":
			return "rank"
		case p.Labels["app.kubernetes.io/component"] == "master":
			return "master"
		case p.Labels["app.kubernetes.io/component"] == "store":
			return "store"
		}
		return "other"
	}
	nsLabels := func(name string) map[string]string {
		var n corev1.Namespace
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}
	type member struct {
		role string
		pod  testutil.PolicyPod
	}
	var cast []member
	for _, where := range []string{ns, operatorNS} {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(where)); err != nil {
			t.Fatal(err)
		}
		labels := nsLabels(where)
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			if where == operatorNS && p.Labels["app.kubernetes.io/component"] != "manager" {
				continue
			}
			cast = append(cast, member{role(p), testutil.PolicyPod{Namespace: where, NamespaceLabels: labels, Labels: p.Labels}})
		}
	}
	// What no one may be let in as: a pod of the namespace wearing the operator's labels, and any
	// other pod.
	var operatorLabels map[string]string
	for _, m := range cast {
		if m.role == "operator" {
			operatorLabels = m.pod.Labels
		}
	}
	if operatorLabels == nil {
		t.Fatal("the operator's pod is not running")
	}
	cast = append(cast,
		member{"operator look-alike", testutil.PolicyPod{Namespace: ns, NamespaceLabels: nsLabels(ns), Labels: operatorLabels}},
		member{"any pod", testutil.PolicyPod{Namespace: ns, NamespaceLabels: nsLabels(ns), Labels: map[string]string{"app": "client"}}},
	)
	roles := map[string]int{}
	for _, m := range cast {
		roles[m.role]++
	}
	if diff := cmp.Diff(map[string]int{"operator": 1, "rank": 1, "master": 1, "store": 1, "operator look-alike": 1, "any pod": 1}, roles); diff != "" {
		t.Fatalf("the running pods (-want +got):\n%s", diff)
	}

	var policies networkingv1.NetworkPolicyList
	if err := k8s.List(ctx, &policies, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	selected := map[string][]string{}
	admitted := map[string]bool{}
	const ephemeral = 41234 // a port chosen at run time: NCCL, the transfer engine
	ports := map[string]map[string]int32{
		backendName + "-master": {"rpc": 50051, "admin": 9003},
		backendName + "-store":  {"http": 8080, "transfer": ephemeral},
		h.Name + "-sglang":      {"http": 30000, "dist": 20102, "transfer": ephemeral},
		h.Name + "-0":           {"http": 30000, "dist": 20102, "nccl": ephemeral},
	}
	for i := range policies.Items {
		np := &policies.Items[i]
		for _, m := range cast {
			if testutil.PolicySelects(np, m.pod) {
				selected[np.Name] = append(selected[np.Name], m.role)
			}
			for port, n := range ports[np.Name] {
				if testutil.PolicyAdmits(np, m.pod, n, corev1.ProtocolTCP) {
					admitted[fmt.Sprintf("%s %s ← %s", np.Name, port, m.role)] = true
				}
			}
		}
	}
	for _, s := range selected {
		sort.Strings(s)
	}
	wantSelected := map[string][]string{
		backendName + "-master": {"master"}, backendName + "-store": {"store"},
		h.Name + "-sglang": {"rank"}, h.Name + "-0": {"rank"},
	}
	if diff := cmp.Diff(wantSelected, selected); diff != "" {
		t.Errorf("the pods each NetworkPolicy of %s selects (-want +got):\n%s", ns, diff)
	}
	want := map[string]bool{}
	for _, k := range []string{
		"mooncake-master rpc ← rank", "mooncake-master rpc ← store", "mooncake-master admin ← operator",
		"mooncake-store transfer ← rank", "mooncake-store transfer ← store",
		"qwen3-sglang http ← rank", "qwen3-sglang http ← master", "qwen3-sglang http ← store",
		"qwen3-sglang http ← operator look-alike", "qwen3-sglang http ← any pod",
		"qwen3-sglang transfer ← rank", "qwen3-sglang transfer ← store",
		"qwen3-0 dist ← rank", "qwen3-0 nccl ← rank",
	} {
		want[k] = true
	}
	if diff := cmp.Diff(want, admitted); diff != "" {
		t.Errorf("the traffic the NetworkPolicies admit (-want +got):\n%s", diff)
	}
	names := make([]string, 0, len(policies.Items))
	for _, np := range policies.Items {
		names = append(names, np.Name)
	}
	slices.Sort(names)
	logf("%s: %d NetworkPolicies (%v) checked against %d running pods", ns, len(names), names, len(cast)-2)
}
