package cache

import (
	"strings"
	"testing"
)

// pick returns vals[i % len] most of the time and a value outside the enum
// for the rest, so the fuzzer also exercises rejected input.
func pick[T ~string](vals []T, i uint8) T {
	if int(i) >= 4*len(vals) {
		return T("bogus-" + string(rune('a'+i%26)))
	}
	return vals[int(i)%len(vals)]
}

var fuzzPoolSets = map[AttentionKind][]PoolName{
	AttentionMHA:            {PoolKV, PoolSWA},
	AttentionMLA:            {PoolKV, PoolIndexer},
	AttentionDSV4:           dsv4Pools,
	AttentionHybridMambaMHA: {PoolKV, PoolMamba},
	AttentionHybridMambaMLA: {PoolKV, PoolIndexer, PoolMamba},
}

var fuzzDraftPools = [][]PoolName{{PoolDraft}, {PoolDraft, PoolDraftSWA}, {PoolDraft, PoolDraftIndexer}, {PoolDraftSWA}}

// FuzzPlan builds topologies from structured random input. Invalid ones
// must be rejected with an error; valid ones must plan so that every
// rank-sharded pool is written by every rank of its shard group, every
// replicated pool by exactly one rank per
// (replica, PP stage, attention-DP group), and every rank reads every pool.
func FuzzPlan(f *testing.F) {
	// attn, tp, pp, dp, dpAttn, alg, placement, hostKind, draftPools, backend, layers, conv
	f.Add(uint8(1), uint16(8), uint8(1), uint8(1), false, uint8(1), uint8(2), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0))
	f.Add(uint8(2), uint16(16), uint8(2), uint8(1), false, uint8(6), uint8(1), uint8(0), uint8(0), uint8(0), uint8(3), uint8(0))
	f.Add(uint8(2), uint16(8), uint8(1), uint8(1), false, uint8(1), uint8(2), uint8(0), uint8(1), uint8(1), uint8(0), uint8(0))
	f.Add(uint8(4), uint16(4), uint8(2), uint8(2), true, uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), uint8(3))
	f.Add(uint8(3), uint16(2), uint8(2), uint8(2), false, uint8(4), uint8(0), uint8(0), uint8(0), uint8(2), uint8(0), uint8(1))
	f.Add(uint8(1), uint16(8), uint8(1), uint8(3), true, uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0))
	f.Add(uint8(0), uint16(0), uint8(0), uint8(0), false, uint8(255), uint8(255), uint8(255), uint8(255), uint8(255), uint8(255), uint8(255))
	f.Add(uint8(1), uint16(65535), uint8(255), uint8(255), false, uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, attnI uint8, tp uint16, pp, dp uint8, dpAttn bool, algI, placeI, kindI, poolsI, backendI, layers, conv uint8) {
		attn := pick(attentionKinds, attnI)
		topo := Topology{
			Attention:        attn,
			Pools:            fuzzPoolSets[attn],
			MambaConvBuffers: int(conv % 4),
			TensorParallel:   int(tp % 130),
			PipelineParallel: int(pp % 9),
			DataParallel:     int(dp % 9),
			DPAttention:      dpAttn,
			Backend:          pick(backendTypes, backendI),
			Draft: Draft{
				Algorithm:    pick(append([]DraftAlgorithm{DraftNone}, draftAlgorithms...), algI),
				Placement:    pick([]DraftPlacement{DraftPlacementNone, DraftPlacementPacked, DraftPlacementSidecar, ""}, placeI),
				PackedLayers: int(layers % 5),
				HostPoolKind: pick([]HostPoolKind{HostPoolMHA, HostPoolMLA, ""}, kindI),
				Pools:        fuzzDraftPools[int(poolsI)%len(fuzzDraftPools)],
				ModelPath:    "d",
			},
		}
		if topo.Pools == nil {
			topo.Pools = []PoolName{PoolKV}
		}
		p, err := Plan(topo)
		if err != nil {
			if err.Error() == "" || topo.Validate() == nil {
				t.Fatalf("Plan failed on a topology Validate accepts, or with an empty message: %v", err)
			}
			return
		}
		if want, _ := referencePlan(topo); differsFromReference(want, p) != "" {
			t.Fatalf("topology %+v: %s", topo, differsFromReference(want, p))
		}
		if bad := checkInvariants(topo, p); len(bad) > 0 {
			t.Fatalf("topology %+v:\n%s", topo, strings.Join(bad, "\n"))
		}
		_ = p.Summary()
		_ = p.String()
		for _, k := range KeysForPage(p, "hc-x_m_", testHash) {
			if !KeyInNamespace(k, "hc-x_m_") {
				t.Fatalf("key %q outside its namespace", k)
			}
		}
		f := Facts(topo, Settings{})
		if len(f.ShortFingerprint()) != ShortFingerprintLen {
			t.Fatalf("short fingerprint %q", f.ShortFingerprint())
		}
	})
}

