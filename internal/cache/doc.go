// Package cache is the operator's embedded model of SGLang's hierarchical
// cache (HiCache) and its L3 store: pure logic, no Kubernetes, no I/O.
//
// A serving group is described by a Topology: the target model's attention
// kind and host pools, the speculative draft, tensor / pipeline / data
// parallel sizes and the storage backend. Built-in profiles (LookupProfile,
// ResolveTopology) fill in the architecture facts of well-known models.
//
// Pools are either rank-replicated (MLA and DeepSeek-V4 pools: identical on
// every attention-TP rank, one L3 object per page) or rank-sharded (MHA kv,
// mamba state, MHA draft pools: one object per page and rank). Plan turns a
// topology into per-rank duties the way SGLang does: on a replicated target
// only attention-TP rank 0 of each pipeline stage and attention-DP group
// backs up the replicated pools; its followers write only their mamba
// shards, and their MHA draft shards on Mooncake. A rank with no duties is
// healthy: CompletedTokens reports the whole operation for it, and reports
// 0 only for a rank whose own writes failed.
//
// L3 keys carry the page hash and the pool/rank suffix, but not the model
// revision, dtypes, layer count (packed draft layers included), TP size of
// replicated pools or the SGLang version; SGLang writes a key only if it is
// missing, and a read succeeds into a larger buffer. A change of any of
// those facts therefore meets stale objects under unchanged keys. Facts
// lists the facts that decide the bytes behind a key; their Fingerprint
// (SHA-256 over a documented canonical encoding, golden-tested) names an L3
// Namespace ("hc-" + 10 hex digits) used as Mooncake's extra_backend_tag, so
// a new layout never reads an old one. Classify tells Breaking changes (a
// fact changed) from Compatible ones (the keys change by themselves: page
// size, served model name, backend) and Neutral ones (replicas, policies,
// a TP change of a purely replicated model).
//
// NamespacePrefix, KeySuffixes, KeyInNamespace and KeysForPage spell the
// Mooncake keys, so flushes and backups can be checked against the keys a
// Mooncake master lists.
package cache
