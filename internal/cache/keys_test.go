package cache

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testHash = "06ac1185e74e10625068f87df9d9dee4bc78903405b73c934132ee564be592d7"

func TestNamespacePrefix(t *testing.T) {
	cases := map[string]struct{ tag, served, want string }{
		"both":                    {"hc-0123456789", "deepseek-ai/DeepSeek-V3.2", "hc-0123456789_deepseek-ai-DeepSeek-V3.2_"},
		"tag only":                {"hc-0123456789", "", "hc-0123456789_"},
		"served only":             {"", "GLM-5.3-Flash", "GLM-5.3-Flash_"},
		"neither":                 {"", "", ""},
		"every slash is replaced": {"t", "a/b/c", "t_a-b-c_"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := NamespacePrefix(tc.tag, tc.served); got != tc.want {
				t.Errorf("NamespacePrefix(%q, %q) = %q, want %q", tc.tag, tc.served, got, tc.want)
			}
		})
	}
}

func TestKeySuffixes(t *testing.T) {
	cases := map[string]struct {
		in   SuffixInput
		want []string
	}{
		"kv replicated":           {SuffixInput{Pool: PoolKV, Sharding: Replicated, PipelineParallel: 1}, []string{"__k"}},
		"kv replicated PP":        {SuffixInput{Pool: PoolKV, Sharding: Replicated, PPRank: 1, PipelineParallel: 2}, []string{"_1_k"}},
		"kv MHA":                  {SuffixInput{Pool: PoolKV, Sharding: RankSharded, TPRank: 3, PipelineParallel: 1}, []string{"_3_k", "_3_v"}},
		"kv MHA PP":               {SuffixInput{Pool: PoolKV, Sharding: RankSharded, TPRank: 3, PPRank: 1, PipelineParallel: 4}, []string{"_3_1_k", "_3_1_v"}},
		"mamba":                   {SuffixInput{Pool: PoolMamba, Sharding: RankSharded, TPRank: 2, PipelineParallel: 1, MambaConvBuffers: 2}, []string{"_2_temporal", "_2_conv_0", "_2_conv_1"}},
		"mamba PP":                {SuffixInput{Pool: PoolMamba, Sharding: RankSharded, TPRank: 2, PPRank: 1, PipelineParallel: 2, MambaConvBuffers: 1}, []string{"_2_1_temporal", "_2_1_conv_0"}},
		"draft MLA host pool":     {SuffixInput{Pool: PoolDraft, Sharding: Replicated, TPRank: 5, PipelineParallel: 1}, []string{"__draft_k"}},
		"draft MHA host pool":     {SuffixInput{Pool: PoolDraft, Sharding: RankSharded, TPRank: 5, PipelineParallel: 1}, []string{"_5_draft_k", "_5_draft_v"}},
		"indexer":                 {SuffixInput{Pool: PoolIndexer, Sharding: Replicated, PipelineParallel: 1}, []string{"__indexer"}},
		"indexer PP":              {SuffixInput{Pool: PoolIndexer, Sharding: Replicated, PPRank: 1, PipelineParallel: 2}, []string{"_1_indexer"}},
		"draft_indexer":           {SuffixInput{Pool: PoolDraftIndexer, Sharding: Replicated, PipelineParallel: 1}, []string{"__draft_indexer"}},
		"deepseek_v4_c4":          {SuffixInput{Pool: PoolDSV4C4, Sharding: Replicated, PipelineParallel: 1}, []string{"__deepseek_v4_c4"}},
		"swa MHA":                 {SuffixInput{Pool: PoolSWA, Sharding: RankSharded, TPRank: 1, PipelineParallel: 1}, []string{"_1_swa_k", "_1_swa_v"}},
		"swa MLA":                 {SuffixInput{Pool: PoolSWA, Sharding: Replicated, PipelineParallel: 1}, []string{"__swa"}},
		"draft_swa MHA host pool": {SuffixInput{Pool: PoolDraftSWA, Sharding: RankSharded, TPRank: 4, PipelineParallel: 1}, []string{"_4_draft_swa_k", "_4_draft_swa_v"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, KeySuffixes(tc.in)); diff != "" {
				t.Errorf("KeySuffixes(%+v) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestKeysForPage(t *testing.T) {
	prefix := NamespacePrefix("hc-abc", "deepseek-ai/DeepSeek-V3.2")
	cases := map[string]struct {
		topo *topoBuilder
		want []string
	}{
		"MLA TP4 EAGLE3 on Mooncake: one kv, one indexer, a draft pair per rank": {
			topo: mk("DeepSeekV32").TP(4).Draft(DraftEAGLE3),
			want: []string{
				prefix + testHash + "_0_draft_k", prefix + testHash + "_0_draft_v",
				prefix + testHash + "_1_draft_k", prefix + testHash + "_1_draft_v",
				prefix + testHash + "_2_draft_k", prefix + testHash + "_2_draft_v",
				prefix + testHash + "_3_draft_k", prefix + testHash + "_3_draft_v",
				prefix + testHash + "__indexer",
				prefix + testHash + "__k",
			},
		},
		"MLA TP8 DP2 with DP attention: the two groups' keys coincide": {
			topo: mk("DeepSeekV3").TP(8).DP(2).DPAttention(),
			want: []string{prefix + testHash + "__k"},
		},
		"MHA TP2 PP2": {
			topo: mk("Llama3").TP(2).PP(2),
			want: []string{
				prefix + testHash + "_0_0_k", prefix + testHash + "_0_0_v",
				prefix + testHash + "_0_1_k", prefix + testHash + "_0_1_v",
				prefix + testHash + "_1_0_k", prefix + testHash + "_1_0_v",
				prefix + testHash + "_1_1_k", prefix + testHash + "_1_1_v",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := KeysForPage(mustPlan(t, tc.topo.Obj(t)), prefix, testHash)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("KeysForPage (-want +got):\n%s", diff)
			}
			for _, k := range got {
				if !KeyInNamespace(k, prefix) {
					t.Errorf("key %q is not in its own namespace %q", k, prefix)
				}
			}
		})
	}
}

func TestKeyInNamespace(t *testing.T) {
	cases := map[string]struct {
		key, prefix string
		want        bool
	}{
		"tagged key":                         {"hc-1_m_" + testHash + "__k", "hc-1_m_", true},
		"bare key with empty prefix":         {testHash + "_0_k", "", true},
		"nested namespace is not the parent": {"hc-1_m_" + testHash + "__k", "hc-1_", false},
		"other tag":                          {"hc-2_m_" + testHash + "__k", "hc-1_m_", false},
		"no suffix":                          {"hc-1_" + testHash, "hc-1_", false},
		"uppercase hash":                     {"hc-1_" + strings.ToUpper(testHash) + "__k", "hc-1_", false},
		"short hash":                         {"hc-1_" + testHash[:63] + "__k", "hc-1_", false},
		"suffix without underscore":          {"hc-1_" + testHash + "k", "hc-1_", false},
		"warmup key of SGLang is not a page": {"sglang_mooncake_store_warmup_key0123", "", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := KeyInNamespace(tc.key, tc.prefix); got != tc.want {
				t.Errorf("KeyInNamespace(%q, %q) = %v, want %v", tc.key, tc.prefix, got, tc.want)
			}
		})
	}
}

func TestIsPageHash(t *testing.T) {
	if !IsPageHash(testHash) || IsPageHash(testHash[1:]) || IsPageHash(strings.ToUpper(testHash)) {
		t.Error("IsPageHash misjudges a page hash")
	}
}