// FuzzResolve feeds arbitrary strings to ResolveTopology and Plan: they must
// return errors, never panic, and whatever resolves must plan.
func FuzzResolve(f *testing.F) {
	f.Add("DeepSeekV4", "", "", "DSPARK", "", "", 8, 1, "Mooncake")
	f.Add("GLM5", "HybridMambaMLA", "kv,indexer,mamba", "", "", "", 4, 2, "File")
	f.Add("", "MHA", "kv", "EAGLE3", "Sidecar", "MHA", 2, 1, "NIXL")
	f.Add("KimiK2", "", "", "NEXTN", "", "", 8, 1, "Mooncake")
	f.Add("nope", "???", ",,,", "x", "y", "z", -1, -7, "")
	f.Fuzz(func(t *testing.T, profile, attn, pools, alg, placement, kind string, tp, pp int, backend string) {
		var ps []PoolName
		if pools != "" {
			for _, s := range strings.Split(pools, ",") {
				ps = append(ps, PoolName(s))
			}
		}
		explicit := Topology{
			Attention: AttentionKind(attn), Pools: ps, TensorParallel: tp % 300, PipelineParallel: pp % 10,
			Backend: BackendType(backend),
			Draft:   Draft{Algorithm: DraftAlgorithm(alg), Placement: DraftPlacement(placement), HostPoolKind: HostPoolKind(kind), ModelPath: "d"},
		}
		topo, err := ResolveTopology(profile, explicit)
		if err != nil {
			return
		}
		if _, err := Plan(topo); err != nil {
			t.Fatalf("a resolved topology does not plan: %v", err)
		}
	})
}

// FuzzKeys checks the key schema on arbitrary tags, names and hashes: a
// page key built from a namespace's prefix is in that namespace, a string
// without a page hash after the prefix is not, and a key of a nested
// namespace is not in the outer one.
func FuzzKeys(f *testing.F) {
	f.Add("hc-0123456789", "deepseek-ai/DeepSeek-V4", testHash, "__k")
	f.Add("", "", testHash, "_3_draft_v")
	f.Add("hc-1", "a_b", "xyz", "_0_k")
	f.Add("t", "m", testHash, "k")
	f.Fuzz(func(t *testing.T, tag, served, hash, suffix string) {
		prefix := NamespacePrefix(tag, served)
		if !strings.HasPrefix(prefix, NamespacePrefix(tag, "")) {
			t.Fatalf("prefix %q does not start with the tag part %q", prefix, NamespacePrefix(tag, ""))
		}
		if strings.Contains(NamespacePrefix("", served), "/") {
			t.Fatalf("the served-name part of %q still contains a slash (the tag is kept verbatim)", prefix)
		}
		key := prefix + hash + suffix
		got := KeyInNamespace(key, prefix)
		if IsPageHash(hash) && strings.HasPrefix(suffix, "_") && !got {
			t.Fatalf("page key %q is not in its namespace %q", key, prefix)
		}
		if len(hash+suffix) <= pageHashHexLen && got {
			t.Fatalf("key %q has no room for a page hash and a suffix after %q but is in the namespace", key, prefix)
		}
		if got && !IsPageHash((hash + suffix)[:pageHashHexLen]) {
			t.Fatalf("key %q is in namespace %q without a page hash after the prefix", key, prefix)
		}
		if tag != "" && served != "" && IsPageHash(hash) && strings.HasPrefix(suffix, "_") {
			outer := NamespacePrefix(tag, "")
			// The served-name part of the nested prefix is not a page hash,
			// unless the served name itself starts like one.
			if KeyInNamespace(key, outer) && !IsPageHash(strings.ReplaceAll(served, "/", "-")[:min(len(served), pageHashHexLen)]) {
				t.Fatalf("key %q of namespace %q is also in the outer namespace %q", key, prefix, outer)
			}
		}
	})
}
