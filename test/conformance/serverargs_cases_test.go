package conformance

import (
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// refusalCase is a sample changed by a patch (merged into it the way a JSON merge patch is:
// maps merge, everything else replaces, null deletes), built to reach one of SGLang's checks.
type refusalCase struct {
	name, sample, patch string
}

// refusals reach the checks of SGLang's ServerArgs resolution that a spec of this API can reach
// (docs/compatibility.md lists them, and those it cannot reach), with their accepted
// neighbours, so that a rule that refuses too much fails here too.
var refusals = []refusalCase{
	// kv_cache_hook.handle_cache_compatibility: HiCache and --disable-radix-cache.
	{"HiCache with --disable-radix-cache", "hicachedeployment_qwen3.yaml", `spec: {template: {extraArgs: ["--disable-radix-cache"]}}`},
	// validation_hook.check_server_args: chunked_prefill_size % page_size.
	{"chunked prefill not a multiple of the page", "hicachedeployment_qwen3.yaml", `spec: {hicache: {pageSize: 64}, template: {extraArgs: ["--chunked-prefill-size", "1000"]}}`},
	{"chunked prefill a multiple of the page", "hicachedeployment_qwen3.yaml", `spec: {hicache: {pageSize: 64}, template: {extraArgs: ["--chunked-prefill-size", "1024"]}}`},
	{"chunked prefill turned off, odd page", "hicachedeployment_qwen3.yaml", `spec: {hicache: {pageSize: 48}, template: {extraArgs: ["--chunked-prefill-size", "-1"]}}`},
	{"page of 48 tokens", "hicachedeployment_qwen3.yaml", `spec: {hicache: {pageSize: 48}}`},
	{"page of 3 tokens", "hicachedeployment_qwen3.yaml", `spec: {hicache: {pageSize: 3}}`},
	{"page of 16 tokens", "hicachedeployment_qwen3.yaml", `spec: {hicache: {pageSize: 16}}`},
	// validation_hook.check_server_args: enable_mixed_chunk with a speculative algorithm.
	{"mixed chunk with NGRAM", "hicachedeployment_qwen3.yaml", `spec: {topology: {draft: {algorithm: NGRAM}}, template: {extraArgs: ["--enable-mixed-chunk"]}}`},
	{"mixed chunk with EAGLE3", "hicachedeployment_kimi_k2_eagle3.yaml", `spec: {template: {extraArgs: ["--enable-mixed-chunk"]}}`},
	// speculative_hook._handle_eagle_family: topk or draft tokens without the number of steps.
	{"EAGLE3 topk without steps", "hicachedeployment_kimi_k2_eagle3.yaml", `spec: {topology: {draft: {numSteps: null, numDraftTokens: null, eagleTopK: 1}}}`},
	{"EAGLE3 draft tokens without steps", "hicachedeployment_kimi_k2_eagle3.yaml", `spec: {topology: {draft: {numSteps: null, eagleTopK: null}}}`},
	{"EAGLE3 with no tree settings", "hicachedeployment_kimi_k2_eagle3.yaml", `spec: {topology: {draft: {numSteps: null, eagleTopK: null, numDraftTokens: null}}}`},
	{"EAGLE3 topk 4 on pages of 64", "hicachedeployment_kimi_k2_eagle3.yaml", `spec: {hicache: {pageSize: 64}, topology: {draft: {eagleTopK: 4, numDraftTokens: 8}}}`},
	// deepseek_v4_hook.apply_deepseek_v4_defaults: DeepSeek-V4 drafts are EAGLE (NEXTN) or DSPARK.
	{"DeepSeek-V4 with EAGLE3", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: EAGLE3, modelPath: /models/deepseek-ai/DeepSeek-V4-DSpark}}}`},
	{"DeepSeek-V4 with DFLASH", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: DFLASH, modelPath: /models/deepseek-ai/DeepSeek-V4-DSpark}}}`},
	{"DeepSeek-V4 with NEXTN", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: NEXTN, modelPath: null}}}`},
	{"DeepSeek-V4 with EAGLE, no top-k", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: EAGLE, modelPath: null}}}`},
	{"DeepSeek-V4 with EAGLE, top-k 1 without draft tokens", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: EAGLE, modelPath: null, numSteps: 3, eagleTopK: 1}}}`},
	{"DeepSeek-V4 EAGLE topk 2", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: EAGLE, modelPath: null, numSteps: 3, eagleTopK: 2, numDraftTokens: 6}}}`},
	{"DeepSeek-V4 EAGLE topk 1", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: EAGLE, modelPath: null, numSteps: 3, eagleTopK: 1, numDraftTokens: 4}}}`},
	// speculative_hook._handle_dspark: draft tokens = block size + 1.
	{"DSpark block 7, 4 draft tokens", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {dsparkBlockSize: 7, numDraftTokens: 4}}}`},
	{"DSpark block 7, 8 draft tokens", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {dsparkBlockSize: 7, numDraftTokens: 8}}}`},
	{"DSpark 1 draft token", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {draft: {numDraftTokens: 1}}}`},
	// validation_hook.check_pipeline_parallel_compat and speculative_hook: PP with a draft.
	{"PP 2 with EAGLE", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {tensorParallel: 8, pipelineParallel: 2, draft: {algorithm: EAGLE, modelPath: null, numSteps: 3, eagleTopK: 1, numDraftTokens: 4}}}`},
	{"PP 2 with DSpark", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {tensorParallel: 8, pipelineParallel: 2}}`},
	{"PP 2 without a draft", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {tensorParallel: 8, pipelineParallel: 2, draft: null}}`},
	{"PP 2 with EAGLE3", "hicachedeployment_kimi_k2_eagle3.yaml", `spec: {topology: {tensorParallel: 4, pipelineParallel: 2}}`},
	{"PD prefill PP 2 with EAGLE", "pd_deepseek_v4.yaml", `spec: {roles: {prefill: {topology: {tensorParallel: 4, pipelineParallel: 2}}}}`},
	{"PD prefill PP 2 with DSpark", "pd_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: DSPARK, modelPath: /models/deepseek-ai/DeepSeek-V4-DSpark}}, roles: {prefill: {topology: {tensorParallel: 8, pipelineParallel: 2}}, decode: {topology: {tensorParallel: 8}}}}`},
	// speculative_hook._handle_eagle_family: STANDALONE with attention data parallelism.
	{"STANDALONE with DP attention", "hicachedeployment_qwen3.yaml", `spec: {topology: {dataParallel: 2, dpAttention: true, draft: {algorithm: STANDALONE, modelPath: /models/Qwen/Qwen3-32B}}}`},
	{"STANDALONE", "hicachedeployment_qwen3.yaml", `spec: {topology: {draft: {algorithm: STANDALONE, modelPath: /models/Qwen/Qwen3-32B}}}`},
	// speculative_hook._handle_dflash: no PP.
	{"DFLASH with PP 2", "hicachedeployment_qwen3.yaml", `spec: {topology: {pipelineParallel: 2, draft: {algorithm: DFLASH, modelPath: /models/Qwen/Qwen3-32B}}}`},
	// validation_hook.check_server_args: data-parallel replicas on one node only.
	{"DP 2 replicas over nodes", "hicachedeployment_qwen3.yaml", `spec: {topology: {tensorParallel: 8, dataParallel: 2}}`},
	{"DP 2 replicas on one node", "hicachedeployment_qwen3.yaml", `spec: {topology: {tensorParallel: 2, dataParallel: 2}}`},
	{"DP attention 2", "hicachedeployment_deepseek_v4.yaml", `spec: {topology: {dataParallel: 2, dpAttention: true, draft: null}}`},
	{"fp8 KV", "hicachedeployment_qwen3.yaml", `spec: {hicache: {kvCacheDType: fp8_e5m2}}`},
	// mamba_hook: the Mamba radix cache and the page size.
	{"Qwen3-Next pages of 64", "hicachedeployment_qwen3_next.yaml", `spec: {hicache: {pageSize: 64}}`},
	{"Qwen3-Next with NEXTN", "hicachedeployment_qwen3_next.yaml", `spec: {topology: {draft: {algorithm: NEXTN}}}`},
	// hicache_hook.validate_hicache_host_memory_mode: buffer_only.
	{"buffer_only", "hicachedeployment_qwen3.yaml", `spec: {hicache: {hostMemoryMode: buffer_only, ratio: null}}`},
	// PD: the decode role's L3 modes.
	{"PD decode HiCache", "pd_deepseek_v4.yaml", `spec: {roles: {decode: {l3: HiCache}}}`},
	{"PD with DSpark", "pd_deepseek_v4.yaml", `spec: {topology: {draft: {algorithm: DSPARK, modelPath: /models/deepseek-ai/DeepSeek-V4-DSpark}}, roles: {decode: {topology: {tensorParallel: 8}}}}`},
	{"PD Qwen3 decode Offload", "pd_deepseek_v4.yaml", pdQwen3 + `, decode: {l3: Offload, topology: {tensorParallel: 4}}}}`},
	{"PD Qwen3 decode HiCache", "pd_deepseek_v4.yaml", pdQwen3 + `, decode: {l3: HiCache, topology: {tensorParallel: 4}}}}`},
	// kv_cache_hook.handle_cache_compatibility: --disable-radix-cache where the hierarchical cache
	// runs (not on a decode server without it).
	{"PD Qwen3 decode Offload with --disable-radix-cache", "pd_deepseek_v4.yaml", pdQwen3 + `, decode: {l3: Offload, topology: {tensorParallel: 4}}}, template: {extraArgs: ["--disable-radix-cache"]}}`},
	{"PD Qwen3 decode HiCache with --disable-radix-cache", "pd_deepseek_v4.yaml", pdQwen3 + `, decode: {l3: HiCache, topology: {tensorParallel: 4}}}, template: {extraArgs: ["--disable-radix-cache"]}}`},
}

