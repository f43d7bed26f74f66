package cache

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// PoolKeys is one pool's objects of one rank: which pool, how it is split,
// and the key suffixes of one page.
type PoolKeys struct {
	Pool        PoolName `json:"pool"`
	Sharding    Sharding `json:"sharding"`
	KeySuffixes []string `json:"keySuffixes"`
}

// RankDuty is what one SGLang rank does against L3.
type RankDuty struct {
	// GlobalRank is the rank's index among all ranks of the topology:
	// replica × (pp × tp) + pp × tp + attention-DP group × attention-TP + attention-TP rank.
	GlobalRank int `json:"globalRank"`
	// TPRank is the attention-TP rank (the TP rank without DP attention).
	TPRank int `json:"tpRank"`
	// PPRank is the pipeline stage.
	PPRank int `json:"ppRank"`
	// DPRank is the attention-DP rank with DP attention, else the index of the
	// data-parallel replica.
	DPRank int `json:"dpRank"`
	// Writes are the pools this rank backs up to L3 (L2 → L3).
	Writes []PoolKeys `json:"writes"`
	// Reads are the pools this rank prefetches from L3 (every rank reads).
	Reads []PoolKeys `json:"reads"`
	// Reason explains the duties in words.
	Reason string `json:"reason"`
}

// HasDuties reports whether the rank writes anything to L3.
func (r RankDuty) HasDuties() bool { return len(r.Writes) > 0 }

// WritePools returns the names of the pools the rank writes, in order.
func (r RankDuty) WritePools() []PoolName {
	out := make([]PoolName, len(r.Writes))
	for i, w := range r.Writes {
		out[i] = w.Pool
	}
	return out
}

// WarningCode identifies a kind of plan warning.
type WarningCode string

const (
	// WarnDraftParallelism: SGLang refuses this speculative algorithm with
	// this parallelism at start (DFLASH needs pp 1, DSPARK pp 1 outside PD
	// prefill), as of 0.5.23.
	WarnDraftParallelism WarningCode = "DraftParallelism"
)

// Warning is something about a plan a person should know.
type Warning struct {
	Code WarningCode `json:"code"`
	// Pools are the pools concerned, if any.
	Pools   []PoolName `json:"pools,omitempty"`
	Message string     `json:"message"`
}

// RankPlan is the per-rank L3 duty plan of a topology. Its slices share backing
// arrays (a rank's writes are part of its reads, ranks of one PP stage share
// the KeySuffixes of replicated pools): treat a plan as read-only.
type RankPlan struct {
	Attention        AttentionKind `json:"attention"`
	Backend          BackendType   `json:"backend"`
	TensorParallel   int           `json:"tensorParallel"`
	PipelineParallel int           `json:"pipelineParallel"`
	AttentionTP      int           `json:"attentionTP"`
	// AttentionDPGroups is the number of attention-DP groups per TP group.
	AttentionDPGroups int `json:"attentionDPGroups"`
	// Replicas is the number of data-parallel replicas without DP attention.
	Replicas int        `json:"replicas"`
	Ranks    []RankDuty `json:"ranks"`
	Warnings []Warning  `json:"warnings,omitempty"`
}

