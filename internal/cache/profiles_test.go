package cache

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestProfileNamesAndLookup(t *testing.T) {
	want := []string{"DeepSeekV3", "DeepSeekV32", "DeepSeekV4", "GLM5", "GptOss", "KimiK2", "KimiK3", "Llama3", "Qwen3", "Qwen3Next"}
	if diff := cmp.Diff(want, ProfileNames()); diff != "" {
		t.Errorf("ProfileNames (-want +got):\n%s", diff)
	}
	cases := map[string]struct {
		name   string
		want   string
		wantOK bool
	}{
		"canonical":        {"DeepSeekV4", "DeepSeekV4", true},
		"case-insensitive": {"deepseekv32", "DeepSeekV32", true},
		"R1 is V3":         {"DeepSeekR1", "DeepSeekV3", true},
		"Llama is Llama3":  {"llama", "Llama3", true},
		"unknown":          {"Mistral", "", false},
		"empty":            {"", "", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, ok := LookupProfile(tc.name)
			if ok != tc.wantOK || p.Name != tc.want {
				t.Errorf("LookupProfile(%q) = %q, %v; want %q, %v", tc.name, p.Name, ok, tc.want, tc.wantOK)
			}
		})
	}
	// A looked-up profile is a copy: changing it does not change the built-in.
	p, _ := LookupProfile("DeepSeekV4")
	p.Pools[0] = "changed"
	p.Drafts[DraftEAGLE3].Pools[0] = "changed"
	again, _ := LookupProfile("DeepSeekV4")
	if again.Pools[0] != PoolKV || again.Drafts[DraftEAGLE3].Pools[0] != PoolDraft {
		t.Error("LookupProfile returned a profile sharing memory with the built-in table")
	}
}

func TestProfilePackedDraftLayers(t *testing.T) {
	cases := map[string]struct {
		profile string
		alg     DraftAlgorithm
		layers  int
	}{
		"DeepSeek-V4 MTP packs 1 layer":     {"DeepSeekV4", DraftNEXTN, 1},
		"DeepSeek-V4 DSpark packs 3 layers": {"DeepSeekV4", DraftDSPARK, 3},
		"DeepSeek-V3.2 MTP packs 1 layer":   {"DeepSeekV32", DraftNEXTN, 1},
		"GLM-5 MTP packs 1 layer":           {"GLM5", DraftNEXTN, 1},
		"DeepSeek-V3 MTP packs 1 layer":     {"DeepSeekV3", DraftEAGLE, 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			topo := mk(tc.profile).TP(8).Draft(tc.alg).Obj(t)
			if topo.Draft.Placement != DraftPlacementPacked || topo.Draft.PackedLayers != tc.layers {
				t.Errorf("draft = %+v, want Packed with %d layers", topo.Draft, tc.layers)
			}
		})
	}
	sidecars := map[string]struct {
		profile string
		alg     DraftAlgorithm
	}{
		"EAGLE3 on DeepSeek-V4":        {"DeepSeekV4", DraftEAGLE3},
		"DFlash on GLM-5":              {"GLM5", DraftDFLASH},
		"DSpark on Kimi-K3 (non-DSV4)": {"KimiK3", DraftDSPARK},
		"DSpark on Qwen3 (non-DSV4)":   {"Qwen3", DraftDSPARK},
	}
	for name, tc := range sidecars {
		t.Run(name, func(t *testing.T) {
			topo := mk(tc.profile).TP(8).Draft(tc.alg).Obj(t)
			if topo.Draft.Placement != DraftPlacementSidecar || topo.Draft.HostPoolKind != HostPoolMHA {
				t.Errorf("draft = %+v, want a Sidecar with an MHA host pool", topo.Draft)
			}
		})
	}
}

