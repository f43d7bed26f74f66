package cache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// referencePlan, referenceKeySuffixes, referenceSummary and referenceRolePlan are Plan,
// KeySuffixes, Summary and RolePlan as they were before they were made fast: plain loops that
// build every rank's strings and slices on their own, into a plan that holds its ranks.
// TestPlanMatchesTheReference holds the fast ones to their results.

func referencePlan(t Topology) (RankPlan, error) {
	if err := t.Validate(); err != nil {
		return RankPlan{}, fmt.Errorf("cannot plan rank duties: %w", err)
	}
	attnTP := t.AttentionTP()
	plan := RankPlan{
		Attention:         t.Attention,
		Backend:           t.Backend,
		TensorParallel:    t.TensorParallel,
		PipelineParallel:  t.PipelineParallel,
		AttentionTP:       attnTP,
		AttentionDPGroups: t.AttentionDPGroups(),
		Replicas:          t.Replicas(),
	}
	ranks := make([]RankDuty, 0, t.TotalRanks())
	pools := t.objectPools()
	replicatedTarget := t.Attention.RankReplicated()
	for rep := 0; rep < plan.Replicas; rep++ {
		for pp := 0; pp < t.PipelineParallel; pp++ {
			// Replicated objects have the same suffixes on every rank of a
			// stage: compute them once and share the (read-only) slices.
			replicatedKeys := make(map[PoolName][]string, len(pools))
			for dpg := 0; dpg < plan.AttentionDPGroups; dpg++ {
				for tp := 0; tp < attnTP; tp++ {
					d := RankDuty{
						GlobalRank: (rep*t.PipelineParallel+pp)*t.TensorParallel + dpg*attnTP + tp,
						TPRank:     tp,
						PPRank:     pp,
						DPRank:     dpg,
						Reads:      make([]PoolKeys, 0, len(pools)),
						Writes:     []PoolKeys{},
					}
					if !t.DPAttention {
						d.DPRank = rep
					}
					leader := tp == 0 || !replicatedTarget
					for _, p := range pools {
						sh := t.PoolSharding(p)
						suffixes, ok := replicatedKeys[p]
						if !ok {
							suffixes = referenceKeySuffixes(SuffixInput{
								Pool: p, Sharding: sh, TPRank: tp, PPRank: pp,
								PipelineParallel: t.PipelineParallel, MambaConvBuffers: t.MambaConvBuffers,
							})
							if sh == Replicated {
								replicatedKeys[p] = suffixes
							}
						}
						keys := PoolKeys{Pool: p, Sharding: sh, KeySuffixes: suffixes}
						d.Reads = append(d.Reads, keys)
						if leader || followerWrites(t, p, sh) {
							d.Writes = append(d.Writes, keys)
						}
					}
					d.Reason = dutyReason(t, d, leader)
					ranks = append(ranks, d)
				}
			}
		}
	}
	plan.Warnings = planWarnings(t)
	return plan.WithRanks(ranks), nil
}

func referenceRolePlan(role Role, mode DecodeL3, t Topology) (RankPlan, error) {
	plan, err := referencePlan(t)
	if err != nil {
		return plan, err
	}
	l3 := L3Of(role, mode)
	if l3.Reads && l3.Writes {
		return plan, nil
	}
	ranks := make([]RankDuty, plan.NumRanks())
	for i, r := range plan.Ranks() {
		r.Reads = []PoolKeys{}
		if !l3.Writes {
			r.Writes = []PoolKeys{}
			r.Reason = "no L3 duties: " + l3.Reason
		} else {
			r.Reason += "; reads nothing (decode offload)"
		}
		ranks[i] = r
	}
	return plan.WithRanks(ranks), nil
}

// referencePlanJSON is RankPlan as the type was before plans were kept by class: its JSON is
// what every plan.json written so far holds.
type referencePlanJSON struct {
	Attention         AttentionKind `json:"attention"`
	Backend           BackendType   `json:"backend"`
	TensorParallel    int           `json:"tensorParallel"`
	PipelineParallel  int           `json:"pipelineParallel"`
	AttentionTP       int           `json:"attentionTP"`
	AttentionDPGroups int           `json:"attentionDPGroups"`
	Replicas          int           `json:"replicas"`
	Ranks             []RankDuty    `json:"ranks"`
	Warnings          []Warning     `json:"warnings,omitempty"`
}

