package cache

import (
	"fmt"
	"strings"
	"testing"
)

// topoBuilder builds test topologies fluently: mk("DeepSeekV32").TP(8).Draft(DraftEAGLE3).Obj(t).
type topoBuilder struct {
	profile string
	t       Topology
}

func mk(profile string) *topoBuilder {
	return &topoBuilder{profile: profile, t: Topology{TensorParallel: 1, Backend: BackendMooncake}}
}

func explicit(attn AttentionKind, pools ...PoolName) *topoBuilder {
	b := mk("")
	b.t.Attention = attn
	b.t.Pools = pools
	return b
}

func (b *topoBuilder) TP(n int) *topoBuilder     { b.t.TensorParallel = n; return b }
func (b *topoBuilder) PP(n int) *topoBuilder     { b.t.PipelineParallel = n; return b }
func (b *topoBuilder) DP(n int) *topoBuilder     { b.t.DataParallel = n; return b }
func (b *topoBuilder) DPAttention() *topoBuilder { b.t.DPAttention = true; return b }
func (b *topoBuilder) Conv(n int) *topoBuilder   { b.t.MambaConvBuffers = n; return b }

// Draft sets the algorithm (and a model path, which every sidecar needs).
func (b *topoBuilder) Draft(a DraftAlgorithm) *topoBuilder {
	b.t.Draft.Algorithm = a
	b.t.Draft.ModelPath = "org/" + strings.ToLower(string(a)) + "-draft"
	return b
}

func (b *topoBuilder) DraftModel(path string) *topoBuilder { b.t.Draft.ModelPath = path; return b }

func (b *topoBuilder) Packed(layers int) *topoBuilder {
	b.t.Draft.Placement = DraftPlacementPacked
	b.t.Draft.PackedLayers = layers
	return b
}

func (b *topoBuilder) Sidecar(kind HostPoolKind, pools ...PoolName) *topoBuilder {
	b.t.Draft.Placement = DraftPlacementSidecar
	b.t.Draft.HostPoolKind = kind
	b.t.Draft.Pools = pools
	return b
}

func (b *topoBuilder) Obj(t testing.TB) Topology {
	t.Helper()
	out, err := ResolveTopology(b.profile, b.t)
	if err != nil {
		t.Fatalf("resolving topology %+v with profile %q: %v", b.t, b.profile, err)
	}
	return out
}

func mustPlan(t testing.TB, topo Topology) RankPlan {
	t.Helper()
	p, err := Plan(topo)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return p
}

// writesOf renders a rank's writes as "pool:suffix,suffix; pool:...".
func writesOf(d RankDuty) string {
	parts := make([]string, len(d.Writes))
	for i, w := range d.Writes {
		parts[i] = string(w.Pool) + ":" + strings.Join(w.KeySuffixes, ",")
	}
	return strings.Join(parts, "; ")
}

// writesByRank maps every global rank to writesOf.
func writesByRank(p RankPlan) map[int]string {
	out := make(map[int]string, len(p.Ranks()))
	for _, r := range p.Ranks() {
		out[r.GlobalRank] = writesOf(r)
	}
	return out
}

func warningCodes(p RankPlan) []WarningCode {
	var out []WarningCode
	for _, w := range p.Warnings {
		out = append(out, w.Code)
	}
	return out
}

// checkInvariants verifies the structural promises of a plan and returns
// every violation in words.
func checkInvariants(topo Topology, p RankPlan) []string {
	var bad []string
	if got, want := len(p.Ranks()), topo.TotalRanks(); got != want {
		bad = append(bad, fmt.Sprintf("plan has %d ranks, want %d", got, want))
	}
	type groupKey struct{ rep, pp, dp int }
	writers := map[groupKey]map[PoolName]int{}
	seenGlobal := map[int]bool{}
	for _, r := range p.Ranks() {
		if seenGlobal[r.GlobalRank] {
			bad = append(bad, fmt.Sprintf("global rank %d appears twice", r.GlobalRank))
		}
		seenGlobal[r.GlobalRank] = true
		if r.GlobalRank < 0 || r.GlobalRank >= topo.TotalRanks() {
			bad = append(bad, fmt.Sprintf("global rank %d out of range", r.GlobalRank))
		}
		rep := 0
		if !topo.DPAttention {
			rep = r.DPRank
		}
		g := groupKey{rep, r.PPRank, r.DPRank}
		if writers[g] == nil {
			writers[g] = map[PoolName]int{}
		}
		wrote := map[PoolName]bool{}
		for _, w := range r.Writes {
			writers[g][w.Pool]++
			wrote[w.Pool] = true
		}
		for _, pl := range topo.objectPools() {
			found := false
			for _, rd := range r.Reads {
				if rd.Pool == pl {
					found = true
				}
			}
			if !found {
				bad = append(bad, fmt.Sprintf("rank %d does not read pool %s", r.GlobalRank, pl))
			}
			if topo.PoolSharding(pl) == RankSharded && !wrote[pl] {
				bad = append(bad, fmt.Sprintf("rank-sharded pool %s is not written by rank %d (tp %d pp %d dp %d)", pl, r.GlobalRank, r.TPRank, r.PPRank, r.DPRank))
			}
		}
	}
	for g, counts := range writers {
		for _, pl := range topo.objectPools() {
			if topo.PoolSharding(pl) == Replicated && counts[pl] != 1 {
				bad = append(bad, fmt.Sprintf("replicated pool %s is written by %d ranks in group %+v, want exactly 1", pl, counts[pl], g))
			}
		}
	}
	if want := topo.Replicas() * topo.PipelineParallel * topo.AttentionDPGroups(); len(writers) != want && len(p.Ranks()) > 0 {
		bad = append(bad, fmt.Sprintf("plan has %d writer groups, want %d", len(writers), want))
	}
	return bad
}
