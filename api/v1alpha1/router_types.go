package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// RouterSpec runs SGLang's router (smg) in front of the serving groups: it discovers the leaders
// of the groups through Kubernetes (only Ready leaders receive requests), routes each request by
// its policy, and the deployment's client Service points at it instead of at the leaders.
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

// LabelRouter is the HiCacheDeployment a router pod routes for.
const LabelRouter = LabelPrefix + "router"