// differsFromReference says how got differs from the reference plan want: its header, its
// ranks (all at once and one by one), its counts, its JSON, summary and table, and its
// rendering; "" if in nothing.
// (TestPlanTableAndJSON reads the JSON back.)
func differsFromReference(want, got RankPlan) string {
	if want.Attention != got.Attention || want.Backend != got.Backend || want.TensorParallel != got.TensorParallel ||
		want.PipelineParallel != got.PipelineParallel || want.AttentionTP != got.AttentionTP ||
		want.AttentionDPGroups != got.AttentionDPGroups || want.Replicas != got.Replicas || !reflect.DeepEqual(want.Warnings, got.Warnings) {
		return fmt.Sprintf("the header or warnings differ: %+v, reference %+v", got.WithRanks(nil), want.WithRanks(nil))
	}
	wantRanks, gotRanks := want.Ranks(), got.Ranks()
	if !reflect.DeepEqual(wantRanks, gotRanks) {
		return "the ranks differ (-reference +Plan):\n" + cmp.Diff(wantRanks, gotRanks)
	}
	if got.NumRanks() != len(wantRanks) {
		return fmt.Sprintf("NumRanks %d, the reference has %d ranks", got.NumRanks(), len(wantRanks))
	}
	writers := 0
	for i, r := range wantRanks {
		if g := got.Rank(i); !reflect.DeepEqual(r, g) {
			return fmt.Sprintf("Rank(%d) differs (-reference +Plan):\n%s", i, cmp.Diff(r, g))
		}
		if r.HasDuties() {
			writers++
		}
	}
	if got.Writers() != writers {
		return fmt.Sprintf("Writers %d, the reference has %d ranks with duties", got.Writers(), writers)
	}
	wantJSON, err := json.Marshal(referencePlanJSON{
		Attention: want.Attention, Backend: want.Backend, TensorParallel: want.TensorParallel, PipelineParallel: want.PipelineParallel,
		AttentionTP: want.AttentionTP, AttentionDPGroups: want.AttentionDPGroups, Replicas: want.Replicas,
		Ranks: wantRanks, Warnings: want.Warnings,
	})
	if err != nil {
		return err.Error()
	}
	gotJSON, err := json.Marshal(got)
	if err != nil {
		return err.Error()
	}
	if !bytes.Equal(wantJSON, gotJSON) {
		return "the JSON differs from the reference's"
	}
	if w, g := referenceSummary(want), got.Summary(); w != g {
		return fmt.Sprintf("Summary %q, reference %q", g, w)
	}
	table := want.String()
	if got.String() != table {
		return "the table differs from the reference's"
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, wantJSON, "", "  "); err != nil {
		return err.Error()
	}
	if r, err := got.Render(); err != nil || r.JSON != indented.String() || r.Table != table {
		return fmt.Sprintf("Render differs from the reference's indented JSON and table (%v)", err)
	}
	return ""
}

func referenceKeySuffixes(in SuffixInput) []string {
	shardTag := strconv.Itoa(in.TPRank)
	replTag := ""
	if in.PipelineParallel > 1 {
		shardTag += "_" + strconv.Itoa(in.PPRank)
		replTag = strconv.Itoa(in.PPRank)
	}
	if in.Pool == PoolMamba {
		out := make([]string, 0, 1+in.MambaConvBuffers)
		base := "_" + shardTag
		out = append(out, base+"_temporal")
		for i := 0; i < in.MambaConvBuffers; i++ {
			out = append(out, base+"_conv_"+strconv.Itoa(i))
		}
		return out
	}
	sharded := in.Sharding == RankSharded
	tag := replTag
	if sharded {
		tag = shardTag
	}
	base := "_" + tag + "_"
	switch in.Pool {
	case PoolKV:
		if sharded {
			return []string{base + "k", base + "v"}
		}
		return []string{base + "k"}
	case PoolSWA, PoolDraftSWA:
		if sharded {
			return []string{base + string(in.Pool) + "_k", base + string(in.Pool) + "_v"}
		}
		return []string{base + string(in.Pool)}
	case PoolDraft:
		if sharded {
			return []string{base + "draft_k", base + "draft_v"}
		}
		return []string{base + "draft_k"}
	default:
		return []string{base + string(in.Pool)}
	}
}

