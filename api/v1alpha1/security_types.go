package v1alpha1

import (
	networkingv1 "k8s.io/api/networking/v1"
)

// ServingSecurity locks a deployment's SGLang servers. Keys reach the pods only through
// secretKeyRef environment variables; they never appear in the pod spec, status, events or logs.
// +kubebuilder:validation:XValidation:rule="!has(self.adminAPIKeySecretRef) || !has(self.apiKeySecretRef) || self.adminAPIKeySecretRef.name != self.apiKeySecretRef.name || self.adminAPIKeySecretRef.key != self.apiKeySecretRef.key",message="spec.security.adminAPIKeySecretRef and spec.security.apiKeySecretRef name the same Secret key: the admin key must differ from the API key every client holds"
type ServingSecurity struct {
	// adminAPIKeySecretRef names the Secret key holding SGLang's admin API key
	// (--admin-api-key), which the admin endpoints (clearing or detaching the L3 store, weight
	// updates, profiling, flushing the cache) require as a bearer token. When unset the operator
	// creates the Secret <deployment>-sglang-admin with a random key under admin-api-key, owned by
	// the deployment; it is generated once and kept for the deployment's life.
	// +optional
	AdminAPIKeySecretRef *SecretKeyReference `json:"adminAPIKeySecretRef,omitempty"`

	// apiKeySecretRef names the Secret key holding SGLang's API key (--api-key), which every
	// other endpoint (the OpenAI-compatible API, generate, ...) then requires as a bearer token;
	// health, readiness and metrics stay open for probes. When unset those endpoints need no
	// key. With spec.router the router requires the same key of its clients and presents it to
	// the servers.
	// +optional
	APIKeySecretRef *SecretKeyReference `json:"apiKeySecretRef,omitempty"`

	// clients are the peers that may reach SGLang's HTTP port, in the NetworkPolicy peer form
	// (podSelector, namespaceSelector, ipBlock). When empty, every pod of the deployment's
	// namespace may. With spec.router, these peers, and only they, reach the router's HTTP and
	// metrics ports, and the router reaches the servers.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Clients []networkingv1.NetworkPolicyPeer `json:"clients,omitempty"`
}

// SecretKeyReference names one key of a Secret in the object's own namespace.
type SecretKeyReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`

	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// Reasons of the HiCacheDeployment's conditions and events about its keys.
const (
	// ReasonKeySecretInvalid: a Secret spec.security names is missing, lacks the key or holds an
	// empty one, or the Secret the operator would generate exists and is not the deployment's.
	ReasonKeySecretInvalid = "KeySecretInvalid"
	// ReasonAdminKeyGenerated: the operator generated the admin API key's Secret.
	ReasonAdminKeyGenerated = "AdminKeyGenerated"
	// ReasonAdminKeySecretAdopted: the generated admin API key's Secret had lost its owner
	// reference, and the operator put it back.
	ReasonAdminKeySecretAdopted = "AdminKeySecretAdopted"
)
