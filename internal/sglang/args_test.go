package sglang

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// server is a fluent builder for test configurations.
type server struct{ c ServerConfig }

func model(path string) *server { return &server{c: ServerConfig{ModelPath: path}} }

func (s *server) TP(n int) *server     { s.c.TP = n; return s }
func (s *server) PP(n int) *server     { s.c.PP = n; return s }
func (s *server) DP(n int) *server     { s.c.DP = n; return s }
func (s *server) EP(n int) *server     { s.c.EP = n; return s }
func (s *server) DPAttention() *server { s.c.EnableDPAttention = true; return s }
func (s *server) Name(n string) *server {
	s.c.ServedModelName = n
	return s
}
func (s *server) Nodes(n int) *server {
	s.c.NNodes, s.c.NodeRankEnv, s.c.DistInitAddr = n, "$(NODE_RANK)", "$(LEADER_ADDRESS):20102"
	return s
}
func (s *server) KV(dtype string) *server      { s.c.KVCacheDType = dtype; return s }
func (s *server) Mamba(dtype string) *server   { s.c.MambaSSMDType = dtype; return s }
func (s *server) Quant(q string) *server       { s.c.Quantization = q; return s }
func (s *server) Page(n int) *server           { s.c.PageSize = n; return s }
func (s *server) Spec(sp Speculative) *server  { s.c.Speculative = &sp; return s }
func (s *server) HiCache(h HiCache) *server    { s.c.HiCache = &h; return s }
func (s *server) Extra(args ...string) *server { s.c.ExtraArgs = args; return s }

// Mooncake adds the mooncake backend with a store contributed by each rank.
func (s *server) Mooncake(t *testing.T, m MooncakeConfig) *server {
	t.Helper()
	if s.c.HiCache == nil {
		s.c.HiCache = &HiCache{}
	}
	extra, err := MooncakeExtraConfig(m)
	if err != nil {
		t.Fatalf("MooncakeExtraConfig: %v", err)
	}
	s.c.HiCache.StorageBackend = StorageBackendMooncake
	s.c.HiCache.ExtraConfig = extra
	return s
}
func (s *server) Obj() ServerConfig { return s.c }

func store() MooncakeConfig {
	return MooncakeConfig{MasterServerAddress: "mooncake-master:50051", GlobalSegmentSize: 16 << 30, LocalHostname: "$(POD_IP)"}
}

func loadSpec(t *testing.T) *argspec.Spec {
	t.Helper()
	spec, err := argspec.Load()
	if err != nil {
		t.Fatalf("argspec.Load: %v", err)
	}
	return spec
}

// parsed maps each argparse destination on a command line to its values.
func parsed(t *testing.T, spec *argspec.Spec, args []string) map[string]string {
	t.Helper()
	occ, err := spec.Parse(args)
	if err != nil {
		t.Fatalf("the pinned release refuses %q: %v", args, err)
	}
	out := map[string]string{}
	for _, o := range occ {
		if o.Argument.Deprecated {
			t.Errorf("rendered the deprecated flag %s; use %s", o.Flag, o.Argument.Replacement)
		}
		if len(o.Values) == 0 {
			out[o.Argument.Dest] = "true"
		} else {
			out[o.Argument.Dest] = strings.Join(o.Values, " ")
		}
	}
	return out
}