func referenceSummary(p RankPlan) string {
	if len(p.Ranks()) == 0 {
		return "no ranks"
	}
	group := p.Ranks()[:min(p.AttentionTP, len(p.Ranks()))]
	leader := poolsOf(group[0].Writes)
	followers := group[1:]
	var b strings.Builder
	if n := p.PipelineParallel * p.AttentionDPGroups * p.Replicas; n > 1 {
		fmt.Fprintf(&b, "in each of %d groups (%s): ", n, groupShape(p))
	}
	allSame := len(followers) > 0
	for _, f := range followers {
		if !slices.Equal(poolsOf(f.Writes), leader) {
			allSame = false
			break
		}
	}
	switch {
	case len(leader) == 0:
		b.WriteString("TP0 writes nothing")
	case allSame:
		fmt.Fprintf(&b, "all %d ranks write their own keys of %s", len(group), joinPools(leader))
	default:
		fmt.Fprintf(&b, "TP0 writes %s", joinPools(leader))
	}
	if len(followers) > 0 && !allSame {
		// Group followers by what they write (they are normally uniform).
		type bucket struct {
			pools []PoolName
			n     int
		}
		var buckets []bucket
		for _, f := range followers {
			ps := poolsOf(f.Writes)
			i := slices.IndexFunc(buckets, func(bk bucket) bool { return slices.Equal(bk.pools, ps) })
			if i < 0 {
				buckets = append(buckets, bucket{pools: ps})
				i = len(buckets) - 1
			}
			buckets[i].n++
		}
		for _, bk := range buckets {
			noun := "followers"
			if bk.n == 1 {
				noun = "follower"
			}
			if len(bk.pools) == 0 {
				fmt.Fprintf(&b, "; %d %s: no duties (replicated)", bk.n, noun)
			} else {
				fmt.Fprintf(&b, "; %d %s write %s", bk.n, noun, joinPools(bk.pools))
			}
		}
	}
	if len(p.Warnings) == 1 {
		b.WriteString(" (1 warning)")
	} else if len(p.Warnings) > 1 {
		fmt.Fprintf(&b, " (%d warnings)", len(p.Warnings))
	}
	return b.String()
}

// TestPlanMatchesTheReference plans every profile with and without each draft it accepts, over a
// grid of TP, PP and DP sizes with and without DP attention, and requires the plan, its summary
// and its table to be those of the reference implementation.
func TestPlanMatchesTheReference(t *testing.T) {
	planned := 0
	for _, profile := range ProfileNames() {
		p, _ := LookupProfile(profile)
		for _, alg := range append([]DraftAlgorithm{DraftNone}, p.DraftAlgorithms()...) {
			for _, tp := range []int{1, 2, 3, 4, 8, 64} {
				for _, pp := range []int{1, 2, 4} {
					for _, dp := range []int{1, 2, 4} {
						for _, dpAttn := range []bool{false, true} {
							in := Topology{TensorParallel: tp, PipelineParallel: pp, DataParallel: dp, DPAttention: dpAttn, Backend: BackendMooncake, MambaConvBuffers: 2}
							if alg != DraftNone {
								in.Draft = Draft{Algorithm: alg, ModelPath: "org/draft"}
							}
							topo, err := ResolveTopology(profile, in)
							if err != nil {
								continue
							}
							want, wantErr := referencePlan(topo)
							got, err := Plan(topo)
							if (err == nil) != (wantErr == nil) {
								t.Fatalf("%s %s TP%d PP%d DP%d dpAttention=%v: Plan error %v, reference %v", profile, alg, tp, pp, dp, dpAttn, err, wantErr)
							}
							if err != nil {
								continue
							}
							planned++
							if diff := differsFromReference(want, got); diff != "" {
								t.Fatalf("%s %s TP%d PP%d DP%d dpAttention=%v: %s", profile, alg, tp, pp, dp, dpAttn, diff)
							}
							if tp > 8 {
								continue // the roles' plans on the smaller topologies
							}
							for _, mode := range []DecodeL3{DecodeL3None, DecodeL3Offload, DecodeL3HiCache} {
								want, _ := referenceRolePlan(RoleDecode, mode, topo)
								got, err := RolePlan(RoleDecode, mode, topo)
								if err != nil {
									t.Fatal(err)
								}
								if diff := differsFromReference(want, got); diff != "" {
									t.Fatalf("%s %s TP%d PP%d DP%d dpAttention=%v decode %s: %s", profile, alg, tp, pp, dp, dpAttn, mode, diff)
								}
							}
						}
					}
				}
			}
		}
	}
	// Pool orders the profiles do not use, where a follower's pools are not neighbours.
	apart := 0
	for _, b := range []*topoBuilder{
		explicit(AttentionHybridMambaMLA, PoolKV, PoolMamba, PoolIndexer).TP(4).PP(2),
		explicit(AttentionHybridMambaMLA, PoolMamba, PoolKV, PoolIndexer).TP(8).Draft(DraftEAGLE3).Sidecar(HostPoolMHA, PoolDraft),
		explicit(AttentionHybridMambaMLA, PoolKV, PoolMamba, PoolIndexer).TP(4).DP(2).DPAttention().Draft(DraftEAGLE3).Sidecar(HostPoolMHA, PoolDraft, PoolDraftSWA),
	} {
		topo := b.Obj(t)
		want, err := referencePlan(topo)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Plan(topo)
		if err != nil {
			t.Fatal(err)
		}
		planned++
		if diff := differsFromReference(want, got); diff != "" {
			t.Fatalf("%+v: %s", topo, diff)
		}
		if followerPoolsApart(got) {
			apart++
		}
	}
	if apart == 0 {
		t.Fatal("no topology has a follower whose pools are not neighbours")
	}
	if planned < 500 {
		t.Fatalf("only %d topologies planned", planned)
	}
	t.Logf("%d topologies planned as the reference plans them", planned)
}

