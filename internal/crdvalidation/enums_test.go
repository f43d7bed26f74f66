package crdvalidation

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// crdEnum is the enum of a field of the HiCacheDeployment CRD, by its path.
func crdEnum(t *testing.T, path string) []string {
	t.Helper()
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	k := v.kinds[hicachev1alpha1.GroupVersion.WithKind("HiCacheDeployment")]
	if k == nil {
		t.Fatal("no HiCacheDeployment schema")
	}
	s := k.structural
	for _, p := range strings.Split(path, ".") {
		next, ok := s.Properties[p]
		if !ok {
			t.Fatalf("the CRD has no field %s", path)
		}
		s = &next
	}
	if s.ValueValidation == nil || len(s.ValueValidation.Enum) == 0 {
		t.Fatalf("%s has no enum in the CRD", path)
	}
	var out []string
	for _, e := range s.ValueValidation.Enum {
		out = append(out, fmt.Sprint(e.Object))
	}
	return out
}

// TestEnumsAreSGLangs checks every enum of the API that is an SGLang flag's value against the
// choices of the pinned SGLang release (the committed argument table): the API offers exactly
// SGLang's choices but for the ones listed as left out, each with the reason. A new release
// that adds, renames or drops a choice fails here, and so does a left-out value SGLang no longer
// has.
func TestEnumsAreSGLangs(t *testing.T) {
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		field, flag string
		runtime     bool
		// leftOut are SGLang's choices the API does not offer, with the reason.
		leftOut map[string]string
	}{
		{field: "spec.hicache.kvCacheDType", flag: "--kv-cache-dtype"},
		{field: "spec.topology.draft.kvCacheDType", flag: "--speculative-draft-kv-cache-dtype"},
		{field: "spec.topology.draft.algorithm", flag: "--speculative-algorithm", runtime: true, leftOut: map[string]string{
			"UNO":           "the target model with a LoRA (--uno-lora-path, no API field) and no draft pool; the cache model has no placement for it yet",
			"FROZEN_KV_MTP": "SGLang promotes NEXTN/EAGLE to it for Gemma4 assistant drafts; the draft owns no KV pool, which the cache model cannot say yet",
		}},
		{field: "spec.hicache.ioBackend", flag: "--hicache-io-backend", leftOut: map[string]string{
			"kernel_ascend": "Ascend NPUs; rank pods request NVIDIA GPUs",
		}},
		{field: "spec.hicache.memLayout", flag: "--hicache-mem-layout"},
		{field: "spec.hicache.writePolicy", flag: "--hicache-write-policy"},
		{field: "spec.hicache.hostMemoryMode", flag: "--hicache-host-memory-mode"},
		{field: "spec.hicache.prefetchPolicy", flag: "--hicache-storage-prefetch-policy"},
		{field: "spec.hicache.mambaSSMDType", flag: "--mamba-ssm-dtype"},
		{field: "spec.model.quantization", flag: "--quantization"},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			choices, ok := spec.Choices(tc.flag)
			if tc.runtime {
				choices, ok = spec.RuntimeChoices(tc.flag)
			}
			if !ok {
				t.Fatalf("sglang %s has no choices for %s", spec.Version(), tc.flag)
			}
			var want []string
			for _, c := range choices {
				if _, out := tc.leftOut[c]; !out {
					want = append(want, c)
				}
			}
			for c := range tc.leftOut {
				if !slices.Contains(choices, c) {
					t.Errorf("%s is listed as left out, but sglang %s no longer has it: drop it from the list", c, spec.Version())
				}
			}
			got := crdEnum(t, tc.field)
			slices.Sort(want)
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s offers other values than sglang %s's %s (-sglang +api); change the +kubebuilder:validation:Enum marker and run make generate, or list the value as left out with the reason:\n%s",
					tc.field, spec.Version(), tc.flag, diff)
			}
		})
	}
}

// TestDraftAlgorithmsAreThePlanners checks that the planner knows exactly the API's algorithms:
// one the API offers and the planner refuses (or the reverse) would make plan and kubectl apply
// disagree.
func TestDraftAlgorithmsAreThePlanners(t *testing.T) {
	var planner []string
	for _, a := range cache.DraftAlgorithms() {
		planner = append(planner, string(a))
	}
	api := crdEnum(t, "spec.topology.draft.algorithm")
	slices.Sort(planner)
	slices.Sort(api)
	if diff := cmp.Diff(api, planner); diff != "" {
		t.Errorf("the planner's draft algorithms differ from the API's (-api +planner):\n%s", diff)
	}
}