// TestArgsAreAcceptedByThePinnedRelease renders typical deployments and
// parses each command line, for every node rank, with the release's
// argument table: an unknown flag, a wrong choice or a deprecated flag fails.
func TestArgsAreAcceptedByThePinnedRelease(t *testing.T) {
	spec := loadSpec(t)
	cases := map[string]struct {
		cfg  ServerConfig
		want map[string]string // destinations that must hold these values
	}{
		"MHA TP=1 with host cache only": {
			cfg:  model("meta-llama/Llama-3.1-8B-Instruct").TP(1).HiCache(HiCache{Ratio: 2}).Obj(),
			want: map[string]string{"tp_size": "1", "enable_hierarchical_cache": "true", "hicache_ratio": "2", "hicache_mem_layout": "page_first", "hicache_io_backend": "kernel", "hicache_write_policy": "write_through", "host": "0.0.0.0", "port": "30000"},
		},
		"MHA TP=4 with Mooncake": {
			cfg:  model("Qwen/Qwen3-32B").Name("qwen3").TP(4).HiCache(HiCache{SizeGB: 64}).Mooncake(t, store()).Obj(),
			want: map[string]string{"tp_size": "4", "served_model_name": "qwen3", "hicache_size": "64", "hicache_storage_backend": "mooncake", "hicache_storage_prefetch_policy": "timeout"},
		},
		"MLA TP=8 page_first_direct": {
			cfg:  model("deepseek-ai/DeepSeek-V3").TP(8).HiCache(HiCache{Ratio: 1.5, MemLayout: MemLayoutPageFirstDirect, IOBackend: IOBackendDirect, WritePolicy: WritePolicyWriteBack}).Mooncake(t, store()).Obj(),
			want: map[string]string{"tp_size": "8", "hicache_mem_layout": "page_first_direct", "hicache_io_backend": "direct", "hicache_write_policy": "write_back"},
		},
		"DSV4 TP=16 on 2 nodes with DSpark": {
			cfg: model("deepseek-ai/DeepSeek-V4").TP(16).Nodes(2).Page(64).
				Spec(Speculative{Algorithm: "dspark", DSparkBlockSize: 4}).
				HiCache(HiCache{MemLayout: MemLayoutPageHead, PrefetchPolicy: PrefetchPolicyWaitComplete}).Mooncake(t, store()).Obj(),
			want: map[string]string{"tp_size": "16", "nnodes": "2", "dist_init_addr": "$(LEADER_ADDRESS):20102", "speculative_algorithm": "DSPARK", "speculative_dspark_block_size": "4", "page_size": "64", "hicache_mem_layout": "page_head", "hicache_storage_prefetch_policy": "wait_complete"},
		},
		"Qwen3-Next hybrid": {
			cfg:  model("Qwen/Qwen3-Next-80B-A3B-Instruct").TP(4).Mamba("float32").HiCache(HiCache{Ratio: 3, MemLayout: MemLayoutPageFirstKVSplit}).Mooncake(t, store()).Obj(),
			want: map[string]string{"mamba_ssm_dtype": "float32", "hicache_mem_layout": "page_first_kv_split"},
		},
		"EAGLE3 draft on an MHA target": {
			cfg: model("meta-llama/Llama-3.1-70B-Instruct").TP(4).
				Spec(Speculative{Algorithm: "EAGLE3", DraftModelPath: "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", NumSteps: 3, EagleTopK: 1, NumDraftTokens: 4, DraftKVCacheDType: "fp8_e4m3"}).
				HiCache(HiCache{}).Mooncake(t, store()).Obj(),
			want: map[string]string{"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", "speculative_num_steps": "3", "speculative_eagle_topk": "1", "speculative_num_draft_tokens": "4", "speculative_draft_kv_cache_dtype": "fp8_e4m3"},
		},
		"EAGLE3 MHA draft on an MLA target": {
			cfg:  model("moonshotai/Kimi-K2-Instruct").TP(8).Spec(Speculative{Algorithm: "EAGLE3", DraftModelPath: "org/kimi-eagle3", NumSteps: 3, EagleTopK: 1, NumDraftTokens: 4}).HiCache(HiCache{}).Mooncake(t, store()).Obj(),
			want: map[string]string{"speculative_algorithm": "EAGLE3", "tp_size": "8"},
		},
		"MTP through NEXTN": {
			cfg:  model("deepseek-ai/DeepSeek-R1").TP(8).Spec(Speculative{Algorithm: "NEXTN", NumSteps: 1, EagleTopK: 1, NumDraftTokens: 2}).HiCache(HiCache{}).Obj(),
			want: map[string]string{"speculative_algorithm": "NEXTN"},
		},
		"DP attention with EP": {
			cfg:  model("deepseek-ai/DeepSeek-V3").TP(8).DP(8).DPAttention().EP(8).HiCache(HiCache{}).Mooncake(t, store()).Obj(),
			want: map[string]string{"tp_size": "8", "attn_dp_size": "8", "ep_size": "8"},
		},
		"DP replicas": {
			cfg:  model("Qwen/Qwen3-8B").TP(2).DP(2).Obj(),
			want: map[string]string{"tp_size": "2", "dp_size": "2"},
		},
		"PP=2": {
			cfg:  model("meta-llama/Llama-3.1-405B-Instruct").TP(8).PP(2).Nodes(2).HiCache(HiCache{}).Mooncake(t, store()).Obj(),
			want: map[string]string{"pp_size": "2", "nnodes": "2"},
		},
		"fp8 KV cache with fp8 weights": {
			cfg:  model("Qwen/Qwen3-32B").TP(2).KV("fp8_e4m3").Quant("fp8").HiCache(HiCache{Ratio: 2}).Mooncake(t, store()).Obj(),
			want: map[string]string{"kv_cache_dtype": "fp8_e4m3", "quantization": "fp8"},
		},
		"buffer_only Mooncake staging": {
			cfg:  model("Qwen/Qwen3-32B").TP(4).HiCache(HiCache{HostMemoryMode: HostMemoryModeBufferOnly, Ratio: 1.2}).Mooncake(t, store()).Obj(),
			want: map[string]string{"hicache_host_memory_mode": "buffer_only", "hicache_ratio": "1.2"},
		},
		"file backend best effort with extra args": {
			cfg:  model("Qwen/Qwen3-8B").HiCache(HiCache{StorageBackend: "file", PrefetchPolicy: PrefetchPolicyBestEffort, WritePolicy: WritePolicyWriteThroughSelective}).Extra("--mem-fraction-static", "0.85", "--enable-metrics").Obj(),
			want: map[string]string{"hicache_storage_backend": "file", "hicache_storage_prefetch_policy": "best_effort", "hicache_write_policy": "write_through_selective", "mem_fraction_static": "0.85", "enable_metrics": "true"},
		},
	}
	if len(cases) < 12 {
		t.Fatalf("only %d configurations; keep at least 12", len(cases))
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args, err := Args(tc.cfg)
			if err != nil {
				t.Fatalf("Args: %v", err)
			}
			nodes := max(tc.cfg.NNodes, 1)
			for rank := range nodes {
				expanded := ExpandVarRefs(args, map[string]string{"NODE_RANK": strconv.Itoa(rank)})
				got := parsed(t, spec, expanded)
				if nodes > 1 && got["node_rank"] != strconv.Itoa(rank) {
					t.Errorf("rank %d runs with --node-rank %q", rank, got["node_rank"])
				}
				for dest, want := range tc.want {
					if got[dest] != want {
						t.Errorf("rank %d: %s = %q, want %q", rank, dest, got[dest], want)
					}
				}
			}
			if tc.cfg.HiCache != nil && tc.cfg.HiCache.ExtraConfig != nil {
				checkExtraConfigRoundTrip(t, spec, args, tc.cfg.HiCache.ExtraConfig)
			}
		})
	}
}