// followerPoolsApart reports whether a rank writes pools that are not neighbours among its reads.
func followerPoolsApart(p RankPlan) bool {
	for _, r := range p.Ranks() {
		at := -1
		for _, w := range r.Writes {
			i := slices.IndexFunc(r.Reads, func(k PoolKeys) bool { return k.Pool == w.Pool })
			if at >= 0 && i != at+1 {
				return true
			}
			at = i
		}
	}
	return false
}

// TestKeySuffixesMatchTheReference compares KeySuffixes with the reference on every pool,
// sharding, rank tag and conv buffer count.
func TestKeySuffixesMatchTheReference(t *testing.T) {
	pools := append(append([]PoolName{PoolKV, PoolSWA, PoolIndexer, PoolMamba}, dsv4Pools...), PoolDraft, PoolDraftSWA, PoolDraftIndexer)
	for _, p := range pools {
		for _, sh := range []Sharding{RankSharded, Replicated} {
			for _, tp := range []int{0, 1, 9, 10, 63, 100, 1234} {
				for _, pp := range []int{1, 2, 11} {
					for conv := range 4 {
						in := SuffixInput{Pool: p, Sharding: sh, TPRank: tp, PPRank: pp - 1, PipelineParallel: pp, MambaConvBuffers: conv}
						if got, want := KeySuffixes(in), referenceKeySuffixes(in); !slices.Equal(got, want) {
							t.Fatalf("KeySuffixes(%+v) = %q, reference %q", in, got, want)
						}
					}
				}
			}
		}
	}
}

// TestPlanAllocationsDoNotGrowWithRanks bounds the allocations of a plan, its summary and its
// namespace for 256 ranks (TP 64 × PP 4): they were 4,272 when every rank built its own strings
// and slices, 95 with one slab and shared reasons, and are 50 now that a plan holds the duties
// of each class of rank and spells a rank out only when asked. A count, not a time: it is exact
// on any machine.
func TestPlanAllocationsDoNotGrowWithRanks(t *testing.T) {
	const bound = 64
	allocs := func(topo Topology) float64 {
		return testing.AllocsPerRun(10, func() {
			p, err := Plan(topo)
			if err != nil {
				t.Fatal(err)
			}
			_ = p.Summary()
			_ = Namespace(Facts(topo, benchSettings))
		})
	}
	for name, topo := range benchTopologies(t) {
		n := allocs(topo)
		t.Logf("%s: %v allocations", name, n)
		if n > bound {
			t.Errorf("%s: Plan + Summary + Namespace made %v allocations for 256 ranks; want at most %d", name, n, bound)
		}
		// The same model at TP 8: as many allocations for 8 times fewer ranks (give or take the
		// two that a collection emptying fmt's pool of printers may add).
		small := topo
		small.TensorParallel = 8
		if m := allocs(small); n > m+2 {
			t.Errorf("%s: Plan + Summary + Namespace made %v allocations at TP 64 and %v at TP 8; want no more", name, n, m)
		}
	}
}
