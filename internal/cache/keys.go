package cache

import (
	"slices"
	"strconv"
	"strings"
)

// Mooncake key schema (as of SGLang 0.5.23, mooncake_store.py).
//
// One L3 object holds one page of one pool (for one rank, if the pool is
// rank-sharded). Its key is
//
//	[{extra_backend_tag}_][{served model name, "/" → "-"}_]{page hash}{suffix}
//
// where the page hash is the 64-hex-digit SHA-256 chain over the previous
// page hash and the page's token ids, and the suffix names the pool, and for
// rank-sharded pools the attention-TP rank. Under pipeline parallelism the PP
// rank joins the rank tag: rank-sharded pools use "{tp}_{pp}" where they
// would use "{tp}", replicated pools use "{pp}" where they would use "".
//
//	pool           rank-sharded (MHA host pool)        replicated (MLA/DSV4 host pool)
//	kv             _{tp}_k, _{tp}_v                     __k
//	swa            _{tp}_swa_k, _{tp}_swa_v             __swa
//	mamba          _{tp}_temporal, _{tp}_conv_{i}       (always rank-sharded)
//	indexer        –                                    __indexer
//	deepseek_v4_*  –                                    __deepseek_v4_c4, ...
//	draft          _{tp}_draft_k, _{tp}_draft_v         __draft_k
//	draft_swa      _{tp}_draft_swa_k, _{tp}_draft_swa_v __draft_swa
//	draft_indexer  –                                    __draft_indexer
//
// (With PP, e.g. MHA kv is _{tp}_{pp}_k and MLA kv is _{pp}_k.)

// pageHashHexLen is the length of a SHA-256 page hash in hex.
const pageHashHexLen = 64

// NamespacePrefix returns the key prefix SGLang puts in front of every page
// hash: "{tag}_{served}_" where tag is Mooncake's extra_backend_tag (kept
// verbatim) and served is the served model name with every "/" replaced by
// "-". Either part may be empty: an empty tag gives "{served}_", an empty
// served name gives "{tag}_", and both empty give "" (keys are then bare
// page hashes with suffixes, shared by every deployment on the store).
//
// Pass the effective served model name: SGLang defaults it to --model-path,
// and appends "-unified-token-major" when the host pool is the unified
// token-major pool. (With decode context parallelism SGLang adds a
// topology part to the prefix, which this function does not model.)
func NamespacePrefix(tag, servedModelName string) string {
	var b strings.Builder
	if tag != "" {
		b.WriteString(tag)
		b.WriteByte('_')
	}
	if servedModelName != "" {
		b.WriteString(strings.ReplaceAll(servedModelName, "/", "-"))
		b.WriteByte('_')
	}
	return b.String()
}

// KeyInNamespace reports whether key is a page object of the namespace whose
// prefix is prefix (from NamespacePrefix): the prefix must be followed by a
// 64-hex-digit page hash and a suffix starting with "_". This keeps nested
// prefixes apart: keys of "hc-1_llama_" are not in the namespace "hc-1_".
func KeyInNamespace(key, prefix string) bool {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) <= pageHashHexLen {
		return false
	}
	if !isLowerHex(rest[:pageHashHexLen]) {
		return false
	}
	return rest[pageHashHexLen] == '_'
}

// IsPageHash reports whether s is a 64-digit lowercase hexadecimal page hash.
func IsPageHash(s string) bool { return len(s) == pageHashHexLen && isLowerHex(s) }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SuffixInput selects one pool object family of one rank.
type SuffixInput struct {
	Pool     PoolName
	Sharding Sharding
	// TPRank is the attention-TP rank; PPRank the pipeline stage.
	TPRank int
	PPRank int
	// PipelineParallel is the PP size; above 1 the PP rank joins the rank tag.
	PipelineParallel int
	// MambaConvBuffers is the number of _conv_{i} objects of a mamba page.
	MambaConvBuffers int
}

// KeySuffixes returns the key suffixes of one page of one pool for one rank,
// following the table in this file's comment.
func KeySuffixes(in SuffixInput) []string {
	var w suffixWriter
	w.write(in)
	return w.cut()
}

// suffixWriter writes key suffixes one after the other into one buffer, remembering where each
// ends, and cuts them out of one string: a plan's thousands of suffixes cost two allocations.
type suffixWriter struct {
	b    []byte
	ends []int
}

// write appends the suffixes of in, following the table in this file's comment.
func (w *suffixWriter) write(in SuffixInput) {
	if in.Pool == PoolMamba {
		w.start(in, true)
		w.end("_temporal", "")
		for i := 0; i < in.MambaConvBuffers; i++ {
			w.start(in, true)
			w.b = append(w.b, "_conv_"...)
			w.b = strconv.AppendInt(w.b, int64(i), 10)
			w.ends = append(w.ends, len(w.b))
		}
		return
	}
	sharded := in.Sharding == RankSharded
	switch in.Pool {
	case PoolKV:
		w.one(in, sharded, "k", "")
		if sharded {
			w.one(in, sharded, "v", "")
		}
	case PoolSWA, PoolDraftSWA:
		if sharded {
			w.one(in, sharded, string(in.Pool), "_k")
			w.one(in, sharded, string(in.Pool), "_v")
		} else {
			w.one(in, sharded, string(in.Pool), "")
		}
	case PoolDraft:
		w.one(in, sharded, "draft_k", "")
		if sharded {
			w.one(in, sharded, "draft_v", "")
		}
	default:
		w.one(in, sharded, string(in.Pool), "")
	}
}

// one appends one suffix of a pool other than mamba: "_", the rank tag, "_", name and tail.
func (w *suffixWriter) one(in SuffixInput, sharded bool, name, tail string) {
	w.start(in, sharded)
	w.b = append(w.b, '_')
	w.end(name, tail)
}

// start appends "_" and the rank tag: "{tp}" or "{tp}_{pp}" for a rank-sharded pool, "" or
// "{pp}" for a replicated one.
func (w *suffixWriter) start(in SuffixInput, sharded bool) {
	w.b = append(w.b, '_')
	switch {
	case sharded:
		w.b = strconv.AppendInt(w.b, int64(in.TPRank), 10)
		if in.PipelineParallel > 1 {
			w.b = append(w.b, '_')
			w.b = strconv.AppendInt(w.b, int64(in.PPRank), 10)
		}
	case in.PipelineParallel > 1:
		w.b = strconv.AppendInt(w.b, int64(in.PPRank), 10)
	}
}

// end appends name and tail and ends a suffix there.
func (w *suffixWriter) end(name, tail string) {
	w.b = append(w.b, name...)
	w.b = append(w.b, tail...)
	w.ends = append(w.ends, len(w.b))
}

// cut returns every suffix written, in order.
func (w *suffixWriter) cut() []string {
	s := string(w.b)
	out := make([]string, len(w.ends))
	from := 0
	for i, e := range w.ends {
		out[i] = s[from:e]
		from = e
	}
	return out
}

// KeysForPage returns, sorted and without duplicates, every key the plan
// writes for one page: prefix + pageHashHex + suffix over every rank's write
// duties. Attention-DP groups and replicas write the same replicated keys;
// they appear once. Use it to check a flush or a backup against the keys a
// Mooncake master lists.
func KeysForPage(plan RankPlan, prefix, pageHashHex string) []string {
	seen := make(map[string]struct{})
	var out []string
	for _, r := range plan.Ranks() {
		for _, w := range r.Writes {
			for _, s := range w.KeySuffixes {
				k := prefix + pageHashHex + s
				if _, ok := seen[k]; ok {
					continue
				}
				seen[k] = struct{}{}
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}