// Plan computes, for every rank of a valid topology, the pools it writes to
// and reads from L3 and why. It reproduces SGLang's rules:
//
//   - on a rank-replicated target (MLA, DSV4, hybrid Mamba over MLA) only
//     attention-TP rank 0 of each (replica, PP stage, attention-DP group)
//     writes the replicated pools (backup_skip = replicated and tp_rank != 0);
//   - such a follower still writes its mamba shard, and its MHA draft /
//     draft_swa shards (Mooncake stores every rank's shard); nothing else;
//   - on an MHA target every rank writes every pool to its own keys;
//   - every rank reads every pool: its own shard of rank-sharded pools, the
//     single object of replicated pools.
//
// It returns an error naming the fields at fault when the topology is invalid.
func Plan(t Topology) (RankPlan, error) {
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
		Ranks:             make([]RankDuty, 0, t.TotalRanks()),
	}
	pools := t.objectPools()
	np := len(pools)
	replicatedTarget := t.Attention.RankReplicated()
	// What each pool is to every rank: its sharding, and whether a follower of a replicated
	// target writes it (a leader writes every pool).
	shardings := make([]Sharding, np)
	byFollowers := make([]bool, np)
	followerPools := 0
	for i, p := range pools {
		shardings[i] = t.PoolSharding(p)
		if byFollowers[i] = followerWrites(t, p, shardings[i]); byFollowers[i] {
			followerPools++
		}
	}
	suffixes := newPlanSuffixes(t, pools, shardings, attnTP)
	// Every rank's reads are cut from one slab. A leader writes every pool: its writes are its
	// reads. A follower writes the pools followers write: a run of its reads when they are
	// neighbours (a sidecar draft's pools come last), else its own part of the slab.
	first := slices.Index(byFollowers, true)
	if first < 0 {
		first = 0
	}
	run := first+followerPools <= np && !slices.Contains(byFollowers[first:first+followerPools], false)
	groups := plan.Replicas * t.PipelineParallel * plan.AttentionDPGroups
	size := groups * attnTP * np
	if replicatedTarget && !run {
		size += groups * (attnTP - 1) * followerPools
	}
	slab := make([]PoolKeys, size)
	// A rank's reason depends on its PP stage and whether it leads: one per (stage, role).
	reasons := make([]string, 2*t.PipelineParallel)
	off := 0
	for rep := 0; rep < plan.Replicas; rep++ {
		for pp := 0; pp < t.PipelineParallel; pp++ {
			for dpg := 0; dpg < plan.AttentionDPGroups; dpg++ {
				for tp := 0; tp < attnTP; tp++ {
					leader := tp == 0 || !replicatedTarget
					reads := slab[off : off+np : off+np]
					off += np
					if rep == 0 && dpg == 0 {
						for i, p := range pools {
							reads[i] = PoolKeys{Pool: p, Sharding: shardings[i], KeySuffixes: suffixes.next(i, tp)}
						}
					} else {
						// The same TP rank of the same stage in the first replica and group.
						copy(reads, plan.Ranks[pp*plan.AttentionDPGroups*attnTP+tp].Reads)
					}
					var w []PoolKeys
					switch {
					case leader:
						w = reads
					case run:
						w = reads[first : first+followerPools : first+followerPools]
					default:
						w = slab[off : off : off+followerPools]
						off += followerPools
						for i := range pools {
							if byFollowers[i] {
								w = append(w, reads[i])
							}
						}
					}
					d := RankDuty{
						GlobalRank: (rep*t.PipelineParallel+pp)*t.TensorParallel + dpg*attnTP + tp,
						TPRank:     tp,
						PPRank:     pp,
						DPRank:     dpg,
						Reads:      reads,
						Writes:     w,
					}
					if !t.DPAttention {
						d.DPRank = rep
					}
					r := &reasons[2*pp]
					if !leader {
						r = &reasons[2*pp+1]
					}
					if *r == "" {
						*r = dutyReason(t, d, leader)
					}
					d.Reason = *r
					plan.Ranks = append(plan.Ranks, d)
				}
			}
		}
	}
	plan.Warnings = planWarnings(t)
	return plan, nil
}

// planSuffixes hands out the key suffixes of a plan's ranks, all cut from one string: stage by
// stage, the replicated pools' (one slice for every rank of the stage), then each attention-TP
// rank's rank-sharded pools'. A rank-sharded pool's suffixes depend on the rank and the stage
// only, not on the replica or the attention-DP group. next must be called in that order: for
// each stage, for each rank, for each pool.
type planSuffixes struct {
	all       []string
	shardings []Sharding
	counts    []int      // suffixes of one page, by pool
	repl      [][]string // the current stage's, by replicated pool
	cur       int
}

func newPlanSuffixes(t Topology, pools []PoolName, shardings []Sharding, attnTP int) *planSuffixes {
	s := &planSuffixes{shardings: shardings, counts: make([]int, len(pools)), repl: make([][]string, len(pools))}
	var scratch suffixWriter
	nStrings, nBytes := 0, 0
	for i, p := range pools {
		n, b := len(scratch.ends), len(scratch.b)
		scratch.write(SuffixInput{Pool: p, Sharding: shardings[i], PipelineParallel: t.PipelineParallel, MambaConvBuffers: t.MambaConvBuffers})
		s.counts[i] = len(scratch.ends) - n
		per := 1
		if shardings[i] != Replicated {
			per = attnTP
		}
		nStrings += per * s.counts[i]
		nBytes += per * (len(scratch.b) - b + 4*s.counts[i]) // room for longer rank numbers
	}
	w := suffixWriter{b: make([]byte, 0, nBytes*t.PipelineParallel), ends: make([]int, 0, nStrings*t.PipelineParallel)}
	for pp := 0; pp < t.PipelineParallel; pp++ {
		in := SuffixInput{PPRank: pp, PipelineParallel: t.PipelineParallel, MambaConvBuffers: t.MambaConvBuffers}
		for i, p := range pools {
			if shardings[i] == Replicated {
				in.Pool, in.Sharding = p, shardings[i]
				w.write(in)
			}
		}
		for tp := 0; tp < attnTP; tp++ {
			for i, p := range pools {
				if shardings[i] != Replicated {
					in.Pool, in.Sharding, in.TPRank = p, shardings[i], tp
					w.write(in)
				}
			}
		}
	}
	s.all = w.cut()
	return s
}

