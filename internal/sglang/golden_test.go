package sglang

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// rendered is what a golden file holds for one configuration.
type rendered struct {
	Command     []string       `json:"command"`
	Args        []string       `json:"args"`
	ExtraConfig map[string]any `json:"extraConfig,omitempty"`
	Env         []EnvVar       `json:"env,omitempty"`
}

func TestGolden(t *testing.T) {
	cases := map[string]struct {
		cfg      ServerConfig
		mooncake *MooncakeConfig
	}{
		"mla-tp8-mooncake": {
			cfg: model("deepseek-ai/DeepSeek-V3").Name("deepseek-v3").TP(8).Page(64).
				HiCache(HiCache{Ratio: 2, MemLayout: MemLayoutPageFirstDirect, IOBackend: IOBackendDirect}).Obj(),
			mooncake: &MooncakeConfig{MasterServerAddress: "hc-mooncake-master.default.svc:50051", GlobalSegmentSize: 32 << 30, Protocol: "rdma", DeviceName: "mlx5_0", LocalHostname: "$(POD_IP)", PrefetchThreshold: 256},
		},
		"dsv4-tp16-2nodes-dspark": {
			cfg: model("deepseek-ai/DeepSeek-V4").TP(16).Nodes(2).
				Spec(Speculative{Algorithm: "DSPARK", DSparkBlockSize: 4}).
				HiCache(HiCache{SizeGB: 200, MemLayout: MemLayoutPageHead}).Extra("--mem-fraction-static", "0.88").Obj(),
			mooncake: &MooncakeConfig{MasterServerAddress: "hc-mooncake-master:50051", TenantID: "prod", TPLCMSize: 16, LocalHostname: "$(POD_IP)"},
		},
		"mha-tp4-eagle3-buffer-only": {
			cfg: model("meta-llama/Llama-3.1-70B-Instruct").TP(4).KV("fp8_e4m3").
				Spec(Speculative{Algorithm: "eagle3", DraftModelPath: "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", NumSteps: 3, EagleTopK: 1, NumDraftTokens: 4}).
				HiCache(HiCache{HostMemoryMode: HostMemoryModeBufferOnly, Ratio: 1.2, PrefetchPolicy: PrefetchPolicyBestEffort}).Obj(),
			mooncake: &MooncakeConfig{MasterServerAddress: "hc-mooncake-master:50051"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := rendered{Command: Command()}
			if tc.mooncake != nil {
				extra, err := MooncakeExtraConfig(*tc.mooncake)
				if err != nil {
					t.Fatalf("MooncakeExtraConfig: %v", err)
				}
				tc.cfg.HiCache.StorageBackend = StorageBackendMooncake
				tc.cfg.HiCache.ExtraConfig = extra
				got.ExtraConfig = extra
				if got.Env, err = Env(*tc.mooncake); err != nil {
					t.Fatalf("Env: %v", err)
				}
			}
			args, err := Args(tc.cfg)
			if err != nil {
				t.Fatalf("Args: %v", err)
			}
			got.Args = args
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(got); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/sglang -run TestGolden -update)", err)
			}
			if diff := cmp.Diff(string(want), buf.String()); diff != "" {
				t.Errorf("%s differs (-want +got), rerun with -update if intended:\n%s", path, diff)
			}
		})
	}
}
