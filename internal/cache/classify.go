package cache

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ChangeKind ranks what a change does to the L3 objects.
type ChangeKind string

const (
	// Neutral: neither keys nor bytes change; old objects stay valid.
	Neutral ChangeKind = "Neutral"
	// Compatible: keys change (new page size, new served model name, another
	// store), so new reads and writes never meet old objects; the old ones
	// just age out or can be flushed at leisure.
	Compatible ChangeKind = "Compatible"
	// Breaking: the bytes behind unchanged keys change. The new layout must
	// use a new namespace (or the store must be flushed first), or readers
	// get silent garbage from stale objects.
	Breaking ChangeKind = "Breaking"
)

func (k ChangeKind) rank() int {
	switch k {
	case Breaking:
		return 2
	case Compatible:
		return 1
	}
	return 0
}

// Config is everything the classifier compares: the resolved topology, the
// settings, the replica count and any other values the caller wants
// reported as neutral (resources, router settings...).
type Config struct {
	Topology Topology          `json:"topology"`
	Settings Settings          `json:"settings"`
	Replicas int               `json:"replicas,omitempty"`
	Other    map[string]string `json:"other,omitempty"`
	// Defaults are the values settings take when a config leaves them out, by the name of
	// the fact or change (e.g. "extra_arg.--dtype": "auto"); descriptions show them instead
	// of "none". They decide nothing.
	Defaults map[string]string `json:"defaults,omitempty"`
	// Reasons say why a fact is one, by fact name (e.g. "env.SGLANG_DSV4_KV_LAYOUT": "chooses
	// the DeepSeek-V4 KV layout ..."); a Breaking change's description ends with it. They
	// decide nothing.
	Reasons map[string]string `json:"reasons,omitempty"`
}

// FactChange is one difference between two configs.
type FactChange struct {
	// Name is the layout fact or setting that changed.
	Name string     `json:"name"`
	Kind ChangeKind `json:"kind"`
	Old  string     `json:"old"`
	New  string     `json:"new"`
	// Description says it in a user's words, e.g.
	// "KV cache dtype auto → fp8_e4m3".
	Description string `json:"description"`
}

// Change is the verdict on moving from one config to another.
type Change struct {
	Kind ChangeKind `json:"kind"`
	// Changes are every difference, breaking ones first.
	Changes      []FactChange `json:"changes,omitempty"`
	OldNamespace string       `json:"oldNamespace"`
	NewNamespace string       `json:"newNamespace"`
}

// Descriptions returns the descriptions of the changes of one kind.
func (c Change) Descriptions(kind ChangeKind) []string {
	var out []string
	for _, fc := range c.Changes {
		if fc.Kind == kind {
			out = append(out, fc.Description)
		}
	}
	return out
}

// String is a short human verdict, e.g.
// "Breaking: packed draft layers 1 → 3 (NEXTN → DSPARK)".
func (c Change) String() string {
	if len(c.Changes) == 0 {
		return "Neutral: no change"
	}
	parts := make([]string, len(c.Changes))
	for i, fc := range c.Changes {
		parts[i] = fc.Description
		if fc.Kind != c.Kind {
			parts[i] += " [" + strings.ToLower(string(fc.Kind)) + "]"
		}
	}
	return string(c.Kind) + ": " + strings.Join(parts, "; ")
}

var factLabels = map[string]string{
	FactModel:             "model",
	FactModelRevision:     "model revision",
	FactQuantization:      "quantization",
	FactAttention:         "attention",
	FactKVCacheDType:      "KV cache dtype",
	FactHostMemLayout:     "host memory layout",
	FactTPSize:            "TP size of rank-sharded pools",
	FactTPLCMSize:         "tp_lcm_size",
	FactPPSize:            "PP size",
	FactMambaSSMDType:     "Mamba SSM dtype",
	FactContextParallel:   "context-parallel size",
	FactSGLangVersion:     "SGLang version line",
	FactSGLangImage:       "SGLang image",
	FactDraftAlgorithm:    "speculative algorithm",
	FactDraftPlacement:    "draft placement",
	FactDraftPackedLayers: "packed draft layers",
	FactDraftModel:        "draft model",
	FactDraftRevision:     "draft model revision",
	FactDraftHostPool:     "draft host pool",
	FactDraftKVCacheDType: "draft KV cache dtype",
	FactDraftNumSteps:     "packed draft steps",
}