// TestProfileMatrix plans every profile × draft (none, NGRAM and each listed
// algorithm) × TP ∈ {1,2,8,16} × PP ∈ {1,2} and checks what the profile
// itself promises: who writes, the tp_size fact, where the draft lives.
func TestProfileMatrix(t *testing.T) {
	type tc struct {
		profile Profile
		alg     DraftAlgorithm
		tp, pp  int
	}
	cases := map[string]tc{}
	for _, name := range ProfileNames() {
		p, _ := LookupProfile(name)
		algs := append([]DraftAlgorithm{DraftNone, DraftNGRAM}, p.DraftAlgorithms()...)
		for _, alg := range algs {
			for _, tp := range []int{1, 2, 8, 16} {
				for _, pp := range []int{1, 2} {
					cases[fmt.Sprintf("%s/%s/TP%d/PP%d", name, orNone(string(alg)), tp, pp)] = tc{p, alg, tp, pp}
				}
			}
		}
	}
	if len(cases) < 10*3*4*2 {
		t.Fatalf("only %d matrix cases", len(cases))
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			topo := mk(c.profile.Name).TP(c.tp).PP(c.pp).Draft(c.alg).Obj(t)
			p := mustPlan(t, topo)
			if bad := checkInvariants(topo, p); len(bad) > 0 {
				t.Fatalf("invariants broken:\n%s", strings.Join(bad, "\n"))
			}
			layout, listed := c.profile.Drafts[c.alg]
			sidecar := listed && layout.Placement == DraftPlacementSidecar

			// Who writes: on replicated targets TP0 writes replicated pools,
			// followers only their shards; on MHA targets every rank writes.
			replicated := c.profile.Attention.RankReplicated()
			for _, r := range p.Ranks() {
				if r.TPRank == 0 && !r.HasDuties() {
					t.Errorf("rank %d (TP0) has no duties", r.GlobalRank)
				}
				for _, w := range r.Writes {
					if replicated && r.TPRank != 0 && w.Sharding == Replicated {
						t.Errorf("follower %d writes replicated pool %s", r.GlobalRank, w.Pool)
					}
				}
			}
			followersIdle := replicated && !slices.Contains(c.profile.Pools, PoolMamba) && !sidecar
			if followersIdle {
				for _, r := range p.Ranks() {
					if r.TPRank != 0 && r.HasDuties() {
						t.Errorf("follower %d of a pure replicated model writes %v", r.GlobalRank, r.WritePools())
					}
				}
			}

			// Where the draft lives.
			var draftWrites []PoolName
			for _, w := range p.Ranks()[0].Writes {
				if w.Pool.IsDraft() {
					draftWrites = append(draftWrites, w.Pool)
				}
			}
			if sidecar {
				if diff := cmp.Diff(layout.Pools, draftWrites); diff != "" {
					t.Errorf("TP0 draft writes (-want +got):\n%s", diff)
				}
			} else if len(draftWrites) > 0 {
				t.Errorf("a non-sidecar draft writes draft pools %v", draftWrites)
			}

			// tp_size is a fact exactly when some written pool is rank-sharded.
			anySharded := !replicated || slices.Contains(c.profile.Pools, PoolMamba) || (sidecar && layout.HostPoolKind == HostPoolMHA)
			f := Facts(topo, Settings{ModelPath: "m"})
			if _, has := f[FactTPSize]; has != anySharded {
				t.Errorf("tp_size fact present = %v, want %v (facts %v)", has, anySharded, f)
			}
			if listed && layout.Placement == DraftPlacementPacked && f[FactDraftPackedLayers] != fmt.Sprint(layout.PackedLayers) {
				t.Errorf("packed layers fact = %q, want %d", f[FactDraftPackedLayers], layout.PackedLayers)
			}
			if p.Summary() == "" {
				t.Error("empty summary")
			}
			wantParallelismWarning := (c.alg == DraftDSPARK || c.alg == DraftDFLASH) && c.pp > 1
			if got := slices.Contains(warningCodes(p), WarnDraftParallelism); got != wantParallelismWarning {
				t.Errorf("draft parallelism warning = %v, want %v", got, wantParallelismWarning)
			}
		})
	}
}

