package cache

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// RankPlan is the per-rank L3 duty plan of a topology. A plan from Plan or RolePlan holds what
// each class of rank does (the leader and the followers of each PP stage: every replica and
// attention-DP group has the same duties) and spells out a rank's duties and key suffixes only
// when asked (Rank, Ranks); a plan read from JSON or made by WithRanks holds them rank by rank.
// Its JSON is the header and every rank's duties, the same either way. Ranks share backing
// arrays (a rank's writes are part of its reads, ranks of one PP stage share the KeySuffixes of
// replicated pools): treat a plan and what it returns as read-only.
type RankPlan struct {
	Attention        AttentionKind
	Backend          BackendType
	TensorParallel   int
	PipelineParallel int
	AttentionTP      int
	// AttentionDPGroups is the number of attention-DP groups per TP group.
	AttentionDPGroups int
	// Replicas is the number of data-parallel replicas without DP attention.
	Replicas int
	Warnings []Warning

	// shape is the duties of each class of rank; nil in a plan that holds ranks.
	shape *planShape
	ranks []RankDuty
}

// rankPlanJSON is a RankPlan as JSON: the header, every rank, the warnings.
type rankPlanJSON struct {
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

// MarshalJSON writes the header, every rank's duties and the warnings.
func (p RankPlan) MarshalJSON() ([]byte, error) {
	if p.shape != nil {
		return p.shape.appendJSON(nil, &p)
	}
	return json.Marshal(rankPlanJSON{
		Attention: p.Attention, Backend: p.Backend, TensorParallel: p.TensorParallel, PipelineParallel: p.PipelineParallel,
		AttentionTP: p.AttentionTP, AttentionDPGroups: p.AttentionDPGroups, Replicas: p.Replicas,
		Ranks: p.Ranks(), Warnings: p.Warnings,
	})
}

// UnmarshalJSON reads what MarshalJSON writes: a plan that holds its ranks.
func (p *RankPlan) UnmarshalJSON(b []byte) error {
	var j rankPlanJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = RankPlan{
		Attention: j.Attention, Backend: j.Backend, TensorParallel: j.TensorParallel, PipelineParallel: j.PipelineParallel,
		AttentionTP: j.AttentionTP, AttentionDPGroups: j.AttentionDPGroups, Replicas: j.Replicas,
		Warnings: j.Warnings, ranks: j.Ranks,
	}
	return nil
}

// WithRanks returns the plan with these ranks instead of its own (the header and warnings
// stay).
func (p RankPlan) WithRanks(ranks []RankDuty) RankPlan {
	p.shape, p.ranks = nil, ranks
	return p
}

// Equal reports whether two plans have the same header, ranks and warnings, however each holds
// its ranks.
func (p RankPlan) Equal(q RankPlan) bool {
	if p.Attention != q.Attention || p.Backend != q.Backend || p.TensorParallel != q.TensorParallel ||
		p.PipelineParallel != q.PipelineParallel || p.AttentionTP != q.AttentionTP ||
		p.AttentionDPGroups != q.AttentionDPGroups || p.Replicas != q.Replicas ||
		!reflect.DeepEqual(p.Warnings, q.Warnings) || p.NumRanks() != q.NumRanks() {
		return false
	}
	return reflect.DeepEqual(p.Ranks(), q.Ranks())
}

// NumRanks is the number of ranks of the plan.
func (p RankPlan) NumRanks() int {
	if p.shape == nil {
		return len(p.ranks)
	}
	return p.shape.numRanks()
}

// Rank returns the duties of the i-th rank (global rank i), 0 <= i < NumRanks.
func (p RankPlan) Rank(i int) RankDuty {
	if p.shape == nil {
		return p.ranks[i]
	}
	if i < 0 || i >= p.shape.numRanks() {
		panic(fmt.Sprintf("cache: rank %d of a plan of %d ranks", i, p.shape.numRanks()))
	}
	return p.shape.rank(i)
}

// Ranks returns every rank's duties, in global rank order. A plan from Plan spells them out on
// every call (for 256 ranks, hundreds of microseconds): count with NumRanks and Writers, and
// describe with Summary, where they are enough.
func (p RankPlan) Ranks() []RankDuty {
	if p.shape == nil {
		return p.ranks
	}
	return p.shape.allRanks()
}

// Writers is the number of ranks with at least one L3 write duty.
func (p RankPlan) Writers() int {
	n := 0
	for i := range p.NumRanks() {
		if len(p.writePools(i)) > 0 {
			n++
		}
	}
	return n
}

// writePools returns the names of the pools rank i writes.
func (p RankPlan) writePools(i int) []PoolName {
	if p.shape == nil {
		return poolsOf(p.ranks[i].Writes)
	}
	return p.shape.writePools(p.shape.leads(i % p.shape.attnTP))
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
	s := newPlanShape(t)
	return RankPlan{
		Attention:         t.Attention,
		Backend:           t.Backend,
		TensorParallel:    t.TensorParallel,
		PipelineParallel:  t.PipelineParallel,
		AttentionTP:       s.attnTP,
		AttentionDPGroups: s.dpGroups,
		Replicas:          s.replicas,
		Warnings:          planWarnings(t),
		shape:             s,
	}, nil
}

// roleDuties is what a role's ranks keep of the duties the topology gives them.
type roleDuties uint8

const (
	roleReadsAndWrites roleDuties = iota
	// roleWritesOnly ranks write what the plan says and read nothing (decode offload).
	roleWritesOnly
	// roleNoDuties ranks neither read nor write.
	roleNoDuties
)

// planShape is what each class of rank of a topology does: a rank's duties depend on whether it
// leads its (replica, PP stage, attention-DP group), and its key suffixes on its stage and, for
// rank-sharded pools, its attention-TP rank; nothing else. A rank-sharded pool's suffix is "_",
// the attention-TP rank, "_" and the stage under PP, then a tail that is the same for every rank.
type planShape struct {
	topo                                Topology
	tp, pp, attnTP, dpGroups, replicas  int
	replicatedTarget                    bool
	pools                               []PoolName
	shardings                           []Sharding
	byFollowers                         []bool // whether a follower of a replicated target writes pool i
	followerPools                       int
	leaderWrites, followerWrites        []PoolName
	repl                                [][]string // [stage*len(pools)+i]: the suffixes of replicated pool i
	tails                               [][]string // [i]: the tails of rank-sharded pool i's suffixes
	shardedPerRank, shardedBytesPerRank int        // suffixes and bytes of one rank's rank-sharded pools
	role                                roleDuties
	noDutiesReason                      string // the reason of every rank with roleNoDuties
}

func newPlanShape(t Topology) *planShape {
	pools := t.objectPools()
	np := len(pools)
	s := &planShape{
		topo: t, tp: t.TensorParallel, pp: t.PipelineParallel, attnTP: t.AttentionTP(), dpGroups: t.AttentionDPGroups(),
		replicas: t.Replicas(), replicatedTarget: t.Attention.RankReplicated(), pools: pools,
		shardings: make([]Sharding, np), byFollowers: make([]bool, np),
		repl: make([][]string, t.PipelineParallel*np), tails: make([][]string, np),
	}
	for i, p := range pools {
		s.shardings[i] = t.PoolSharding(p)
		if s.byFollowers[i] = followerWrites(t, p, s.shardings[i]); s.byFollowers[i] {
			s.followerPools++
		}
	}
	s.leaderWrites = pools
	s.followerWrites = pools
	if s.replicatedTarget {
		s.followerWrites = make([]PoolName, 0, s.followerPools)
		for i, p := range pools {
			if s.byFollowers[i] {
				s.followerWrites = append(s.followerWrites, p)
			}
		}
	}
	// Every replicated suffix of every stage, and the tails of the rank-sharded pools (their
	// suffixes on attention-TP rank 0 without PP, less the leading "_0"), cut from one string.
	counts := make([]int, np)
	w := suffixWriter{b: make([]byte, 0, 32*(t.PipelineParallel+1)*np), ends: make([]int, 0, 2*(t.PipelineParallel+1)*np)}
	for pp := 0; pp < t.PipelineParallel; pp++ {
		for i, p := range pools {
			if s.shardings[i] == Replicated {
				n := len(w.ends)
				w.write(SuffixInput{Pool: p, Sharding: Replicated, PPRank: pp, PipelineParallel: t.PipelineParallel, MambaConvBuffers: t.MambaConvBuffers})
				counts[i] = len(w.ends) - n
			}
		}
	}
	for i, p := range pools {
		if s.shardings[i] != Replicated {
			n := len(w.ends)
			w.write(SuffixInput{Pool: p, Sharding: s.shardings[i], PipelineParallel: 1, MambaConvBuffers: t.MambaConvBuffers})
			counts[i] = len(w.ends) - n
		}
	}
	all := w.cut()
	for pp := 0; pp < t.PipelineParallel; pp++ {
		for i := range pools {
			if s.shardings[i] == Replicated {
				n := counts[i]
				s.repl[pp*np+i], all = all[:n:n], all[n:]
			}
		}
	}
	for i := range pools {
		if s.shardings[i] != Replicated {
			n := counts[i]
			s.tails[i], all = all[:n:n], all[n:]
			for j, tail := range s.tails[i] {
				s.tails[i][j] = tail[len("_0"):]
				s.shardedBytesPerRank += len(tail)
			}
			s.shardedPerRank += n
		}
	}
	return s
}

func (s *planShape) numRanks() int { return s.replicas * s.pp * s.tp }

// leads reports whether attention-TP rank tp writes every pool: rank 0 of a replicated target,
// every rank of a sharded one.
func (s *planShape) leads(tp int) bool { return tp == 0 || !s.replicatedTarget }

// writePools returns the pools a leader or a follower writes.
func (s *planShape) writePools(leader bool) []PoolName {
	switch {
	case s.role == roleNoDuties:
		return nil
	case leader:
		return s.leaderWrites
	}
	return s.followerWrites
}

// writeSharded appends the suffixes of rank-sharded pool i for attention-TP rank tp of stage pp.
func (s *planShape) writeSharded(w *suffixWriter, i, tp, pp int) {
	for _, tail := range s.tails[i] {
		w.b = append(w.b, '_')
		w.b = strconv.AppendInt(w.b, int64(tp), 10)
		if s.pp > 1 {
			w.b = append(w.b, '_')
			w.b = strconv.AppendInt(w.b, int64(pp), 10)
		}
		w.b = append(w.b, tail...)
		w.ends = append(w.ends, len(w.b))
	}
}

// reason is the reason of a leader or a follower of stage pp.
func (s *planShape) reason(pp int, leader bool) string {
	if s.role == roleNoDuties {
		return s.noDutiesReason
	}
	d := RankDuty{PPRank: pp, Writes: make([]PoolKeys, 0, len(s.pools))}
	for i, p := range s.pools {
		if leader || s.byFollowers[i] {
			d.Writes = append(d.Writes, PoolKeys{Pool: p, Sharding: s.shardings[i]})
		}
	}
	r := dutyReason(s.topo, d, leader)
	if s.role == roleWritesOnly {
		r += "; reads nothing (decode offload)"
	}
	return r
}

// duty fills in a rank's numbers.
func (s *planShape) duty(rep, pp, dpg, tp int, reads, writes []PoolKeys, reason string) RankDuty {
	d := RankDuty{
		GlobalRank: (rep*s.pp+pp)*s.tp + dpg*s.attnTP + tp,
		TPRank:     tp,
		PPRank:     pp,
		DPRank:     dpg,
		Reads:      reads,
		Writes:     writes,
		Reason:     reason,
	}
	if !s.topo.DPAttention {
		d.DPRank = rep
	}
	return d
}

// applyRole takes from a rank the duties its role does not do.
func (s *planShape) applyRole(d *RankDuty) {
	switch s.role {
	case roleWritesOnly:
		d.Reads = []PoolKeys{}
	case roleNoDuties:
		d.Reads, d.Writes = []PoolKeys{}, []PoolKeys{}
	}
}

// fillReads fills a rank of stage pp's reads of every pool: the stage's replicated suffixes, and
// the rank's own suffixes of the rank-sharded pools, taken in pool order from the front of own.
// It returns what is left of own.
func (s *planShape) fillReads(reads []PoolKeys, pp int, own []string) []string {
	np := len(s.pools)
	for i, p := range s.pools {
		ks := s.repl[pp*np+i]
		if ks == nil {
			n := len(s.tails[i])
			ks, own = own[:n:n], own[n:]
		}
		reads[i] = PoolKeys{Pool: p, Sharding: s.shardings[i], KeySuffixes: ks}
	}
	return own
}

// rank spells out the duties of global rank i.
func (s *planShape) rank(i int) RankDuty {
	tp := i % s.attnTP
	g := i / s.attnTP
	dpg := g % s.dpGroups
	g /= s.dpGroups
	pp, rep := g%s.pp, g/s.pp
	np := len(s.pools)
	w := suffixWriter{b: make([]byte, 0, s.shardedBytesPerRank+8*s.shardedPerRank), ends: make([]int, 0, s.shardedPerRank)}
	for i := range s.pools {
		if s.shardings[i] != Replicated {
			s.writeSharded(&w, i, tp, pp)
		}
	}
	reads := make([]PoolKeys, np)
	s.fillReads(reads, pp, w.cut())
	leader := s.leads(tp)
	writes := reads
	if !leader {
		writes = make([]PoolKeys, 0, s.followerPools)
		for i := range s.pools {
			if s.byFollowers[i] {
				writes = append(writes, reads[i])
			}
		}
	}
	d := s.duty(rep, pp, dpg, tp, reads, writes, s.reason(pp, leader))
	s.applyRole(&d)
	return d
}

// allRanks spells out every rank's duties. Every suffix is written into one buffer and cut from
// one string, every rank's reads are cut from one slab and its writes are a run of its reads (a
// leader writes every pool, a follower the trailing draft pools) or its own part of the slab,
// ranks of another replica or attention-DP group copy the reads of the same rank of the first,
// and a reason is built once per (stage, leader or follower).
func (s *planShape) allRanks() []RankDuty {
	np := len(s.pools)
	// The rank-sharded suffixes of every (stage, attention-TP rank), in that order.
	w := suffixWriter{
		b:    make([]byte, 0, s.pp*s.attnTP*(s.shardedBytesPerRank+8*s.shardedPerRank)),
		ends: make([]int, 0, s.pp*s.attnTP*s.shardedPerRank),
	}
	for pp := 0; pp < s.pp; pp++ {
		for tp := 0; tp < s.attnTP; tp++ {
			for i := range s.pools {
				if s.shardings[i] != Replicated {
					s.writeSharded(&w, i, tp, pp)
				}
			}
		}
	}
	own := w.cut()
	first := slices.Index(s.byFollowers, true)
	if first < 0 {
		first = 0
	}
	run := first+s.followerPools <= np && !slices.Contains(s.byFollowers[first:first+s.followerPools], false)
	groups := s.replicas * s.pp * s.dpGroups
	size := groups * s.attnTP * np
	if s.replicatedTarget && !run {
		size += groups * (s.attnTP - 1) * s.followerPools
	}
	slab := make([]PoolKeys, size)
	ranks := make([]RankDuty, 0, s.numRanks())
	reasons := make([]string, 2*s.pp)
	off := 0
	for rep := 0; rep < s.replicas; rep++ {
		for pp := 0; pp < s.pp; pp++ {
			for dpg := 0; dpg < s.dpGroups; dpg++ {
				for tp := 0; tp < s.attnTP; tp++ {
					leader := s.leads(tp)
					reads := slab[off : off+np : off+np]
					off += np
					if rep == 0 && dpg == 0 {
						own = s.fillReads(reads, pp, own)
					} else {
						// The same TP rank of the same stage in the first replica and group.
						copy(reads, ranks[pp*s.dpGroups*s.attnTP+tp].Reads)
					}
					var wr []PoolKeys
					switch {
					case leader:
						wr = reads
					case run:
						wr = reads[first : first+s.followerPools : first+s.followerPools]
					default:
						wr = slab[off : off : off+s.followerPools]
						off += s.followerPools
						for i := range s.pools {
							if s.byFollowers[i] {
								wr = append(wr, reads[i])
							}
						}
					}
					r := &reasons[2*pp]
					if !leader {
						r = &reasons[2*pp+1]
					}
					if *r == "" {
						*r = s.reason(pp, leader)
					}
					ranks = append(ranks, s.duty(rep, pp, dpg, tp, reads, wr, *r))
				}
			}
		}
	}
	if s.role != roleReadsAndWrites {
		for i := range ranks {
			s.applyRole(&ranks[i])
		}
	}
	return ranks
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
	n := p.NumRanks()
	if n == 0 {
		return "no ranks"
	}
	group := min(p.AttentionTP, n)
	leader := p.writePools(0)
	var b strings.Builder
	if n := p.PipelineParallel * p.AttentionDPGroups * p.Replicas; n > 1 {
		fmt.Fprintf(&b, "in each of %d groups (%s): ", n, groupShape(p))
	}
	allSame := group > 1
	for f := 1; f < group; f++ {
		if !slices.Equal(p.writePools(f), leader) {
			allSame = false
			break
		}
	}
	switch {
	case len(leader) == 0:
		b.WriteString("TP0 writes nothing")
	case allSame:
		fmt.Fprintf(&b, "all %d ranks write their own keys of %s", group, joinPools(leader))
	default:
		fmt.Fprintf(&b, "TP0 writes %s", joinPools(leader))
	}
	if group > 1 && !allSame {
		// Group followers by what they write (they are normally uniform).
		type bucket struct {
			pools []PoolName
			n     int
		}
		var buckets []bucket
		for f := 1; f < group; f++ {
			ps := p.writePools(f)
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
	ranks := p.Ranks()
	for _, g := range groupRanks(ranks) {
		first, last := ranks[g.first], ranks[g.last]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", span(first.GlobalRank, last.GlobalRank), span(first.TPRank, last.TPRank),
			first.PPRank, first.DPRank, g.writes, first.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ranks) > 0 {
		if _, err := fmt.Fprintf(w, "every rank reads %s: its own shard of rank-sharded pools, the one object of replicated ones\n",
			joinPools(poolsOf(ranks[0].Reads))); err != nil {
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

// rankRow is one row of a plan's table: ranks[first] to ranks[last] and what they write.
type rankRow struct {
	first, last int
	writes      string
}

// groupRanks splits ranks into runs of neighbours (consecutive global and TP
// ranks) whose rows would read the same but for the rank numbers.
func groupRanks(ranks []RankDuty) []rankRow {
	var out []rankRow
	for i, r := range ranks {
		writes := rowWrites(r)
		if n := len(out); n > 0 {
			g := &out[n-1]
			prev := ranks[g.last]
			if r.GlobalRank == prev.GlobalRank+1 && r.TPRank == prev.TPRank+1 && r.PPRank == prev.PPRank && r.DPRank == prev.DPRank &&
				r.Reason == prev.Reason && writes == g.writes {
				g.last = i
				continue
			}
		}
		out = append(out, rankRow{first: i, last: i, writes: writes})
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

// appendJSON appends the plan's JSON as encoding/json writes rankPlanJSON, straight from the
// classes: what every rank of a class writes but its numbers and its rank-sharded suffixes is
// encoded once.
func (s *planShape) appendJSON(b []byte, p *RankPlan) ([]byte, error) {
	np := len(s.pools)
	// A pool's object: its head up to the suffixes, the escaped tails of a rank-sharded one,
	// the whole object of a replicated one at each stage.
	heads := make([][]byte, np)
	tails := make([][]string, np)
	repl := make([][]byte, s.pp*np)
	for i, pl := range s.pools {
		h := append([]byte(`{"pool":`), jsonString(nil, string(pl))...)
		h = append(h, `,"sharding":`...)
		h = jsonString(h, string(s.shardings[i]))
		heads[i] = append(h, `,"keySuffixes":[`...)
		if s.shardings[i] != Replicated {
			tails[i] = make([]string, len(s.tails[i]))
			for j, t := range s.tails[i] {
				q := jsonString(nil, t)
				tails[i][j] = string(q[1 : len(q)-1])
			}
			continue
		}
		for pp := 0; pp < s.pp; pp++ {
			o := slices.Clone(heads[i])
			for j, suffix := range s.repl[pp*np+i] {
				if j > 0 {
					o = append(o, ',')
				}
				o = jsonString(o, suffix)
			}
			repl[pp*np+i] = append(o, "]}"...)
		}
	}
	reasons := make([][]byte, 2*s.pp)
	for pp := 0; pp < s.pp; pp++ {
		reasons[2*pp] = jsonString(nil, s.reason(pp, true))
		reasons[2*pp+1] = jsonString(nil, s.reason(pp, false))
	}
	pool := func(b []byte, i, tp, pp int) []byte {
		if o := repl[pp*np+i]; o != nil {
			return append(b, o...)
		}
		b = append(b, heads[i]...)
		for j, tail := range tails[i] {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `"_`...)
			b = strconv.AppendInt(b, int64(tp), 10)
			if s.pp > 1 {
				b = append(b, '_')
				b = strconv.AppendInt(b, int64(pp), 10)
			}
			b = append(b, tail...)
			b = append(b, '"')
		}
		return append(b, "]}"...)
	}

	b = append(b, `{"attention":`...)
	b = jsonString(b, string(p.Attention))
	b = append(b, `,"backend":`...)
	b = jsonString(b, string(p.Backend))
	for _, f := range []struct {
		name string
		v    int
	}{{`,"tensorParallel":`, p.TensorParallel}, {`,"pipelineParallel":`, p.PipelineParallel}, {`,"attentionTP":`, p.AttentionTP},
		{`,"attentionDPGroups":`, p.AttentionDPGroups}, {`,"replicas":`, p.Replicas}} {
		b = append(b, f.name...)
		b = strconv.AppendInt(b, int64(f.v), 10)
	}
	b = append(b, `,"ranks":[`...)
	for i := range s.numRanks() {
		tp := i % s.attnTP
		g := i / s.attnTP
		dpg := g % s.dpGroups
		g /= s.dpGroups
		pp, rep := g%s.pp, g/s.pp
		d := s.duty(rep, pp, dpg, tp, nil, nil, "")
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"globalRank":`...)
		b = strconv.AppendInt(b, int64(d.GlobalRank), 10)
		b = append(b, `,"tpRank":`...)
		b = strconv.AppendInt(b, int64(d.TPRank), 10)
		b = append(b, `,"ppRank":`...)
		b = strconv.AppendInt(b, int64(d.PPRank), 10)
		b = append(b, `,"dpRank":`...)
		b = strconv.AppendInt(b, int64(d.DPRank), 10)
		leader := s.leads(tp)
		b = append(b, `,"writes":[`...)
		if s.role != roleNoDuties {
			n := 0
			for j := range s.pools {
				if leader || s.byFollowers[j] {
					if n > 0 {
						b = append(b, ',')
					}
					b = pool(b, j, tp, pp)
					n++
				}
			}
		}
		b = append(b, `],"reads":[`...)
		if s.role == roleReadsAndWrites {
			for j := range s.pools {
				if j > 0 {
					b = append(b, ',')
				}
				b = pool(b, j, tp, pp)
			}
		}
		b = append(b, `],"reason":`...)
		if leader {
			b = append(b, reasons[2*pp]...)
		} else {
			b = append(b, reasons[2*pp+1]...)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if len(p.Warnings) > 0 {
		w, err := json.Marshal(p.Warnings)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"warnings":`...)
		b = append(b, w...)
	}
	return append(b, '}'), nil
}

// jsonString appends s as encoding/json writes a string.
func jsonString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// RenderedPlan is a plan as people and tools read it: in the deployment's ConfigMap, plan.json
// and plan.txt.
type RenderedPlan struct {
	// JSON is the plan's JSON as json.MarshalIndent(plan, "", "  ") writes it.
	JSON string
	// Table is the plan's table (String).
	Table string
}

// Render returns the plan's indented JSON and its table. A reconcile renders the same plan
// again and again, and for 256 ranks that is milliseconds and 650 KB: the renderings of the
// plans from Plan and RolePlan rendered last are kept (renderedPlans).
func (p RankPlan) Render() (RenderedPlan, error) {
	if p.shape == nil {
		return p.render()
	}
	key, err := p.renderKey()
	if err != nil {
		return RenderedPlan{}, err
	}
	if r, ok := renderedPlans.get(key); ok {
		return r, nil
	}
	r, err := p.render()
	if err != nil {
		return RenderedPlan{}, err
	}
	renderedPlans.add(key, r)
	return r, nil
}

func (p RankPlan) render() (RenderedPlan, error) {
	compact, err := p.MarshalJSON()
	if err != nil {
		return RenderedPlan{}, err
	}
	return RenderedPlan{JSON: string(indentJSON(make([]byte, 0, 2*len(compact)), compact, "  ")), Table: p.String()}, nil
}

// indentJSON appends src, compact JSON that encoding/json wrote, indented as json.Indent does
// with no prefix: without json.Indent's validation, which took twice as long as writing it.
func indentJSON(dst, src []byte, indent string) []byte {
	depth := 0
	newline := func() {
		dst = append(dst, '\n')
		for range depth {
			dst = append(dst, indent...)
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case '"':
			// A string, escapes and all, up to its closing quote.
			j := i + 1
			for ; j < len(src) && src[j] != '"'; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			dst = append(dst, src[i:j+1]...)
			i = j
		case '{', '[':
			dst = append(dst, c)
			if i+1 < len(src) && (src[i+1] == '}' || src[i+1] == ']') {
				dst = append(dst, src[i+1])
				i++
				continue
			}
			depth++
			newline()
		case '}', ']':
			depth--
			newline()
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, ':', ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// renderKey is everything a plan from Plan or RolePlan is made of: its header and warnings,
// the topology it was planned from and its role.
func (p RankPlan) renderKey() (string, error) {
	header, err := json.Marshal(rankPlanJSON{
		Attention: p.Attention, Backend: p.Backend, TensorParallel: p.TensorParallel, PipelineParallel: p.PipelineParallel,
		AttentionTP: p.AttentionTP, AttentionDPGroups: p.AttentionDPGroups, Replicas: p.Replicas, Warnings: p.Warnings,
	})
	if err != nil {
		return "", err
	}
	topo, err := json.Marshal(p.shape.topo)
	if err != nil {
		return "", err
	}
	return string(header) + "\x00" + string(topo) + "\x00" + strconv.Itoa(int(p.shape.role)) + "\x00" + p.shape.noDutiesReason, nil
}

// renderedPlans keeps the last renderings, at most 8 of them and 8 MiB together.
var renderedPlans = &renderCache{maxEntries: 8, maxBytes: 8 << 20}

// renderCache is a small least-recently-used cache of renderings by key.
type renderCache struct {
	mu                   sync.Mutex
	maxEntries, maxBytes int
	entries              []renderEntry // most recently used first
	bytes                int
}

type renderEntry struct {
	key string
	r   RenderedPlan
}

func (e renderEntry) size() int { return len(e.key) + len(e.r.JSON) + len(e.r.Table) }

func (c *renderCache) get(key string) (RenderedPlan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.entries, func(e renderEntry) bool { return e.key == key })
	if i < 0 {
		return RenderedPlan{}, false
	}
	e := c.entries[i]
	copy(c.entries[1:i+1], c.entries[:i])
	c.entries[0] = e
	return e.r, true
}

func (c *renderCache) add(key string, r RenderedPlan) {
	e := renderEntry{key: key, r: r}
	if e.size() > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.ContainsFunc(c.entries, func(e renderEntry) bool { return e.key == key }) {
		return
	}
	c.entries = slices.Insert(c.entries, 0, e)
	c.bytes += e.size()
	for len(c.entries) > c.maxEntries || c.bytes > c.maxBytes {
		n := len(c.entries) - 1
		c.bytes -= c.entries[n].size()
		c.entries[n] = renderEntry{}
		c.entries = c.entries[:n]
	}
}
