package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Settings are the SGLang server settings that matter to the cache tier,
// beside the Topology. Layout settings change the bytes behind a key;
// PageSize and ServedModelName change the keys themselves; the rest is
// neutral (reported by Classify, never part of the layout).
type Settings struct {
	// ModelPath is --model-path (a hub id or a path): the model identity.
	ModelPath string `json:"modelPath,omitempty"`
	// Revision is the model revision (hub commit or tag).
	Revision string `json:"revision,omitempty"`
	// ServedModelName is --served-model-name; it is part of every key.
	ServedModelName string `json:"servedModelName,omitempty"`
	// KVCacheDType is --kv-cache-dtype; empty means "auto".
	KVCacheDType string `json:"kvCacheDType,omitempty"`
	// DraftKVCacheDType is --speculative-draft-kv-cache-dtype; empty means "auto".
	DraftKVCacheDType string `json:"draftKVCacheDType,omitempty"`
	// DraftNumSteps is --speculative-num-steps; 0 leaves it to the release, which picks it from
	// the model's architecture. A layout fact only for a packed EAGLE/NEXTN draft: a multi-layer
	// EAGLE draft runs one draft runner per step and every runner's layers are packed into the
	// target's pages (docs/compatibility.md, the draft's step and token counts).
	DraftNumSteps int `json:"draftNumSteps,omitempty"`
	// HostMemLayout is --hicache-mem-layout; empty means "page_first".
	HostMemLayout string `json:"hostMemLayout,omitempty"`
	// MambaSSMDType is --mamba-ssm-dtype; empty means "auto".
	MambaSSMDType string `json:"mambaSSMDType,omitempty"`
	// Quantization is --quantization; empty or "none" means unquantized.
	Quantization string `json:"quantization,omitempty"`
	// ContextParallel is the attention context-parallel (DCP) size; 0 or 1 means none.
	ContextParallel int `json:"contextParallel,omitempty"`
	// TPLCMSize is tp_lcm_size of the storage extra config (heterogeneous TP); 0 means unset.
	TPLCMSize int `json:"tpLCMSize,omitempty"`
	// SGLangVersion is the value of the SGLang release's layout fact: the fact of the class of
	// releases whose keys and bytes are recorded as equal (internal/sglang/release), e.g. "0.5"
	// for 0.5.23, or the release itself, e.g. "0.5.24.post1". It is used as given.
	SGLangVersion string `json:"sglangVersion,omitempty"`
	// SGLangImage is the digest of an SGLang image whose release is not read from its
	// reference (a private build): the image itself is then the layout fact.
	SGLangImage string `json:"sglangImage,omitempty"`
	// PageSize is --page-size. A change gives every page a new key.
	PageSize int `json:"pageSize,omitempty"`
	// ExtraLayoutArgs are server flags given beside the spec (canonical flag →
	// value) that change the bytes behind a key, such as --dtype; each is a
	// layout fact.
	ExtraLayoutArgs map[string]string `json:"extraLayoutArgs,omitempty"`
	// ExtraKeyArgs are server flags given beside the spec that change the
	// keys by themselves (token ids, adapter ids), never the bytes behind one.
	ExtraKeyArgs map[string]string `json:"extraKeyArgs,omitempty"`
	// LayoutEnv are environment variables of the serving container (name → value) that change
	// the bytes behind a key, such as SGLANG_DSV4_KV_LAYOUT; each is a layout fact.
	LayoutEnv map[string]string `json:"layoutEnv,omitempty"`
	// KeyEnv are environment variables that change the keys by themselves, never the bytes.
	KeyEnv map[string]string `json:"keyEnv,omitempty"`
	// LayoutMounts are the volumes mounted into the serving container at paths not known to
	// be neutral (mount path → the volume's identity and how it is mounted): what SGLang reads
	// there (weights, code, configuration) is the volume's, so each is a layout fact.
	LayoutMounts map[string]string `json:"layoutMounts,omitempty"`

	// Neutral settings: they change neither keys nor bytes.
	HostMemoryMode string  `json:"hostMemoryMode,omitempty"`
	HiCacheRatio   float64 `json:"hicacheRatio,omitempty"`
	HiCacheSizeGB  float64 `json:"hicacheSizeGB,omitempty"`
	WritePolicy    string  `json:"writePolicy,omitempty"`
	PrefetchPolicy string  `json:"prefetchPolicy,omitempty"`
	IOBackend      string  `json:"ioBackend,omitempty"`
	// DraftNumDraftTokens (--speculative-num-draft-tokens) and DraftDSparkBlockSize
	// (--speculative-dspark-block-size, the draft tokens less one) size device rings and
	// verify scratch only: no host pool's page bytes depend on them.
	DraftNumDraftTokens  int `json:"draftNumDraftTokens,omitempty"`
	DraftDSparkBlockSize int `json:"draftDSparkBlockSize,omitempty"`
}

