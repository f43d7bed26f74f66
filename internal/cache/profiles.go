package cache

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// DraftLayout is how one speculative algorithm lays out its KV on a profile.
type DraftLayout struct {
	Placement DraftPlacement `json:"placement"`
	// PackedLayers is the number of draft layers packed into the target's
	// host pools (Packed only).
	PackedLayers int `json:"packedLayers,omitempty"`
	// HostPoolKind is the class of the draft's host pool (Sidecar only).
	HostPoolKind HostPoolKind `json:"hostPoolKind,omitempty"`
	// Pools are the sidecar pools (Sidecar only).
	Pools []PoolName `json:"pools,omitempty"`
}

// Profile is a built-in model architecture: the facts of its host pools and
// of the drafts known to work with it.
type Profile struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Attention   AttentionKind `json:"attention"`
	Pools       []PoolName    `json:"pools"`
	// MambaConvBuffers is the number of conv-state objects per mamba page.
	MambaConvBuffers int `json:"mambaConvBuffers,omitempty"`
	// Drafts maps each supported --speculative-algorithm to its layout.
	// NGRAM is always allowed (it keeps no KV) and is not listed.
	Drafts map[DraftAlgorithm]DraftLayout `json:"drafts"`
}

// DraftAlgorithms returns the profile's listed speculative algorithms, sorted.
func (p Profile) DraftAlgorithms() []DraftAlgorithm {
	return slices.Sorted(maps.Keys(p.Drafts))
}

var (
	// dsv4Pools are the pools SGLang 0.5.23 registers for DeepSeek-V4 without
	// the fp8 unified kv or the FP4 indexer (those add *_rope and
	// c4_indexer_scale pools); the c128 state pool is not registered.
	dsv4Pools = []PoolName{
		PoolKV, PoolSWA, PoolDSV4C4, PoolDSV4C4Indexer, PoolDSV4C4State, PoolDSV4C4IndexerState, PoolDSV4C128,
	}
	mtp1 = DraftLayout{Placement: DraftPlacementPacked, PackedLayers: 1}
	// mhaSidecar is a separate draft model with a Llama/Qwen-style MHA host pool.
	mhaSidecar = DraftLayout{Placement: DraftPlacementSidecar, HostPoolKind: HostPoolMHA, Pools: []PoolName{PoolDraft}}
)

