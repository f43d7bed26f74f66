package cache

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// AttentionKind is the attention family of the target model. It decides the
// class of SGLang's device KV pool and therefore whether the host pools are
// rank-replicated (identical on every attention-TP rank) or rank-sharded.
type AttentionKind string

const (
	// AttentionMHA covers multi-head and grouped-query attention (Llama,
	// Qwen3, gpt-oss): each TP rank holds 1/tp of the KV heads.
	AttentionMHA AttentionKind = "MHA"
	// AttentionMLA is multi-head latent attention (DeepSeek-V3/R1/V3.2,
	// Kimi-K2, GLM-5): the latent cache is identical on every TP rank.
	AttentionMLA AttentionKind = "MLA"
	// AttentionDSV4 is DeepSeek-V4's compressed MLA: a logical kv anchor
	// with no payload of its own plus swa/c4/c128/state pools, all replicated.
	AttentionDSV4 AttentionKind = "DSV4"
	// AttentionHybridMambaMHA is a linear-attention/Mamba hybrid over MHA
	// layers (Qwen3-Next, Nemotron-H).
	AttentionHybridMambaMHA AttentionKind = "HybridMambaMHA"
	// AttentionHybridMambaMLA is a linear-attention/Mamba hybrid over MLA
	// layers (Kimi-K3, GLM-5.3-Flash). Its mamba state stays rank-sharded.
	AttentionHybridMambaMLA AttentionKind = "HybridMambaMLA"
)

// attentionKinds lists every attention kind the planner understands.
var attentionKinds = []AttentionKind{
	AttentionMHA, AttentionMLA, AttentionDSV4, AttentionHybridMambaMHA, AttentionHybridMambaMLA,
}

// AttentionKinds returns every supported attention kind, in a fixed order.
func AttentionKinds() []AttentionKind { return slices.Clone(attentionKinds) }

// RankReplicated reports whether the target's host pools are rank-replicated,
// i.e. SGLang sets is_mla_model (is_rank_replicated) and only attention-TP
// rank 0 backs up the replicated pools.
func (a AttentionKind) RankReplicated() bool {
	switch a {
	case AttentionMLA, AttentionDSV4, AttentionHybridMambaMLA:
		return true
	}
	return false
}

// HostPoolKind returns the kind of host pool the target's own KV lives in.
func (a AttentionKind) HostPoolKind() HostPoolKind {
	if a.RankReplicated() {
		return HostPoolMLA
	}
	return HostPoolMHA
}

// PoolName names one host pool, with the same spelling SGLang uses for its
// PoolName values; the name is also the key suffix of replicated sidecar pools.
type PoolName string

const (
	PoolKV                 PoolName = "kv"
	PoolIndexer            PoolName = "indexer"
	PoolSWA                PoolName = "swa"
	PoolMamba              PoolName = "mamba"
	PoolDSV4C1             PoolName = "deepseek_v4_c1"
	PoolDSV4C1Indexer      PoolName = "deepseek_v4_c1_indexer"
	PoolDSV4C1IndexerScale PoolName = "deepseek_v4_c1_indexer_scale"
	PoolDSV4C2             PoolName = "deepseek_v4_c2"
	PoolDSV4C2Indexer      PoolName = "deepseek_v4_c2_indexer"
	PoolDSV4C2IndexerScale PoolName = "deepseek_v4_c2_indexer_scale"
	PoolDSV4C4             PoolName = "deepseek_v4_c4"
	PoolDSV4C4Indexer      PoolName = "deepseek_v4_c4_indexer"
	PoolDSV4C4IndexerScale PoolName = "deepseek_v4_c4_indexer_scale"
	PoolDSV4C128           PoolName = "deepseek_v4_c128"
	PoolDSV4C4Rope         PoolName = "deepseek_v4_c4_rope"
	PoolDSV4C128Rope       PoolName = "deepseek_v4_c128_rope"
	PoolDSV4C4State        PoolName = "deepseek_v4_c4_state"
	PoolDSV4C4IndexerState PoolName = "deepseek_v4_c4_indexer_state"
	PoolDSV4C128State      PoolName = "deepseek_v4_c128_state"
	PoolDraft              PoolName = "draft"
	PoolDraftSWA           PoolName = "draft_swa"
	PoolDraftIndexer       PoolName = "draft_indexer"
)

const (
	deepSeekV4PoolPrefix = "deepseek_v4_"
	maxMambaConvBuffers  = 16
	maxPackedDraftLayers = 64
	maxPlannedRanks      = 1 << 16
	maxParallelSize      = 1 << 16
)

