package cache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

const dsv4Rank0 = "swa:__swa; deepseek_v4_c4:__deepseek_v4_c4; deepseek_v4_c4_indexer:__deepseek_v4_c4_indexer; " +
	"deepseek_v4_c4_state:__deepseek_v4_c4_state; deepseek_v4_c4_indexer_state:__deepseek_v4_c4_indexer_state; " +
	"deepseek_v4_c128:__deepseek_v4_c128"

// TestPlanDomainRows reproduces every row of the rank-duty table (DOMAIN §10)
// plus the pipeline and attention-DP rules. want lists the writes of chosen
// global ranks; every other rank must write others.
func TestPlanDomainRows(t *testing.T) {
	type row struct {
		topo     *topoBuilder
		want     map[int]string
		others   string
		warnings []WarningCode
		summary  string
	}
	cases := map[string]row{
		"MHA TP1 none: rank 0 writes kv _0_k/_0_v": {
			topo:    mk("Llama3"),
			want:    map[int]string{0: "kv:_0_k,_0_v"},
			summary: "TP0 writes kv",
		},
		"MHA TP4 none: every rank writes its kv shard": {
			topo:    mk("Qwen3").TP(4),
			want:    map[int]string{0: "kv:_0_k,_0_v", 1: "kv:_1_k,_1_v", 2: "kv:_2_k,_2_v", 3: "kv:_3_k,_3_v"},
			summary: "all 4 ranks write their own keys of kv",
		},
		"MHA TP4 MTP packed: draft layers live inside kv": {
			topo: explicit(AttentionMHA, PoolKV).TP(4).Draft(DraftNEXTN).Packed(1),
			want: map[int]string{0: "kv:_0_k,_0_v", 1: "kv:_1_k,_1_v", 2: "kv:_2_k,_2_v", 3: "kv:_3_k,_3_v"},
		},
		"MHA TP2 EAGLE3 sidecar: every rank writes kv and draft": {
			topo: mk("Llama3").TP(2).Draft(DraftEAGLE3),
			want: map[int]string{
				0: "kv:_0_k,_0_v; draft:_0_draft_k,_0_draft_v",
				1: "kv:_1_k,_1_v; draft:_1_draft_k,_1_draft_v",
			},
		},
		"MHA TP2 non-DSV4 DSpark is a sidecar": {
			topo: mk("Qwen3").TP(2).Draft(DraftDSPARK),
			want: map[int]string{
				0: "kv:_0_k,_0_v; draft:_0_draft_k,_0_draft_v",
				1: "kv:_1_k,_1_v; draft:_1_draft_k,_1_draft_v",
			},
		},
		"MHA TP2 swa pool (gpt-oss) is rank-sharded": {
			topo: mk("GptOss").TP(2),
			want: map[int]string{
				0: "kv:_0_k,_0_v; swa:_0_swa_k,_0_swa_v",
				1: "kv:_1_k,_1_v; swa:_1_swa_k,_1_swa_v",
			},
		},
		"MLA TP1 none: rank 0 writes __k": {
			topo: mk("DeepSeekV3"),
			want: map[int]string{0: "kv:__k"},
		},
		"DSA TP1 none: rank 0 writes __k and __indexer": {
			topo: mk("DeepSeekV32"),
			want: map[int]string{0: "kv:__k; indexer:__indexer"},
		},
		"MLA TP8 none: TP0 only, followers have no duties": {
			topo:    mk("KimiK2").TP(8),
			want:    map[int]string{0: "kv:__k"},
			summary: "TP0 writes kv; 7 followers: no duties (replicated)",
		},
		"DSA TP8 none (GLM-5): TP0 writes kv and indexer": {
			topo:    mk("GLM5").TP(8),
			want:    map[int]string{0: "kv:__k; indexer:__indexer"},
			summary: "TP0 writes kv, indexer; 7 followers: no duties (replicated)",
		},
		"MLA TP8 MTP packed (V3.2): as without a draft": {
			topo:    mk("DeepSeekV32").TP(8).Draft(DraftNEXTN),
			want:    map[int]string{0: "kv:__k; indexer:__indexer"},
			summary: "TP0 writes kv, indexer; 7 followers: no duties (replicated)",
		},
		"MLA TP8 EAGLE3 MHA draft on Mooncake: every rank writes its draft shard": {
			topo: mk("DeepSeekV32").TP(8).Draft(DraftEAGLE3),
			want: map[int]string{
				0: "kv:__k; indexer:__indexer; draft:_0_draft_k,_0_draft_v",
				1: "draft:_1_draft_k,_1_draft_v", 2: "draft:_2_draft_k,_2_draft_v", 3: "draft:_3_draft_k,_3_draft_v",
				4: "draft:_4_draft_k,_4_draft_v", 5: "draft:_5_draft_k,_5_draft_v", 6: "draft:_6_draft_k,_6_draft_v",
				7: "draft:_7_draft_k,_7_draft_v",
			},
			summary: "TP0 writes kv, indexer, draft; 7 followers write draft",
		},
		"MLA TP8 sidecar draft with MLA host pool: TP0 only, __draft_k": {
			topo: mk("DeepSeekV3").TP(8).Draft(DraftStandalone).Sidecar(HostPoolMLA, PoolDraft),
			want: map[int]string{0: "kv:__k; draft:__draft_k"},
		},
		"MLA TP4 DSA draft with MLA host pool and draft_indexer: TP0 only": {
			topo: mk("GLM5").TP(4).Draft(DraftStandalone).Sidecar(HostPoolMLA, PoolDraft, PoolDraftIndexer),
			want: map[int]string{0: "kv:__k; indexer:__indexer; draft:__draft_k; draft_indexer:__draft_indexer"},
		},
		"DSV4 TP8 none: TP0 writes every pool, kv anchor has no object": {
			topo:    mk("DeepSeekV4").TP(8),
			want:    map[int]string{0: dsv4Rank0},
			summary: "TP0 writes swa, deepseek_v4_c4, deepseek_v4_c4_indexer, deepseek_v4_c4_state, deepseek_v4_c4_indexer_state, deepseek_v4_c128; 7 followers: no duties (replicated)",
		},
		"DSV4 TP8 MTP packed: TP0 only": {
			topo: mk("DeepSeekV4").TP(8).Draft(DraftNEXTN),
			want: map[int]string{0: dsv4Rank0},
		},
		"DSV4 TP8 DSpark packed (3 layers): TP0 only": {
			topo: mk("DeepSeekV4").TP(8).Draft(DraftDSPARK),
			want: map[int]string{0: dsv4Rank0},
		},
		"DSV4 TP8 EAGLE3 sidecar on Mooncake: every rank writes draft and draft_swa shards": {
			topo: mk("DeepSeekV4").TP(8).Draft(DraftEAGLE3),
			want: map[int]string{
				0: dsv4Rank0 + "; draft:_0_draft_k,_0_draft_v; draft_swa:_0_draft_swa_k,_0_draft_swa_v",
				1: "draft:_1_draft_k,_1_draft_v; draft_swa:_1_draft_swa_k,_1_draft_swa_v",
				2: "draft:_2_draft_k,_2_draft_v; draft_swa:_2_draft_swa_k,_2_draft_swa_v",
				3: "draft:_3_draft_k,_3_draft_v; draft_swa:_3_draft_swa_k,_3_draft_swa_v",
				4: "draft:_4_draft_k,_4_draft_v; draft_swa:_4_draft_swa_k,_4_draft_swa_v",
				5: "draft:_5_draft_k,_5_draft_v; draft_swa:_5_draft_swa_k,_5_draft_swa_v",
				6: "draft:_6_draft_k,_6_draft_v; draft_swa:_6_draft_swa_k,_6_draft_swa_v",
				7: "draft:_7_draft_k,_7_draft_v; draft_swa:_7_draft_swa_k,_7_draft_swa_v",
			},
		},
		"Hybrid Mamba+MHA TP4 (Qwen3-Next): every rank writes kv and mamba shards": {
			topo: mk("Qwen3Next").TP(4),
			want: map[int]string{
				0: "kv:_0_k,_0_v; mamba:_0_temporal,_0_conv_0",
				1: "kv:_1_k,_1_v; mamba:_1_temporal,_1_conv_0",
				2: "kv:_2_k,_2_v; mamba:_2_temporal,_2_conv_0",
				3: "kv:_3_k,_3_v; mamba:_3_temporal,_3_conv_0",
			},
			summary: "all 4 ranks write their own keys of kv, mamba",
		},
		"Hybrid Mamba+MLA TP4 (Kimi-K3): TP0 writes kv, every rank its mamba shard": {
			topo: mk("KimiK3").TP(4),
			want: map[int]string{
				0: "kv:__k; mamba:_0_temporal,_0_conv_0,_0_conv_1,_0_conv_2",
				1: "mamba:_1_temporal,_1_conv_0,_1_conv_1,_1_conv_2",
				2: "mamba:_2_temporal,_2_conv_0,_2_conv_1,_2_conv_2",
				3: "mamba:_3_temporal,_3_conv_0,_3_conv_1,_3_conv_2",
			},
			summary: "TP0 writes kv, mamba; 3 followers write mamba",
		},
		"Hybrid Mamba+MLA with DSA indexer (GLM-5.3-Flash) TP2: mamba on every rank": {
			topo: explicit(AttentionHybridMambaMLA, PoolKV, PoolIndexer, PoolMamba).TP(2),
			want: map[int]string{
				0: "kv:__k; indexer:__indexer; mamba:_0_temporal,_0_conv_0",
				1: "mamba:_1_temporal,_1_conv_0",
			},
		},
		"MLA TP2 PP2: each stage's TP0 writes its _{pp}_k slice": {
			topo:    mk("DeepSeekV32").TP(2).PP(2),
			want:    map[int]string{0: "kv:_0_k; indexer:_0_indexer", 2: "kv:_1_k; indexer:_1_indexer"},
			summary: "in each of 2 groups (2 PP stages): TP0 writes kv, indexer; 1 follower: no duties (replicated)",
		},
		"MHA TP2 PP2: rank tag is {tp}_{pp}": {
			topo: mk("Llama3").TP(2).PP(2),
			want: map[int]string{0: "kv:_0_0_k,_0_0_v", 1: "kv:_1_0_k,_1_0_v", 2: "kv:_0_1_k,_0_1_v", 3: "kv:_1_1_k,_1_1_v"},
		},
		"Hybrid Mamba+MLA TP2 PP2: mamba shards carry tp and pp": {
			topo: mk("KimiK3").TP(2).PP(2).Conv(1),
			want: map[int]string{
				0: "kv:_0_k; mamba:_0_0_temporal,_0_0_conv_0", 1: "mamba:_1_0_temporal,_1_0_conv_0",
				2: "kv:_1_k; mamba:_0_1_temporal,_0_1_conv_0", 3: "mamba:_1_1_temporal,_1_1_conv_0",
			},
		},
		"MLA TP8 DP2 with DP attention: each attention-DP group's TP0 writes": {
			topo:    mk("DeepSeekV3").TP(8).DP(2).DPAttention(),
			want:    map[int]string{0: "kv:__k", 4: "kv:__k"},
			summary: "in each of 2 groups (2 attention-DP groups): TP0 writes kv; 3 followers: no duties (replicated)",
		},
		"MHA TP4 DP2 with DP attention: shards follow the attention-TP rank": {
			topo: mk("Qwen3").TP(4).DP(2).DPAttention(),
			want: map[int]string{0: "kv:_0_k,_0_v", 1: "kv:_1_k,_1_v", 2: "kv:_0_k,_0_v", 3: "kv:_1_k,_1_v"},
		},
		"MLA TP2 DP2 without DP attention: each replica's TP0 writes": {
			topo:    mk("DeepSeekV3").TP(2).DP(2),
			want:    map[int]string{0: "kv:__k", 2: "kv:__k"},
			summary: "in each of 2 groups (2 replicas): TP0 writes kv; 1 follower: no duties (replicated)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			topo := tc.topo.Obj(t)
			p := mustPlan(t, topo)
			want := make(map[int]string, len(p.Ranks()))
			for i := 0; i < topo.TotalRanks(); i++ {
				want[i] = tc.others
			}
			for r, w := range tc.want {
				want[r] = w
			}
			if diff := cmp.Diff(want, writesByRank(p)); diff != "" {
				t.Errorf("writes by global rank (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.warnings, warningCodes(p)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if tc.summary != "" && p.Summary() != tc.summary {
				t.Errorf("Summary() = %q, want %q", p.Summary(), tc.summary)
			}
			if bad := checkInvariants(topo, p); len(bad) > 0 {
				t.Errorf("invariants broken:\n%s", strings.Join(bad, "\n"))
			}
		})
	}
}

