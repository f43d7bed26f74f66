package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Profile names a built-in model architecture whose cache facts (attention kind, pools, which
// drafts are packed) the operator knows.
// +kubebuilder:validation:Enum=DeepSeekV3;DeepSeekV32;DeepSeekV4;KimiK2;KimiK3;GLM5;Qwen3;Qwen3Next;Llama3;GptOss
type Profile string

// AttentionKind is how a model's attention KV is shaped, which decides whether its KV pools are
// split across tensor-parallel ranks (MHA) or identical on every rank (MLA).
// +kubebuilder:validation:Enum=MHA;MLA;DSV4;HybridMambaMHA;HybridMambaMLA
type AttentionKind string

// The attention kinds.
const (
	AttentionMHA            AttentionKind = "MHA"
	AttentionMLA            AttentionKind = "MLA"
	AttentionDSV4           AttentionKind = "DSV4"
	AttentionHybridMambaMHA AttentionKind = "HybridMambaMHA"
	AttentionHybridMambaMLA AttentionKind = "HybridMambaMLA"
)

// DraftAlgorithm is SGLang's --speculative-algorithm. The operator supports these of SGLang
// 0.5.23's algorithms; UNO and FROZEN_KV_MTP are left out (docs/compatibility.md says why).
// +kubebuilder:validation:Enum=EAGLE;EAGLE3;NEXTN;STANDALONE;NGRAM;DFLASH;DSPARK
type DraftAlgorithm string

// HostPoolKind is the kind of host memory pool a draft model's cache uses.
// +kubebuilder:validation:Enum=MHA;MLA
type HostPoolKind string

// PoolName names an extra KV pool a model keeps beside its main KV.
// +kubebuilder:validation:Enum=indexer;swa;mamba
type PoolName string

// HiCacheDeploymentSpec is the desired state of a HiCacheDeployment.
// The rules that name profiles hold the profiles' draft layouts, attention kinds and pools
// (internal/cache/profiles.go) for the API server: their profile-indexed maps, and the Profile
// enum, are written by `make generate` (hack/profile-cel) and checked by `make verify`.
// +kubebuilder:validation:XValidation:rule="has(self.profile) || has(self.topology.attention)",message="set spec.profile to a built-in architecture (e.g. DeepSeekV4, Qwen3) or spec.topology.attention to describe the model"
// +kubebuilder:validation:XValidation:rule="!has(self.hicache.hostMemoryMode) || self.hicache.hostMemoryMode != 'buffer_only' || has(self.storage)",message="spec.hicache.hostMemoryMode buffer_only keeps no KV in host memory and needs an L3 store: set spec.storage.backendRef"
// +kubebuilder:validation:XValidation:rule="!has(self.topology.attention) || has(self.topology.pools) || !has(self.profile) || self.topology.attention in {'DeepSeekV3': ['MHA', 'MLA'], 'DeepSeekV32': ['MLA', 'DSV4'], 'DeepSeekV4': ['DSV4'], 'GLM5': ['MLA', 'DSV4'], 'GptOss': ['MHA', 'MLA', 'DSV4'], 'KimiK2': ['MHA', 'MLA'], 'KimiK3': ['HybridMambaMHA', 'HybridMambaMLA'], 'Llama3': ['MHA', 'MLA'], 'Qwen3': ['MHA', 'MLA'], 'Qwen3Next': ['HybridMambaMHA', 'HybridMambaMLA']}[self.profile]",message="spec.topology.attention does not fit the pools of spec.profile (an indexer pool needs MLA, Mamba state a hybrid attention, the DeepSeek-V4 pools DSV4): leave attention to the profile, or set spec.topology.pools too"
// +kubebuilder:validation:XValidation:rule="!has(self.topology.draft) || self.topology.draft.algorithm == 'NGRAM' || has(self.topology.draft.packedLayers) || (has(self.profile) && self.topology.draft.algorithm in {'DeepSeekV3': ['DFLASH', 'DSPARK', 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE'], 'DeepSeekV32': ['DFLASH', 'DSPARK', 'EAGLE', 'EAGLE3', 'NEXTN'], 'DeepSeekV4': ['DFLASH', 'DSPARK', 'EAGLE', 'EAGLE3', 'NEXTN'], 'GLM5': ['DFLASH', 'DSPARK', 'EAGLE', 'EAGLE3', 'NEXTN'], 'GptOss': ['DFLASH', 'EAGLE3'], 'KimiK2': ['DFLASH', 'DSPARK', 'EAGLE3', 'STANDALONE'], 'KimiK3': ['DFLASH', 'DSPARK', 'EAGLE3'], 'Llama3': ['DFLASH', 'DSPARK', 'EAGLE', 'EAGLE3', 'STANDALONE'], 'Qwen3': ['DFLASH', 'DSPARK', 'EAGLE', 'EAGLE3', 'STANDALONE'], 'Qwen3Next': ['DFLASH', 'EAGLE', 'EAGLE3', 'NEXTN']}[self.profile])",message="spec.topology.draft.algorithm: spec.profile has no built-in layout for this algorithm (or spec.profile is not set): set spec.topology.draft.packedLayers (above 0: packed into the target's pools; 0: a sidecar draft with its own pool, spec.topology.draft.hostPool)"
// +kubebuilder:validation:XValidation:rule="!has(self.topology.draft) || has(self.topology.draft.packedLayers) || has(self.topology.draft.modelPath) || self.topology.draft.algorithm in ['EAGLE3', 'STANDALONE', 'DFLASH', 'DSPARK'] || !has(self.profile) || !(self.topology.draft.algorithm in {'DeepSeekV3': ['DFLASH', 'DSPARK', 'EAGLE3', 'STANDALONE'], 'DeepSeekV32': ['DFLASH', 'DSPARK', 'EAGLE3'], 'DeepSeekV4': ['DFLASH', 'EAGLE3'], 'GLM5': ['DFLASH', 'DSPARK', 'EAGLE3'], 'GptOss': ['DFLASH', 'EAGLE3'], 'KimiK2': ['DFLASH', 'DSPARK', 'EAGLE3', 'STANDALONE'], 'KimiK3': ['DFLASH', 'DSPARK', 'EAGLE3'], 'Llama3': ['DFLASH', 'DSPARK', 'EAGLE', 'EAGLE3', 'STANDALONE'], 'Qwen3': ['DFLASH', 'DSPARK', 'EAGLE', 'EAGLE3', 'STANDALONE'], 'Qwen3Next': ['DFLASH', 'EAGLE3']}[self.profile])",message="spec.topology.draft.modelPath is required: spec.profile keeps this algorithm as a sidecar draft, which runs its own checkpoint"
// +kubebuilder:validation:XValidation:rule="!has(self.topology.draft) || !has(self.topology.draft.hostPool) || has(self.topology.draft.packedLayers) || !has(self.profile) || !(self.topology.draft.algorithm in {'DeepSeekV3': ['EAGLE', 'NEXTN'], 'DeepSeekV32': ['EAGLE', 'NEXTN'], 'DeepSeekV4': ['DSPARK', 'EAGLE', 'NEXTN'], 'GLM5': ['EAGLE', 'NEXTN'], 'GptOss': [], 'KimiK2': [], 'KimiK3': [], 'Llama3': [], 'Qwen3': [], 'Qwen3Next': ['EAGLE', 'NEXTN']}[self.profile])",message="spec.topology.draft.hostPool is for a sidecar draft: spec.profile packs this algorithm into the target's pools (set packedLayers 0 for a sidecar)"
// +kubebuilder:validation:XValidation:rule="!has(self.topology.draft) || !has(self.topology.draft.hostPool) || self.topology.draft.hostPool != 'MLA' || (has(self.topology.attention) ? self.topology.attention : (has(self.profile) ? {'DeepSeekV3': 'MLA', 'DeepSeekV32': 'MLA', 'DeepSeekV4': 'DSV4', 'GLM5': 'MLA', 'GptOss': 'MHA', 'KimiK2': 'MLA', 'KimiK3': 'HybridMambaMLA', 'Llama3': 'MHA', 'Qwen3': 'MHA', 'Qwen3Next': 'HybridMambaMHA'}[self.profile] : 'MHA')) in ['MLA', 'DSV4', 'HybridMambaMLA']",message="spec.topology.draft.hostPool MLA needs a rank-replicated target (attention MLA, DSV4 or HybridMambaMLA): the draft of an MHA target has an MHA host pool"
// +kubebuilder:validation:XValidation:rule="!has(self.topology.draft) || self.topology.draft.algorithm != 'DSPARK' || !has(self.topology.draft.packedLayers) || self.topology.draft.packedLayers == 0 || (has(self.topology.attention) ? self.topology.attention == 'DSV4' : (has(self.profile) && self.profile == 'DeepSeekV4'))",message="spec.topology.draft.packedLayers above 0 packs DSpark layers only into a DeepSeek-V4 (DSV4) target; on other models DSPARK is a sidecar draft: set packedLayers 0"
// +kubebuilder:validation:XValidation:rule="!has(self.hicache.memLayout) || self.hicache.memLayout != 'layer_first' || !has(self.storage)",message="spec.hicache.memLayout layer_first is not supported with the Mooncake L3 store (SGLang would switch to a page_first layout): use page_first, or page_first_direct with ioBackend direct"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || !has(self.replicas) || self.replicas == 1",message="spec.replicas counts the serving groups of a deployment without roles: with spec.roles, set spec.roles.prefill.replicas and spec.roles.decode.replicas and leave spec.replicas at 1"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || !has(self.roles.decode.l3) || self.roles.decode.l3 == 'None' || has(self.storage)",message="spec.roles.decode.l3 Offload and HiCache write to the L3 store: set spec.storage.backendRef, or set spec.roles.decode.l3 None"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || !has(self.roles.decode.l3) || self.roles.decode.l3 == 'None' || !has(self.hicache.hostMemoryMode) || self.hicache.hostMemoryMode != 'buffer_only'",message="spec.hicache.hostMemoryMode buffer_only is refused by SGLang on decode servers: set spec.roles.decode.l3 None, or use hostMemoryMode cache"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || !has(self.roles.decode.l3) || self.roles.decode.l3 != 'HiCache' || !has(self.topology.draft) || self.topology.draft.algorithm in ['EAGLE', 'NEXTN', 'EAGLE3', 'DSPARK']",message="spec.roles.decode.l3 HiCache needs SGLang's decode radix cache, which serves only the EAGLE (NEXTN), EAGLE3 and DSPARK drafts: change spec.topology.draft.algorithm or set spec.roles.decode.l3 None"
// +kubebuilder:validation:XValidation:rule="has(self.roles) || !has(self.router) || (!has(self.router.prefillPolicy) && !has(self.router.decodePolicy))",message="spec.router.prefillPolicy and spec.router.decodePolicy choose the servers of one role and apply only with spec.roles: set spec.router.policy instead"
// +kubebuilder:validation:XValidation:rule="!has(self.model.source) || !has(self.template) || !has(self.template.volumeMounts) || self.template.volumeMounts.all(m, m.mountPath != '/models' && !m.mountPath.startsWith('/models/'))",message="spec.template.volumeMounts: with spec.model.source the operator mounts the weights at /models: mount elsewhere, or drop spec.model.source and mount the weights yourself"
// The next rules mirror checks of SGLang's own argument resolution (internal/resolve/serverargs.go
// has them all, test/conformance proves them against the pinned release).
// +kubebuilder:validation:XValidation:rule="!has(self.topology.draft) || !has(self.profile) || self.profile != 'DeepSeekV4' || self.topology.draft.algorithm in ['EAGLE', 'DSPARK']",message="spec.topology.draft.algorithm: SGLang runs DeepSeek-V4 (spec.profile DeepSeekV4) only with the EAGLE (MTP) and DSPARK drafts; for MTP write EAGLE, not NEXTN, which SGLang checks before it reads NEXTN as EAGLE"
// +kubebuilder:validation:XValidation:rule="!has(self.topology.draft) || !has(self.profile) || self.profile != 'DeepSeekV4' || self.topology.draft.algorithm != 'EAGLE' || (has(self.topology.draft.eagleTopK) && self.topology.draft.eagleTopK == 1)",message="spec.topology.draft.eagleTopK: SGLang runs the EAGLE draft of DeepSeek-V4 only as a chain and checks for top-k 1 before it fills in a default: set eagleTopK 1 (with numSteps, and numDraftTokens numSteps + 1)"
// +kubebuilder:validation:XValidation:rule="!has(self.topology.draft) || self.topology.draft.algorithm != 'STANDALONE' || !has(self.topology.dpAttention) || !self.topology.dpAttention",message="spec.topology.draft.algorithm STANDALONE is refused by SGLang with spec.topology.dpAttention: choose another algorithm, or turn dpAttention off"
// +kubebuilder:validation:XValidation:rule="has(self.roles) || !has(self.topology.draft) || self.topology.pipelineParallel <= 1",message="spec.topology.pipelineParallel: SGLang runs a draft (spec.topology.draft) with pipeline parallelism only on prefill servers (spec.roles.prefill), and only EAGLE or DSPARK: set pipelineParallel 1, or serve with spec.roles"
// +kubebuilder:validation:XValidation:rule="has(self.roles) || (has(self.topology.dpAttention) && self.topology.dpAttention) || self.topology.dataParallel <= 1 || self.topology.tensorParallel * self.topology.pipelineParallel * self.topology.dataParallel <= self.topology.gpusPerNode",message="spec.topology.dataParallel without dpAttention makes data-parallel replicas inside one server, which SGLang runs only on one node, and these need more GPUs than gpusPerNode: set spec.topology.dpAttention, or run the replicas as separate serving groups with spec.replicas"
type HiCacheDeploymentSpec struct {
	// model is the served model.
	// +required
	Model ModelSpec `json:"model"`

	// sglang is the SGLang server image; the release it runs is read from it.
	// +optional
	SGLang SGLangSpec `json:"sglang,omitempty"`

	// profile is a built-in architecture that fills in the topology facts (attention kind,
	// extra pools, how drafts are stored). Fields set in spec.topology override it.
	// +optional
	Profile Profile `json:"profile,omitempty"`

	// topology is how the model is split across GPUs and nodes, and its speculative draft.
	// +kubebuilder:default={tensorParallel: 1, pipelineParallel: 1, dataParallel: 1, gpusPerNode: 8}
	// +optional
	Topology TopologySpec `json:"topology,omitempty"`

	// hicache are the hierarchical cache settings: host memory (L2) and the policies between tiers.
	// +kubebuilder:default={}
	// +optional
	HiCache HiCacheSpec `json:"hicache,omitempty"`

	// storage is the shared L3 store and how this deployment's objects are namespaced in it.
	// Without it the cache stops at host memory.
	// +optional
	Storage *StorageSpec `json:"storage,omitempty"`

	// replicas is the number of serving groups. Each group is one SGLang server spanning
	// one or more nodes.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// resources are the CPU and memory of each rank pod. GPUs are added from the topology, and the
	// memory the pod's ranks lend to the store (spec.storage.globalSegmentSize each) is added to
	// the memory request and limit.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// template overrides parts of every rank pod.
	// +optional
	Template PodOverrides `json:"template,omitempty"`

	// rollout is how a change of spec reaches the serving groups.
	// +kubebuilder:default={maxUnavailable: 1}
	// +optional
	Rollout RolloutSpec `json:"rollout,omitempty"`

	// security locks the servers' HTTP APIs with keys from Secrets and says who may reach them.
	// The admin endpoints are always locked: without spec.security.adminAPIKeySecretRef the
	// operator generates a key.
	// +optional
	Security *ServingSecurity `json:"security,omitempty"`

	// probes tunes the rank pods' startup, readiness and liveness probes.
	// +optional
	Probes ProbesSpec `json:"probes,omitempty"`

	// roles splits serving into prefill and decode groups (prefill/decode disaggregation). Without
	// it every serving group does both.
	// +optional
	Roles *RolesSpec `json:"roles,omitempty"`

	// router runs SGLang's router in front of the serving groups; the client Service then points
	// at the router. Without it the client Service balances over the groups' leaders.
	// +optional
	Router *RouterSpec `json:"router,omitempty"`
}

// ModelSpec names the model a deployment serves and where its weights come from.
// +kubebuilder:validation:XValidation:rule="has(self.path) != has(self.source)",message="spec.model: set exactly one of path (weights inside the image, or a hub id SGLang downloads itself) or source (a claim, a host path or a hub download the operator mounts; --model-path follows from it)"
// +kubebuilder:validation:XValidation:rule="!has(self.source) || !has(self.source.hub) || (has(self.revision) && self.revision.matches('^[0-9a-f]{40}$'))",message="spec.model.revision must be a commit (40 lowercase hex characters) with a hub source: a branch or a tag such as main can move to other weights while the spec stays the same, so ranks started before and after the move would write two layouts under one L3 namespace; pin the commit the branch or tag points at"
// +kubebuilder:validation:XValidation:rule="!has(self.path) || self.path.startsWith('/') || (has(self.revision) && self.revision.matches('^[0-9a-f]{40}$'))",message="spec.model.revision must be a commit (40 lowercase hex characters) when spec.model.path is a hub id (not an absolute path), which SGLang downloads when each rank starts: a branch or a tag such as main can move to other weights while the spec stays the same, so ranks started before and after the move would write two layouts under one L3 namespace; pin the commit the branch or tag points at, or serve a local path (an absolute one, or spec.model.source)"
// +kubebuilder:validation:XValidation:rule="!has(self.source) || has(self.source.hub) || has(self.servedName)",message="spec.model.servedName is required with a pvc or hostPath source: it names the model in the API and in every L3 key (the mount path would)"
type ModelSpec struct {
	// path is the model path or hub id passed to --model-path as it is: for images that bake the
	// weights in, or a hub id SGLang downloads itself. Set it or spec.model.source, not both:
	// with a source, --model-path is where the source is mounted.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.trim().size() > 0",message="spec.model.path is blank: set the model directory or hub id SGLang loads"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|[^$])([$][$])*[$][(]')",message="spec.model.path holds a $(NAME) reference, which the kubelet would replace with a variable's value in each pod while the operator chooses the L3 namespace from the text as written: write the value itself ($$( for a literal)"
	// +optional
	Path string `json:"path,omitempty"`

	// source is where the rank pods get the weights: a PersistentVolumeClaim, a directory on
	// every node, or a download from the Hugging Face hub at start. It is mounted read-only at
	// /models and --model-path follows from it.
	// +optional
	Source *ModelSource `json:"source,omitempty"`

	// weightsSize is the size of the checkpoint's files, e.g. 700Gi. The startup probe's budget
	// follows it (spec.probes.startupSeconds).
	// +optional
	WeightsSize *resource.Quantity `json:"weightsSize,omitempty"`

	// servedName is the name the API serves the model under (--served-model-name). It is also
	// part of every L3 key. Defaults to path, or to the repository of a hub source.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|[^$])([$][$])*[$][(]')",message="spec.model.servedName holds a $(NAME) reference, which the kubelet would replace with a variable's value in each pod while the operator chooses the L3 namespace from the text as written: write the value itself ($$( for a literal)"
	// +optional
	ServedName string `json:"servedName,omitempty"`

	// revision is the model's revision. A change of revision changes the bytes behind every L3
	// key. With spec.model.path it is passed to --revision; with a hub source it is the revision
	// downloaded; with a claim or a host path it records which revision they hold (SGLang loads a
	// local directory as it is). A hub model (spec.model.source.hub, or a spec.model.path that is
	// not absolute, which SGLang downloads) must name a commit, 40 lowercase hex characters: a
	// branch or a tag moves to other weights while the spec stays the same.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|[^$])([$][$])*[$][(]')",message="spec.model.revision holds a $(NAME) reference, which the kubelet would replace with a variable's value in each pod while the operator chooses the L3 namespace from the text as written: write the value itself ($$( for a literal)"
	// +optional
	Revision string `json:"revision,omitempty"`

	// quantization is the weight quantization (--quantization), e.g. fp8.
	// +optional
	Quantization Quantization `json:"quantization,omitempty"`
}

// Quantization is SGLang's --quantization: its choices in SGLang 0.5.23.
// +kubebuilder:validation:Enum=awq;fp8;mxfp8;gptq;gptq_marlin;awq_marlin;bitsandbytes;gguf;modelopt;modelopt_fp8;modelopt_fp4;nvfp4_online;modelopt_mixed;petit_nvfp4;w8a8_int8;w8a8_fp8;moe_wna16;w4afp8;mxfp4;auto-round;auto-round-int8;compressed-tensors;modelslim;mxfp_w4a8;quark;quark_int4fp8_moe;quark_mxfp4;mlx_q4;mlx_q8;unquant;humming
type Quantization string

// SGLangSpec is the SGLang server image.
// +kubebuilder:validation:XValidation:rule="!has(self.image) || has(self.compatibleRelease) || self.image.matches('^([^@]+/)?lmsysorg/sglang:v0[.]5[.]23(-(cu[0-9]{3}|runtime|amd64|arm64))*(@sha256:[0-9a-f]{64})?$')",message="spec.sglang.image: the operator has the arguments of SGLang 0.5.23 only, read from lmsysorg/sglang:v0.5.23 (its cuNNN, runtime, amd64 and arm64 builds, on Docker Hub or a mirror whose path ends in lmsysorg/sglang); for an image of another release or a private build, set spec.sglang.compatibleRelease to the checked release whose arguments it accepts"
// +kubebuilder:validation:XValidation:rule="!has(self.image) || !has(self.compatibleRelease) || self.image.matches('@sha256:[0-9a-f]{64}$') || self.image.matches('^([^@]+/)?lmsysorg/sglang:v[0-9]+[.][0-9]+[.][0-9]+([.]post[0-9]+|rc[0-9]+)?(-(cu[0-9]{3}|runtime|amd64|arm64))*$')",message="spec.sglang.image: its SGLang release is not read from its tag (a private build, latest, another platform's build), so the image itself is the layout fact and a tag can be pushed again with other bytes: pin it by digest (image@sha256:...)"
type SGLangSpec struct {
	// image is the SGLang server image; the operator's default image when empty. The SGLang
	// release is read from it: a release tag of lmsysorg/sglang (v0.5.23, and its cuNNN, runtime,
	// amd64 and arm64 builds of the same release) on Docker Hub or on a mirror whose path ends in
	// lmsysorg/sglang, or the digest of a checked image. The release is a layout fact (a change
	// to a release whose keys and bytes are not recorded as equal moves the deployment to a new
	// L3 namespace) and decides the arguments the command line is checked against. An image
	// whose release is not read (a private build, latest) must be pinned by digest
	// (image@sha256:...) and name compatibleRelease; its digest is then the layout fact.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// compatibleRelease is the checked SGLang release whose command-line arguments the image
	// accepts, for an image whose release the operator has no argument definitions of, or
	// cannot read. It picks the arguments the command line is checked against, nothing else:
	// the image's own release (or its digest) stays the layout fact. Leave it out for an image
	// of a checked release.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self in ['0.5.23']",message="spec.sglang.compatibleRelease must be a release the operator has the argument definitions of: 0.5.23"
	// +optional
	CompatibleRelease string `json:"compatibleRelease,omitempty"`

	// versionLine is deprecated and decides nothing: the release is read from the image. A
	// value is accepted only when it is the image's release line (0.5 for SGLang 0.5.23, or the
	// line of compatibleRelease for an image whose release is not read); remove it.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+\.[0-9]+$`
	// +optional
	VersionLine string `json:"versionLine,omitempty"`
}

// TopologySpec describes how the model is split across GPUs.
// +kubebuilder:validation:XValidation:rule="(self.tensorParallel * self.pipelineParallel) % self.gpusPerNode == 0 || self.gpusPerNode % (self.tensorParallel * self.pipelineParallel) == 0",message="spec.topology: tensorParallel x pipelineParallel must be a multiple or a divisor of gpusPerNode, so that every node runs whole ranks"
// +kubebuilder:validation:XValidation:rule="!has(self.dpAttention) || !self.dpAttention || (self.dataParallel > 1 && self.tensorParallel % self.dataParallel == 0)",message="spec.topology.dpAttention needs dataParallel > 1 dividing tensorParallel (attention data parallelism splits the tensor-parallel group)"
type TopologySpec struct {
	// tensorParallel is the tensor-parallel size (--tp-size).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +optional
	TensorParallel int32 `json:"tensorParallel,omitempty"`

	// pipelineParallel is the pipeline-parallel size (--pp-size).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	PipelineParallel int32 `json:"pipelineParallel,omitempty"`

	// dataParallel is the data-parallel size (--dp-size).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +optional
	DataParallel int32 `json:"dataParallel,omitempty"`

	// dpAttention turns on data-parallel attention (--enable-dp-attention): the tensor-parallel
	// group is split into dataParallel attention groups, each with its own attention rank 0.
	// +optional
	DPAttention bool `json:"dpAttention,omitempty"`

	// gpusPerNode is the number of GPUs each rank pod uses.
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	GPUsPerNode int32 `json:"gpusPerNode,omitempty"`

	// attention overrides the profile's attention kind.
	// +optional
	Attention AttentionKind `json:"attention,omitempty"`

	// pools overrides the profile's extra KV pools beside the main KV.
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +optional
	Pools []PoolName `json:"pools,omitempty"`

	// draft is the speculative-decoding draft.
	// +optional
	Draft *DraftSpec `json:"draft,omitempty"`
}

// DraftSpec is a speculative-decoding draft.
// +kubebuilder:validation:XValidation:rule="!(self.algorithm in ['EAGLE3', 'STANDALONE', 'DFLASH', 'DSPARK']) || has(self.modelPath)",message="spec.topology.draft.modelPath is required: this speculative algorithm runs a separate draft checkpoint"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'NGRAM' || !has(self.modelPath)",message="spec.topology.draft.modelPath must be empty for NGRAM, which drafts from the prompt and needs no model"
// +kubebuilder:validation:XValidation:rule="self.algorithm == 'NGRAM' || !has(self.packedLayers) || self.packedLayers != 0 || has(self.modelPath)",message="spec.topology.draft.modelPath is required with packedLayers 0: a sidecar draft runs its own checkpoint"
// +kubebuilder:validation:XValidation:rule="!has(self.dsparkBlockSize) || self.algorithm == 'DSPARK'",message="spec.topology.draft.dsparkBlockSize only applies to the DSPARK algorithm"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'NGRAM' || (!has(self.packedLayers) && !has(self.hostPool))",message="spec.topology.draft: NGRAM drafts from the prompt and keeps no draft KV: leave packedLayers and hostPool unset"
// +kubebuilder:validation:XValidation:rule="!has(self.packedLayers) || self.packedLayers == 0 || self.algorithm in ['EAGLE', 'NEXTN', 'DSPARK']",message="spec.topology.draft.packedLayers above 0 packs MTP/NextN (EAGLE, NEXTN) or DeepSeek-V4 DSpark layers into the target's pools; this algorithm runs a separate draft model: set packedLayers 0 or leave it unset"
// +kubebuilder:validation:XValidation:rule="!has(self.hostPool) || !has(self.packedLayers) || self.packedLayers == 0",message="spec.topology.draft.hostPool is for a sidecar draft (packedLayers 0): packed draft layers live in the target's pools"
// +kubebuilder:validation:XValidation:rule="!(self.algorithm in ['EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE']) || has(self.numSteps) || (!has(self.eagleTopK) && !has(self.numDraftTokens))",message="spec.topology.draft.numSteps is required with eagleTopK or numDraftTokens: SGLang chooses the draft tree's settings all together or takes all three"
// +kubebuilder:validation:XValidation:rule="self.algorithm != 'DSPARK' || !has(self.numDraftTokens) || (has(self.dsparkBlockSize) && self.numDraftTokens == self.dsparkBlockSize + 1)",message="spec.topology.draft.numDraftTokens: SGLang requires DSpark's draft tokens to be dsparkBlockSize + 1 (set dsparkBlockSize too: without it SGLang takes the block size from the draft checkpoint), or leave numDraftTokens unset"
// +kubebuilder:validation:XValidation:rule="!has(self.modelPath) || self.modelPath.startsWith('/') || (has(self.revision) && self.revision.matches('^[0-9a-f]{40}$'))",message="spec.topology.draft.revision must be a commit (40 lowercase hex characters) when spec.topology.draft.modelPath is a hub id (not an absolute path), which SGLang downloads when each rank starts (at main without a revision): a branch or a tag such as main can move to other draft weights while the spec stays the same, so ranks started before and after the move would write two layouts under one L3 namespace; pin the commit the branch or tag points at, or serve the draft from a local path (an absolute one)"
// +kubebuilder:validation:XValidation:rule="!has(self.revision) || has(self.modelPath)",message="spec.topology.draft.revision is the revision of spec.topology.draft.modelPath; without modelPath SGLang reads the draft from the model's own checkpoint at spec.model.revision: remove revision or set modelPath"
type DraftSpec struct {
	// algorithm is SGLang's --speculative-algorithm.
	// +required
	Algorithm DraftAlgorithm `json:"algorithm"`

	// modelPath is the draft checkpoint (--speculative-draft-model-path).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|[^$])([$][$])*[$][(]')",message="spec.topology.draft.modelPath holds a $(NAME) reference, which the kubelet would replace with a variable's value in each pod while the operator chooses the L3 namespace from the text as written: write the value itself ($$( for a literal)"
	// +optional
	ModelPath string `json:"modelPath,omitempty"`

	// revision is the draft checkpoint's revision (--speculative-draft-model-revision). A change
	// of revision changes the bytes behind every draft L3 key. A hub draft (a modelPath that is
	// not absolute, which SGLang downloads) must name a commit, 40 lowercase hex characters: a
	// branch or a tag moves to other weights while the spec stays the same. With a local path it
	// records which revision the directory holds (SGLang loads a local directory as it is).
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|[^$])([$][$])*[$][(]')",message="spec.topology.draft.revision holds a $(NAME) reference, which the kubelet would replace with a variable's value in each pod while the operator chooses the L3 namespace from the text as written: write the value itself ($$( for a literal)"
	// +optional
	Revision string `json:"revision,omitempty"`

	// packedLayers overrides the profile's count of draft layers packed as tail layers of the
	// target's cache (MTP/NextN and DeepSeek-V4 DSpark). 0 means the draft keeps its own pools.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	// +optional
	PackedLayers *int32 `json:"packedLayers,omitempty"`

	// hostPool overrides the profile's kind of the draft's own host pool (sidecar drafts).
	// +optional
	HostPool HostPoolKind `json:"hostPool,omitempty"`

	// kvCacheDType is the draft's KV dtype (--speculative-draft-kv-cache-dtype).
	// +optional
	KVCacheDType DraftKVCacheDType `json:"kvCacheDType,omitempty"`

	// numSteps is --speculative-num-steps.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	NumSteps int32 `json:"numSteps,omitempty"`

	// eagleTopK is --speculative-eagle-topk.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	EagleTopK int32 `json:"eagleTopK,omitempty"`

	// numDraftTokens is --speculative-num-draft-tokens.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +optional
	NumDraftTokens int32 `json:"numDraftTokens,omitempty"`

	// dsparkBlockSize is --speculative-dspark-block-size.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +optional
	DSparkBlockSize int32 `json:"dsparkBlockSize,omitempty"`
}

// KVCacheDType is SGLang's --kv-cache-dtype: its choices in SGLang 0.5.23. SGLang checks at
// start whether the GPU and attention backend support the 4-bit ones (nvfp4, fp4_mx_block16).
// +kubebuilder:validation:Enum=auto;fp8_e5m2;fp8_e4m3;mxfp8;bf16;bfloat16;nvfp4;fp4_mx_block16
type KVCacheDType string

// DraftKVCacheDType is SGLang's --speculative-draft-kv-cache-dtype: its choices in SGLang 0.5.23
// (fewer than the target's).
// +kubebuilder:validation:Enum=auto;fp8_e5m2;fp8_e4m3;bf16;bfloat16
type DraftKVCacheDType string

// HostMemoryMode is --hicache-host-memory-mode.
// +kubebuilder:validation:Enum=cache;buffer_only
type HostMemoryMode string

// WritePolicy is --hicache-write-policy.
// +kubebuilder:validation:Enum=write_back;write_through;write_through_selective
type WritePolicy string

// IOBackend is --hicache-io-backend. SGLang's kernel_ascend (Ascend NPUs) is left out: rank pods
// request NVIDIA GPUs.
// +kubebuilder:validation:Enum=direct;kernel
type IOBackend string

// MemLayout is --hicache-mem-layout.
// +kubebuilder:validation:Enum=layer_first;page_first;page_first_direct;page_first_kv_split;page_head
type MemLayout string

// PrefetchPolicy is --hicache-storage-prefetch-policy.
// +kubebuilder:validation:Enum=best_effort;wait_complete;timeout
type PrefetchPolicy string

// HiCacheSpec are the hierarchical cache settings.
// +kubebuilder:validation:XValidation:rule="!(has(self.ratio) && has(self.sizeGB))",message="spec.hicache: set ratio or sizeGB, not both (sizeGB overrides ratio in SGLang, so one of them would be silently ignored)"
// +kubebuilder:validation:XValidation:rule="!has(self.memLayout) || self.memLayout != 'page_first_direct' || (has(self.ioBackend) && self.ioBackend == 'direct')",message="spec.hicache.memLayout page_first_direct needs ioBackend direct (the default, kernel, makes SGLang switch to direct on its own)"
// +kubebuilder:validation:XValidation:rule="!has(self.ioBackend) || self.ioBackend != 'direct' || (has(self.memLayout) && self.memLayout in ['layer_first', 'page_first_direct'])",message="spec.hicache.ioBackend direct needs memLayout page_first_direct or layer_first: SGLang's direct copies know no other layout (it switches page_first, the default, to page_first_direct on its own)"
// +kubebuilder:validation:XValidation:rule="!has(self.hostMemoryMode) || self.hostMemoryMode != 'buffer_only' || !has(self.writePolicy) || self.writePolicy != 'write_back'",message="spec.hicache.writePolicy write_back does not apply to hostMemoryMode buffer_only (there is no host tier to write back from): use write_through"
type HiCacheSpec struct {
	// hostMemoryMode is how host memory is used: cache keeps KV in host memory (L2); buffer_only
	// uses it only as a staging buffer to L3.
	// +optional
	HostMemoryMode HostMemoryMode `json:"hostMemoryMode,omitempty"`

	// ratio is the host pool size as a multiple of the GPU pool (--hicache-ratio), above 1.
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 1.0",message="spec.hicache.ratio must be greater than 1: the host pool is a multiple of the GPU pool"
	// +optional
	Ratio string `json:"ratio,omitempty"`

	// sizeGB is the host pool size per rank in GB (--hicache-size); it overrides ratio.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +optional
	SizeGB int32 `json:"sizeGB,omitempty"`

	// writePolicy is --hicache-write-policy.
	// +optional
	WritePolicy WritePolicy `json:"writePolicy,omitempty"`

	// ioBackend is --hicache-io-backend.
	// +optional
	IOBackend IOBackend `json:"ioBackend,omitempty"`

	// memLayout is --hicache-mem-layout. It decides the bytes behind every L3 key.
	// +optional
	MemLayout MemLayout `json:"memLayout,omitempty"`

	// prefetchPolicy is --hicache-storage-prefetch-policy.
	// +optional
	PrefetchPolicy PrefetchPolicy `json:"prefetchPolicy,omitempty"`

	// pageSize is --page-size, in tokens. Every L3 key hashes a page, so a new page size
	// writes new keys.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +optional
	PageSize int32 `json:"pageSize,omitempty"`

	// kvCacheDType is --kv-cache-dtype.
	// +optional
	KVCacheDType KVCacheDType `json:"kvCacheDType,omitempty"`

	// mambaSSMDType is --mamba-ssm-dtype for hybrid models.
	// +kubebuilder:validation:Enum=float32;bfloat16;float16
	// +optional
	MambaSSMDType string `json:"mambaSSMDType,omitempty"`
}

// NamespaceStrategy is how a deployment's L3 objects are kept apart from objects written
// under another layout.
// +kubebuilder:validation:Enum=LayoutHash;Fixed
type NamespaceStrategy string

const (
	// NamespaceLayoutHash derives the namespace from the layout fingerprint: a breaking change
	// moves writers to a fresh namespace and the old one is flushed when nothing uses it.
	NamespaceLayoutHash NamespaceStrategy = "LayoutHash"
	// NamespaceFixed keeps one namespace: a breaking change stops every writer, flushes the
	// namespace and then starts the new generation.
	NamespaceFixed NamespaceStrategy = "Fixed"
)

// FlushPolicy is what happens to a namespace that no longer matches the layout.
// +kubebuilder:validation:Enum=Auto;Manual
type FlushPolicy string

const (
	// FlushAuto flushes a stale namespace once nothing uses it.
	FlushAuto FlushPolicy = "Auto"
	// FlushManual only records stale namespaces; a person flushes them.
	FlushManual FlushPolicy = "Manual"
)

// TransferProtocol is the Mooncake transfer protocol.
// +kubebuilder:validation:Enum=tcp;rdma
type TransferProtocol string

// StorageSpec is the L3 store a deployment writes to.
// +kubebuilder:validation:XValidation:rule="!has(self.namespaceStrategy) || self.namespaceStrategy != 'Fixed' || has(self.namespace)",message="spec.storage.namespace is required with the Fixed namespace strategy"
// +kubebuilder:validation:XValidation:rule="!has(self.namespace) || (has(self.namespaceStrategy) && self.namespaceStrategy == 'Fixed')",message="spec.storage.namespace is only used with namespaceStrategy Fixed; LayoutHash derives it from the layout"
type StorageSpec struct {
	// backendRef names the CacheBackend, in this namespace.
	// +required
	BackendRef LocalObjectReference `json:"backendRef"`

	// namespaceStrategy is how objects of different layouts are kept apart.
	// +kubebuilder:default=LayoutHash
	// +optional
	NamespaceStrategy NamespaceStrategy `json:"namespaceStrategy,omitempty"`

	// namespace is the fixed key prefix (extra_backend_tag) with the Fixed strategy. Names
	// starting with hc- are reserved for the namespaces the operator derives from layouts.
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('hc-')",message="spec.storage.namespace may not start with hc-: such names are reserved for the namespaces the operator derives from layouts (namespaceStrategy LayoutHash), and another deployment may write there under another layout; choose another name"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// flushPolicy is what happens to a namespace left behind by a layout change.
	// +kubebuilder:default=Auto
	// +optional
	FlushPolicy FlushPolicy `json:"flushPolicy,omitempty"`

	// protocol is the transfer protocol between ranks and the store.
	// +kubebuilder:default=tcp
	// +optional
	Protocol TransferProtocol `json:"protocol,omitempty"`

	// globalSegmentSize is the memory each rank lends to the store (0: a pure client, when the
	// backend runs store pods); at least 16Mi otherwise, the least Mooncake mounts. SGLang divides
	// the global_segment_size it is given by the attention-TP size × the PP size, so the operator
	// renders this value times that product. The memory of each rank pod is requested on top of
	// spec.resources (and added to a memory limit, if one is set).
	// +optional
	GlobalSegmentSize *resource.Quantity `json:"globalSegmentSize,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// PodOverrides are the parts of rank pods a user may set: explicit fields rather than a patch of
// the pod template, so that the API server can refuse, at apply, whatever would change what the
// operator owns (the serving container's name, command, arguments, ports and L3 environment, its
// volumes and their mount paths, the labels it finds its pods by). What CEL cannot judge within
// its cost budget (names compared across two lists) the operator checks when it resolves the
// spec (internal/resolve), before anything is applied.
// +kubebuilder:validation:XValidation:rule="!has(self.gangScheduling) || self.gangScheduling.scheduler != 'Volcano' || !has(self.schedulerName) || self.schedulerName == 'volcano'",message="spec.template.schedulerName: gangScheduling Volcano runs the rank pods with Volcano's scheduler (volcano): leave schedulerName unset or set it to volcano"
type PodOverrides struct {
	// labels added to every rank pod. Keys under hicache.io/ and apps.kubernetes.io/ are the
	// operator's and the StatefulSet controller's, which find the pods by them.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('hicache.io/') && !k.startsWith('apps.kubernetes.io/') && !k.startsWith('statefulset.kubernetes.io/') && k != 'controller-revision-hash')",message="spec.template.labels: keys under hicache.io/, apps.kubernetes.io/ and statefulset.kubernetes.io/ and controller-revision-hash are set by the operator and the StatefulSet controller, which find the rank pods by them: choose another key"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to every rank pod. Keys under hicache.io/ are the operator's.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('hicache.io/'))",message="spec.template.annotations: keys under hicache.io/ are set by the operator (the layout and template hashes of the rank pods): choose another key"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// leader overrides parts of the pod of node rank 0 of every serving group, the one that
	// serves HTTP.
	// +optional
	Leader *RoleOverrides `json:"leader,omitempty"`

	// follower overrides parts of the pods of node ranks 1 and above (groups of several nodes).
	// +optional
	Follower *RoleOverrides `json:"follower,omitempty"`

	// nodeSelector for every rank pod.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations for every rank pod.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// env added to the SGLang container. POD_IP, NODE_RANK, MOONCAKE_* and HICACHE_* are the
	// operator's: they come from the topology, the CacheBackend and spec.security.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(e, !(e.name in ['POD_IP', 'NODE_RANK']) && !e.name.startsWith('MOONCAKE_'))",message="spec.template.env: POD_IP, NODE_RANK and MOONCAKE_* are set by the operator from the topology and the CacheBackend (the L3 store's address, segment and protocol): remove them, or set spec.storage"
	// +kubebuilder:validation:XValidation:rule="self.all(e, !e.name.startsWith('HICACHE_'))",message="spec.template.env: HICACHE_* variables are the operator's (the keys among them come from the Secrets spec.security names): remove them, and name key Secrets in spec.security.adminAPIKeySecretRef and spec.security.apiKeySecretRef"
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// serviceAccountName of every rank pod.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// volumes added to every rank pod: caches, secrets, weights that spec.model.source does not
	// cover (an image volume, a CSI driver). dshm, hicache, model and infiniband are the
	// operator's names.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(v, !(v.name in ['dshm', 'hicache', 'model', 'infiniband']))",message="spec.template.volumes: dshm, hicache, model and infiniband are the operator's volumes (shared memory, the rendered cache configuration, spec.model.source, RDMA devices): give the volume another name"
	// +listType=map
	// +listMapKey=name
	// +optional
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// volumeMounts added to the SGLang container; each names one of spec.template.volumes.
	// /dev/shm, /etc/hicache and /dev/infiniband (and paths below them) are the operator's, and
	// /models too with spec.model.source. A mount is a layout fact (its volume's source and how
	// it is mounted) unless it is an emptyDir at or below a neutral mount point: /tmp, /var/tmp,
	// /var/log, /root/.cache/sglang. Init containers and sidecars may not mount writable a
	// volume mounted here.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(m, ['/dev/shm', '/etc/hicache', '/dev/infiniband'].all(p, m.mountPath != p && !m.mountPath.startsWith(p + '/')))",message="spec.template.volumeMounts: /dev/shm, /etc/hicache and /dev/infiniband are where the operator mounts shared memory, the rendered cache configuration and RDMA devices: mount elsewhere"
	// +kubebuilder:validation:XValidation:rule="self.all(m, !has(m.subPathExpr) || m.subPathExpr == '' || ['/tmp', '/var/tmp', '/var/log', '/root/.cache/sglang'].exists(p, m.mountPath == p || m.mountPath.startsWith(p + '/')))",message="spec.template.volumeMounts: a subPathExpr gives each pod another directory of the volume, and outside the neutral mount points (/tmp, /var/tmp, /var/log, /root/.cache/sglang) SGLang may read weights, code or configuration there, under one L3 namespace: write the directory in subPath"
	// +listType=map
	// +listMapKey=mountPath
	// +optional
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// affinity of every rank pod. The operator adds to it, for groups of several nodes, a
	// required pod anti-affinity term that keeps two ranks of one group off one node; node
	// affinity, pod affinity and the other anti-affinity terms are kept as they are.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// topologySpreadConstraints of every rank pod, e.g. to spread serving groups across zones
	// (select them with the hicache.io/deployment label; hicache.io/group tells groups apart).
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// priorityClassName of every rank pod.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// schedulerName of every rank pod, e.g. a gang scheduler's. See spec.template.gangScheduling
	// for what Volcano and Kueue need besides.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`

	// gangScheduling makes every serving group one gang: all its pods are placed together or
	// none is, so a group never holds some nodes' GPUs while waiting for the others.
	// +optional
	GangScheduling *GangScheduling `json:"gangScheduling,omitempty"`

	// imagePullSecrets of every rank pod, for a private SGLang image.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// securityContext of every rank pod (user and group IDs, fsGroup for volumes, seccomp).
	// +optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// containerSecurityContext of the SGLang container. With spec.storage.protocol rdma the
	// operator adds the IPC_LOCK capability to it.
	// +optional
	ContainerSecurityContext *corev1.SecurityContext `json:"containerSecurityContext,omitempty"`

	// containers are added beside the SGLang container of every rank pod (sidecars such as log
	// shippers). sglang, guard and model-download are the operator's container names, and its ports (30000 for HTTP, 20102
	// for the group's rendezvous) are taken in the pod.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(c, !(c.name in ['sglang', 'guard', 'model-download']))",message="spec.template.containers: sglang, guard and model-download are the operator's containers (the server, the proxy in front of it, the download of a hub model source): give the sidecar another name"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !has(c.ports) || c.ports.all(p, p.containerPort != 30000 && p.containerPort != 20102))",message="spec.template.containers: ports 30000 (SGLang's HTTP API) and 20102 (the group's rendezvous) are taken by the serving container in every rank pod: listen on another port"
	// +listType=map
	// +listMapKey=name
	// +optional
	Containers []corev1.Container `json:"containers,omitempty"`

	// initContainers run before the SGLang container of every rank pod, after the operator's
	// download of a hub model source; one with restartPolicy Always is a native sidecar that
	// runs beside it.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(c, !(c.name in ['sglang', 'guard', 'model-download']))",message="spec.template.initContainers: sglang, guard and model-download are the operator's containers (the server, the proxy in front of it, the download of a hub model source): give the init container another name"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !has(c.ports) || c.ports.all(p, p.containerPort != 30000 && p.containerPort != 20102))",message="spec.template.initContainers: ports 30000 (SGLang's HTTP API) and 20102 (the group's rendezvous) are taken by the serving container in every rank pod: listen on another port"
	// +listType=map
	// +listMapKey=name
	// +optional
	InitContainers []corev1.Container `json:"initContainers,omitempty"`

	// extraArgs are appended to the SGLang command line as they are. Flags the spec has a field
	// for, flags the operator sets, and flags the L3 cache cannot stay correct with are refused
	// (docs/compatibility.md lists them); flags that change the cache layout, such as --dtype,
	// become layout facts and move the deployment to its own L3 namespace.
	// +kubebuilder:validation:XValidation:rule="self.all(a, !(a.split('=')[0] in {'--admin-api-key': 'set spec.security.adminAPIKeySecretRef instead', '--api-key': 'set spec.security.apiKeySecretRef instead', '--attention-context-parallel-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--attention-data-parallel-size': 'set spec.topology.dataParallel instead', '--attn-cp-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--attn-dp-size': 'set spec.topology.dataParallel instead', '--config': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--data-parallel-size': 'set spec.topology.dataParallel instead', '--dcp-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--decode-context-parallel-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--decoupled-spec-role': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--disaggregation-bootstrap-port': 'set spec.roles.transfer.bootstrapPort instead', '--disaggregation-decode-enable-offload-kvcache': 'set spec.roles.decode.l3 instead', '--disaggregation-decode-enable-radix-cache': 'set spec.roles.decode.l3 instead', '--disaggregation-ib-device': 'set spec.roles.transfer.ibDevice instead', '--disaggregation-mode': 'set spec.roles instead', '--disaggregation-transfer-backend': 'set spec.roles.transfer.backend instead', '--dist-init-addr': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--dp-size': 'set spec.topology.dataParallel instead', '--dwdp-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-dp-attention': 'set spec.topology.dpAttention instead', '--enable-flexkv': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-hicache': 'set spec.hicache instead', '--enable-hierarchical-cache': 'set spec.hicache instead', '--enable-kv-cache-sharding': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-lmcache': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-prefill-cp': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-return-aux-hidden-states': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-unified-cache-external-linker': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--flexkv-config-file': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--grpc-port': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--hicache-host-memory-mode': 'set spec.hicache.hostMemoryMode instead', '--hicache-io-backend': 'set spec.hicache.ioBackend instead', '--hicache-mem-layout': 'set spec.hicache.memLayout instead', '--hicache-ratio': 'set spec.hicache.ratio instead', '--hicache-size': 'set spec.hicache.sizeGB instead', '--hicache-storage-backend': 'set spec.storage instead', '--hicache-storage-backend-extra-config': 'set spec.storage instead', '--hicache-storage-prefetch-policy': 'set spec.hicache.prefetchPolicy instead', '--hicache-write-policy': 'set spec.hicache.writePolicy instead', '--host': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--kv-cache-dtype': 'set spec.hicache.kvCacheDType instead', '--lmcache-config-file': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--mamba-ssm-dtype': 'set spec.hicache.mambaSSMDType instead', '--model': 'set spec.model.path instead', '--model-path': 'set spec.model.path instead', '--nccl-init-addr': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--nnodes': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--node-rank': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--page-size': 'set spec.hicache.pageSize instead', '--pipeline-parallel-size': 'set spec.topology.pipelineParallel instead', '--port': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--pp-size': 'set spec.topology.pipelineParallel instead', '--quantization': 'set spec.model.quantization instead', '--radix-cache-backend': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--revision': 'set spec.model.revision instead', '--served-model-name': 'set spec.model.servedName instead', '--speculative-algorithm': 'set spec.topology.draft.algorithm instead', '--speculative-dflash-block-size': 'set spec.topology.draft.numDraftTokens instead', '--speculative-draft-kv-cache-dtype': 'set spec.topology.draft.kvCacheDType instead', '--speculative-draft-model': 'set spec.topology.draft.modelPath instead', '--speculative-draft-model-path': 'set spec.topology.draft.modelPath instead', '--speculative-draft-model-revision': 'set spec.topology.draft.revision instead', '--speculative-dspark-block-size': 'set spec.topology.draft.dsparkBlockSize instead', '--speculative-eagle-topk': 'set spec.topology.draft.eagleTopK instead', '--speculative-num-draft-tokens': 'set spec.topology.draft.numDraftTokens instead', '--speculative-num-steps': 'set spec.topology.draft.numSteps instead', '--tensor-parallel-size': 'set spec.topology.tensorParallel instead', '--tokenizer-worker-num': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--tp-size': 'set spec.topology.tensorParallel instead', '--unified-cache-external-linker-config': 'the operator sets it or the L3 cache cannot stay correct with it; remove it'}))",messageExpression="[{'--admin-api-key': 'set spec.security.adminAPIKeySecretRef instead', '--api-key': 'set spec.security.apiKeySecretRef instead', '--attention-context-parallel-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--attention-data-parallel-size': 'set spec.topology.dataParallel instead', '--attn-cp-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--attn-dp-size': 'set spec.topology.dataParallel instead', '--config': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--data-parallel-size': 'set spec.topology.dataParallel instead', '--dcp-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--decode-context-parallel-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--decoupled-spec-role': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--disaggregation-bootstrap-port': 'set spec.roles.transfer.bootstrapPort instead', '--disaggregation-decode-enable-offload-kvcache': 'set spec.roles.decode.l3 instead', '--disaggregation-decode-enable-radix-cache': 'set spec.roles.decode.l3 instead', '--disaggregation-ib-device': 'set spec.roles.transfer.ibDevice instead', '--disaggregation-mode': 'set spec.roles instead', '--disaggregation-transfer-backend': 'set spec.roles.transfer.backend instead', '--dist-init-addr': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--dp-size': 'set spec.topology.dataParallel instead', '--dwdp-size': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-dp-attention': 'set spec.topology.dpAttention instead', '--enable-flexkv': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-hicache': 'set spec.hicache instead', '--enable-hierarchical-cache': 'set spec.hicache instead', '--enable-kv-cache-sharding': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-lmcache': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-prefill-cp': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-return-aux-hidden-states': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--enable-unified-cache-external-linker': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--flexkv-config-file': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--grpc-port': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--hicache-host-memory-mode': 'set spec.hicache.hostMemoryMode instead', '--hicache-io-backend': 'set spec.hicache.ioBackend instead', '--hicache-mem-layout': 'set spec.hicache.memLayout instead', '--hicache-ratio': 'set spec.hicache.ratio instead', '--hicache-size': 'set spec.hicache.sizeGB instead', '--hicache-storage-backend': 'set spec.storage instead', '--hicache-storage-backend-extra-config': 'set spec.storage instead', '--hicache-storage-prefetch-policy': 'set spec.hicache.prefetchPolicy instead', '--hicache-write-policy': 'set spec.hicache.writePolicy instead', '--host': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--kv-cache-dtype': 'set spec.hicache.kvCacheDType instead', '--lmcache-config-file': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--mamba-ssm-dtype': 'set spec.hicache.mambaSSMDType instead', '--model': 'set spec.model.path instead', '--model-path': 'set spec.model.path instead', '--nccl-init-addr': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--nnodes': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--node-rank': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--page-size': 'set spec.hicache.pageSize instead', '--pipeline-parallel-size': 'set spec.topology.pipelineParallel instead', '--port': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--pp-size': 'set spec.topology.pipelineParallel instead', '--quantization': 'set spec.model.quantization instead', '--radix-cache-backend': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--revision': 'set spec.model.revision instead', '--served-model-name': 'set spec.model.servedName instead', '--speculative-algorithm': 'set spec.topology.draft.algorithm instead', '--speculative-dflash-block-size': 'set spec.topology.draft.numDraftTokens instead', '--speculative-draft-kv-cache-dtype': 'set spec.topology.draft.kvCacheDType instead', '--speculative-draft-model': 'set spec.topology.draft.modelPath instead', '--speculative-draft-model-path': 'set spec.topology.draft.modelPath instead', '--speculative-draft-model-revision': 'set spec.topology.draft.revision instead', '--speculative-dspark-block-size': 'set spec.topology.draft.dsparkBlockSize instead', '--speculative-eagle-topk': 'set spec.topology.draft.eagleTopK instead', '--speculative-num-draft-tokens': 'set spec.topology.draft.numDraftTokens instead', '--speculative-num-steps': 'set spec.topology.draft.numSteps instead', '--tensor-parallel-size': 'set spec.topology.tensorParallel instead', '--tokenizer-worker-num': 'the operator sets it or the L3 cache cannot stay correct with it; remove it', '--tp-size': 'set spec.topology.tensorParallel instead', '--unified-cache-external-linker-config': 'the operator sets it or the L3 cache cannot stay correct with it; remove it'}].map(m, self.filter(a, a.split('=')[0] in m).map(a, 'spec.template.extraArgs sets ' + a.split('=')[0] + ': ' + m[a.split('=')[0]] + ' (docs/compatibility.md lists every refused flag and why)'))[0][0]"
	// +kubebuilder:validation:XValidation:rule="self.all(a, !a.matches('(^|[^$])([$][$])*[$][(]'))",message="spec.template.extraArgs holds a $(NAME) reference, which the kubelet would replace with a variable's value in each pod while the operator chooses the L3 namespace from the text as written: write the value itself ($$( for a literal)"
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +listType=atomic
	// +optional
	ExtraArgs []string `json:"extraArgs,omitempty"`
}

// RolloutSpec is how spec changes reach the serving groups.
type RolloutSpec struct {
	// maxUnavailable is how many serving groups may be down at once during a rollout; with
	// spec.roles, how many of each role's, and also the skew bound of a change that rolls both
	// roles: the count of one role's groups on the new template leads the other's by at most
	// this many while both still have groups to roll.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +optional
	MaxUnavailable int32 `json:"maxUnavailable,omitempty"`
}

// HiCacheDeployment condition types and reasons.
const (
	// ConditionReady is True when every serving group is ready.
	ConditionReady = "Ready"
	// ConditionProgressing is True while groups are created, rolled or recreated.
	ConditionProgressing = "Progressing"
	// ConditionCacheLayoutCurrent is True when every group runs the current layout namespace.
	ConditionCacheLayoutCurrent = "CacheLayoutCurrent"
	// ConditionBackendReady mirrors the referenced CacheBackend's Ready condition.
	ConditionBackendReady = "BackendReady"

	ReasonAllGroupsReady      = "AllGroupsReady"
	ReasonGroupsNotReady      = "GroupsNotReady"
	ReasonRollingOut          = "RollingOut"
	ReasonUpToDate            = "UpToDate"
	ReasonInvalidSpec         = "InvalidSpec"
	ReasonUnknownProfile      = "UnknownProfile"
	ReasonBackendNotFound     = "BackendNotFound"
	ReasonBackendNotReady     = "BackendNotReady"
	ReasonBackendReady        = "BackendReady"
	ReasonNoStorage           = "NoStorage"
	ReasonLayoutCurrent       = "LayoutCurrent"
	ReasonLayoutChanging      = "LayoutChanging"
	ReasonWaitingForFlush     = "WaitingForFlush"
	ReasonScaledToZero        = "ScaledToZero"
	ReasonGroupRecreated      = "GroupRecreated"
	ReasonReconcileError      = "ReconcileError"
	ReasonNamespaceRotated    = "NamespaceRotated"
	ReasonFlushRequested      = "FlushRequested"
	ReasonStaleNamespaceInUse = "StaleNamespaceInUse"
	// ReasonNamespaceConflict: another deployment writes the namespace, on the same store, under
	// another layout; this one is held (no serving group writes it) until that ends.
	ReasonNamespaceConflict = "NamespaceConflict"
	// ReasonStaleNamespaceDropped: status.cache.staleNamespaces was full and its oldest entry was
	// dropped; that namespace is no longer flushed by the operator.
	ReasonStaleNamespaceDropped = "StaleNamespaceDropped"
	// ReasonRecountAfterFailover: the masters elected another leader after the flush that
	// emptied a namespace this deployment is about to write under a new layout; the namespace is
	// counted, and flushed again, through the new leader before the new layout starts.
	ReasonRecountAfterFailover = "RecountAfterFailover"
)

// Bounds of the HiCacheDeployment's status lists: what lies beyond them is counted, not listed.
const (
	// MaxListedFacts bounds status.cache.facts.
	MaxListedFacts = 64
	// MaxStaleNamespaces bounds status.cache.staleNamespaces.
	MaxStaleNamespaces = 32
	// MaxFormedGroups bounds status.formedGroups: every group of both roles at their largest.
	MaxFormedGroups = 2048
)

// StaleBlock is why the flush of a stale namespace waits.
// +kubebuilder:validation:Enum=InUse;ManualPolicy;FlushFailed;BackendMissing
type StaleBlock string

// Why a stale namespace's flush waits.
const (
	// StaleInUse: a serving pod or another deployment of the store still uses it.
	StaleInUse StaleBlock = "InUse"
	// StaleManualPolicy: spec.storage.flushPolicy is Manual; a person flushes it.
	StaleManualPolicy StaleBlock = "ManualPolicy"
	// StaleFlushFailed: its CacheFlush failed and is retried.
	StaleFlushFailed StaleBlock = "FlushFailed"
	// StaleBackendMissing: the CacheBackend it was written to does not exist.
	StaleBackendMissing StaleBlock = "BackendMissing"
)

// HiCacheDeploymentStatus is the observed state of a HiCacheDeployment.
type HiCacheDeploymentStatus struct {
	// conditions: Ready, Progressing, CacheLayoutCurrent, BackendReady.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of serving groups that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of serving groups whose every rank is ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// updatedReplicas is the number of serving groups running the current spec.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`

	// ready is readyReplicas/desired groups, for display.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Ready string `json:"ready,omitempty"`

	// selector is the label selector of the rank pods, for the scale subresource.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Selector string `json:"selector,omitempty"`

	// attention is the resolved attention kind (from the profile or the spec).
	// +optional
	Attention AttentionKind `json:"attention,omitempty"`

	// draft is the resolved draft, e.g. "DSPARK (packed, 3 layers)".
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Draft string `json:"draft,omitempty"`

	// cache is the L3 layout the deployment writes under.
	// +optional
	Cache *CacheStatus `json:"cache,omitempty"`

	// plan summarises the per-rank L3 backup duties (with spec.roles, the prefill role's).
	// +optional
	Plan *PlanStatus `json:"plan,omitempty"`

	// roles counts the serving groups of each role of a deployment with spec.roles; replicas,
	// readyReplicas and updatedReplicas are then the sums over both roles.
	// +optional
	Roles *RolesStatus `json:"roles,omitempty"`

	// formedGroups is the operator's record of the serving groups that formed (every rank Ready
	// at once): which pod held each rank then. A rank replaced by a new pod since breaks the
	// group's process group, which is then recreated whole. It is written with the status that
	// reports the group Ready; not for editing.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=2048
	// +optional
	FormedGroups []FormedGroup `json:"formedGroups,omitempty"`
}

// FormedGroup records the pods a serving group formed with.
type FormedGroup struct {
	// name is the serving group's StatefulSet.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`

	// revision identifies the StatefulSet, pod template and recreation the group formed under: a
	// record of another revision says nothing of the group's pods.
	// +kubebuilder:validation:MaxLength=64
	// +required
	Revision string `json:"revision"`

	// pods are the UIDs of the group's rank pods when it formed, by rank: "0=<uid>,1=<uid>".
	// +kubebuilder:validation:MaxLength=262144
	// +required
	Pods string `json:"pods"`
}

// RolesStatus counts the serving groups of each role.
type RolesStatus struct {
	// prefill counts the prefill role's groups.
	// +optional
	Prefill RoleStatus `json:"prefill,omitempty"`

	// decode counts the decode role's groups.
	// +optional
	Decode RoleStatus `json:"decode,omitempty"`
}

// RoleStatus counts the serving groups of one role.
type RoleStatus struct {
	// replicas is the number of the role's groups that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of the role's groups whose every rank is ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// updatedReplicas is the number of the role's groups running the current spec.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`

	// desiredReplicas is the number of groups the role asks for (spec.roles.<role>.replicas).
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas,omitempty"`

	// ready is readyReplicas/desiredReplicas, for display.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Ready string `json:"ready,omitempty"`
}

// CacheStatus is the L3 layout of a deployment.
type CacheStatus struct {
	// layoutHash is the SHA-256 fingerprint of the layout facts.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	LayoutHash string `json:"layoutHash,omitempty"`

	// shortHash is the short form of layoutHash.
	// +kubebuilder:validation:MaxLength=16
	// +optional
	ShortHash string `json:"shortHash,omitempty"`

	// namespace is the key prefix (extra_backend_tag) the current generation writes under.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// backend is the CacheBackend the current generation writes to.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Backend string `json:"backend,omitempty"`

	// facts are the layout facts behind the fingerprint, "name=value": the first 64 in name
	// order (kubectl hicache plan shows them all); factCount says how many there are.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	Facts []string `json:"facts,omitempty"`

	// factCount is the number of layout facts, also those beyond the 64 that facts lists.
	// +kubebuilder:validation:Minimum=0
	// +optional
	FactCount int32 `json:"factCount,omitempty"`

	// staleNamespaces are namespaces written under an older layout (or on an older backend),
	// awaiting a flush: at most 32, the newest. When a layout change would add a 33rd, the oldest
	// is dropped from the list and counted in droppedStaleNamespaces.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	StaleNamespaces []StaleNamespace `json:"staleNamespaces,omitempty"`

	// droppedStaleNamespaces is the number of stale namespaces dropped from staleNamespaces
	// because it was full. The operator no longer flushes them (a flush already requested still
	// runs): a StaleNamespaceDropped Event names each, and kubectl hicache flush --prefix removes
	// what it holds.
	// +kubebuilder:validation:Minimum=0
	// +optional
	DroppedStaleNamespaces int32 `json:"droppedStaleNamespaces,omitempty"`

	// lastFlush is the most recent flush of a namespace this deployment left behind.
	// +optional
	LastFlush *FlushRecord `json:"lastFlush,omitempty"`

	// since is when the deployment started writing namespace under layoutHash. Of two
	// deployments that write one namespace of a store under different layouts, the one that
	// recorded it first keeps it.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// conflict is set while the deployment is held because another deployment writes its
	// namespace, on the same store, under another layout.
	// +optional
	Conflict *NamespaceConflict `json:"conflict,omitempty"`
}

// NamespaceConflict is another deployment writing a namespace under another layout.
type NamespaceConflict struct {
	// namespace is the key prefix both would write.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Namespace string `json:"namespace"`

	// deployment is the HiCacheDeployment that keeps it, namespace/name.
	// +kubebuilder:validation:MaxLength=317
	// +optional
	Deployment string `json:"deployment,omitempty"`

	// layoutHash is the short fingerprint of the layout it writes there.
	// +kubebuilder:validation:MaxLength=16
	// +optional
	LayoutHash string `json:"layoutHash,omitempty"`

	// since is when the deployment was first held; once the other deployment leaves, a flush of
	// what it wrote, created after this time, runs before this deployment writes the namespace.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// StaleNamespace is a namespace written under an older layout.
type StaleNamespace struct {
	// namespace is the key prefix.
	// +kubebuilder:validation:MaxLength=63
	// +required
	Namespace string `json:"namespace"`

	// backend is the CacheBackend that holds it.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Backend string `json:"backend,omitempty"`

	// layoutHash is the short fingerprint of the layout it was written under.
	// +kubebuilder:validation:MaxLength=16
	// +optional
	LayoutHash string `json:"layoutHash,omitempty"`

	// since is when it became stale.
	// +optional
	Since metav1.Time `json:"since,omitempty"`

	// flush is the CacheFlush that removes it, once there is one. One flush serves every
	// deployment that left the namespace of a store under one layout.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Flush string `json:"flush,omitempty"`

	// flushNamespace is the Kubernetes namespace of that CacheFlush, when it is not this
	// deployment's (it lives beside the oldest CacheBackend of the store).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	FlushNamespace string `json:"flushNamespace,omitempty"`

	// blocked is why its flush waits, when it does.
	// +optional
	Blocked StaleBlock `json:"blocked,omitempty"`

	// blockedBy says in words what the flush waits for.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	BlockedBy string `json:"blockedBy,omitempty"`

	// writtenSince is when this deployment started writing the namespace under that layout: a
	// flush created after it removes what the deployment wrote.
	// +optional
	WrittenSince *metav1.Time `json:"writtenSince,omitempty"`
}

// FlushRecord is the outcome of a flush.
type FlushRecord struct {
	// name of the CacheFlush.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`

	// namespace flushed.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// removed is the number of objects removed.
	// +optional
	Removed int64 `json:"removed,omitempty"`

	// completionTime is when it completed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// PlanStatus summarises the rank plan.
type PlanStatus struct {
	// ranks is the number of ranks in one serving group.
	// +optional
	Ranks int32 `json:"ranks,omitempty"`

	// nodes is the number of pods (nodes) in one serving group.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`

	// writers is the number of ranks with at least one L3 write duty.
	// +optional
	Writers int32 `json:"writers,omitempty"`

	// storeMemoryPerRank is the memory each rank lends to the L3 store (spec.storage.globalSegmentSize).
	// +optional
	StoreMemoryPerRank *resource.Quantity `json:"storeMemoryPerRank,omitempty"`

	// storeMemoryPerGroup is the memory all ranks of one serving group lend to the L3 store.
	// +optional
	StoreMemoryPerGroup *resource.Quantity `json:"storeMemoryPerGroup,omitempty"`

	// summary is the plan in one line, e.g. "TP0 writes kv, indexer; 7 followers: no duties
	// (replicated)".
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Summary string `json:"summary,omitempty"`

	// warnings are known gaps of SGLang that affect this plan.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	// +listType=atomic
	// +optional
	Warnings []string `json:"warnings,omitempty"`
}

// HiCacheDeployment runs SGLang serving groups with a hierarchical KV cache whose L3 objects are
// kept correct across layout changes.
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lowercase letters, digits and '-', starting with a letter) of at most 40 characters: it names the Services, StatefulSets and pods of the serving groups"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=hcd,categories=hicache
// +kubebuilder:printcolumn:name="TP",type=integer,JSONPath=`.spec.topology.tensorParallel`
// +kubebuilder:printcolumn:name="Attention",type=string,JSONPath=`.status.attention`
// +kubebuilder:printcolumn:name="Draft",type=string,JSONPath=`.status.draft`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.storage.backendRef.name`
// +kubebuilder:printcolumn:name="Layout",type=string,JSONPath=`.status.cache.shortHash`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Prefill",type=string,JSONPath=`.status.roles.prefill.ready`
// +kubebuilder:printcolumn:name="Decode",type=string,JSONPath=`.status.roles.decode.ready`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.status.cache.namespace`,priority=1
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.status.plan.summary`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HiCacheDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec HiCacheDeploymentSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status HiCacheDeploymentStatus `json:"status,omitempty"`
}

// HiCacheDeploymentList is a list of HiCacheDeployments.
// +kubebuilder:object:root=true
type HiCacheDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HiCacheDeployment `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HiCacheDeployment{}, &HiCacheDeploymentList{})
}