// targetPools are the target pools SGLang 0.5.23 can store in Mooncake
// (PoolName values with a key suffix in mooncake_store.py).
var targetPools = []PoolName{
	PoolKV, PoolIndexer, PoolSWA, PoolMamba,
	PoolDSV4C1, PoolDSV4C1Indexer, PoolDSV4C1IndexerScale,
	PoolDSV4C2, PoolDSV4C2Indexer, PoolDSV4C2IndexerScale,
	PoolDSV4C4, PoolDSV4C4Indexer, PoolDSV4C4IndexerScale, PoolDSV4C128,
	PoolDSV4C4Rope, PoolDSV4C128Rope, PoolDSV4C4State, PoolDSV4C4IndexerState, PoolDSV4C128State,
}

var draftPools = []PoolName{PoolDraft, PoolDraftSWA, PoolDraftIndexer}

// IsDraft reports whether the pool belongs to a sidecar draft model.
func (p PoolName) IsDraft() bool { return slices.Contains(draftPools, p) }

// IsDeepSeekV4 reports whether the pool is one of DeepSeek-V4's compressed pools.
func (p PoolName) IsDeepSeekV4() bool { return strings.HasPrefix(string(p), deepSeekV4PoolPrefix) }

// Sharding says how a pool's content is split across attention-TP ranks.
type Sharding string

const (
	// Replicated pools hold identical bytes on every attention-TP rank; one
	// object per page, written by attention-TP rank 0.
	Replicated Sharding = "replicated"
	// RankSharded pools hold a different slice on every attention-TP rank;
	// one object per page and rank, written by that rank.
	RankSharded Sharding = "rank-sharded"
)

// HostPoolKind is the class of a host pool: MHA pools are split by heads
// across ranks, MLA (and DSV4) pools are replicated.
type HostPoolKind string

const (
	HostPoolMHA HostPoolKind = "MHA"
	HostPoolMLA HostPoolKind = "MLA"
)

// DraftAlgorithm is SGLang's --speculative-algorithm value.
type DraftAlgorithm string

const (
	DraftNone       DraftAlgorithm = ""
	DraftEAGLE      DraftAlgorithm = "EAGLE"
	DraftEAGLE3     DraftAlgorithm = "EAGLE3"
	DraftNEXTN      DraftAlgorithm = "NEXTN" // alias of EAGLE in SGLang ("MTP")
	DraftStandalone DraftAlgorithm = "STANDALONE"
	DraftNGRAM      DraftAlgorithm = "NGRAM"
	DraftDFLASH     DraftAlgorithm = "DFLASH"
	DraftDSPARK     DraftAlgorithm = "DSPARK"
)

// draftAlgorithms are the algorithms the cache model describes: the API's, a test keeps them
// equal. SGLang 0.5.23 also has UNO (the target model with a LoRA, no draft pool) and
// FROZEN_KV_MTP (a draft reading the target's KV, owning no pool), which the operator does not
// offer yet (docs/compatibility.md).
var draftAlgorithms = []DraftAlgorithm{
	DraftEAGLE, DraftEAGLE3, DraftNEXTN, DraftStandalone, DraftNGRAM, DraftDFLASH, DraftDSPARK,
}

// DraftAlgorithms returns every speculative algorithm name the package knows
// (without the empty "no draft" value).
func DraftAlgorithms() []DraftAlgorithm { return slices.Clone(draftAlgorithms) }

// DraftPlacement says where a draft model's KV lives in the host tier.
type DraftPlacement string

const (
	// DraftPlacementNone: no draft KV in the host tier (no speculation, or NGRAM).
	DraftPlacementNone DraftPlacement = "None"
	// DraftPlacementPacked: draft layers are appended as tail layers of the
	// target's host pools; their bytes live inside the target's L3 objects.
	DraftPlacementPacked DraftPlacement = "Packed"
	// DraftPlacementSidecar: the draft has its own draft* host pools and objects.
	DraftPlacementSidecar DraftPlacement = "Sidecar"
)

