package v1alpha1

import (
	networkingv1 "k8s.io/api/networking/v1"
)

// ServingSecurity says who may reach a deployment's SGLang servers.
type ServingSecurity struct {
	// clients are the peers that may reach SGLang's HTTP port, in the NetworkPolicy peer form
	// (podSelector, namespaceSelector, ipBlock). When empty, every pod of the deployment's
	// namespace may.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Clients []networkingv1.NetworkPolicyPeer `json:"clients,omitempty"`
}