// Layout fact names. A fact is present only when it applies; optional facts
// are left out at their default, so adding a new optional fact in a later
// release leaves every existing fingerprint unchanged.
const (
	FactModel             = "model"
	FactModelRevision     = "model.revision"
	FactQuantization      = "quantization"
	FactAttention         = "attention"
	FactKVCacheDType      = "kv_cache_dtype"
	FactHostMemLayout     = "hicache_mem_layout"
	FactTPSize            = "tp_size"
	FactTPLCMSize         = "tp_lcm_size"
	FactPPSize            = "pp_size"
	FactMambaSSMDType     = "mamba_ssm_dtype"
	FactContextParallel   = "context_parallel"
	FactSGLangVersion     = "sglang_version_line"
	FactSGLangImage       = "sglang.image"
	FactDraftAlgorithm    = "draft.algorithm"
	FactDraftPlacement    = "draft.placement"
	FactDraftPackedLayers = "draft.packed_layers"
	FactDraftModel        = "draft.model"
	FactDraftRevision     = "draft.revision"
	FactDraftHostPool     = "draft.host_pool"
	FactDraftKVCacheDType = "draft.kv_cache_dtype"
	FactDraftNumSteps     = "draft.num_steps"
	// FactExtraArgPrefix starts the name of a layout fact set by a server
	// flag given beside the spec: "extra_arg.--dtype".
	FactExtraArgPrefix = "extra_arg."
	// FactEnvPrefix starts the name of a layout fact set by an environment variable of the
	// serving container: "env.SGLANG_DSV4_KV_LAYOUT".
	FactEnvPrefix = "env."
	// FactMountPrefix starts the name of a layout fact set by a volume mounted into the
	// serving container: "mount./models".
	FactMountPrefix = "mount."
)

// LayoutFacts are the facts that decide the bytes behind an unchanged key
// (name → value). Two deployments with equal facts can share L3 objects;
// any difference must move to another namespace or flush.
type LayoutFacts map[string]string

// Facts derives the layout facts of a topology and its settings. Only facts
// that change the bytes stored under an unchanged key are included:
//
//   - model identity (path, revision, quantization) and attention kind;
//   - KV cache dtype and host memory layout;
//   - tp_size (the attention-TP size) only where some written pool is
//     rank-sharded: MHA kv, mamba, an MHA sidecar draft. For pure MLA/DSV4
//     a TP change keeps every object's bytes. Under tp_lcm_size with the
//     page_head layout the MHA kv objects are cut into tp_lcm_size head
//     slices, so kv alone no longer makes tp_size a fact (tp_lcm_size does);
//   - pp_size (each stage writes its own layer slice);
//   - the Mamba SSM dtype when there is a mamba pool;
//   - context-parallel size, the SGLang release's class (or, for an image whose release is not
//     read, the image's digest);
//   - every layout-relevant server flag given beside the spec (extra
//     arguments such as --dtype or --json-model-override-args), by flag;
//   - every layout-relevant environment variable of the serving container, by name;
//   - every volume mounted into the serving container outside the neutral mount points, by
//     mount path, with the volume's identity;
//   - the draft: algorithm (NEXTN counted as EAGLE, its alias), placement,
//     packed layer count, draft model and its revision, draft host pool kind, draft KV dtype —
//     only for drafts that keep KV in the host tier (not NGRAM); and, for a packed EAGLE/NEXTN
//     draft whose step count the spec sets, that count (a multi-layer EAGLE packs one draft
//     runner's layers per step). The draft's token counts are never facts.
//
// Page size, served model name, replicas, resources and cache policies are
// not layout facts (see Classify).
func Facts(t Topology, s Settings) LayoutFacts {
	f := LayoutFacts{}
	setIf := func(k, v string) {
		if v != "" {
			f[k] = v
		}
	}
	setIf(FactModel, strings.TrimRight(strings.TrimSpace(s.ModelPath), "/"))
	setIf(FactModelRevision, strings.TrimSpace(s.Revision))
	if q := strings.ToLower(strings.TrimSpace(s.Quantization)); q != "none" {
		setIf(FactQuantization, q)
	}
	setIf(FactAttention, string(t.Attention))
	f[FactKVCacheDType] = orDefault(s.KVCacheDType, "auto")
	layout := orDefault(s.HostMemLayout, "page_first")
	f[FactHostMemLayout] = layout
	f[FactPPSize] = strconv.Itoa(max(t.PipelineParallel, 1))

	splitHeads := s.TPLCMSize > 0 && layout == "page_head"
	for _, p := range t.objectPools() {
		if t.PoolSharding(p) != RankSharded {
			continue
		}
		if p == PoolKV && splitHeads {
			continue
		}
		f[FactTPSize] = strconv.Itoa(t.AttentionTP())
		break
	}
	if s.TPLCMSize > 0 {
		f[FactTPLCMSize] = strconv.Itoa(s.TPLCMSize)
	}
	if slices.Contains(t.Pools, PoolMamba) {
		f[FactMambaSSMDType] = orDefault(s.MambaSSMDType, "auto")
	}
	if s.ContextParallel > 1 {
		f[FactContextParallel] = strconv.Itoa(s.ContextParallel)
	}
	setIf(FactSGLangVersion, strings.TrimSpace(s.SGLangVersion))
	setIf(FactSGLangImage, strings.TrimSpace(s.SGLangImage))
	for flag, v := range s.ExtraLayoutArgs {
		f[FactExtraArgPrefix+flag] = v
	}
	for name, v := range s.LayoutEnv {
		f[FactEnvPrefix+name] = v
	}
	for p, v := range s.LayoutMounts {
		f[FactMountPrefix+p] = v
	}

	d := t.Draft
	if d.Placement == DraftPlacementPacked || d.Placement == DraftPlacementSidecar {
		f[FactDraftAlgorithm] = string(canonicalAlgorithm(d.Algorithm))
		f[FactDraftPlacement] = string(d.Placement)
		f[FactDraftKVCacheDType] = orDefault(s.DraftKVCacheDType, "auto")
		if d.Placement == DraftPlacementPacked {
			f[FactDraftPackedLayers] = strconv.Itoa(d.PackedLayers)
			if PackedStepsMatter(d) && s.DraftNumSteps > 0 {
				f[FactDraftNumSteps] = strconv.Itoa(s.DraftNumSteps)
			}
		} else {
			f[FactDraftHostPool] = string(d.HostPoolKind)
		}
		if strings.TrimSpace(d.ModelPath) != "" {
			f[FactDraftModel] = strings.TrimRight(strings.TrimSpace(d.ModelPath), "/")
		}
		if r := strings.TrimSpace(d.Revision); r != "" {
			f[FactDraftRevision] = r
		}
	}
	return f
}

