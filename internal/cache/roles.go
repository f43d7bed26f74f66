package cache

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Role is the part a server plays under SGLang's prefill/decode disaggregation.
type Role string

const (
	// RolePrefill servers compute a prompt's KV and hand it to a decode server. Their cache is
	// the ordinary HiRadixCache: they read and write L3 exactly as a server without roles.
	RolePrefill Role = "prefill"
	// RoleDecode servers generate tokens from the KV a prefill server sent them.
	RoleDecode Role = "decode"
)

// DecodeL3 is what a decode server does with the L3 store (SGLang 0.5.23).
type DecodeL3 string

const (
	// DecodeL3None: no prefix cache at all. A decode server disables its radix cache unless told
	// otherwise, and the hierarchical cache needs one; its host pool, if any, is the retraction
	// backup, which never reaches storage.
	DecodeL3None DecodeL3 = "None"
	// DecodeL3Offload: --disaggregation-decode-enable-offload-kvcache. The decode server writes
	// the KV it decoded to L3, continuing the prefill's page hashes, and reads nothing. Its host
	// pool is built from its device KV pool alone (no draft pools, no sidecar pools).
	DecodeL3Offload DecodeL3 = "Offload"
	// DecodeL3HiCache: --enable-hierarchical-cache with the decode radix cache. The decode server
	// runs the ordinary HiRadixCache and reads and writes L3 like a prefill server.
	DecodeL3HiCache DecodeL3 = "HiCache"
)

// RoleL3 is what one role does against L3.
type RoleL3 struct {
	Role   Role `json:"role"`
	Reads  bool `json:"reads"`
	Writes bool `json:"writes"`
	// Reason says why, in words.
	Reason string `json:"reason"`
}

// L3Of says whether a role reads and writes L3. mode only matters to the decode role.
func L3Of(role Role, mode DecodeL3) RoleL3 {
	out := RoleL3{Role: role}
	switch {
	case role == RolePrefill:
		out.Reads, out.Writes = true, true
		out.Reason = "prefill servers run the ordinary hierarchical cache: they read and write L3"
	case mode == DecodeL3Offload:
		out.Writes = true
		out.Reason = "decode offload writes the decoded KV under the prefill's keys and never reads"
	case mode == DecodeL3HiCache:
		out.Reads, out.Writes = true, true
		out.Reason = "the decode radix cache with HiCache reads and writes L3 like a prefill server"
	default:
		out.Reason = "decode servers keep no prefix cache: nothing is read or written"
	}
	return out
}

// RolePlan is the per-rank duty plan of one role's serving group. The prefill role and a decode
// role with HiCache have the ordinary plan; a decode role with Offload writes what the plan says
// it writes and reads nothing; a decode role without L3 has no duties at all. The topology must
// be valid for the role (CheckDecodeL3).
func RolePlan(role Role, mode DecodeL3, t Topology) (RankPlan, error) {
	plan, err := Plan(t)
	if err != nil {
		return plan, err
	}
	l3 := L3Of(role, mode)
	if l3.Reads && l3.Writes {
		return plan, nil
	}
	shape := *plan.shape
	if l3.Writes {
		shape.role = roleWritesOnly
	} else {
		shape.role, shape.noDutiesReason = roleNoDuties, "no L3 duties: "+l3.Reason
	}
	plan.shape = &shape
	return plan, nil
}

// RoleProblem is a combination of roles the pinned SGLang release (or the cache's correctness)
// refuses. Field names the role's setting at fault, relative to the roles: "decode.l3",
// "decode.topology.tensorParallel", "decode.topology.pipelineParallel".
type RoleProblem struct {
	Field   string
	Message string
}

func (p *RoleProblem) Error() string { return p.Field + ": " + p.Message }