// Draft describes the speculative draft model, as far as the cache tier cares.
type Draft struct {
	// Algorithm is --speculative-algorithm; empty means no speculation.
	Algorithm DraftAlgorithm `json:"algorithm,omitempty"`
	// Placement is where the draft's KV lives (None, Packed or Sidecar).
	Placement DraftPlacement `json:"placement,omitempty"`
	// PackedLayers is the number of draft layers packed into the target's
	// host pools (Packed only), e.g. 1 for DeepSeek-V4 MTP, 3 for DSpark.
	PackedLayers int `json:"packedLayers,omitempty"`
	// HostPoolKind is the class of the draft's own host pool (Sidecar only).
	HostPoolKind HostPoolKind `json:"hostPoolKind,omitempty"`
	// Pools are the sidecar pools the draft owns: draft, draft_swa, draft_indexer.
	Pools []PoolName `json:"pools,omitempty"`
	// ModelPath is --speculative-draft-model-path.
	ModelPath string `json:"modelPath,omitempty"`
	// Revision is --speculative-draft-model-revision: the draft checkpoint's revision.
	Revision string `json:"revision,omitempty"`
}

// Enabled reports whether a speculative algorithm is set.
func (d Draft) Enabled() bool { return d.Algorithm != DraftNone }

// BackendType is the L3 storage backend (--hicache-storage-backend). Mooncake is the only one the
// API offers, so the only one the plan follows; docs/compatibility.md says what another (SGLang's
// file backend) would need.
type BackendType string

// BackendMooncake is SGLang's mooncake storage backend.
const BackendMooncake BackendType = "Mooncake"

var backendTypes = []BackendType{BackendMooncake}

// BackendTypes returns every known storage backend.
func BackendTypes() []BackendType { return slices.Clone(backendTypes) }

// Topology is everything about a serving group that decides which rank
// writes which L3 object. Zero values are "unset" for ResolveTopology; a
// resolved Topology passes Validate.
type Topology struct {
	// Profile is the built-in profile the topology was resolved from, if any.
	Profile string `json:"profile,omitempty"`
	// Attention is the target model's attention family.
	Attention AttentionKind `json:"attention"`
	// Pools are the target's host pools (draft pools are in Draft.Pools).
	Pools []PoolName `json:"pools"`
	// MambaConvBuffers is the number of conv-state buffers of the mamba pool;
	// each is one L3 object per page and rank (suffix _conv_{i}).
	MambaConvBuffers int `json:"mambaConvBuffers,omitempty"`
	// TensorParallel is --tp-size.
	TensorParallel int `json:"tensorParallel"`
	// PipelineParallel is --pp-size.
	PipelineParallel int `json:"pipelineParallel"`
	// DataParallel is --dp-size. With DPAttention it splits the TP group into
	// attention-DP groups; without it, it counts independent replicas of the
	// whole TP×PP group.
	DataParallel int `json:"dataParallel"`
	// DPAttention is --enable-dp-attention.
	DPAttention bool `json:"dpAttention,omitempty"`
	// Draft is the speculative draft model.
	Draft Draft `json:"draft"`
	// Backend is the L3 storage backend.
	Backend BackendType `json:"backend"`
}

// AttentionTP is the attention-TP size: the number of ranks a rank-sharded
// pool is split across (tp / dp with DP attention, else tp).
func (t Topology) AttentionTP() int {
	if t.DPAttention && t.DataParallel > 0 {
		return t.TensorParallel / t.DataParallel
	}
	return t.TensorParallel
}

// AttentionDPGroups is the number of attention-DP groups inside one TP group.
func (t Topology) AttentionDPGroups() int {
	if t.DPAttention {
		return t.DataParallel
	}
	return 1
}

// Replicas is the number of independent copies of the TP×PP group (data
// parallelism without DP attention).
func (t Topology) Replicas() int {
	if t.DPAttention {
		return 1
	}
	return t.DataParallel
}

// TotalRanks is the number of SGLang ranks (GPUs) of the topology.
func (t Topology) TotalRanks() int { return t.TensorParallel * t.PipelineParallel * t.Replicas() }

// PoolSharding returns how pool is split across attention-TP ranks in t.
func (t Topology) PoolSharding(p PoolName) Sharding {
	switch {
	case p == PoolMamba:
		return RankSharded
	case p.IsDraft():
		if t.Draft.HostPoolKind == HostPoolMHA {
			return RankSharded
		}
		return Replicated
	case t.Attention.RankReplicated():
		return Replicated
	default:
		return RankSharded
	}
}

// poolHasObject reports whether a pool writes objects of its own. DeepSeek-V4's
// kv pool is a logical anchor whose payload lives in the deepseek_v4_* pools.
func (t Topology) poolHasObject(p PoolName) bool {
	return !(t.Attention == AttentionDSV4 && p == PoolKV)
}

// objectPools lists the pools that own L3 objects: target pools first, then
// sidecar draft pools, in declaration order.
func (t Topology) objectPools() []PoolName {
	out := make([]PoolName, 0, len(t.Pools)+len(t.Draft.Pools))
	for _, p := range t.Pools {
		if t.poolHasObject(p) {
			out = append(out, p)
		}
	}
	if t.Draft.Placement == DraftPlacementSidecar {
		out = append(out, t.Draft.Pools...)
	}
	return out
}

