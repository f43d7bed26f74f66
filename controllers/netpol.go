package controllers

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// The NetworkPolicies of everything the operator runs. Each admits only the traffic the pods it
// selects need; what a policy does not name is refused by a CNI that enforces policies (the
// policies are Ingress only: egress stays open). Peers are named by the labels the operator puts
// on its own pods; any pod of the same namespace can carry the same labels, so a namespace is
// the trust boundary, except for the operator itself, which is also named by its namespace's
// kubernetes.io/metadata.name label (set by the API server, no user can forge it).

// StoreHTTPPort is the HTTP API of mooncake_store_service (its --port default): /api/put,
// /api/remove_all, /api/unmount. Nothing the operator runs needs it, so no policy admits it.
const StoreHTTPPort = 8080

// OperatorPodLabels are labels the chart puts on the operator's pods; the policies admit the
// operator to the masters' admin port by them.
var OperatorPodLabels = map[string]string{
	"app.kubernetes.io/name":      "hicache-operator",
	"app.kubernetes.io/component": "manager",
}

const namespaceNameLabel = "kubernetes.io/metadata.name"

// policyName of a deployment's serving pods (the group policies take the group's name).
func deploymentPolicyName(hcd string) string { return hcd + "-sglang" }

// storePolicyName is the NetworkPolicy of a backend's store pods.
func storePolicyName(cb string) string { return cb + "-store" }

func tcpPort(p int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(p))}
}

// portsExcept is every TCP and UDP port but the excluded ones, as ranges: the ports of
// torch.distributed, NCCL and Mooncake's transfer engine are chosen at run time, while a
// server's HTTP API must stay closed to the same peers.
func portsExcept(excluded ...int32) []networkingv1.NetworkPolicyPort {
	ex := slices.Clone(excluded)
	slices.Sort(ex)
	ex = slices.Compact(ex)
	var out []networkingv1.NetworkPolicyPort
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		lo := int32(1)
		for _, p := range append(ex, 65536) {
			if p > lo {
				np := networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt32(lo))}
				if hi := p - 1; hi > lo {
					np.EndPort = ptr.To(hi)
				}
				out = append(out, np)
			}
			lo = p + 1
		}
	}
	return out
}

// operatorPeer is the operator's pods: in its own namespace when it is known, else in any.
func operatorPeer(operatorNamespace string) networkingv1.NetworkPolicyPeer {
	ns := &metav1.LabelSelector{}
	if operatorNamespace != "" {
		ns.MatchLabels = map[string]string{namespaceNameLabel: operatorNamespace}
	}
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: &metav1.LabelSelector{MatchLabels: OperatorPodLabels}}
}

// backendPeer is every pod of the namespace that uses backend cb: the serving ranks of the
// deployments on it, its store pods and its flush Jobs; not its master or its managed etcd's
// members, which call none of them.
func backendPeer(cb string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{hicachev1alpha1.LabelBackend: cb},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app.kubernetes.io/component", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"master", "etcd"}},
		},
	}}
}

func ingressPolicy(name, namespace string, labels map[string]string, owners []metav1.OwnerReference, selector map[string]string, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, OwnerReferences: owners},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			// An empty list admits nothing; nil would be dropped and read the same.
			Ingress: append([]networkingv1.NetworkPolicyIngressRule{}, rules...),
		},
	}
}

// buildMasterNetworkPolicy admits RPC only from the pods that use this backend (serving ranks,
// store pods, flush Jobs), and admin HTTP only from the operator.
func buildMasterNetworkPolicy(cb *hicachev1alpha1.CacheBackend, operatorNamespace string) *networkingv1.NetworkPolicy {
	m := cb.Spec.Mooncake.Managed
	return ingressPolicy(masterName(cb.Name), cb.Namespace, backendLabels(cb, "master"), backendOwner(cb), backendLabels(cb, "master"),
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{backendPeer(cb.Name)},
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(m.RPCPort)},
		},
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{operatorPeer(operatorNamespace)},
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(m.AdminPort)},
		},
	)
}

// buildStoreNetworkPolicy admits the pods that use this backend to the store pods' transfer
// engine (the segments they serve, on ports chosen at run time), and nothing to their HTTP API.
func buildStoreNetworkPolicy(cb *hicachev1alpha1.CacheBackend) *networkingv1.NetworkPolicy {
	return ingressPolicy(storePolicyName(cb.Name), cb.Namespace, backendLabels(cb, "store"), backendOwner(cb), backendLabels(cb, "store"),
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{backendPeer(cb.Name)},
			Ports: portsExcept(StoreHTTPPort),
		},
	)
}

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
	return ingressPolicy(routerName(hcd.Name), hcd.Namespace, routerLabels(hcd), []metav1.OwnerReference{ownerRef(hcd)}, routerSelector(hcd),
		networkingv1.NetworkPolicyIngressRule{
			From:  servingClients(hcd),
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(int32(port)), tcpPort(int32(metrics))},
		},
	), nil
}

// buildDeploymentNetworkPolicy covers every serving pod of a deployment: SGLang's HTTP port
// from its clients (spec.security.clients; by default every pod of the deployment's namespace),
// and, when the ranks mount a segment of the store, the other users of the backend to the
// transfer engine. Rank-to-rank traffic is each group's own policy.
func buildDeploymentNetworkPolicy(hcd *hicachev1alpha1.HiCacheDeployment, r *resolve.Resolved) *networkingv1.NetworkPolicy {
	clients := servingClients(hcd)
	if s := hcd.Spec.Security; s != nil && len(s.Clients) > 0 && hcd.Spec.Router != nil {
		// The router is the leaders' client.
		clients = append(clients, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: routerSelector(hcd)}})
	}
	rules := []networkingv1.NetworkPolicyIngressRule{{
		From:  clients,
		Ports: []networkingv1.NetworkPolicyPort{tcpPort(SGLangPort)},
	}}
	if hcd.Spec.Roles != nil {
		// The roles hand KV over to each other: decode servers reach the prefill leaders'
		// bootstrap server, then both roles' transfer engines talk on ports chosen at run time.
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{hicachev1alpha1.LabelDeployment: hcd.Name},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: hicachev1alpha1.LabelRole, Operator: metav1.LabelSelectorOpExists}},
			}}},
			Ports: portsExcept(SGLangPort),
		})
	}
	if hcd.Spec.Storage != nil && r.SegmentPerPod() > 0 {
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{backendPeer(hcd.Spec.Storage.BackendRef.Name)},
			Ports: portsExcept(SGLangPort, DistInitPort),
		})
	}
	return ingressPolicy(deploymentPolicyName(hcd.Name), hcd.Namespace, commonLabels(hcd), []metav1.OwnerReference{ownerRef(hcd)},
		map[string]string{hicachev1alpha1.LabelDeployment: hcd.Name}, rules...)
}

// buildGroupNetworkPolicy admits the ranks of group k to each other on every port but SGLang's
// HTTP port: torch.distributed's rendezvous on the dist-init port, then NCCL and Gloo on ports
// chosen at run time.
func buildGroupNetworkPolicy(hcd *hicachev1alpha1.HiCacheDeployment, k groupKey) *networkingv1.NetworkPolicy {
	group := groupSelector(hcd.Name, k)
	return ingressPolicy(groupName(hcd.Name, k), hcd.Namespace, groupLabels(hcd, k), []metav1.OwnerReference{ownerRef(hcd)}, group,
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: group}}},
			Ports: portsExcept(SGLangPort),
		},
	)
}
