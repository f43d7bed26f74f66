package hicachedeployment

import (
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// The NetworkPolicies of everything the operator runs. Each admits only the traffic the pods it
// selects need; what a policy does not name is refused by a CNI that enforces policies (the
// policies are Ingress only: egress stays open). Peers are named by the labels the operator puts
// on its own pods; any pod of the same namespace can carry the same labels, so a namespace is
// the trust boundary, except for the operator itself, which is also named by its namespace's
// kubernetes.io/metadata.name label (set by the API server, no user can forge it).

// policyName of a deployment's serving pods (the group policies take the group's name).
func deploymentPolicyName(hcd string) string { return hcd + "-sglang" }

// servingClients are the peers spec.security.clients names, or every pod of the deployment's
// namespace when it names none.
func servingClients(hcd *hicachev1alpha1.HiCacheDeployment) []networkingv1.NetworkPolicyPeer {
	if s := hcd.Spec.Security; s != nil && len(s.Clients) > 0 {
		return slices.Clone(s.Clients)
	}
	return []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
}

// buildRouterNetworkPolicy admits the deployment's clients (spec.security.clients; by default
// every pod of its namespace) to its router's HTTP and metrics ports, and nothing else: the
// router reaches every leader, so whoever reaches the router reaches the servers, and it must
// admit no one the servers' own policy does not. Its health port is left to the kubelet, whose
// probes most CNIs admit from the node whatever the policies say.
func buildRouterNetworkPolicy(hcd *hicachev1alpha1.HiCacheDeployment) (*networkingv1.NetworkPolicy, error) {
	cfg, err := resolve.RouterConfig(hcd)
	if err != nil {
		return nil, err
	}
	port, _, metrics := cfg.Ports()
	return storeuse.IngressPolicy(routerName(hcd.Name), hcd.Namespace, routerLabels(hcd), []metav1.OwnerReference{ownerRef(hcd)}, routerSelector(hcd),
		networkingv1.NetworkPolicyIngressRule{
			From:  servingClients(hcd),
			Ports: []networkingv1.NetworkPolicyPort{storeuse.TCPPort(int32(port)), storeuse.TCPPort(int32(metrics))},
		},
	), nil
}

// BuildDeploymentNetworkPolicy covers every serving pod of a deployment: SGLang's HTTP port
// from its clients (spec.security.clients; by default every pod of the deployment's namespace),
// and, when the ranks mount a segment of the store, the other users of the backend to the
// transfer engine. Rank-to-rank traffic is each group's own policy.
func BuildDeploymentNetworkPolicy(hcd *hicachev1alpha1.HiCacheDeployment, r *resolve.Resolved) *networkingv1.NetworkPolicy {
	clients := servingClients(hcd)
	if s := hcd.Spec.Security; s != nil && len(s.Clients) > 0 && hcd.Spec.Router != nil {
		// The router is the leaders' client.
		clients = append(clients, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: routerSelector(hcd)}})
	}
	rules := []networkingv1.NetworkPolicyIngressRule{{
		From:  clients,
		Ports: []networkingv1.NetworkPolicyPort{storeuse.TCPPort(SGLangPort)},
	}}
	if hcd.Spec.Roles != nil {
		// The roles hand KV over to each other: decode servers reach the prefill leaders'
		// bootstrap server, then both roles' transfer engines talk on ports chosen at run time.
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{hicachev1alpha1.LabelDeployment: hcd.Name},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: hicachev1alpha1.LabelRole, Operator: metav1.LabelSelectorOpExists}},
			}}},
			Ports: storeuse.PortsExcept(SGLangPort),
		})
	}
	if hcd.Spec.Storage != nil && r.SegmentPerPod() > 0 {
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{storeuse.BackendPeer(hcd.Spec.Storage.BackendRef.Name)},
			Ports: storeuse.PortsExcept(SGLangPort, DistInitPort),
		})
	}
	return storeuse.IngressPolicy(deploymentPolicyName(hcd.Name), hcd.Namespace, commonLabels(hcd), []metav1.OwnerReference{ownerRef(hcd)},
		map[string]string{hicachev1alpha1.LabelDeployment: hcd.Name}, rules...)
}

// BuildGroupNetworkPolicy admits the ranks of group k to each other on every port but SGLang's
// HTTP port: torch.distributed's rendezvous on the dist-init port, then NCCL and Gloo on ports
// chosen at run time.
func BuildGroupNetworkPolicy(hcd *hicachev1alpha1.HiCacheDeployment, k GroupKey) *networkingv1.NetworkPolicy {
	group := groupSelector(hcd.Name, k)
	return storeuse.IngressPolicy(groupName(hcd.Name, k), hcd.Namespace, groupLabels(hcd, k), []metav1.OwnerReference{ownerRef(hcd)}, group,
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: group}}},
			Ports: storeuse.PortsExcept(SGLangPort),
		},
	)
}