// The built-in profiles. Where DOMAIN facts and the SGLang source were not
// enough to be sure (noted per profile), the layout is the best reading and
// every field can be overridden in the topology.
var builtinProfiles = map[string]Profile{
	"DeepSeekV3": {
		Name:        "DeepSeekV3",
		Description: "DeepSeek-V3 / R1: MLA; MTP (NextN) packs 1 draft layer into the kv pool",
		Attention:   AttentionMLA,
		Pools:       []PoolName{PoolKV},
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftNEXTN: mtp1, DraftEAGLE: mtp1,
			DraftEAGLE3: mhaSidecar, DraftStandalone: mhaSidecar, DraftDFLASH: mhaSidecar, DraftDSPARK: mhaSidecar,
		},
	},
	"DeepSeekV32": {
		Name:        "DeepSeekV32",
		Description: "DeepSeek-V3.2: MLA with the DSA indexer pool; MTP packs 1 draft layer into kv and indexer",
		Attention:   AttentionMLA,
		Pools:       []PoolName{PoolKV, PoolIndexer},
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftNEXTN: mtp1, DraftEAGLE: mtp1,
			DraftEAGLE3: mhaSidecar, DraftDFLASH: mhaSidecar, DraftDSPARK: mhaSidecar,
		},
	},
	"DeepSeekV4": {
		Name:        "DeepSeekV4",
		Description: "DeepSeek-V4: compressed MLA (kv is a logical anchor; swa, c4, c4 indexer, c4 state and c128 pools hold the bytes); MTP packs 1 layer, DSpark 3",
		Attention:   AttentionDSV4,
		Pools:       dsv4Pools,
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftNEXTN:  mtp1,
			DraftEAGLE:  mtp1,
			DraftDSPARK: {Placement: DraftPlacementPacked, PackedLayers: 3},
			DraftEAGLE3: {Placement: DraftPlacementSidecar, HostPoolKind: HostPoolMHA, Pools: []PoolName{PoolDraft, PoolDraftSWA}},
			DraftDFLASH: mhaSidecar,
		},
	},
	"KimiK2": {
		Name:        "KimiK2",
		Description: "Kimi-K2: MLA (DeepSeek-V3 architecture, no MTP layers)",
		Attention:   AttentionMLA,
		Pools:       []PoolName{PoolKV},
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftEAGLE3: mhaSidecar, DraftStandalone: mhaSidecar, DraftDFLASH: mhaSidecar, DraftDSPARK: mhaSidecar,
		},
	},
	"KimiK3": {
		Name:        "KimiK3",
		Description: "Kimi-K3: MLA layers plus KDA linear-attention state (mamba pool, rank-sharded even on MLA)",
		Attention:   AttentionHybridMambaMLA,
		Pools:       []PoolName{PoolKV, PoolMamba},
		// KDA keeps separate short-conv states for q, k and v (not confirmed
		// against the host pool's conv_buffer list; override if it differs).
		MambaConvBuffers: 3,
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftEAGLE3: mhaSidecar, DraftDFLASH: mhaSidecar, DraftDSPARK: mhaSidecar,
		},
	},
	"GLM5": {
		Name:        "GLM5",
		Description: "GLM-5.x: MLA with the DSA indexer pool; MTP packs 1 draft layer into kv and indexer",
		Attention:   AttentionMLA,
		Pools:       []PoolName{PoolKV, PoolIndexer},
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftNEXTN: mtp1, DraftEAGLE: mtp1,
			DraftEAGLE3: mhaSidecar, DraftDFLASH: mhaSidecar, DraftDSPARK: mhaSidecar,
		},
	},
	"Qwen3": {
		Name:        "Qwen3",
		Description: "Qwen3 dense/MoE: GQA, rank-sharded kv",
		Attention:   AttentionMHA,
		Pools:       []PoolName{PoolKV},
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftEAGLE: mhaSidecar, DraftEAGLE3: mhaSidecar, DraftStandalone: mhaSidecar,
			DraftDFLASH: mhaSidecar, DraftDSPARK: mhaSidecar,
		},
	},
	"Qwen3Next": {
		Name:        "Qwen3Next",
		Description: "Qwen3-Next: Gated DeltaNet (mamba pool) over GQA layers, all rank-sharded; MTP packs 1 layer (not confirmed)",
		Attention:   AttentionHybridMambaMHA,
		Pools:       []PoolName{PoolKV, PoolMamba},
		// GDN keeps one fused conv state per layer.
		MambaConvBuffers: 1,
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftNEXTN: mtp1, DraftEAGLE: mtp1,
			DraftEAGLE3: mhaSidecar, DraftDFLASH: mhaSidecar,
		},
	},
	"Llama3": {
		Name:        "Llama3",
		Description: "Llama 3.x: GQA, rank-sharded kv",
		Attention:   AttentionMHA,
		Pools:       []PoolName{PoolKV},
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftEAGLE: mhaSidecar, DraftEAGLE3: mhaSidecar, DraftStandalone: mhaSidecar,
			DraftDFLASH: mhaSidecar, DraftDSPARK: mhaSidecar,
		},
	},
	"GptOss": {
		Name:        "GptOss",
		Description: "gpt-oss: GQA with alternating sliding-window layers (swa pool), rank-sharded",
		Attention:   AttentionMHA,
		Pools:       []PoolName{PoolKV, PoolSWA},
		Drafts: map[DraftAlgorithm]DraftLayout{
			DraftEAGLE3: mhaSidecar, DraftDFLASH: mhaSidecar,
		},
	},
}

// profileAliases maps other accepted names to canonical profile names.
var profileAliases = map[string]string{
	"DeepSeekR1": "DeepSeekV3",
	"Llama":      "Llama3",
}

