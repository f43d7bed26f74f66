package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// RouterSpec runs SGLang's router (smg) in front of the serving groups: it discovers the leaders
// of the groups through Kubernetes (only Ready leaders receive requests), routes each request by
// its policy, and the deployment's client Service points at it instead of at the leaders. With
// spec.roles it runs in prefill/decode mode: it sends each request to a prefill and a decode
// leader, telling the decode server where the prefill's bootstrap server is. Its management
// routes (/workers, /flush_cache, ...) take only a key the operator generates into the Secret
// <deployment>-router-admin; with spec.security.apiKeySecretRef its serving routes require the
// servers' API key.
type RouterSpec struct {
	// replicas is the number of router pods.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// policy is the routing policy (--policy). cache_aware, the default, sends a request to the
	// server whose radix cache most likely holds its prefix.
	// +kubebuilder:default=cache_aware
	// +optional
	Policy RoutingPolicy `json:"policy,omitempty"`

	// prefillPolicy replaces policy for choosing the prefill server of a request
	// (--prefill-policy); only with spec.roles. It also offers bucket, which the release has for
	// prefill servers only: requests are spread by prompt length.
	// +optional
	PrefillPolicy PrefillRoutingPolicy `json:"prefillPolicy,omitempty"`

	// decodePolicy replaces policy for choosing the decode server of a request (--decode-policy);
	// only with spec.roles. Decode servers keep no prefix cache unless spec.roles.decode.l3 is
	// HiCache, so a load-balancing policy (power_of_two, least_load) may route them better than
	// cache_aware.
	// +optional
	DecodePolicy RoutingPolicy `json:"decodePolicy,omitempty"`

	// image is the router image; the operator's default (the smg release it was built against)
	// when empty.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// resources of the router container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// RoutingPolicy is the router's --policy, of the choices the pinned smg release offers both roles.
// +kubebuilder:validation:Enum=cache_aware;round_robin;random;power_of_two;least_load;consistent_hashing;prefix_hash
type RoutingPolicy string

// PrefillRoutingPolicy is the router's --prefill-policy: the policies of RoutingPolicy, and bucket.
// +kubebuilder:validation:Enum=cache_aware;round_robin;random;power_of_two;least_load;consistent_hashing;prefix_hash;bucket
type PrefillRoutingPolicy string

// LabelRouter is the HiCacheDeployment a router pod routes for.
const LabelRouter = LabelPrefix + "router"
