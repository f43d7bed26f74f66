package resolve

import (
	"errors"
	"fmt"
	"strconv"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// The rules of this file refuse the specs whose rendered command line the pinned SGLang release
// refuses at start, before it starts a process: ServerArgs.resolve_once (the resolution hooks
// of sglang/srt/arg_groups) and check_server_args, as launch_server runs them. Without them such
// a deployment passes kubectl apply and kubectl hicache plan and then crash-loops in its pods.
// Each rule names the check it mirrors; test/conformance (TestSGLangServerArgsAgree) runs the
// real checks on the command lines of the samples and of specs built to reach every rule, and
// requires that SGLang refuses exactly what the operator refuses. docs/compatibility.md lists the
// checks mirrored and those a spec cannot reach.

// serverArgsRule is one of SGLang's checks, restated over the spec: check returns nil when the
// spec passes it, or the refusal in the spec's words (which field, why, what to do).
type serverArgsRule struct {
	// sglang names the check it mirrors: file and function of the pinned release.
	sglang string
	check  func(in serverArgsInput) *FieldError
}

// serverArgsInput is what a rule reads: the spec as one role's servers see it, its resolution,
// the role ("" without spec.roles) and the decode role's L3 mode.
type serverArgsInput struct {
	spec     *hicachev1alpha1.HiCacheDeploymentSpec
	r        *Resolved
	role     hicachev1alpha1.Role
	decodeL3 cache.DecodeL3
}

// draftAlgorithm is the spec's draft algorithm, "" without a draft.
func (in serverArgsInput) draftAlgorithm() hicachev1alpha1.DraftAlgorithm {
	if d := in.spec.Topology.Draft; d != nil {
		return d.Algorithm
	}
	return ""
}

// hierarchicalCache says whether the servers run SGLang's hierarchical cache
// (--enable-hierarchical-cache): every server but a decode one whose L3 mode is not HiCache.
func (in serverArgsInput) hierarchicalCache() bool {
	return in.role != hicachev1alpha1.RoleDecode || in.decodeL3 == cache.DecodeL3HiCache
}

// extraArg returns the values of the last occurrence of a flag in spec.template.extraArgs (as
// SGLang's argparse reads it: aliases and abbreviations resolve to the flag), and whether the
// flag is there.
func (in serverArgsInput) extraArg(flag string) ([]string, bool) {
	if len(in.spec.Template.ExtraArgs) == 0 {
		return nil, false
	}
	spec, err := argspec.Default()
	if err != nil {
		return nil, false
	}
	occ, _ := spec.Parse(in.spec.Template.ExtraArgs)
	var values []string
	found := false
	for _, o := range occ {
		if o.Argument.Flags[0] == flag {
			values, found = o.Values, true
		}
	}
	return values, found
}

// The chunked prefill sizes SGLang 0.5.23 defaults to (memory_hook.handle_gpu_memory_settings),
// by the GPU's memory: 2048 below 20 GiB, 4096 below 60 GiB, 8192 below 160 GiB, 16384 above;
// each is a multiple of the smallest.
const smallestDefaultChunkedPrefill = 2048

// eagleFamily are the algorithms SGLang's _handle_eagle_family resolves.
var eagleFamily = map[hicachev1alpha1.DraftAlgorithm]bool{"EAGLE": true, "EAGLE3": true, "NEXTN": true, "STANDALONE": true}

// serverArgsRules are the rules, in the order SGLang's resolution pipeline runs their checks.
var serverArgsRules = []serverArgsRule{
	{
		sglang: "deepseek_v4_hook.apply_deepseek_v4_defaults (via model_hook.handle_model_specific_adjustments): \"Only EAGLE and DSPARK speculative algorithms are supported for DeepseekV4ForCausalLM\"",
		check: func(in serverArgsInput) *FieldError {
			alg := in.draftAlgorithm()
			if in.spec.Profile != "DeepSeekV4" || alg == "" || alg == "EAGLE" || alg == "DSPARK" {
				return nil
			}
			hint := "use EAGLE (MTP) or DSPARK"
			if alg == "NEXTN" {
				hint = "write EAGLE, the same MTP draft: SGLang checks the DeepSeek-V4 algorithm before it reads NEXTN as EAGLE"
			}
			return &FieldError{Field: "spec.topology.draft.algorithm", Message: fmt.Sprintf("%s is refused by SGLang for DeepSeek-V4 (spec.profile DeepSeekV4), which runs only the EAGLE and DSPARK drafts: %s", alg, hint)}
		},
	},
	{
		sglang: "deepseek_v4_hook.apply_deepseek_v4_defaults: \"Only EAGLE speculative algorithm with topk == 1 is supported for DeepseekV4ForCausalLM\" (checked before SGLang fills in a default top-k)",
		check: func(in serverArgsInput) *FieldError {
			d := in.spec.Topology.Draft
			if in.spec.Profile != "DeepSeekV4" || d == nil || d.Algorithm != "EAGLE" || d.EagleTopK == 1 {
				return nil
			}
			if d.EagleTopK == 0 {
				return &FieldError{Field: "spec.topology.draft.eagleTopK", Message: "is not set; SGLang runs the EAGLE draft of DeepSeek-V4 only as a chain and checks for top-k 1 before it fills in a default: set eagleTopK 1 (with numSteps, and numDraftTokens numSteps + 1)"}
			}
			return &FieldError{Field: "spec.topology.draft.eagleTopK", Message: fmt.Sprintf("is %d; SGLang runs the EAGLE draft of DeepSeek-V4 only as a chain (top-k 1): set it to 1", d.EagleTopK)}
		},
	},
	{
		sglang: "kv_cache_hook.handle_cache_compatibility: \"The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive\"",
		check: func(in serverArgsInput) *FieldError {
			if !in.hierarchicalCache() {
				return nil
			}
			if _, ok := in.extraArg("--disable-radix-cache"); !ok {
				return nil
			}
			return &FieldError{Field: "spec.template.extraArgs", Message: "sets --disable-radix-cache, which SGLang refuses with the hierarchical cache every server of spec.hicache runs (the cache is a radix tree): remove it"}
		},
	},
	{
		sglang: "validation_hook.check_server_args: \"chunked_prefill_size must be divisible by page_size\" (not on decode servers)",
		check: func(in serverArgsInput) *FieldError {
			page := int(in.spec.HiCache.PageSize)
			if in.role == hicachev1alpha1.RoleDecode || page <= 1 {
				return nil
			}
			if v, ok := in.extraArg("--chunked-prefill-size"); ok && len(v) == 1 {
				chunk, err := strconv.Atoi(v[0])
				if err != nil || chunk <= 0 || chunk%page == 0 {
					return nil // argparse refuses a non-integer; 0 or less turns chunked prefill off
				}
				return &FieldError{Field: "spec.hicache.pageSize", Message: fmt.Sprintf("is %d, and spec.template.extraArgs sets --chunked-prefill-size %d, which SGLang requires to be a multiple of the page size: make it a multiple of %d", page, chunk, page)}
			}
			if smallestDefaultChunkedPrefill%page == 0 {
				return nil
			}
			return &FieldError{Field: "spec.hicache.pageSize", Message: fmt.Sprintf("is %d, which does not divide SGLang's default chunked prefill size (%d to %d tokens by the GPU's memory): SGLang requires the chunk to be a multiple of the page, so use a power of two up to %d, or set --chunked-prefill-size to a multiple of %d in spec.template.extraArgs",
				page, smallestDefaultChunkedPrefill, 8*smallestDefaultChunkedPrefill, smallestDefaultChunkedPrefill, page)}
		},
	},
	{
		sglang: "validation_hook.check_server_args: \"multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes\"",
		check: func(in serverArgsInput) *FieldError {
			t := in.spec.Topology
			if t.DataParallel <= 1 || t.DPAttention || in.r.Nodes <= 1 {
				return nil
			}
			return &FieldError{Field: "spec.topology.dataParallel", Message: fmt.Sprintf("is %d without dpAttention, which makes %d data-parallel replicas of the tensor-parallel group inside one server; SGLang runs those only on one node, and this server spans %d: set spec.topology.dpAttention, or run the replicas as separate serving groups with spec.replicas",
				t.DataParallel, t.DataParallel, in.r.Nodes)}
		},
	},
	{
		sglang: "speculative_hook._handle_eagle_family: assert speculative_eagle_topk is None and speculative_num_draft_tokens is None when speculative_num_steps is None",
		check: func(in serverArgsInput) *FieldError {
			d := in.spec.Topology.Draft
			if d == nil || !eagleFamily[d.Algorithm] || d.NumSteps > 0 || (d.EagleTopK == 0 && d.NumDraftTokens == 0) {
				return nil
			}
			return &FieldError{Field: "spec.topology.draft.numSteps", Message: fmt.Sprintf("is not set, but eagleTopK or numDraftTokens is: SGLang chooses the %s tree's settings all together or takes all three: set numSteps too, or leave eagleTopK and numDraftTokens unset", d.Algorithm)}
		},
	},
	{
		sglang: "speculative_hook._handle_eagle_family: \"Currently standalone speculative decoding does not support dp attention.\"",
		check: func(in serverArgsInput) *FieldError {
			if in.draftAlgorithm() != "STANDALONE" || !in.spec.Topology.DPAttention {
				return nil
			}
			return &FieldError{Field: "spec.topology.draft.algorithm", Message: "STANDALONE is refused by SGLang with spec.topology.dpAttention: choose another algorithm, or turn dpAttention off"}
		},
	},
	{
		sglang: "speculative_hook._handle_dflash, _handle_dspark and validation_hook.check_pipeline_parallel_compat: pipeline parallelism with a draft",
		check: func(in serverArgsInput) *FieldError {
			alg := in.draftAlgorithm()
			if alg == "" || in.spec.Topology.PipelineParallel <= 1 {
				return nil
			}
			field := "spec.topology.pipelineParallel"
			if in.role != "" {
				field = "spec.roles." + string(in.role) + ".topology.pipelineParallel"
			}
			switch {
			case alg != "EAGLE" && alg != "NEXTN" && alg != "DSPARK":
				return &FieldError{Field: field, Message: fmt.Sprintf("is %d; SGLang runs a draft with pipeline parallelism only for EAGLE (NEXTN) and DSPARK, not %s: set pipelineParallel 1, or change spec.topology.draft.algorithm", in.spec.Topology.PipelineParallel, alg)}
			case in.role != hicachev1alpha1.RolePrefill:
				return &FieldError{Field: field, Message: fmt.Sprintf("is %d; SGLang runs the %s draft with pipeline parallelism only on prefill servers (spec.roles.prefill): set pipelineParallel 1 here", in.spec.Topology.PipelineParallel, alg)}
			}
			return nil
		},
	},
	{
		sglang: "speculative_hook._handle_dspark: \"DSpark speculative_num_draft_tokens must equal gamma + 1\"",
		check: func(in serverArgsInput) *FieldError {
			d := in.spec.Topology.Draft
			if d == nil || d.Algorithm != "DSPARK" || d.NumDraftTokens == 0 {
				return nil
			}
			if d.DSparkBlockSize == 0 {
				return &FieldError{Field: "spec.topology.draft.numDraftTokens", Message: "is set without dsparkBlockSize: SGLang requires DSpark's draft tokens to be its block size (gamma) + 1, and without dsparkBlockSize it takes gamma from the draft checkpoint, which the operator cannot read: set dsparkBlockSize too, or leave numDraftTokens unset"}
			}
			if d.NumDraftTokens != d.DSparkBlockSize+1 {
				return &FieldError{Field: "spec.topology.draft.numDraftTokens", Message: fmt.Sprintf("is %d; SGLang requires DSpark's draft tokens to be dsparkBlockSize + 1 = %d: set it to %d, or leave it unset", d.NumDraftTokens, d.DSparkBlockSize+1, d.DSparkBlockSize+1)}
			}
			return nil
		},
	},
}

// checkServerArgs refuses a spec whose rendered command line the pinned SGLang would refuse at
// start, with every rule's refusal.
func checkServerArgs(spec *hicachev1alpha1.HiCacheDeploymentSpec, r *Resolved, role hicachev1alpha1.Role, decodeL3 cache.DecodeL3) error {
	in := serverArgsInput{spec: spec, r: r, role: role, decodeL3: decodeL3}
	var errs []error
	for _, rule := range serverArgsRules {
		if fe := rule.check(in); fe != nil {
			errs = append(errs, fe)
		}
	}
	return errors.Join(errs...)
}

// WithoutSGLangRules is Resolve without the rules of this file. It exists for the
// conformance test (test/conformance), which renders the command lines these rules refuse and
// asks the pinned SGLang itself whether it refuses them too; the operator never calls it.
func WithoutSGLangRules(hcd *hicachev1alpha1.HiCacheDeployment) (*Resolved, error) {
	if hcd.Spec.Roles != nil {
		return nil, ErrHasRoles
	}
	return resolveOne(hcd, false)
}

// RolesOfWithoutSGLangRules is RolesOf without the rules of this file, for the conformance
// test like WithoutSGLangRules.
func RolesOfWithoutSGLangRules(hcd *hicachev1alpha1.HiCacheDeployment) (*Roles, error) {
	return rolesOf(hcd, false)
}