// next returns the suffixes of pool i for attention-TP rank tp of the current stage.
func (s *planSuffixes) next(i, tp int) []string {
	if tp == 0 && i == 0 {
		// A new stage: its replicated pools come first.
		for j, n := range s.counts {
			if s.repl[j] = nil; s.shardings[j] == Replicated {
				s.repl[j] = s.take(n)
			}
		}
	}
	if s.repl[i] != nil {
		return s.repl[i]
	}
	return s.take(s.counts[i])
}

func (s *planSuffixes) take(n int) []string {
	out := s.all[s.cur : s.cur+n : s.cur+n]
	s.cur += n
	return out
}

// followerWrites is SGLang's should_backup for a rank with backup_skip set.
func followerWrites(t Topology, p PoolName, sh Sharding) bool {
	switch {
	case p == PoolMamba:
		return true
	case p == PoolDraft || p == PoolDraftSWA:
		return sh == RankSharded
	}
	return false
}

func dutyReason(t Topology, d RankDuty, leader bool) string {
	var b strings.Builder
	switch {
	case !t.Attention.RankReplicated() && t.AttentionTP() == 1:
		b.WriteString("single attention-TP rank: writes every pool to its own keys")
	case !t.Attention.RankReplicated():
		b.WriteString("rank-sharded pools: every rank writes its own shard to rank-suffixed keys")
	case leader && t.AttentionTP() == 1:
		b.WriteString("single attention-TP rank: writes every pool")
	case leader:
		b.WriteString("attention-TP rank 0 writes the replicated pools for its group (backup_skip is off only on rank 0)")
		if len(d.Writes) > 0 && hasSharded(d.Writes) {
			b.WriteString(" and its own shards of the rank-sharded ones")
		}
	case !d.HasDuties():
		b.WriteString("follower: replicated pools are written by attention-TP rank 0; no duties — it acknowledges every backup and succeeds vacuously")
	default:
		fmt.Fprintf(&b, "follower: writes its own shards of %s; replicated pools are written by attention-TP rank 0", joinPools(poolsOf(d.Writes)))
	}
	if t.PipelineParallel > 1 {
		fmt.Fprintf(&b, "; PP stage %d owns its layer slice", d.PPRank)
	}
	return b.String()
}

func hasSharded(ks []PoolKeys) bool {
	return slices.ContainsFunc(ks, func(k PoolKeys) bool { return k.Sharding == RankSharded })
}

func planWarnings(t Topology) []Warning {
	var out []Warning
	switch {
	case t.Draft.Algorithm == DraftDFLASH && t.PipelineParallel > 1:
		out = append(out, Warning{Code: WarnDraftParallelism, Message: fmt.Sprintf(
			"SGLang runs DFLASH only with --pp-size 1; this topology has pipelineParallel %d", t.PipelineParallel)})
	case t.Draft.Algorithm == DraftDSPARK && t.PipelineParallel > 1:
		out = append(out, Warning{Code: WarnDraftParallelism, Message: fmt.Sprintf(
			"SGLang runs DSPARK with --pp-size > 1 only on PD prefill servers; this topology has pipelineParallel %d", t.PipelineParallel)})
	}
	return out
}

func poolsOf(ks []PoolKeys) []PoolName {
	out := make([]PoolName, len(ks))
	for i, k := range ks {
		out[i] = k.Pool
	}
	return out
}

func joinPools(ps []PoolName) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = string(p)
	}
	return strings.Join(parts, ", ")
}