// PackedStepsMatter tells whether --speculative-num-steps changes the bytes a draft leaves in
// the host tier. SGLang 0.5.23 packs every draft runner's KV pool into the target's host pools
// for an EAGLE/NEXTN MTP draft (speculative/base_spec_worker.py, _build_hicache_draft_plan), and
// a multi-layer EAGLE draft has one runner per step (multi_layer_eagle_worker_v2.py,
// draft_runners), so the packed tail layers grow with the steps. Whether a model runs its MTP
// as multi-layer EAGLE is its architecture's choice (arg_groups/model_overrides), which the
// operator does not read: every packed EAGLE/NEXTN draft counts its steps. A sidecar draft
// registers its first runner only; DSPARK and DFLASH have one runner.
func PackedStepsMatter(d Draft) bool {
	return d.Placement == DraftPlacementPacked && canonicalAlgorithm(d.Algorithm) == DraftEAGLE
}

func orDefault(v, def string) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return def
	}
	return v
}

// canonicalAlgorithm maps SGLang's aliases to the algorithm they run.
func canonicalAlgorithm(a DraftAlgorithm) DraftAlgorithm {
	if a == DraftNEXTN {
		return DraftEAGLE
	}
	return a
}

// LayoutEncodingVersion is the first line of the canonical encoding.
const LayoutEncodingVersion = "hicache-layout/v1"

// ShortFingerprintLen is the number of hex digits of the short fingerprint.
const ShortFingerprintLen = 10

// Canonical is the documented byte encoding the fingerprint hashes: the line
// "hicache-layout/v1", then one "name=value" line per fact, sorted by name,
// each line ending in "\n". In values, backslash, newline and carriage
// return are written as \\, \n and \r. It does not depend on map order.
func (f LayoutFacts) Canonical() string {
	var b strings.Builder
	b.WriteString(LayoutEncodingVersion)
	b.WriteByte('\n')
	for _, k := range slices.Sorted(maps.Keys(f)) {
		b.WriteString(escapeFact(k))
		b.WriteByte('=')
		b.WriteString(escapeFact(f[k]))
		b.WriteByte('\n')
	}
	return b.String()
}

var factEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`)

func escapeFact(s string) string { return factEscaper.Replace(s) }

// Fingerprint is the lowercase hex SHA-256 of Canonical.
func (f LayoutFacts) Fingerprint() string {
	sum := sha256.Sum256([]byte(f.Canonical()))
	return hex.EncodeToString(sum[:])
}

// ShortFingerprint is the first 10 hex digits of Fingerprint (40 bits):
// lowercase alphanumerics, valid in a Mooncake key prefix and a DNS label.
func (f LayoutFacts) ShortFingerprint() string { return f.Fingerprint()[:ShortFingerprintLen] }

// NamespacePrefixTag is the fixed start of every namespace tag.
const NamespacePrefixTag = "hc-"

// Namespace returns the L3 namespace tag of a layout: "hc-" followed by the
// short fingerprint, e.g. "hc-3f9a0c1b7e" (13 characters of [a-z0-9-]). It
// is meant as Mooncake's extra_backend_tag, and is also a valid DNS label
// and Kubernetes label value.
func Namespace(f LayoutFacts) string { return NamespacePrefixTag + f.ShortFingerprint() }
