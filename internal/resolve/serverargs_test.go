package resolve_test

import (
	"errors"
	"strings"
	"testing"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// TestSGLangRules: each rule of serverargs.go refuses the spec SGLang's check refuses, naming the
// field, and accepts its neighbour SGLang accepts (test/conformance runs SGLang itself on them).
func TestSGLangRules(t *testing.T) {
	draft := func(b *testutil.HCDBuilder, edit func(d *hicachev1alpha1.DraftSpec)) *hicachev1alpha1.HiCacheDeployment {
		h := b.Obj()
		edit(h.Spec.Topology.Draft)
		return h
	}
	dsv4 := func() *testutil.HCDBuilder { return makeHCD("a").Profile("DeepSeekV4").TP(8) }
	kimi := func() *testutil.HCDBuilder { return makeHCD("a").Profile("KimiK2").TP(8).Draft("EAGLE3") }
	cases := map[string]struct {
		hcd   *hicachev1alpha1.HiCacheDeployment
		field string // "" when the spec passes every rule
		want  string
		// elsewhere: an older rule of the resolver (cache.CheckRolePair) refuses it too.
		elsewhere bool
	}{
		// deepseek_v4_hook.apply_deepseek_v4_defaults
		"DeepSeek-V4 with EAGLE3":         {hcd: dsv4().Draft("EAGLE3").Obj(), field: "spec.topology.draft.algorithm", want: "only the EAGLE and DSPARK drafts"},
		"DeepSeek-V4 with NEXTN":          {hcd: dsv4().Draft("NEXTN").Obj(), field: "spec.topology.draft.algorithm", want: "write EAGLE"},
		"DeepSeek-V4 EAGLE without top-k": {hcd: dsv4().Draft("EAGLE").Obj(), field: "spec.topology.draft.eagleTopK", want: "set eagleTopK 1"},
		"DeepSeek-V4 with DSPARK":         {hcd: dsv4().Draft("DSPARK").Obj()},
		"NEXTN on DeepSeek-V3":            {hcd: makeHCD("a").Profile("DeepSeekV3").TP(8).Draft("NEXTN").Obj()},
		"DeepSeek-V4 EAGLE top-k 2": {hcd: draft(dsv4().Draft("EAGLE"), func(d *hicachev1alpha1.DraftSpec) { d.NumSteps, d.EagleTopK, d.NumDraftTokens = 3, 2, 6 }),
			field: "spec.topology.draft.eagleTopK", want: "only as a chain"},
		"DeepSeek-V4 EAGLE top-k 1": {hcd: draft(dsv4().Draft("EAGLE"), func(d *hicachev1alpha1.DraftSpec) { d.NumSteps, d.EagleTopK, d.NumDraftTokens = 3, 1, 4 })},
		// kv_cache_hook.handle_cache_compatibility
		"--disable-radix-cache with HiCache": {hcd: makeHCD("a").ExtraArgs("--disable-radix-cache").Obj(), field: "spec.template.extraArgs", want: "sets --disable-radix-cache"},
		"--disable-radix abbreviated":        {hcd: makeHCD("a").ExtraArgs("--disable-radix").Obj(), field: "spec.template.extraArgs", want: "sets --disable-radix-cache"},
		"--disable-radix-cache on a decode server without L3": {hcd: makeHCD("a").Profile("Qwen3").TP(4).Storage("mooncake").Roles(4, 1, 4, 1).ExtraArgs("--disable-radix-cache").Obj(),
			field: "spec.template.extraArgs", want: "sets --disable-radix-cache"}, // the prefill role runs HiCache
		// validation_hook.check_server_args: chunked_prefill_size % page_size
		"page of 48":                      {hcd: makeHCD("a").PageSize(48).Obj(), field: "spec.hicache.pageSize", want: "does not divide SGLang's default chunked prefill size"},
		"page of 3":                       {hcd: makeHCD("a").PageSize(3).Obj(), field: "spec.hicache.pageSize", want: "power of two up to 2048"},
		"page of 64":                      {hcd: makeHCD("a").PageSize(64).Obj()},
		"page of 2048":                    {hcd: makeHCD("a").PageSize(2048).Obj()},
		"chunk not a multiple":            {hcd: makeHCD("a").PageSize(64).ExtraArgs("--chunked-prefill-size", "1000").Obj(), field: "spec.hicache.pageSize", want: "make it a multiple of 64"},
		"chunk a multiple, page of 48":    {hcd: makeHCD("a").PageSize(48).ExtraArgs("--chunked-prefill-size=960").Obj()},
		"chunked prefill off, page of 48": {hcd: makeHCD("a").PageSize(48).ExtraArgs("--chunked-prefill-size", "-1").Obj()},
		// validation_hook.check_server_args: multi-node data-parallel replicas
		"DP replicas over two nodes":  {hcd: makeHCD("a").TP(4).DP(4).Obj(), field: "spec.topology.dataParallel", want: "only on one node"},
		"DP replicas on one node":     {hcd: makeHCD("a").TP(4).DP(2).Obj()},
		"DP attention over two nodes": {hcd: makeHCD("a").Profile("DeepSeekV3").TP(16).DP(8).DPAttention().Obj()},
		// speculative_hook._handle_eagle_family
		"EAGLE3 top-k without steps":        {hcd: draft(kimi(), func(d *hicachev1alpha1.DraftSpec) { d.EagleTopK = 1 }), field: "spec.topology.draft.numSteps", want: "set numSteps too"},
		"EAGLE3 draft tokens without steps": {hcd: draft(kimi(), func(d *hicachev1alpha1.DraftSpec) { d.NumDraftTokens = 4 }), field: "spec.topology.draft.numSteps", want: "set numSteps too"},
		"EAGLE3 with all three":             {hcd: draft(kimi(), func(d *hicachev1alpha1.DraftSpec) { d.NumSteps, d.EagleTopK, d.NumDraftTokens = 3, 1, 4 })},
		"EAGLE3 with none":                  {hcd: kimi().Obj()},
		"STANDALONE with DP attention":      {hcd: makeHCD("a").TP(2).DP(2).DPAttention().Draft("STANDALONE").Obj(), field: "spec.topology.draft.algorithm", want: "STANDALONE is refused"},
		"STANDALONE":                        {hcd: makeHCD("a").TP(2).Draft("STANDALONE").Obj()},
		// _handle_dflash, _handle_dspark, check_pipeline_parallel_compat
		"DFLASH with PP 2":           {hcd: makeHCD("a").TP(2).PP(2).Draft("DFLASH").Obj(), field: "spec.topology.pipelineParallel", want: "only for EAGLE (NEXTN) and DSPARK, not DFLASH"},
		"EAGLE3 with PP 2":           {hcd: kimi().TP(4).PP(2).Obj(), field: "spec.topology.pipelineParallel", want: "not EAGLE3"},
		"DSPARK with PP 2":           {hcd: dsv4().PP(2).Draft("DSPARK").Obj(), field: "spec.topology.pipelineParallel", want: "only on prefill servers"},
		"PP 2 without a draft":       {hcd: dsv4().PP(2).Obj()},
		"PD prefill PP 2 with EAGLE": {hcd: makeHCD("a").Profile("DeepSeekV3").Draft("NEXTN").Roles(8, 1, 8, 1).RolePP(hicachev1alpha1.RolePrefill, 2).Obj()},
		"PD decode PP 2 with EAGLE": {hcd: makeHCD("a").Profile("DeepSeekV3").Draft("EAGLE").Roles(8, 1, 8, 1).RolePP(hicachev1alpha1.RoleDecode, 2).Obj(),
			field: "spec.roles.decode.topology.pipelineParallel", want: "only on prefill servers", elsewhere: true},
		// speculative_hook._handle_dspark: draft tokens = gamma + 1
		"DSpark tokens without a block size": {hcd: draft(dsv4().Draft("DSPARK"), func(d *hicachev1alpha1.DraftSpec) { d.NumDraftTokens = 8 }), field: "spec.topology.draft.numDraftTokens", want: "set dsparkBlockSize too"},
		"DSpark tokens not block + 1":        {hcd: draft(dsv4().Draft("DSPARK"), func(d *hicachev1alpha1.DraftSpec) { d.NumDraftTokens, d.DSparkBlockSize = 4, 7 }), field: "spec.topology.draft.numDraftTokens", want: "dsparkBlockSize + 1 = 8"},
		"DSpark tokens block + 1":            {hcd: draft(dsv4().Draft("DSPARK"), func(d *hicachev1alpha1.DraftSpec) { d.NumDraftTokens, d.DSparkBlockSize = 8, 7 })},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			if tc.hcd.Spec.Roles != nil {
				_, err = resolve.RolesOf(tc.hcd)
			} else {
				_, err = resolve.Resolve(tc.hcd)
			}
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *resolve.FieldError
			if err == nil || !errors.As(err, &fe) {
				t.Fatalf("got %v, want a refusal of %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refusal %q does not name %s with %q", err, tc.field, tc.want)
			}
			// Without the rules the resolver accepts it: the refusal is the rule's.
			if tc.hcd.Spec.Roles != nil {
				_, err = resolve.RolesOfWithoutSGLangRules(tc.hcd)
			} else {
				_, err = resolve.WithoutSGLangRules(tc.hcd)
			}
			if err != nil && !tc.elsewhere {
				t.Errorf("refused without the SGLang rules too: %v", err)
			}
		})
	}
}