// LookupProfile returns the built-in profile called name (case-insensitive;
// DeepSeekR1 is DeepSeekV3 and Llama is Llama3). The profile is a deep copy.
func LookupProfile(name string) (Profile, bool) {
	for k, p := range builtinProfiles {
		if strings.EqualFold(k, name) {
			return cloneProfile(p), true
		}
	}
	for alias, k := range profileAliases {
		if strings.EqualFold(alias, name) {
			return cloneProfile(builtinProfiles[k]), true
		}
	}
	return Profile{}, false
}

// ProfileNames returns the canonical names of the built-in profiles, sorted.
func ProfileNames() []string { return slices.Sorted(maps.Keys(builtinProfiles)) }

func cloneProfile(p Profile) Profile {
	p.Pools = slices.Clone(p.Pools)
	drafts := make(map[DraftAlgorithm]DraftLayout, len(p.Drafts))
	for k, v := range p.Drafts {
		v.Pools = slices.Clone(v.Pools)
		drafts[k] = v
	}
	p.Drafts = drafts
	return p
}

// ResolveTopology fills an explicit topology from a built-in profile: every
// field set in explicit wins; unset fields (zero values: empty attention,
// nil pools, 0 counts, empty draft placement/kind/pools) come from the
// profile. Parallel sizes and the backend come only from explicit (0 sizes
// become 1 for pipelineParallel and dataParallel). An empty profileName
// resolves explicit alone. The result is validated.
func ResolveTopology(profileName string, explicit Topology) (Topology, error) {
	t := explicit
	t.Pools = slices.Clone(explicit.Pools)
	t.Draft.Pools = slices.Clone(explicit.Draft.Pools)
	if t.PipelineParallel == 0 {
		t.PipelineParallel = 1
	}
	if t.DataParallel == 0 {
		t.DataParallel = 1
	}
	if t.Draft.Algorithm == DraftNone && t.Draft.Placement == "" {
		t.Draft.Placement = DraftPlacementNone
	}
	if t.Draft.Algorithm == DraftNGRAM && t.Draft.Placement == "" {
		t.Draft.Placement = DraftPlacementNone
	}
	if profileName != "" {
		p, ok := LookupProfile(profileName)
		if !ok {
			return Topology{}, fmt.Errorf("topology.profile: unknown profile %q; built-in profiles are %s", profileName, strings.Join(ProfileNames(), ", "))
		}
		t.Profile = p.Name
		if t.Attention == "" {
			t.Attention = p.Attention
		}
		if t.Pools == nil {
			t.Pools = slices.Clone(p.Pools)
		}
		if t.MambaConvBuffers == 0 {
			t.MambaConvBuffers = p.MambaConvBuffers
		}
		if err := applyDraftLayout(&t, p); err != nil {
			return Topology{}, err
		}
	}
	if t.MambaConvBuffers == 0 && slices.Contains(t.Pools, PoolMamba) {
		t.MambaConvBuffers = 1
	}
	if err := t.Validate(); err != nil {
		return Topology{}, err
	}
	return t, nil
}

func applyDraftLayout(t *Topology, p Profile) error {
	alg := t.Draft.Algorithm
	if alg == DraftNone || alg == DraftNGRAM {
		return nil
	}
	layout, ok := p.Drafts[alg]
	if !ok {
		if t.Draft.Placement != "" {
			return nil // fully explicit draft: nothing to take from the profile
		}
		return fmt.Errorf("topology.draft.algorithm: profile %s has no built-in layout for %s (it knows %s); set topology.draft.placement (and packedLayers or hostPoolKind and pools) explicitly",
			p.Name, alg, joinQuoted(p.DraftAlgorithms()))
	}
	d := &t.Draft
	if d.Placement == "" {
		d.Placement = layout.Placement
	}
	if d.Placement != layout.Placement {
		return nil // the user chose another placement; keep their fields as they are
	}
	switch d.Placement {
	case DraftPlacementPacked:
		if d.PackedLayers == 0 {
			d.PackedLayers = layout.PackedLayers
		}
	case DraftPlacementSidecar:
		if d.HostPoolKind == "" {
			d.HostPoolKind = layout.HostPoolKind
		}
		if d.Pools == nil {
			d.Pools = slices.Clone(layout.Pools)
		}
	}
	return nil
}