// Summary is a one-line human description of who writes what, e.g.
// "TP0 writes kv, indexer; 7 followers: no duties (replicated)". Every
// (replica, PP stage, attention-DP group) has the same shape, so the first
// group stands for all.
func (p RankPlan) Summary() string {
	if len(p.Ranks) == 0 {
		return "no ranks"
	}
	group := p.Ranks[:min(p.AttentionTP, len(p.Ranks))]
	leader := poolsOf(group[0].Writes)
	followers := group[1:]
	var b strings.Builder
	if n := p.PipelineParallel * p.AttentionDPGroups * p.Replicas; n > 1 {
		fmt.Fprintf(&b, "in each of %d groups (%s): ", n, groupShape(p))
	}
	allSame := len(followers) > 0
	for _, f := range followers {
		if !writesPools(f.Writes, leader) {
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
			i := slices.IndexFunc(buckets, func(bk bucket) bool { return writesPools(f.Writes, bk.pools) })
			if i < 0 {
				buckets = append(buckets, bucket{pools: poolsOf(f.Writes)})
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

// writesPools reports whether ks are of the pools ps, in order.
func writesPools(ks []PoolKeys, ps []PoolName) bool {
	if len(ks) != len(ps) {
		return false
	}
	for i, k := range ks {
		if k.Pool != ps[i] {
			return false
		}
	}
	return true
}

func groupShape(p RankPlan) string {
	var parts []string
	if p.Replicas > 1 {
		parts = append(parts, fmt.Sprintf("%d replicas", p.Replicas))
	}
	if p.PipelineParallel > 1 {
		parts = append(parts, fmt.Sprintf("%d PP stages", p.PipelineParallel))
	}
	if p.AttentionDPGroups > 1 {
		parts = append(parts, fmt.Sprintf("%d attention-DP groups", p.AttentionDPGroups))
	}
	return strings.Join(parts, " × ")
}

// WriteTable writes the plan as an aligned table of what each rank writes,
// then what they read and the warnings. Neighbouring ranks with the same
// duties (same stage, writes and reason, such as the followers of a
// rank-replicated target) share one row, their ranks written as a range
// ("1-15").
func (p RankPlan) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tTP\tPP\tDP\tWRITES\tREASON")
	for _, g := range groupRanks(p.Ranks) {
		first, last := g[0], g[len(g)-1]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", span(first.GlobalRank, last.GlobalRank), span(first.TPRank, last.TPRank),
			first.PPRank, first.DPRank, rowWrites(first), first.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Ranks) > 0 {
		if _, err := fmt.Fprintf(w, "every rank reads %s: its own shard of rank-sharded pools, the one object of replicated ones\n",
			joinPools(poolsOf(p.Ranks[0].Reads))); err != nil {
			return err
		}
	}
	for _, wn := range p.Warnings {
		if _, err := fmt.Fprintf(w, "warning (%s): %s\n", wn.Code, wn.Message); err != nil {
			return err
		}
	}
	return nil
}

// groupRanks splits ranks into runs of neighbours (consecutive global and TP
// ranks) whose rows would read the same but for the rank numbers.
func groupRanks(ranks []RankDuty) [][]RankDuty {
	var out [][]RankDuty
	for i, r := range ranks {
		if i > 0 {
			g := out[len(out)-1]
			prev := g[len(g)-1]
			if r.GlobalRank == prev.GlobalRank+1 && r.TPRank == prev.TPRank+1 && r.PPRank == prev.PPRank && r.DPRank == prev.DPRank &&
				r.Reason == prev.Reason && rowWrites(r) == rowWrites(prev) {
				out[len(out)-1] = append(g, r)
				continue
			}
		}
		out = append(out, []RankDuty{r})
	}
	return out
}

func rowWrites(r RankDuty) string {
	if len(r.Writes) == 0 {
		return "-"
	}
	return describeKeys(r.Writes)
}

// span is "3" or "1-15".
func span(first, last int) string {
	if first == last {
		return strconv.Itoa(first)
	}
	return fmt.Sprintf("%d-%d", first, last)
}

func describeKeys(ks []PoolKeys) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = string(k.Pool) + " " + strings.Join(k.KeySuffixes, ",")
	}
	return strings.Join(parts, "; ")
}

// String renders the plan as a table (see WriteTable).
func (p RankPlan) String() string {
	var b strings.Builder
	_ = p.WriteTable(&b)
	return b.String()
}