func TestPlanReadsEveryPool(t *testing.T) {
	p := mustPlan(t, mk("DeepSeekV4").TP(2).Draft(DraftEAGLE3).Obj(t))
	got := map[int]string{}
	for _, r := range p.Ranks() {
		parts := make([]string, len(r.Reads))
		for i, k := range r.Reads {
			parts[i] = string(k.Pool) + ":" + strings.Join(k.KeySuffixes, ",")
		}
		got[r.GlobalRank] = strings.Join(parts, "; ")
	}
	want := map[int]string{
		0: dsv4Rank0 + "; draft:_0_draft_k,_0_draft_v; draft_swa:_0_draft_swa_k,_0_draft_swa_v",
		1: dsv4Rank0 + "; draft:_1_draft_k,_1_draft_v; draft_swa:_1_draft_swa_k,_1_draft_swa_v",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reads (-want +got):\n%s", diff)
	}
}

func TestPlanReasons(t *testing.T) {
	cases := map[string]struct {
		topo       *topoBuilder
		rank       int
		wantSubstr string
	}{
		"MLA follower succeeds vacuously":    {mk("DeepSeekV3").TP(8), 3, "no duties"},
		"MLA leader writes replicated":       {mk("DeepSeekV3").TP(8), 0, "attention-TP rank 0 writes the replicated pools"},
		"hybrid follower names its shards":   {mk("KimiK3").TP(2), 1, "writes its own shards of mamba"},
		"MHA rank writes its shard":          {mk("Qwen3").TP(2), 1, "every rank writes its own shard"},
		"PP stage is named":                  {mk("Qwen3").TP(2).PP(2), 3, "PP stage 1 owns its layer slice"},
		"single rank writes everything":      {mk("DeepSeekV3"), 0, "single attention-TP rank"},
		"leader of hybrid MLA writes shards": {mk("KimiK3").TP(2), 0, "and its own shards"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := mustPlan(t, tc.topo.Obj(t))
			if got := p.Ranks()[tc.rank].Reason; !strings.Contains(got, tc.wantSubstr) {
				t.Errorf("rank %d reason %q does not contain %q", tc.rank, got, tc.wantSubstr)
			}
		})
	}
}