// Validate checks the topology and returns every problem found, each naming
// the field at fault, joined into one error (nil when valid).
func (t Topology) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !slices.Contains(attentionKinds, t.Attention) {
		add("topology.attention must be one of %s, got %q", joinQuoted(attentionKinds), t.Attention)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"tensorParallel", t.TensorParallel},
		{"pipelineParallel", t.PipelineParallel},
		{"dataParallel", t.DataParallel},
	} {
		name, v := f.name, f.v
		switch {
		case v < 1:
			add("topology.%s must be >= 1, got %d", name, v)
		case v > maxParallelSize:
			add("topology.%s must be <= %d, got %d", name, maxParallelSize, v)
		}
	}
	parallelOK := t.TensorParallel >= 1 && t.PipelineParallel >= 1 && t.DataParallel >= 1 &&
		t.TensorParallel <= maxParallelSize && t.PipelineParallel <= maxParallelSize && t.DataParallel <= maxParallelSize
	if parallelOK {
		if t.DPAttention && t.TensorParallel%t.DataParallel != 0 {
			add("topology.dataParallel (%d) must divide topology.tensorParallel (%d) when topology.dpAttention is on", t.DataParallel, t.TensorParallel)
		}
		if n := t.TensorParallel * t.PipelineParallel * t.Replicas(); n > maxPlannedRanks {
			add("topology has %d ranks (tensorParallel × pipelineParallel × replicas); the planner supports at most %d", n, maxPlannedRanks)
		}
	}
	if !slices.Contains(backendTypes, t.Backend) {
		add("topology.backend must be one of %s, got %q", joinQuoted(backendTypes), t.Backend)
	}
	errs = append(errs, t.validatePools()...)
	errs = append(errs, t.validateDraft()...)
	return errors.Join(errs...)
}

func (t Topology) validatePools() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(t.Pools) == 0 {
		add("topology.pools must list the target's host pools (at least %q)", PoolKV)
		return errs
	}
	seen := map[PoolName]bool{}
	for i, p := range t.Pools {
		switch {
		case p.IsDraft():
			add("topology.pools[%d]: %q is a draft pool; list it in topology.draft.pools", i, p)
		case !slices.Contains(targetPools, p):
			add("topology.pools[%d]: unknown pool %q; known pools are %s", i, p, joinQuoted(targetPools))
		case seen[p]:
			add("topology.pools[%d]: pool %q is listed twice", i, p)
		}
		seen[p] = true
		if !slices.Contains(attentionKinds, t.Attention) {
			continue
		}
		switch {
		case p == PoolIndexer && !t.Attention.RankReplicated():
			add("topology.pools[%d]: the %q pool (DSA indexer) needs an MLA-family attention, not %s", i, p, t.Attention)
		case p.IsDeepSeekV4() && t.Attention != AttentionDSV4:
			add("topology.pools[%d]: the %q pool needs attention %s, not %s", i, p, AttentionDSV4, t.Attention)
		case p == PoolMamba && t.Attention != AttentionHybridMambaMHA && t.Attention != AttentionHybridMambaMLA:
			add("topology.pools[%d]: the %q pool needs a hybrid Mamba attention (%s or %s), not %s", i, p, AttentionHybridMambaMHA, AttentionHybridMambaMLA, t.Attention)
		}
	}
	if !seen[PoolKV] {
		add("topology.pools must include %q (the anchor every other pool follows)", PoolKV)
	}
	hybrid := t.Attention == AttentionHybridMambaMHA || t.Attention == AttentionHybridMambaMLA
	if hybrid && !seen[PoolMamba] {
		add("topology.pools must include %q for attention %s", PoolMamba, t.Attention)
	}
	if seen[PoolMamba] {
		if t.MambaConvBuffers < 1 || t.MambaConvBuffers > maxMambaConvBuffers {
			add("topology.mambaConvBuffers must be between 1 and %d when the mamba pool is present, got %d", maxMambaConvBuffers, t.MambaConvBuffers)
		}
	} else if t.MambaConvBuffers != 0 {
		add("topology.mambaConvBuffers must be 0 without a mamba pool, got %d", t.MambaConvBuffers)
	}
	if t.Attention == AttentionDSV4 && len(t.Pools) == 1 {
		add("topology.pools: a %s target keeps its payload in the deepseek_v4_* and swa pools; list them (the kv pool is only an anchor)", AttentionDSV4)
	}
	return errs
}

