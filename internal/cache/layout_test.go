package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestFacts(t *testing.T) {
	base := Settings{ModelPath: "org/model", SGLangVersion: "0.5.20"}
	cases := map[string]struct {
		topo     *topoBuilder
		settings Settings
		want     LayoutFacts
	}{
		"pure MLA: no tp_size": {
			topo: mk("DeepSeekV32").TP(8), settings: base,
			want: LayoutFacts{"model": "org/model", "attention": "MLA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "sglang_version_line": "0.5.20"},
		},
		"DSV4 DSpark: packed layers 3, still no tp_size": {
			topo: mk("DeepSeekV4").TP(8).Draft(DraftDSPARK), settings: base,
			want: LayoutFacts{
				"model": "org/model", "attention": "DSV4", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "sglang_version_line": "0.5.20",
				"draft.algorithm": "DSPARK", "draft.placement": "Packed", "draft.packed_layers": "3", "draft.kv_cache_dtype": "auto", "draft.model": "org/dspark-draft",
			},
		},
		"NEXTN is recorded as EAGLE, its alias": {
			topo: mk("DeepSeekV4").TP(8).Draft(DraftNEXTN), settings: base,
			want: LayoutFacts{
				"model": "org/model", "attention": "DSV4", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "sglang_version_line": "0.5.20",
				"draft.algorithm": "EAGLE", "draft.placement": "Packed", "draft.packed_layers": "1", "draft.kv_cache_dtype": "auto", "draft.model": "org/nextn-draft",
			},
		},
		"MHA: tp_size is a fact": {
			topo: mk("Qwen3").TP(8), settings: Settings{ModelPath: "Qwen/Qwen3-32B/", KVCacheDType: "fp8_e4m3", Quantization: "none"},
			want: LayoutFacts{"model": "Qwen/Qwen3-32B", "attention": "MHA", "kv_cache_dtype": "fp8_e4m3", "hicache_mem_layout": "page_first", "pp_size": "1", "tp_size": "8"},
		},
		"MHA with DP attention: tp_size is the attention-TP size": {
			topo: mk("Qwen3").TP(8).DP(2).DPAttention(), settings: Settings{},
			want: LayoutFacts{"attention": "MHA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "tp_size": "4"},
		},
		"hybrid MLA: mamba makes tp_size a fact, and the SSM dtype": {
			topo: mk("KimiK3").TP(16).PP(2), settings: Settings{MambaSSMDType: "float32", ContextParallel: 8},
			want: LayoutFacts{"attention": "HybridMambaMLA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "2", "tp_size": "16", "mamba_ssm_dtype": "float32", "context_parallel": "8"},
		},
		"MLA target with MHA sidecar draft: tp_size is a fact": {
			topo: mk("DeepSeekV3").TP(8).Draft(DraftEAGLE3), settings: Settings{DraftKVCacheDType: "bf16"},
			want: LayoutFacts{
				"attention": "MLA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "tp_size": "8",
				"draft.algorithm": "EAGLE3", "draft.placement": "Sidecar", "draft.host_pool": "MHA", "draft.kv_cache_dtype": "bf16", "draft.model": "org/eagle3-draft",
			},
		},
		"packed EAGLE: the steps the spec sets are a fact (a multi-layer EAGLE packs one runner per step)": {
			topo: mk("DeepSeekV4").TP(8).Draft(DraftEAGLE), settings: Settings{DraftNumSteps: 3, DraftNumDraftTokens: 4},
			want: LayoutFacts{
				"attention": "DSV4", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1",
				"draft.algorithm": "EAGLE", "draft.placement": "Packed", "draft.packed_layers": "1", "draft.kv_cache_dtype": "auto", "draft.model": "org/eagle-draft",
				"draft.num_steps": "3",
			},
		},
		"packed DSpark: steps, draft tokens and block size are no facts": {
			topo: mk("DeepSeekV4").TP(8).Draft(DraftDSPARK), settings: Settings{DraftNumSteps: 5, DraftNumDraftTokens: 8, DraftDSparkBlockSize: 7},
			want: LayoutFacts{
				"attention": "DSV4", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1",
				"draft.algorithm": "DSPARK", "draft.placement": "Packed", "draft.packed_layers": "3", "draft.kv_cache_dtype": "auto", "draft.model": "org/dspark-draft",
			},
		},
		"sidecar EAGLE3: the steps are no fact (only the first runner is registered)": {
			topo: mk("DeepSeekV3").TP(8).Draft(DraftEAGLE3), settings: Settings{DraftNumSteps: 5, DraftNumDraftTokens: 6},
			want: LayoutFacts{
				"attention": "MLA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "tp_size": "8",
				"draft.algorithm": "EAGLE3", "draft.placement": "Sidecar", "draft.host_pool": "MHA", "draft.kv_cache_dtype": "auto", "draft.model": "org/eagle3-draft",
			},
		},
		"no draft: a stray step count is no fact": {
			topo: mk("Qwen3").TP(1), settings: Settings{DraftNumSteps: 3},
			want: LayoutFacts{"attention": "MHA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "tp_size": "1"},
		},
		"NGRAM keeps no KV: no draft facts": {
			topo: mk("Llama3").TP(1).Draft(DraftNGRAM), settings: Settings{},
			want: LayoutFacts{"attention": "MHA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "tp_size": "1"},
		},
		"tp_lcm_size with page_head: kv shards are in lcm space": {
			topo: mk("Qwen3").TP(4), settings: Settings{HostMemLayout: "page_head", TPLCMSize: 8},
			want: LayoutFacts{"attention": "MHA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_head", "pp_size": "1", "tp_lcm_size": "8"},
		},
		"tp_lcm_size without page_head: tp_size stays": {
			topo: mk("Qwen3").TP(4), settings: Settings{TPLCMSize: 8},
			want: LayoutFacts{"attention": "MHA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "tp_size": "4", "tp_lcm_size": "8"},
		},
		"revision and quantization": {
			topo: mk("GLM5").TP(8), settings: Settings{ModelPath: "zai/GLM-5", Revision: "abc123", Quantization: "FP8", SGLangVersion: "0.5.21"},
			want: LayoutFacts{"model": "zai/GLM-5", "model.revision": "abc123", "quantization": "fp8", "attention": "MLA", "kv_cache_dtype": "auto", "hicache_mem_layout": "page_first", "pp_size": "1", "sglang_version_line": "0.5.21"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Facts(tc.topo.Obj(t), tc.settings)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Facts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFactsIgnoreKeyAndNeutralSettings(t *testing.T) {
	topo := mk("DeepSeekV32").TP(8).Obj(t)
	a := Settings{ModelPath: "m", PageSize: 64, ServedModelName: "a", HiCacheRatio: 2, WritePolicy: "write_through"}
	b := Settings{ModelPath: "m", PageSize: 256, ServedModelName: "b", HiCacheSizeGB: 100, WritePolicy: "write_back", PrefetchPolicy: "timeout", IOBackend: "direct", HostMemoryMode: "buffer_only"}
	if diff := cmp.Diff(Facts(topo, a), Facts(topo, b)); diff != "" {
		t.Errorf("page size, served name and neutral settings changed the facts (-a +b):\n%s", diff)
	}
	// A TP change of a pure MLA model keeps the fingerprint.
	if Namespace(Facts(topo, a)) != Namespace(Facts(mk("DeepSeekV32").TP(16).Obj(t), a)) {
		t.Error("TP 8 → 16 of a pure MLA model changed the namespace")
	}
	// Defaults are the same as their spelled-out values.
	if Namespace(Facts(topo, Settings{})) != Namespace(Facts(topo, Settings{KVCacheDType: "auto", HostMemLayout: "page_first"})) {
		t.Error("explicit default dtype/layout changed the namespace")
	}
}

func TestCanonicalEncoding(t *testing.T) {
	f := LayoutFacts{"b": "x\ny", "a": `c:\d`, "c": "1=2"}
	want := "hicache-layout/v1\na=c:\\\\d\nb=x\\ny\nc=1=2\n"
	if got := f.Canonical(); got != want {
		t.Fatalf("Canonical() = %q, want %q", got, want)
	}
	sum := sha256.Sum256([]byte(want))
	if got := f.Fingerprint(); got != hex.EncodeToString(sum[:]) {
		t.Errorf("Fingerprint() = %s, want the SHA-256 of the canonical text", got)
	}
	// Building the same facts in another order gives the same hash.
	g := LayoutFacts{}
	for _, k := range []string{"c", "a", "b"} {
		g[k] = f[k]
	}
	if g.Fingerprint() != f.Fingerprint() {
		t.Error("fingerprint depends on insertion order")
	}
	// A value with a newline cannot forge another fact.
	forged := LayoutFacts{"a": "1\nb=2"}
	honest := LayoutFacts{"a": "1", "b": "2"}
	if forged.Fingerprint() == honest.Fingerprint() {
		t.Error("a newline in a value collides with two facts")
	}
}

var namespaceRE = regexp.MustCompile(`^hc-[0-9a-f]{10}$`)
var dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func goldenConfigs(t testing.TB) map[string]Config {
	v := Settings{SGLangVersion: "0.5.20"}
	with := func(s Settings, model string) Settings { s.ModelPath = model; return s }
	return map[string]Config{
		"deepseek-v4-tp8-none":     {Topology: mk("DeepSeekV4").TP(8).Obj(t), Settings: with(v, "deepseek-ai/DeepSeek-V4")},
		"deepseek-v4-tp8-nextn":    {Topology: mk("DeepSeekV4").TP(8).Draft(DraftNEXTN).Obj(t), Settings: with(v, "deepseek-ai/DeepSeek-V4")},
		"deepseek-v4-tp8-dspark":   {Topology: mk("DeepSeekV4").TP(8).Draft(DraftDSPARK).Obj(t), Settings: with(v, "deepseek-ai/DeepSeek-V4")},
		"deepseek-v32-tp8-fp8":     {Topology: mk("DeepSeekV32").TP(8).Obj(t), Settings: Settings{ModelPath: "deepseek-ai/DeepSeek-V3.2", KVCacheDType: "fp8_e4m3", SGLangVersion: "0.5.20"}},
		"kimi-k3-tp16-pp2":         {Topology: mk("KimiK3").TP(16).PP(2).Obj(t), Settings: with(v, "moonshotai/Kimi-K3")},
		"qwen3-tp4-page-head-lcm8": {Topology: mk("Qwen3").TP(4).Obj(t), Settings: Settings{ModelPath: "Qwen/Qwen3-32B", HostMemLayout: "page_head", TPLCMSize: 8}},
		"llama3-tp8-eagle3":        {Topology: mk("Llama3").TP(8).Draft(DraftEAGLE3).Obj(t), Settings: with(v, "meta-llama/Llama-3.3-70B-Instruct")},
		"empty":                    {},
	}
}

type goldenFingerprint struct {
	Canonical   string `json:"canonical"`
	Fingerprint string `json:"fingerprint"`
	Namespace   string `json:"namespace"`
}

// TestGoldenFingerprints pins the fingerprint of fixed configs: any change
// of the encoding or of the facts shows up here. Run with -update to accept.
func TestGoldenFingerprints(t *testing.T) {
	got := map[string]goldenFingerprint{}
	for name, c := range goldenConfigs(t) {
		f := Facts(c.Topology, c.Settings)
		got[name] = goldenFingerprint{Canonical: f.Canonical(), Fingerprint: f.Fingerprint(), Namespace: Namespace(f)}
		if ns := Namespace(f); !namespaceRE.MatchString(ns) || !dnsLabelRE.MatchString(ns) {
			t.Errorf("%s: namespace %q is not hc- + 10 hex digits and a DNS label", name, ns)
		}
	}
	path := filepath.Join("testdata", "fingerprints.golden.json")
	if *update {
		raw, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run go test -run TestGoldenFingerprints -update to create it): %v", path, err)
	}
	var want map[string]goldenFingerprint
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fingerprints changed (-golden +now); if intended, run with -update and say why in the commit:\n%s", diff)
	}
	// Every golden config has its own namespace.
	var seen []string
	for _, g := range got {
		if slices.Contains(seen, g.Namespace) {
			t.Errorf("namespace %s is shared by two golden configs", g.Namespace)
		}
		seen = append(seen, g.Namespace)
	}
}