// FactLabel is the words a user reads for a fact name.
func FactLabel(name string) string {
	if l, ok := factLabels[name]; ok {
		return l
	}
	if flag, ok := strings.CutPrefix(name, FactExtraArgPrefix); ok {
		return "extra arg " + flag
	}
	if v, ok := strings.CutPrefix(name, FactEnvPrefix); ok {
		return "env " + v
	}
	if p, ok := strings.CutPrefix(name, FactMountPrefix); ok {
		return "mount " + p
	}
	return name
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

func algName(a DraftAlgorithm) string { return orNone(string(a)) }

// Classify compares two configs. Any changed layout fact (see Facts) is
// Breaking; a change of page size, served model name, storage backend or a
// key-changing extra argument is Compatible (new keys); everything else that differs — replicas, hicache
// ratio/size, write/prefetch policy, io backend, host memory mode, a TP
// change that keeps the bytes, the caller's Other values — is Neutral.
func Classify(old, new Config) Change {
	of, nf := Facts(old.Topology, old.Settings), Facts(new.Topology, new.Settings)
	// shown is a value as a user reads it: the default a config runs when it leaves it out.
	shown := func(name, v string) string {
		for _, d := range []string{v, old.Defaults[name], new.Defaults[name]} {
			if d != "" {
				return d
			}
		}
		return "none"
	}
	c := Change{Kind: Neutral, OldNamespace: Namespace(of), NewNamespace: Namespace(nf)}
	oa, na := old.Topology.Draft.Algorithm, new.Topology.Draft.Algorithm

	names := slices.Sorted(maps.Keys(union(of, nf)))
	layersChanged := of[FactDraftPackedLayers] != nf[FactDraftPackedLayers]
	for _, n := range names {
		// A fact set to "" is not a fact left out: the canonical encoding (and the namespace)
		// tells them apart, as SGLang tells a variable set empty from an unset one.
		ov, oin := of[n]
		nv, nin := nf[n]
		if ov == nv && oin == nin {
			continue
		}
		if n == FactDraftAlgorithm && layersChanged && of[FactDraftPackedLayers] != "" && nf[FactDraftPackedLayers] != "" {
			continue // said together with the packed layers
		}
		shownFact := func(v string, in bool) string {
			if in && v == "" {
				return `""`
			}
			return shown(n, v)
		}
		desc := fmt.Sprintf("%s %s → %s", FactLabel(n), shownFact(ov, oin), shownFact(nv, nin))
		switch n {
		case FactDraftPackedLayers:
			desc = fmt.Sprintf("packed draft layers %s → %s (%s → %s)", orZero(ov), orZero(nv), algName(oa), algName(na))
		case FactDraftAlgorithm:
			desc = fmt.Sprintf("speculative algorithm %s → %s", algName(oa), algName(na))
		case FactTPSize:
			desc = fmt.Sprintf("TP size of rank-sharded pools %s → %s (every shard's bytes change)", orNone(ov), orNone(nv))
		}
		if why := reason(old, new, n); why != "" {
			desc += " (" + why + ")"
		}
		c.add(FactChange{Name: n, Kind: Breaking, Old: ov, New: nv, Description: desc})
	}

	os, ns := old.Settings, new.Settings
	if os.PageSize != ns.PageSize {
		c.add(FactChange{Name: "pageSize", Kind: Compatible, Old: itoa(os.PageSize), New: itoa(ns.PageSize),
			Description: fmt.Sprintf("page size %s → %s (every page gets a new key; old objects are never read again)", orNone(itoa(os.PageSize)), orNone(itoa(ns.PageSize)))})
	}
	if os.ServedModelName != ns.ServedModelName {
		c.add(FactChange{Name: "servedModelName", Kind: Compatible, Old: os.ServedModelName, New: ns.ServedModelName,
			Description: fmt.Sprintf("served model name %s → %s (the key prefix changes)", orNone(os.ServedModelName), orNone(ns.ServedModelName))})
	}
	for _, flag := range slices.Sorted(maps.Keys(union(os.ExtraKeyArgs, ns.ExtraKeyArgs))) {
		ov, nv := os.ExtraKeyArgs[flag], ns.ExtraKeyArgs[flag]
		if ov == nv {
			continue
		}
		name := "extraArgs." + flag
		c.add(FactChange{Name: name, Kind: Compatible, Old: ov, New: nv,
			Description: fmt.Sprintf("extra arg %s %s → %s (requests hash to other keys; the bytes behind a key stay the same)", flag, shown(name, ov), shown(name, nv))})
	}
	for _, v := range slices.Sorted(maps.Keys(union(os.KeyEnv, ns.KeyEnv))) {
		ov, nv := os.KeyEnv[v], ns.KeyEnv[v]
		if ov == nv {
			continue
		}
		name := "env." + v
		desc := fmt.Sprintf("env %s %s → %s (requests hash to other keys; the bytes behind a key stay the same)", v, shown(name, ov), shown(name, nv))
		c.add(FactChange{Name: name, Kind: Compatible, Old: ov, New: nv, Description: desc})
	}
	ot, nt := old.Topology, new.Topology

	neutral := func(name, label, ov, nv, note string) {
		if ov == nv {
			return
		}
		d := fmt.Sprintf("%s %s → %s", label, shown(name, ov), shown(name, nv))
		if note != "" {
			d += " (" + note + ")"
		}
		c.add(FactChange{Name: name, Kind: Neutral, Old: ov, New: nv, Description: d})
	}
	if of[FactTPSize] == nf[FactTPSize] {
		note := "no rank-sharded pool is written: object bytes unchanged"
		if of[FactTPSize] != "" {
			note = "rank-sharded pools keep their shard size"
		}
		neutral("tensorParallel", "tensor parallel", itoa(ot.TensorParallel), itoa(nt.TensorParallel), note)
		neutral("dataParallel", "data parallel", itoa(ot.DataParallel), itoa(nt.DataParallel), "")
		neutral("dpAttention", "DP attention", strconv.FormatBool(ot.DPAttention), strconv.FormatBool(nt.DPAttention), "")
	}
	if of[FactDraftAlgorithm] == nf[FactDraftAlgorithm] && oa != na {
		neutral("draft.algorithm", "speculative algorithm", string(oa), string(na), "same draft KV layout")
	}
	if of[FactDraftNumSteps] == nf[FactDraftNumSteps] {
		neutral("draft.numSteps", "draft steps", itoa(os.DraftNumSteps), itoa(ns.DraftNumSteps), "only a packed EAGLE draft's host layers follow the steps")
	}
	neutral("draft.numDraftTokens", "draft tokens", itoa(os.DraftNumDraftTokens), itoa(ns.DraftNumDraftTokens), "sizes device rings and verify scratch, no host page")
	neutral("draft.dsparkBlockSize", "DSpark block size", itoa(os.DraftDSparkBlockSize), itoa(ns.DraftDSparkBlockSize), "the draft tokens less one")
	neutral("pools", "host pools", joinPools(ot.Pools), joinPools(nt.Pools), "existing objects keep their bytes")
	neutral("replicas", "replicas", itoa(old.Replicas), itoa(new.Replicas), "")
	neutral("hicacheRatio", "hicache ratio", ftoa(os.HiCacheRatio), ftoa(ns.HiCacheRatio), "")
	neutral("hicacheSizeGB", "hicache size (GB)", ftoa(os.HiCacheSizeGB), ftoa(ns.HiCacheSizeGB), "")
	neutral("writePolicy", "write policy", os.WritePolicy, ns.WritePolicy, "")
	neutral("prefetchPolicy", "prefetch policy", os.PrefetchPolicy, ns.PrefetchPolicy, "")
	neutral("ioBackend", "io backend", os.IOBackend, ns.IOBackend, "")
	neutral("hostMemoryMode", "host memory mode", os.HostMemoryMode, ns.HostMemoryMode, "")
	for _, k := range slices.Sorted(maps.Keys(union(old.Other, new.Other))) {
		neutral("other."+k, k, old.Other[k], new.Other[k], "")
	}

	slices.SortStableFunc(c.Changes, func(a, b FactChange) int { return b.Kind.rank() - a.Kind.rank() })
	return c
}

// reason is why a fact is a layout fact, as the newer config (or the older) says.
func reason(old, new Config, name string) string {
	if r := new.Reasons[name]; r != "" {
		return r
	}
	return old.Reasons[name]
}

func (c *Change) add(fc FactChange) {
	c.Changes = append(c.Changes, fc)
	if fc.Kind.rank() > c.Kind.rank() {
		c.Kind = fc.Kind
	}
}

func union(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func orZero(v string) string {
	if v == "" {
		return "0"
	}
	return v
}

func ftoa(f float64) string {
	if f == 0 {
		return ""
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
