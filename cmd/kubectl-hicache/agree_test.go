package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/crdvalidation"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// TestWhatTheCRDAdmitsPlans draws HiCacheDeployments from the values the API offers and requires
// that every one the CRD admits also plans: a spec kubectl apply accepts must not be refused by
// the planner or the renderer (which would leave the operator reporting InvalidSpec instead).
func TestWhatTheCRDAdmitsPlans(t *testing.T) {
	v, err := crdvalidation.Default()
	if err != nil {
		t.Fatal(err)
	}
	pick := func(r *rand.Rand, vals ...any) any { return vals[r.IntN(len(vals))] }
	r := rand.New(rand.NewPCG(11, 3))
	admitted, failures := 0, map[string]string{}
	for i := 0; i < 2000; i++ {
		topo := map[string]any{
			"tensorParallel":   pick(r, 1, 2, 4, 8, 16),
			"pipelineParallel": pick(r, 1, 1, 2),
			"dataParallel":     pick(r, 1, 1, 2, 4),
			"gpusPerNode":      pick(r, 8, 4),
		}
		if r.IntN(4) == 0 {
			topo["dpAttention"] = true
		}
		if r.IntN(2) == 0 {
			d := map[string]any{"algorithm": pick(r, "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK")}
			if d["algorithm"] != "NGRAM" && r.IntN(3) > 0 {
				d["modelPath"] = "/models/org/draft"
			}
			if r.IntN(3) == 0 {
				d["packedLayers"] = pick(r, 0, 1, 3)
			}
			if r.IntN(4) == 0 {
				d["hostPool"] = pick(r, "MHA", "MLA")
			}
			if r.IntN(4) == 0 {
				d["kvCacheDType"] = pick(r, "auto", "bf16", "fp8_e4m3")
			}
			topo["draft"] = d
		}
		hc := map[string]any{}
		for k, vals := range map[string][]any{
			"memLayout":      {"layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"},
			"ioBackend":      {"direct", "kernel"},
			"hostMemoryMode": {"cache", "buffer_only"},
			"writePolicy":    {"write_back", "write_through", "write_through_selective"},
			"kvCacheDType":   {"auto", "fp8_e4m3", "nvfp4", "bf16"},
			"ratio":          {"1.5", "2"},
			"sizeGB":         {64},
			"pageSize":       {1, 64},
			"mambaSSMDType":  {"float32", "bfloat16"},
		} {
			if r.IntN(3) == 0 {
				hc[k] = pick(r, vals...)
			}
		}
		spec := map[string]any{
			"model":    map[string]any{"path": "org/model", "revision": "0123456789abcdef0123456789abcdef01234567"},
			"profile":  pick(r, "DeepSeekV3", "DeepSeekV32", "DeepSeekV4", "KimiK2", "KimiK3", "GLM5", "Qwen3", "Qwen3Next", "Llama3", "GptOss"),
			"topology": topo,
			"hicache":  hc,
		}
		if r.IntN(4) > 0 {
			spec["storage"] = map[string]any{"backendRef": map[string]any{"name": "mooncake"}}
		}
		obj := map[string]any{"apiVersion": "hicache.io/v1alpha1", "kind": "HiCacheDeployment", "metadata": map[string]any{"name": "x"}, "spec": spec}
		_, errs, err := v.Admit(context.Background(), obj, defaultNamespace)
		if err != nil {
			t.Fatal(err)
		}
		if len(errs) > 0 {
			continue
		}
		admitted++
		js, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		hcd, err := admit(js, "x.yaml")
		if err != nil {
			t.Fatalf("admitted by the CRD, refused by the loader: %v", err)
		}
		res, err := resolve.Resolve(hcd)
		if err == nil {
			_, err = newPlanReport(loaded{hcd: hcd, source: "x.yaml", where: "x.yaml"}, res)
		}
		if err != nil {
			key := err.Error()
			if i := strings.IndexAny(key, "0123456789\""); i > 40 {
				key = key[:i]
			}
			if _, seen := failures[key]; !seen {
				b, _ := json.Marshal(spec)
				failures[key] = fmt.Sprintf("%v\n    spec: %s", err, b)
			}
		}
	}
	if admitted < 400 {
		t.Fatalf("only %d of the drawn specs were admitted; the draw no longer exercises the planner", admitted)
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range failures {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Errorf("the CRD admits it, plan refuses it:\n  %s", failures[k])
	}
	t.Logf("%d specs admitted", admitted)
}

// TestProfileDraftRulesAreThePlanners runs every profile with every draft algorithm, with and
// without packedLayers, a draft model and a host pool, through the CRD and then through the
// planner alone: whatever the CRD admits, the planner must plan. The CRD's draft rules restate
// the profiles' tables (internal/cache/profiles.go); this keeps the two equal. (The CRD is
// stricter in places, e.g. NGRAM with a model path, which plan refuses too.)
func TestProfileDraftRulesAreThePlanners(t *testing.T) {
	v, err := crdvalidation.Default()
	if err != nil {
		t.Fatal(err)
	}
	profiles := []string{"DeepSeekV3", "DeepSeekV32", "DeepSeekV4", "KimiK2", "KimiK3", "GLM5", "Qwen3", "Qwen3Next", "Llama3", "GptOss"}
	algorithms := []string{"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK"}
	disagree := 0
	for _, profile := range profiles {
		for _, alg := range algorithms {
			for _, packed := range []any{nil, 0, 1} {
				for _, model := range []bool{false, true} {
					for _, pool := range []string{"", "MHA", "MLA"} {
						d := map[string]any{"algorithm": alg}
						if packed != nil {
							d["packedLayers"] = packed
						}
						if model {
							d["modelPath"] = "/models/org/draft"
						}
						if pool != "" {
							d["hostPool"] = pool
						}
						topo := map[string]any{"tensorParallel": 8, "draft": d}
						obj := map[string]any{"apiVersion": "hicache.io/v1alpha1", "kind": "HiCacheDeployment", "metadata": map[string]any{"name": "x"},
							"spec": map[string]any{"model": map[string]any{"path": "org/model", "revision": "0123456789abcdef0123456789abcdef01234567"}, "profile": profile, "topology": topo,
								"storage": map[string]any{"backendRef": map[string]any{"name": "mooncake"}}}}
						defaulted, errs, err := v.Admit(context.Background(), obj, defaultNamespace)
						if err != nil {
							t.Fatal(err)
						}
						b, err := json.Marshal(defaulted)
						if err != nil {
							t.Fatal(err)
						}
						hcd := &hicachev1alpha1.HiCacheDeployment{}
						if err := json.Unmarshal(b, hcd); err != nil {
							t.Fatal(err)
						}
						res, planErr := resolve.Resolve(hcd)
						if planErr == nil {
							_, planErr = newPlanReport(loaded{hcd: hcd, source: "x.yaml", where: "x.yaml"}, res)
						}
						if len(errs) == 0 && planErr != nil {
							disagree++
							if disagree <= 10 {
								spec, _ := json.Marshal(obj["spec"])
								t.Errorf("the CRD says %q, the planner says %v\n  spec: %s", crdvalidation.Message(errs), planErr, spec)
							}
						}
					}
				}
			}
		}
	}
	if disagree > 10 {
		t.Errorf("... %d disagreements in all", disagree)
	}
}

// TestProfileAttentionRuleIsThePlanners overrides the attention kind of every profile (its pools
// left to the profile): the CRD must admit exactly what the planner plans.
func TestProfileAttentionRuleIsThePlanners(t *testing.T) {
	v, err := crdvalidation.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, profile := range []string{"DeepSeekV3", "DeepSeekV32", "DeepSeekV4", "KimiK2", "KimiK3", "GLM5", "Qwen3", "Qwen3Next", "Llama3", "GptOss"} {
		for _, attention := range []string{"MHA", "MLA", "DSV4", "HybridMambaMHA", "HybridMambaMLA"} {
			obj := map[string]any{"apiVersion": "hicache.io/v1alpha1", "kind": "HiCacheDeployment", "metadata": map[string]any{"name": "x"},
				"spec": map[string]any{"model": map[string]any{"path": "org/model", "revision": "0123456789abcdef0123456789abcdef01234567"}, "profile": profile,
					"topology": map[string]any{"tensorParallel": 8, "attention": attention}}}
			defaulted, errs, err := v.Admit(context.Background(), obj, defaultNamespace)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(defaulted)
			if err != nil {
				t.Fatal(err)
			}
			hcd := &hicachev1alpha1.HiCacheDeployment{}
			if err := json.Unmarshal(b, hcd); err != nil {
				t.Fatal(err)
			}
			_, planErr := resolve.Resolve(hcd)
			if (len(errs) == 0) != (planErr == nil) {
				t.Errorf("%s with attention %s: the CRD says %q, the planner says %v", profile, attention, crdvalidation.Message(errs), planErr)
			}
		}
	}
}