func TestPlanRejectsInvalidTopology(t *testing.T) {
	cases := map[string]struct {
		topo Topology
		want string
	}{
		"zero TP": {
			Topology{Attention: AttentionMLA, Pools: []PoolName{PoolKV}, PipelineParallel: 1, DataParallel: 1, Backend: BackendMooncake},
			"topology.tensorParallel must be >= 1",
		},
		"DP not dividing TP with DP attention": {
			Topology{Attention: AttentionMLA, Pools: []PoolName{PoolKV}, TensorParallel: 8, PipelineParallel: 1, DataParallel: 3, DPAttention: true, Backend: BackendMooncake},
			"topology.dataParallel (3) must divide topology.tensorParallel (8)",
		},
		"unknown backend": {
			Topology{Attention: AttentionMLA, Pools: []PoolName{PoolKV}, TensorParallel: 1, PipelineParallel: 1, DataParallel: 1, Backend: "S3"},
			`topology.backend must be one of "Mooncake"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Plan(tc.topo)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Plan error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestPlanTableAndJSON(t *testing.T) {
	p := mustPlan(t, mk("DeepSeekV32").TP(2).PP(2).Draft(DraftDFLASH).Obj(t))
	table := p.String()
	for _, want := range []string{
		"RANK", "WRITES", "kv _0_k; indexer _0_indexer; draft _0_0_draft_k,_0_0_draft_v",
		"warning (DraftParallelism)", "every rank reads kv, indexer, draft: its own shard",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table does not contain %q:\n%s", want, table)
		}
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 1+4+1+1 { // header, 4 ranks, reads, 1 warning
		t.Errorf("table has %d lines, want 7:\n%s", len(lines), table)
	}

	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"globalRank"`, `"tpRank"`, `"keySuffixes"`, `"attentionTP"`, `"warnings"`} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("JSON lacks %s: %s", key, raw)
		}
	}
	var back RankPlan
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
}