// checkExtraConfigRoundTrip reads the rendered extra config back and
// compares it with the map it was rendered from.
func checkExtraConfigRoundTrip(t *testing.T, spec *argspec.Spec, args []string, want map[string]any) {
	t.Helper()
	occ, _ := spec.Parse(ExpandVarRefs(args, map[string]string{"NODE_RANK": "0"}))
	for _, o := range occ {
		if o.Argument.Dest != "hicache_storage_backend_extra_config" {
			continue
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(o.Values[0]), &got); err != nil {
			t.Fatalf("extra config %q is not JSON: %v", o.Values[0], err)
		}
		wantJSON, _ := json.Marshal(want)
		var wantBack map[string]any
		_ = json.Unmarshal(wantJSON, &wantBack)
		if diff := cmp.Diff(wantBack, got); diff != "" {
			t.Errorf("extra config (-want +got):\n%s", diff)
		}
		return
	}
	t.Error("no --hicache-storage-backend-extra-config was rendered")
}

// TestEveryHiCacheCombination renders each host memory mode, layout, I/O
// backend, write policy and prefetch policy of the release with Mooncake:
// combinations the release would silently rewrite are refused, every other
// one renders a command line the release accepts.
func TestEveryHiCacheCombination(t *testing.T) {
	spec := loadSpec(t)
	choices := func(flag string) []string {
		c, ok := spec.Choices(flag)
		if !ok {
			t.Fatalf("%s has no choices", flag)
		}
		return c
	}
	rendered, refused := 0, 0
	for _, mode := range choices("--hicache-host-memory-mode") {
		for _, layout := range choices("--hicache-mem-layout") {
			for _, io := range choices("--hicache-io-backend") {
				for _, write := range choices("--hicache-write-policy") {
					for _, prefetch := range choices("--hicache-storage-prefetch-policy") {
						h := HiCache{HostMemoryMode: mode, MemLayout: layout, IOBackend: io, WritePolicy: write, PrefetchPolicy: prefetch, Ratio: 2}
						cfg := model("m").TP(4).HiCache(h).Mooncake(t, store()).Obj()
						rewritten := (layout == "page_first_direct" && io == "kernel") ||
							(layout == "page_first" && io == "direct") ||
							layout == "layer_first" ||
							(mode == "buffer_only" && write == "write_back")
						args, err := Args(cfg)
						name := fmt.Sprintf("%s/%s/%s/%s/%s", mode, layout, io, write, prefetch)
						switch {
						case rewritten && err == nil:
							t.Errorf("%s: rendered although the release rewrites it: %q", name, args)
						case !rewritten && err != nil:
							t.Errorf("%s: refused: %v", name, err)
						case err == nil:
							rendered++
							got := parsed(t, spec, args)
							for dest, want := range map[string]string{"hicache_host_memory_mode": mode, "hicache_mem_layout": layout, "hicache_io_backend": io, "hicache_write_policy": write, "hicache_storage_prefetch_policy": prefetch} {
								if got[dest] != want {
									t.Errorf("%s: %s = %q", name, dest, got[dest])
								}
							}
						default:
							refused++
						}
					}
				}
			}
		}
	}
	if rendered == 0 || refused == 0 {
		t.Errorf("rendered %d and refused %d combinations; expected both to happen", rendered, refused)
	}
}