func TestResolveTopology(t *testing.T) {
	cases := map[string]struct {
		profile  string
		explicit Topology
		want     Topology
		wantErr  string
	}{
		"profile fills architecture and defaults": {
			profile:  "DeepSeekV4",
			explicit: Topology{TensorParallel: 8, Backend: BackendMooncake, Draft: Draft{Algorithm: DraftDSPARK, ModelPath: "deepseek-ai/dspark"}},
			want: Topology{Profile: "DeepSeekV4", Attention: AttentionDSV4, Pools: dsv4Pools, TensorParallel: 8, PipelineParallel: 1, DataParallel: 1,
				Backend: BackendMooncake, Draft: Draft{Algorithm: DraftDSPARK, Placement: DraftPlacementPacked, PackedLayers: 3, ModelPath: "deepseek-ai/dspark"}},
		},
		"explicit packed layer count wins": {
			profile:  "DeepSeekV4",
			explicit: Topology{TensorParallel: 8, Backend: BackendMooncake, Draft: Draft{Algorithm: DraftDSPARK, PackedLayers: 2, ModelPath: "deepseek-ai/dspark"}},
			want: Topology{Profile: "DeepSeekV4", Attention: AttentionDSV4, Pools: dsv4Pools, TensorParallel: 8, PipelineParallel: 1, DataParallel: 1,
				Backend: BackendMooncake, Draft: Draft{Algorithm: DraftDSPARK, Placement: DraftPlacementPacked, PackedLayers: 2, ModelPath: "deepseek-ai/dspark"}},
		},
		"explicit pools and attention win": {
			profile:  "GLM5",
			explicit: Topology{Attention: AttentionHybridMambaMLA, Pools: []PoolName{PoolKV, PoolIndexer, PoolMamba}, TensorParallel: 4, Backend: BackendMooncake},
			want: Topology{Profile: "GLM5", Attention: AttentionHybridMambaMLA, Pools: []PoolName{PoolKV, PoolIndexer, PoolMamba}, MambaConvBuffers: 1,
				TensorParallel: 4, PipelineParallel: 1, DataParallel: 1, Backend: BackendMooncake, Draft: Draft{Placement: DraftPlacementNone}},
		},
		"explicit sidecar host kind wins": {
			profile:  "DeepSeekV3",
			explicit: Topology{TensorParallel: 8, Backend: BackendMooncake, Draft: Draft{Algorithm: DraftEAGLE3, HostPoolKind: HostPoolMLA, ModelPath: "d"}},
			want: Topology{Profile: "DeepSeekV3", Attention: AttentionMLA, Pools: []PoolName{PoolKV}, TensorParallel: 8, PipelineParallel: 1, DataParallel: 1,
				Backend: BackendMooncake, Draft: Draft{Algorithm: DraftEAGLE3, Placement: DraftPlacementSidecar, HostPoolKind: HostPoolMLA, Pools: []PoolName{PoolDraft}, ModelPath: "d"}},
		},
		"no profile: explicit alone": {
			explicit: Topology{Attention: AttentionMHA, Pools: []PoolName{PoolKV}, TensorParallel: 2, Backend: BackendMooncake},
			want: Topology{Attention: AttentionMHA, Pools: []PoolName{PoolKV}, TensorParallel: 2, PipelineParallel: 1, DataParallel: 1,
				Backend: BackendMooncake, Draft: Draft{Placement: DraftPlacementNone}},
		},
		"unknown profile": {
			profile: "Mistral", explicit: Topology{TensorParallel: 1, Backend: BackendMooncake},
			wantErr: `topology.profile: unknown profile "Mistral"`,
		},
		"algorithm the profile does not know": {
			profile: "KimiK2", explicit: Topology{TensorParallel: 8, Backend: BackendMooncake, Draft: Draft{Algorithm: DraftNEXTN}},
			wantErr: "profile KimiK2 has no built-in layout for NEXTN",
		},
		"DSpark without a model path": {
			profile: "DeepSeekV4", explicit: Topology{TensorParallel: 8, Backend: BackendMooncake, Draft: Draft{Algorithm: DraftDSPARK}},
			wantErr: "draft DSPARK needs a draft model path",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ResolveTopology(tc.profile, tc.explicit)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ResolveTopology (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	valid := func() Topology {
		return Topology{Attention: AttentionMLA, Pools: []PoolName{PoolKV}, TensorParallel: 8, PipelineParallel: 1, DataParallel: 1, Backend: BackendMooncake}
	}
	cases := map[string]struct {
		mutate func(*Topology)
		want   string
	}{
		"TP below 1":                  {func(t *Topology) { t.TensorParallel = 0 }, "topology.tensorParallel must be >= 1"},
		"PP below 1":                  {func(t *Topology) { t.PipelineParallel = -1 }, "topology.pipelineParallel must be >= 1"},
		"too many ranks":              {func(t *Topology) { t.TensorParallel, t.PipelineParallel = 4096, 64 }, "the planner supports at most 65536"},
		"unknown attention":           {func(t *Topology) { t.Attention = "Linear" }, `topology.attention must be one of`},
		"no pools":                    {func(t *Topology) { t.Pools = nil }, "topology.pools must list"},
		"no kv pool":                  {func(t *Topology) { t.Pools = []PoolName{PoolIndexer} }, `topology.pools must include "kv"`},
		"duplicate pool":              {func(t *Topology) { t.Pools = []PoolName{PoolKV, PoolKV} }, `topology.pools[1]: pool "kv" is listed twice`},
		"indexer on MHA":              {func(t *Topology) { t.Attention = AttentionMHA; t.Pools = []PoolName{PoolKV, PoolIndexer} }, `topology.pools[1]: the "indexer" pool (DSA indexer) needs an MLA-family attention`},
		"dsv4 pool on MLA":            {func(t *Topology) { t.Pools = []PoolName{PoolKV, PoolDSV4C4} }, `needs attention DSV4`},
		"hybrid without mamba":        {func(t *Topology) { t.Attention = AttentionHybridMambaMLA }, `topology.pools must include "mamba"`},
		"mamba without conv":          {func(t *Topology) { t.Attention = AttentionHybridMambaMLA; t.Pools = []PoolName{PoolKV, PoolMamba} }, "topology.mambaConvBuffers must be between 1 and 16"},
		"draft pool in target pools":  {func(t *Topology) { t.Pools = []PoolName{PoolKV, PoolDraft} }, "is a draft pool; list it in topology.draft.pools"},
		"unknown algorithm":           {func(t *Topology) { t.Draft = Draft{Algorithm: "MEDUSA"} }, "topology.draft.algorithm must be empty or one of"},
		"algorithm without placement": {func(t *Topology) { t.Draft = Draft{Algorithm: DraftEAGLE3} }, "topology.draft.placement must be set for draft EAGLE3"},
		"packed with no layers":       {func(t *Topology) { t.Draft = Draft{Algorithm: DraftNEXTN, Placement: DraftPlacementPacked} }, "topology.draft.packedLayers must be between 1 and 64"},
		"packed EAGLE3": {func(t *Topology) {
			t.Draft = Draft{Algorithm: DraftEAGLE3, Placement: DraftPlacementPacked, PackedLayers: 1, ModelPath: "x"}
		}, "draft EAGLE3 is a separate model, use placement Sidecar"},
		"packed DSpark on MLA": {func(t *Topology) {
			t.Draft = Draft{Algorithm: DraftDSPARK, Placement: DraftPlacementPacked, PackedLayers: 3, ModelPath: "x"}
		}, "Packed for DSPARK needs a DSV4 target"},
		"NGRAM with a placement": {func(t *Topology) {
			t.Draft = Draft{Algorithm: DraftNGRAM, Placement: DraftPlacementSidecar, HostPoolKind: HostPoolMHA, Pools: []PoolName{PoolDraft}}
		}, "topology.draft.placement must be None for draft NGRAM"},
		"sidecar without host kind": {func(t *Topology) {
			t.Draft = Draft{Algorithm: DraftEAGLE3, Placement: DraftPlacementSidecar, Pools: []PoolName{PoolDraft}, ModelPath: "x"}
		}, "topology.draft.hostPoolKind must be MHA or MLA"},
		"sidecar without draft pool": {func(t *Topology) {
			t.Draft = Draft{Algorithm: DraftEAGLE3, Placement: DraftPlacementSidecar, HostPoolKind: HostPoolMHA, Pools: []PoolName{PoolDraftSWA}, ModelPath: "x"}
		}, `topology.draft.pools must include "draft"`},
		"sidecar needs a model path": {func(t *Topology) {
			t.Draft = Draft{Algorithm: DraftEAGLE3, Placement: DraftPlacementSidecar, HostPoolKind: HostPoolMHA, Pools: []PoolName{PoolDraft}}
		}, "topology.draft.modelPath: draft EAGLE3 needs a draft model path"},
		"draft_indexer on MHA host pool": {func(t *Topology) {
			t.Draft = Draft{Algorithm: DraftEAGLE3, Placement: DraftPlacementSidecar, HostPoolKind: HostPoolMHA, Pools: []PoolName{PoolDraft, PoolDraftIndexer}, ModelPath: "x"}
		}, `"draft_indexer" needs an MLA draft host pool`},
		"MLA draft on MHA target": {func(t *Topology) {
			t.Attention = AttentionMHA
			t.Draft = Draft{Algorithm: DraftEAGLE3, Placement: DraftPlacementSidecar, HostPoolKind: HostPoolMLA, Pools: []PoolName{PoolDraft}, ModelPath: "x"}
		}, "hostPoolKind MLA needs a rank-replicated target"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			topo := valid()
			if err := topo.Validate(); err != nil {
				t.Fatalf("base topology invalid: %v", err)
			}
			tc.mutate(&topo)
			err := topo.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