func TestPlanGlobalRankLayout(t *testing.T) {
	// Without DP attention: replica-major, then PP stage, then TP rank.
	p := mustPlan(t, mk("Qwen3").TP(2).PP(2).DP(2).Obj(t))
	var got []string
	for _, r := range p.Ranks() {
		got = append(got, fmt.Sprintf("%d:tp%d/pp%d/dp%d", r.GlobalRank, r.TPRank, r.PPRank, r.DPRank))
	}
	want := []string{
		"0:tp0/pp0/dp0", "1:tp1/pp0/dp0", "2:tp0/pp1/dp0", "3:tp1/pp1/dp0",
		"4:tp0/pp0/dp1", "5:tp1/pp0/dp1", "6:tp0/pp1/dp1", "7:tp1/pp1/dp1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rank layout (-want +got):\n%s", diff)
	}
}

// TestPlanTableGroupsIdenticalRanks: the 15 followers of a DeepSeek-V4 TP16 group have the same
// duties and share one row; ranks whose keys differ (MHA shards) keep their own rows.
func TestPlanTableGroupsIdenticalRanks(t *testing.T) {
	cases := map[string]struct {
		topo Topology
		rows []string // the first two columns of each row
	}{
		"DSV4 TP16":    {topo: mk("DeepSeekV4").TP(16).Obj(t), rows: []string{"0 0", "1-15 1-15"}},
		"DSV4 TP8 PP2": {topo: mk("DeepSeekV4").TP(8).PP(2).Obj(t), rows: []string{"0 0", "1-7 1-7", "8 0", "9-15 1-7"}},
		"MHA TP4":      {topo: mk("Qwen3").TP(4).Obj(t), rows: []string{"0 0", "1 1", "2 2", "3 3"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lines := strings.Split(strings.TrimSpace(mustPlan(t, tc.topo).String()), "\n")[1:]
			var got []string
			for _, l := range lines {
				if strings.HasPrefix(l, "every rank reads") {
					break
				}
				f := strings.Fields(l)
				got = append(got, f[0]+" "+f[1])
			}
			if diff := cmp.Diff(tc.rows, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderKeepsTheLastRenderings: a plan rendered again is served from the cache (the very
// same strings), a role's plan of the same topology is rendered on its own, and the cache
// forgets the least recently used rendering beyond its bounds.
func TestRenderKeepsTheLastRenderings(t *testing.T) {
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	topo := mk("DeepSeekV4").TP(16).Obj(t)
	first, err := mustPlan(t, topo).Render()
	if err != nil {
		t.Fatal(err)
	}
	again, err := mustPlan(t, topo).Render()
	if err != nil {
		t.Fatal(err)
	}
	if !same(first.JSON, again.JSON) || !same(first.Table, again.Table) {
		t.Error("a plan of the same topology was rendered again instead of served from the cache")
	}
	decode, err := RolePlan(RoleDecode, DecodeL3None, topo)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := decode.Render(); err != nil || r.JSON == first.JSON || !strings.Contains(r.Table, "no L3 duties") {
		t.Errorf("the decode role's plan rendered as the ordinary plan (%v):\n%s", err, r.Table)
	}
	// A plan that holds its ranks is rendered every time.
	held := mustPlan(t, topo)
	held = held.WithRanks(held.Ranks())
	if r, err := held.Render(); err != nil || same(r.JSON, first.JSON) || r.JSON != first.JSON {
		t.Errorf("a plan that holds its ranks: served from the cache or rendered otherwise (%v)", err)
	}

	c := &renderCache{maxEntries: 2, maxBytes: 100}
	c.add("a", RenderedPlan{JSON: "1"})
	c.add("b", RenderedPlan{JSON: "2"})
	if _, ok := c.get("a"); !ok { // a is now the most recently used
		t.Fatal("a is not cached")
	}
	c.add("c", RenderedPlan{JSON: "3"})
	if _, ok := c.get("b"); ok {
		t.Error("b, the least recently used, was kept beyond 2 entries")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s was dropped", k)
		}
	}
	c.add("d", RenderedPlan{JSON: strings.Repeat("x", 98)})
	if len(c.entries) != 1 || c.entries[0].key != "d" || c.bytes != 99 {
		t.Errorf("beyond 100 bytes the cache keeps %d entries of %d bytes, want d alone (99 bytes)", len(c.entries), c.bytes)
	}
	c.add("e", RenderedPlan{JSON: strings.Repeat("x", 200)})
	if _, ok := c.get("e"); ok {
		t.Error("a rendering larger than the whole cache was kept")
	}
}

// TestIndentJSONIsJSONIndent: indentJSON indents what encoding/json writes exactly as
// json.Indent does, strings with quotes, backslashes, brackets and escapes included.
func TestIndentJSONIsJSONIndent(t *testing.T) {
	for _, v := range []any{
		map[string]any{},
		[]any{},
		map[string]any{"a": []any{}, "b": map[string]any{}, "c": nil, "d": []int{1, 2}},
		[]any{"x\"y", `back\slash\`, "{[,:]}", "<&>", "\u2028\n\t", "", "—", map[string]string{`k"{`: `v\"`}},
		map[string]any{"ranks": []any{map[string]any{"writes": []any{}, "reads": []any{map[string]any{"keySuffixes": []string{"_0_1_k"}}}}}},
	} {
		compact, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := json.Indent(&want, compact, "", "  "); err != nil {
			t.Fatal(err)
		}
		if got := indentJSON(nil, compact, "  "); string(got) != want.String() {
			t.Errorf("indentJSON(%s) =\n%s\njson.Indent:\n%s", compact, got, want.String())
		}
	}
}