func (t Topology) validateDraft() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	d := t.Draft
	if d.Algorithm != DraftNone && !slices.Contains(draftAlgorithms, d.Algorithm) {
		add("topology.draft.algorithm must be empty or one of %s, got %q", joinQuoted(draftAlgorithms), d.Algorithm)
		return errs
	}
	placement := d.Placement
	if placement == "" && d.Algorithm == DraftNone {
		placement = DraftPlacementNone
	}
	switch placement {
	case DraftPlacementNone, DraftPlacementPacked, DraftPlacementSidecar:
	case "":
		add("topology.draft.placement must be set for draft %s (None, Packed or Sidecar)", d.Algorithm)
		return errs
	default:
		add("topology.draft.placement must be None, Packed or Sidecar, got %q", d.Placement)
		return errs
	}

	if d.Algorithm == DraftNone && placement != DraftPlacementNone {
		add("topology.draft.placement is %s but topology.draft.algorithm is empty; set the algorithm or use placement None", placement)
	}
	if d.Algorithm == DraftNGRAM && placement != DraftPlacementNone {
		add("topology.draft.placement must be None for draft NGRAM: n-gram drafting keeps no KV cache")
	}
	if placement != DraftPlacementPacked && d.PackedLayers != 0 {
		add("topology.draft.packedLayers must be 0 unless topology.draft.placement is Packed, got %d", d.PackedLayers)
	}
	if placement != DraftPlacementSidecar {
		if len(d.Pools) != 0 {
			add("topology.draft.pools must be empty unless topology.draft.placement is Sidecar")
		}
		if d.HostPoolKind != "" {
			add("topology.draft.hostPoolKind must be empty unless topology.draft.placement is Sidecar (packed draft layers live in the target's pools)")
		}
	}

	switch placement {
	case DraftPlacementPacked:
		if d.PackedLayers < 1 || d.PackedLayers > maxPackedDraftLayers {
			add("topology.draft.packedLayers must be between 1 and %d for a packed draft, got %d", maxPackedDraftLayers, d.PackedLayers)
		}
		switch d.Algorithm {
		case DraftEAGLE, DraftNEXTN:
		case DraftDSPARK:
			if t.Attention != AttentionDSV4 {
				add("topology.draft.placement Packed for DSPARK needs a %s target; DSpark on other models is a Sidecar draft", AttentionDSV4)
			}
		case DraftNGRAM, DraftNone:
		default:
			add("topology.draft.placement Packed is for MTP/NextN and DeepSeek-V4 DSpark drafts; draft %s is a separate model, use placement Sidecar", d.Algorithm)
		}
	case DraftPlacementSidecar:
		if d.HostPoolKind != HostPoolMHA && d.HostPoolKind != HostPoolMLA {
			add("topology.draft.hostPoolKind must be MHA or MLA for a sidecar draft, got %q", d.HostPoolKind)
		}
		if d.HostPoolKind == HostPoolMLA && slices.Contains(attentionKinds, t.Attention) && !t.Attention.RankReplicated() {
			add("topology.draft.hostPoolKind MLA needs a rank-replicated target (MLA, DSV4 or HybridMambaMLA), not %s; an MHA target's sidecar draft has an MHA host pool", t.Attention)
		}
		seen := map[PoolName]bool{}
		for i, p := range d.Pools {
			switch {
			case !p.IsDraft():
				add("topology.draft.pools[%d]: %q is not a draft pool; draft pools are %s", i, p, joinQuoted(draftPools))
			case seen[p]:
				add("topology.draft.pools[%d]: pool %q is listed twice", i, p)
			case p == PoolDraftIndexer && d.HostPoolKind != HostPoolMLA:
				add("topology.draft.pools[%d]: %q needs an MLA draft host pool (a DSA draft)", i, p)
			}
			seen[p] = true
		}
		if !seen[PoolDraft] {
			add("topology.draft.pools must include %q for a sidecar draft", PoolDraft)
		}
	}
	needsPath := d.Algorithm == DraftDSPARK ||
		(placement == DraftPlacementSidecar && d.Algorithm != DraftNone && d.Algorithm != DraftNGRAM)
	if needsPath && strings.TrimSpace(d.ModelPath) == "" {
		add("topology.draft.modelPath: draft %s needs a draft model path", d.Algorithm)
	}
	return errs
}

func joinQuoted[T ~string](vals []T) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = fmt.Sprintf("%q", string(v))
	}
	return strings.Join(parts, ", ")
}