func TestArgsRefusesWhatTheServerWouldNotRunAsWritten(t *testing.T) {
	extra := func(kv map[string]any) ServerConfig {
		return model("m").TP(4).HiCache(HiCache{StorageBackend: "mooncake", ExtraConfig: kv}).Obj()
	}
	cases := map[string]struct {
		cfg  ServerConfig
		want []string // fragments the error must contain
	}{
		"no model":               {cfg: ServerConfig{}, want: []string{"ModelPath is empty"}},
		"port out of range":      {cfg: ServerConfig{ModelPath: "m", Port: 70000}, want: []string{"port 70000"}},
		"negative TP":            {cfg: model("m").TP(-1).Obj(), want: []string{"TP is -1"}},
		"ratio and size":         {cfg: model("m").HiCache(HiCache{Ratio: 2, SizeGB: 10}).Obj(), want: []string{"both set"}},
		"ratio not above one":    {cfg: model("m").HiCache(HiCache{Ratio: 0.5}).Obj(), want: []string{"ratio above 1"}},
		"buffer_only alone":      {cfg: model("m").HiCache(HiCache{HostMemoryMode: "buffer_only"}).Obj(), want: []string{"needs a StorageBackend"}},
		"page_first over direct": {cfg: model("m").HiCache(HiCache{IOBackend: "direct"}).Obj(), want: []string{"page_first needs IOBackend kernel"}},
		"layer_first on mooncake": {
			cfg:  model("m").HiCache(HiCache{MemLayout: "layer_first"}).Mooncake(t, store()).Obj(),
			want: []string{"layer_first is not supported with the mooncake storage backend"},
		},
		"extra config without backend": {cfg: model("m").HiCache(HiCache{ExtraConfig: map[string]any{"a": 1}}).Obj(), want: []string{"without a StorageBackend"}},
		"unknown layout": {
			cfg:  model("m").HiCache(HiCache{MemLayout: "page_last"}).Obj(),
			want: []string{"--hicache-mem-layout", `"page_last"`, "page_first_kv_split"},
		},
		"unknown kv dtype":        {cfg: model("m").KV("fp6").Obj(), want: []string{"--kv-cache-dtype", "fp8_e4m3"}},
		"DP attention needs DP":   {cfg: model("m").TP(8).DPAttention().Obj(), want: []string{"needs DP of at least 2"}},
		"DP attention divides TP": {cfg: model("m").TP(8).DP(3).DPAttention().Obj(), want: []string{"TP (8) must be a multiple of DP (3)"}},
		"nodes without rank or address": {
			cfg:  ServerConfig{ModelPath: "m", NNodes: 2},
			want: []string{"NodeRankEnv is empty", "DistInitAddr is empty"},
		},
		"a literal admin key":                {cfg: ServerConfig{ModelPath: "m", AdminAPIKey: "s3cret"}, want: []string{"AdminAPIKey is not a variable reference"}},
		"a literal API key":                  {cfg: ServerConfig{ModelPath: "m", APIKey: "$HICACHE_API_KEY"}, want: []string{"APIKey is not a variable reference"}},
		"rank on one node":                   {cfg: ServerConfig{ModelPath: "m", NodeRankEnv: "$(NODE_RANK)"}, want: []string{"only apply to servers spanning several nodes"}},
		"bad node rank":                      {cfg: ServerConfig{ModelPath: "m", NNodes: 2, NodeRankEnv: "$NODE_RANK", DistInitAddr: "a:1"}, want: []string{"neither a number nor a variable reference"}},
		"address without port":               {cfg: ServerConfig{ModelPath: "m", NNodes: 2, NodeRankEnv: "1", DistInitAddr: "leader"}, want: []string{"is not host:port"}},
		"unknown algorithm":                  {cfg: model("m").Spec(Speculative{Algorithm: "MEDUSA"}).Obj(), want: []string{`"MEDUSA" is not known`, "EAGLE3"}},
		"no algorithm":                       {cfg: model("m").Spec(Speculative{}).Obj(), want: []string{"Algorithm is empty"}},
		"DSpark size on EAGLE":               {cfg: model("m").Spec(Speculative{Algorithm: "EAGLE", DSparkBlockSize: 4}).Obj(), want: []string{"only applies to the DSPARK algorithm"}},
		"bad draft kv dtype":                 {cfg: model("m").Spec(Speculative{Algorithm: "EAGLE3", DraftKVCacheDType: "nvfp4"}).Obj(), want: []string{"--speculative-draft-kv-cache-dtype", `"nvfp4"`}},
		"extra args own the TP":              {cfg: model("m").TP(4).Extra("--tensor-parallel-size=8").Obj(), want: []string{"spec.template.extraArgs sets --tensor-parallel-size (--tp-size)", "set spec.topology.tensorParallel instead"}},
		"extra args abbreviate":              {cfg: model("m").Extra("--hicache-mem-lay", "page_head").Obj(), want: []string{"--hicache-mem-lay (--hicache-mem-layout)", "set spec.hicache.memLayout instead"}},
		"extra args deprecated dp attention": {cfg: model("m").Extra("--enable-dp-attention").Obj(), want: []string{"set spec.topology.dpAttention instead"}},
		"extra args repeat a rendered flag":  {cfg: ServerConfig{ModelPath: "m", TP: 8, EP: 8, ExtraArgs: []string{"--ep-size", "4"}}, want: []string{"sets --ep-size, which the operator already renders from the spec"}},
		"extra args unknown":                 {cfg: model("m").Extra("--turbo").Obj(), want: []string{"spec.template.extraArgs", "unknown flag --turbo"}},
		"prefetch threshold as text": {
			cfg:  extra(map[string]any{"master_server_address": "m:1", "prefetch_threshold": "256"}),
			want: []string{"prefetch_threshold must be a JSON integer"},
		},
		"prefetch threshold as fraction": {
			cfg:  extra(map[string]any{"master_server_address": "m:1", "prefetch_threshold": 2.5}),
			want: []string{"prefetch_threshold must be a JSON integer"},
		},
		"pass prefix keys as text": {
			cfg:  extra(map[string]any{"hicache_storage_pass_prefix_keys": "yes"}),
			want: []string{"hicache_storage_pass_prefix_keys must be a JSON boolean"},
		},
		"tp lcm not a multiple": {
			cfg:  extra(map[string]any{"tp_lcm_size": 6}),
			want: []string{"tp_lcm_size 6 must be a positive multiple of the TP size 4"},
		},
		"extra config not JSON": {
			cfg:  extra(map[string]any{"f": func() {}}),
			want: []string{"cannot be written as JSON"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args, err := Args(tc.cfg)
			if err == nil {
				t.Fatalf("rendered %q, want an error", args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestArgsAcceptValidExtraConfigTypes(t *testing.T) {
	cfg := model("m").TP(4).HiCache(HiCache{StorageBackend: "mooncake", ExtraConfig: map[string]any{
		"master_server_address": "m:50051", "prefetch_threshold": 128, "tp_lcm_size": 8,
		"prefetch_timeout_base": 0.5, "prefetch_timeout_per_ki_token": 1, "hicache_storage_pass_prefix_keys": true,
		"nested": map[string]any{"z": 1, "a": "<&>"},
	}}).Obj()
	args, err := Args(cfg)
	if err != nil {
		t.Fatalf("Args: %v", err)
	}
	want := `{"hicache_storage_pass_prefix_keys":true,"master_server_address":"m:50051","nested":{"a":"<&>","z":1},"prefetch_threshold":128,"prefetch_timeout_base":0.5,"prefetch_timeout_per_ki_token":1,"tp_lcm_size":8}`
	if got := args[len(args)-1]; got != want {
		t.Errorf("extra config\n got %s\nwant %s", got, want)
	}
}

func TestArgsAreDeterministicAndExtraArgsComeLast(t *testing.T) {
	cfg := model("m").TP(2).HiCache(HiCache{}).Mooncake(t, MooncakeConfig{
		MasterServerAddress: "a:1", TenantID: "t", ExtraBackendTag: "x", PrefetchThreshold: 64, TPLCMSize: 4, DeviceName: "mlx5_0",
	}).Extra("--log-level", "debug").Obj()
	first, err := Args(cfg)
	if err != nil {
		t.Fatalf("Args: %v", err)
	}
	for range 20 {
		again, err := Args(cfg)
		if err != nil {
			t.Fatalf("Args: %v", err)
		}
		if diff := cmp.Diff(first, again); diff != "" {
			t.Fatalf("two renders differ:\n%s", diff)
		}
	}
	if got := first[len(first)-2:]; !cmp.Equal(got, []string{"--log-level", "debug"}) {
		t.Errorf("the command line ends with %q, want the extra args", got)
	}
	if first[0] != "--model-path" {
		t.Errorf("the command line starts with %q, want --model-path", first[0])
	}
}

// TestRendererDefaultsMatchTheRelease keeps the defaults the renderer writes
// out equal to the pinned release's, so rendering them changes nothing.
func TestRendererDefaultsMatchTheRelease(t *testing.T) {
	spec := loadSpec(t)
	for flag, ours := range map[string]any{
		"--hicache-host-memory-mode":        HostMemoryModeCache,
		"--hicache-write-policy":            WritePolicyWriteThrough,
		"--hicache-io-backend":              IOBackendKernel,
		"--hicache-mem-layout":              MemLayoutPageFirst,
		"--hicache-storage-prefetch-policy": PrefetchPolicyTimeout,
		"--port":                            DefaultPort,
	} {
		a, ok := spec.Lookup(flag)
		if !ok {
			t.Errorf("%s is unknown to the release", flag)
			continue
		}
		want, _ := json.Marshal(ours)
		if string(a.Default) != string(want) {
			t.Errorf("%s: the release defaults to %s, the renderer to %s", flag, a.Default, want)
		}
	}
}

func TestCommand(t *testing.T) {
	c := Command()
	c[0] = "mutated"
	if Command()[0] != "python3" {
		t.Error("Command returned shared state")
	}
	if got := strings.Join(Command(), " "); got != "python3 -m sglang.launch_server" {
		t.Errorf("Command() = %q", got)
	}
}

func TestExpandVarRefs(t *testing.T) {
	env := map[string]string{"NODE_RANK": "3", "POD_IP": "10.0.0.7"}
	cases := map[string]struct{ in, want string }{
		"whole value":       {"$(NODE_RANK)", "3"},
		"inside a value":    {"$(POD_IP):20102", "10.0.0.7:20102"},
		"undefined is kept": {"$(OTHER)", "$(OTHER)"},
		"escaped dollar":    {"$$(NODE_RANK)", "$(NODE_RANK)"},
		"unterminated":      {"$(NODE_RANK", "$(NODE_RANK"},
		"plain dollar":      {"a$b$", "a$b$"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ExpandVarRefs([]string{tc.in}, env)[0]; got != tc.want {
				t.Errorf("ExpandVarRefs(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestValidationErrorsAreTyped(t *testing.T) {
	_, err := Args(model("m").KV("fp6").Obj())
	var p argspec.Problem
	if !errors.As(err, &p) || p.Kind != argspec.InvalidChoice || p.Flag != "--kv-cache-dtype" {
		t.Errorf("want an InvalidChoice problem for --kv-cache-dtype, got %v", err)
	}
}

// Keys are rendered as the references the kubelet expands, accepted by the pinned release's
// parser, and a literal key is refused without being quoted.
func TestArgsRenderKeysAsReferences(t *testing.T) {
	args, err := Args(ServerConfig{ModelPath: "m", AdminAPIKey: "$(HICACHE_ADMIN_API_KEY)", APIKey: "$(HICACHE_API_KEY)"})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	for _, want := range []string{"--admin-api-key $(HICACHE_ADMIN_API_KEY)", "--api-key $(HICACHE_API_KEY)"} {
		if !strings.Contains(joined, want) {
			t.Errorf("%q lacks %q", joined, want)
		}
	}
	_, err = Args(ServerConfig{ModelPath: "m", AdminAPIKey: "canary-c0ffee"})
	if err == nil || strings.Contains(err.Error(), "canary-c0ffee") {
		t.Errorf("a literal admin key: error %v, want a refusal that does not quote it", err)
	}
}