// CheckDecodeL3 refuses a decode L3 mode the release or the cache's correctness does not allow
// for the decode role's topology t.
func CheckDecodeL3(mode DecodeL3, t Topology) error {
	switch mode {
	case DecodeL3None, "":
		return nil
	case DecodeL3HiCache:
		switch canonicalAlgorithm(t.Draft.Algorithm) {
		case DraftNone, DraftEAGLE, DraftEAGLE3, DraftDSPARK:
			return nil
		}
		return &RoleProblem{Field: "decode.l3", Message: fmt.Sprintf(
			"HiCache needs SGLang's decode radix cache, which does not serve the %s draft (only EAGLE or NEXTN, EAGLE3 and DSPARK): set it to None, or change the draft", t.Draft.Algorithm)}
	case DecodeL3Offload:
	default:
		return &RoleProblem{Field: "decode.l3", Message: fmt.Sprintf("%q is not one of None, Offload, HiCache", mode)}
	}
	switch t.Attention {
	case AttentionDSV4, AttentionHybridMambaMHA, AttentionHybridMambaMLA:
		return &RoleProblem{Field: "decode.l3", Message: fmt.Sprintf(
			"Offload is refused by SGLang for %s models (its decode offload handles only MHA and MLA KV pools, \"Unsupported KV cache type for decode offload\"): set it to None, or HiCache", t.Attention)}
	}
	if extra := slices.DeleteFunc(slices.Clone(t.Pools), func(p PoolName) bool { return p == PoolKV || p == PoolSWA }); len(extra) > 0 {
		return &RoleProblem{Field: "decode.l3", Message: fmt.Sprintf(
			"Offload would write the KV without the model's %s pool, which prefill servers then read as a short hit of a page written under their keys: set it to None, or HiCache", joinPools(extra))}
	}
	if t.Draft.Placement == DraftPlacementPacked || t.Draft.Placement == DraftPlacementSidecar {
		return &RoleProblem{Field: "decode.l3", Message: fmt.Sprintf(
			"Offload would write the KV without the %s draft's layers, which prefill servers read from the same objects: set it to None, or HiCache", t.Draft.Algorithm)}
	}
	return nil
}

// CheckRolePair refuses a prefill and a decode topology that the release will not pair, or that
// would write different bytes under one key of the namespace they share. prefillFacts and
// decodeFacts are the roles' layout facts.
func CheckRolePair(prefill, decode Topology, mode DecodeL3, prefillFacts, decodeFacts LayoutFacts) error {
	if decode.Draft.Enabled() && decode.PipelineParallel > 1 {
		return &RoleProblem{Field: "decode.topology.pipelineParallel", Message: fmt.Sprintf(
			"SGLang runs speculative decoding (%s) with pipeline parallelism only on prefill servers: set it to 1", decode.Draft.Algorithm)}
	}
	if canonicalAlgorithm(prefill.Draft.Algorithm) == DraftDSPARK && prefill.Attention == AttentionDSV4 && prefill.AttentionTP() != decode.AttentionTP() {
		return &RoleProblem{Field: "decode.topology.tensorParallel", Message: fmt.Sprintf(
			"DeepSeek-V4 DSpark pairs a prefill and a decode server only with the same attention tensor-parallel size; prefill has %d, decode %d",
			prefill.AttentionTP(), decode.AttentionTP())}
	}
	if !L3Of(RoleDecode, mode).Writes || maps.Equal(prefillFacts, decodeFacts) {
		return nil
	}
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(prefillFacts)) {
		if prefillFacts[k] != decodeFacts[k] {
			diff = append(diff, fmt.Sprintf("%s %s on prefill, %s on decode", k, orUnset(prefillFacts[k]), orUnset(decodeFacts[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(decodeFacts)) {
		if _, ok := prefillFacts[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s unset on prefill, %s on decode", k, decodeFacts[k]))
		}
	}
	field := "decode.l3"
	switch {
	case prefillFacts[FactTPSize] != decodeFacts[FactTPSize]:
		field = "decode.topology.tensorParallel"
	case prefillFacts[FactPPSize] != decodeFacts[FactPPSize]:
		field = "decode.topology.pipelineParallel"
	}
	return &RoleProblem{Field: field, Message: fmt.Sprintf(
		"decode servers with L3 %s write under the prefill's namespace, so both roles must store the same bytes under a key, but their layouts differ (%s): give both roles the same sizes, or set the decode role's l3 to None",
		mode, strings.Join(diff, "; "))}
}

func orUnset(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}