// pdQwen3 turns the prefill/decode sample into a Qwen3 one (its roles left open for the decode).
const pdQwen3 = `spec: {model: {source: {subPath: Qwen/Qwen3-32B}}, profile: Qwen3, topology: {gpusPerNode: 4, draft: null}, roles: {prefill: {topology: {tensorParallel: 4}}`

// refusalCases are the refusals as cases.
func refusalCases() []argsCase {
	out := make([]argsCase, 0, len(refusals))
	for _, r := range refusals {
		b, err := os.ReadFile(filepath.Join(testutil.SamplesDir(), r.sample))
		if err != nil {
			panic(err)
		}
		var base, patch map[string]any
		if err := yaml.Unmarshal(b, &base); err != nil {
			panic(err)
		}
		if err := yaml.Unmarshal([]byte(r.patch), &patch); err != nil {
			panic(r.name + ": " + err.Error())
		}
		merged, err := yaml.Marshal(mergePatch(base, patch))
		if err != nil {
			panic(err)
		}
		out = append(out, argsCase{name: r.name, yaml: merged})
	}
	return out
}

func mergePatch(base, patch map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range patch {
		if v == nil {
			delete(out, k)
			continue
		}
		pm, pok := v.(map[string]any)
		bm, bok := out[k].(map[string]any)
		if pok && bok {
			out[k] = mergePatch(bm, pm)
			continue
		}
		out[k] = v
	}
	return out
}
