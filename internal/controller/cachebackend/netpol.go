package cachebackend

import (
	networkingv1 "k8s.io/api/networking/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

// storePolicyName is the NetworkPolicy of a backend's store pods.
func storePolicyName(cb string) string { return cb + "-store" }

// BuildMasterNetworkPolicy admits RPC only from the pods that use this backend (serving ranks,
// store pods, flush Jobs), and admin HTTP only from the operator.
func BuildMasterNetworkPolicy(cb *hicachev1alpha1.CacheBackend, operatorNamespace string) *networkingv1.NetworkPolicy {
	m := cb.Spec.Mooncake.Managed
	return storeuse.IngressPolicy(storeuse.MasterName(cb.Name), cb.Namespace, storeuse.BackendLabels(cb, "master"), storeuse.BackendOwner(cb), storeuse.BackendLabels(cb, "master"),
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{storeuse.BackendPeer(cb.Name)},
			Ports: []networkingv1.NetworkPolicyPort{storeuse.TCPPort(m.RPCPort)},
		},
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{storeuse.OperatorPeer(operatorNamespace)},
			Ports: []networkingv1.NetworkPolicyPort{storeuse.TCPPort(m.AdminPort)},
		},
	)
}

// BuildStoreNetworkPolicy admits the pods that use this backend to the store pods' transfer
// engine (the segments they serve, on ports chosen at run time), and nothing to their HTTP API.
func BuildStoreNetworkPolicy(cb *hicachev1alpha1.CacheBackend) *networkingv1.NetworkPolicy {
	return storeuse.IngressPolicy(storePolicyName(cb.Name), cb.Namespace, storeuse.BackendLabels(cb, "store"), storeuse.BackendOwner(cb), storeuse.BackendLabels(cb, "store"),
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{storeuse.BackendPeer(cb.Name)},
			Ports: storeuse.PortsExcept(storeuse.StoreHTTPPort),
		},
	)
}
