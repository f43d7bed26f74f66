package v1alpha1

import "k8s.io/apimachinery/pkg/api/resource"

// ModelMountPath is where a model source is mounted, read-only, in the SGLang container: a claim
// or a host path at its root, a hub download in a directory of its own below it. A draft
// checkpoint kept beside the model in a claim or a host path is named by a path below it in
// spec.topology.draft.modelPath.
const ModelMountPath = "/models"

// ModelSource is where the rank pods get the model's weights. Exactly one of pvc, hostPath or hub
// is set.
// +kubebuilder:validation:XValidation:rule="(has(self.pvc) ? 1 : 0) + (has(self.hostPath) ? 1 : 0) + (has(self.hub) ? 1 : 0) == 1",message="spec.model.source: set exactly one of pvc (a claim holding the weights), hostPath (a directory on every node) or hub (a download at start)"
// +kubebuilder:validation:XValidation:rule="!has(self.hub) || !has(self.subPath)",message="spec.model.source.subPath is the model's directory inside a claim or a host path; a hub download has its own directory: remove subPath"
type ModelSource struct {
	// pvc mounts a PersistentVolumeClaim that holds the weights, read-only, in every rank pod of
	// every group: a ReadOnlyMany (or ReadWriteMany) claim, since the ranks run on several nodes.
	// +optional
	PVC *ClaimModelSource `json:"pvc,omitempty"`

	// hostPath mounts a directory that every GPU node holds (a node-local model cache filled
	// beforehand), read-only. A node without it fails the pod's start with an event.
	// +optional
	HostPath *HostPathModelSource `json:"hostPath,omitempty"`

	// hub downloads the model from the Hugging Face hub when each rank pod starts, with the
	// serving image's own hub CLI in an init container, into a volume of the pod.
	// +optional
	Hub *HubModelSource `json:"hub,omitempty"`

	// subPath is the model's directory inside the claim or the host path ("" for its root);
	// --model-path is /models/<subPath>.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-][A-Za-z0-9_./@+-]*$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(p, p == '..')",message="spec.model.source.subPath may not contain '..': it names a directory inside the claim or the host path"
	// +optional
	SubPath string `json:"subPath,omitempty"`
}

// ClaimModelSource is a PersistentVolumeClaim holding the weights.
type ClaimModelSource struct {
	// claimName is the PersistentVolumeClaim, in the deployment's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +required
	ClaimName string `json:"claimName"`
}

// HostPathModelSource is a directory on every GPU node that holds the weights.
type HostPathModelSource struct {
	// path is the directory on the node, absolute.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_.@+-]+)+/?$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(p, p == '..')",message="spec.model.source.hostPath.path may not contain '..': name the directory itself"
	// +required
	Path string `json:"path"`
}

// HubModelSource is a download of a model repository from the Hugging Face hub at pod start.
// Its revision is spec.model.revision, which is then required: the download would otherwise take
// whatever the repository's main branch holds at each pod's start, and the ranks of one group
// could load different weights under one L3 namespace.
type HubModelSource struct {
	// repo is the hub repository id, e.g. deepseek-ai/DeepSeek-V4.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=96
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*$`
	// +required
	Repo string `json:"repo"`

	// tokenSecretRef names the key of a Secret, in the deployment's namespace, that holds a hub
	// access token (for gated or private repositories). It reaches the download container only
	// as the HF_TOKEN variable through a secretKeyRef; the operator never reads it.
	// +optional
	TokenSecretRef *SecretKeyRef `json:"tokenSecretRef,omitempty"`

	// cacheSizeLimit bounds the pod's download volume (an emptyDir on the node's disk, one per
	// pod, emptied when the pod goes). Unset, the volume is bounded by the node's disk only.
	// +optional
	CacheSizeLimit *resource.Quantity `json:"cacheSizeLimit,omitempty"`
}

// SecretKeyRef names one key of a Secret in the same namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// key in the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Key string `json:"key"`
}

// ProbesSpec tunes the rank pods' probes.
type ProbesSpec struct {
	// startupSeconds is how long a rank may take from its container's start to serving (loading
	// the weights, capturing CUDA graphs, warming up) before the kubelet restarts it. Unset, it
	// follows the weights' size: 10 minutes plus 1 minute per 8Gi of spec.model.weightsSize
	// (read at about 136 MiB/s); without weightsSize, the weights are taken to fill half of the
	// group's GPU memory at 80Gi per GPU. A hub download runs before, in an init container, and
	// is not counted.
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	// +optional
	StartupSeconds int32 `json:"startupSeconds,omitempty"`
}
