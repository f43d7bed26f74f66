package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// RolesSpec splits serving into prefill and decode groups (SGLang's prefill/decode
// disaggregation): prefill servers compute the prompt's KV and hand it to decode servers over
// the transfer backend. Both roles serve one model with one image and one draft
// (spec.model, spec.sglang, spec.topology.draft); each has its own parallelism, replicas,
// resources and pod overrides.
type RolesSpec struct {
	// prefill are the prefill servers. They read and write the L3 store like a deployment without
	// roles.
	// +required
	Prefill PrefillRoleSpec `json:"prefill"`

	// decode are the decode servers.
	// +required
	Decode DecodeRoleSpec `json:"decode"`

	// transfer is how KV moves from prefill to decode servers.
	// +kubebuilder:default={backend: mooncake, bootstrapPort: 8998}
	// +optional
	Transfer TransferSpec `json:"transfer,omitempty"`
}

// RoleSpec is what one role sets for itself.
type RoleSpec struct {
	// topology overrides the parallel sizes of spec.topology for this role's servers. The model's
	// facts (attention, pools, draft) stay those of spec.topology.
	// +optional
	Topology RoleTopology `json:"topology,omitempty"`

	// replicas is the number of serving groups of this role.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// resources replace spec.resources for this role's rank pods when set.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// template adds to spec.template for this role's rank pods: its labels, annotations, node
	// selector and env are merged over spec.template's, its tolerations appended.
	// +optional
	Template RolePodOverrides `json:"template,omitempty"`
}

// PrefillRoleSpec are the prefill servers.
type PrefillRoleSpec struct {
	RoleSpec `json:",inline"`
}

// DecodeRoleSpec are the decode servers.
type DecodeRoleSpec struct {
	RoleSpec `json:",inline"`

	// l3 is what the decode servers do with the L3 store. None (the default): nothing, decode
	// servers keep no prefix cache. Offload: they write the KV of what they decoded
	// (--disaggregation-decode-enable-offload-kvcache) and read nothing. HiCache: they run the
	// hierarchical cache like prefill servers, reading and writing. Offload and HiCache need
	// spec.storage and write under the prefill's namespace.
	// +kubebuilder:default=None
	// +optional
	L3 DecodeL3 `json:"l3,omitempty"`
}

// DecodeL3 is what decode servers do with the L3 store.
// +kubebuilder:validation:Enum=None;Offload;HiCache
type DecodeL3 string

// What decode servers do with the L3 store.
const (
	DecodeL3None    DecodeL3 = "None"
	DecodeL3Offload DecodeL3 = "Offload"
	DecodeL3HiCache DecodeL3 = "HiCache"
)

// RoleTopology overrides the parallel sizes of spec.topology for one role. Unset fields keep
// spec.topology's.
type RoleTopology struct {
	// tensorParallel is the role's --tp-size.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +optional
	TensorParallel int32 `json:"tensorParallel,omitempty"`

	// pipelineParallel is the role's --pp-size.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	PipelineParallel int32 `json:"pipelineParallel,omitempty"`

	// dataParallel is the role's --dp-size.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +optional
	DataParallel int32 `json:"dataParallel,omitempty"`

	// dpAttention turns data-parallel attention on or off for the role.
	// +optional
	DPAttention *bool `json:"dpAttention,omitempty"`

	// gpusPerNode is the number of GPUs each of the role's rank pods uses.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	GPUsPerNode int32 `json:"gpusPerNode,omitempty"`
}

// RolePodOverrides are one role's additions to spec.template.
type RolePodOverrides struct {
	// labels added to the role's rank pods.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the role's rank pods.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// nodeSelector entries added for the role's rank pods.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations appended for the role's rank pods.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// env added to the role's SGLang container.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
}

// TransferSpec is how KV moves from prefill to decode servers.
// +kubebuilder:validation:XValidation:rule="!has(self.ibDevice) || self.backend != 'mooncake_tcp'",message="spec.roles.transfer.ibDevice names RDMA devices, which the mooncake_tcp backend does not use: remove it or use backend mooncake"
type TransferSpec struct {
	// backend is SGLang's --disaggregation-transfer-backend: mooncake (RDMA), mooncake_tcp
	// (Mooncake over TCP, no RDMA device) or nixl.
	// +kubebuilder:default=mooncake
	// +optional
	Backend TransferBackend `json:"backend,omitempty"`

	// bootstrapPort is the port of the prefill leaders' bootstrap server, through which decode
	// servers find the prefill ranks (--disaggregation-bootstrap-port).
	// +kubebuilder:default=8998
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	// +optional
	BootstrapPort int32 `json:"bootstrapPort,omitempty"`

	// ibDevice names the RDMA devices of the transfer (--disaggregation-ib-device): comma-separated
	// names or a per-GPU JSON map. Without it Mooncake discovers the devices itself.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	IBDevice string `json:"ibDevice,omitempty"`
}

// TransferBackend is SGLang's --disaggregation-transfer-backend, of the choices the operator
// supports.
// +kubebuilder:validation:Enum=mooncake;mooncake_tcp;nixl
type TransferBackend string

// The transfer backends.
const (
	TransferMooncake    TransferBackend = "mooncake"
	TransferMooncakeTCP TransferBackend = "mooncake_tcp"
	TransferNIXL        TransferBackend = "nixl"
)

// Role names a role of a disaggregated deployment.
type Role string

// The roles.
const (
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)
