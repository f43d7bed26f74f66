package sglang

import (
	"strings"
	"testing"
)

func (s *server) Role(d Disaggregation) *server { s.c.Disaggregation = &d; return s }

// TestDisaggregatedRolesAreAcceptedByThePinnedRelease renders both roles of prefill/decode
// deployments and parses them with the release's argument table.
func TestDisaggregatedRolesAreAcceptedByThePinnedRelease(t *testing.T) {
	spec := loadSpec(t)
	dsv4 := func() *server { return model("deepseek-ai/DeepSeek-V4").Page(64) }
	for name, tc := range map[string]struct {
		cfg    ServerConfig
		want   map[string]string // destinations that must hold these values
		absent []string          // destinations that must not be set
	}{
		"DSV4 prefill TP 8 with Mooncake L3": {
			cfg:  dsv4().TP(8).Role(Disaggregation{Mode: DisaggregationPrefill, TransferBackend: "mooncake", BootstrapPort: 8998, IBDevice: "mlx5_0,mlx5_1"}).HiCache(HiCache{}).Mooncake(t, store()).Obj(),
			want: map[string]string{"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "mooncake", "disaggregation_bootstrap_port": "8998", "disaggregation_ib_device": "mlx5_0,mlx5_1", "enable_hierarchical_cache": "true", "hicache_storage_backend": "mooncake"},
		},
		"DSV4 decode TP 16 on 2 nodes without L3": {
			cfg:    dsv4().TP(16).Nodes(2).Role(Disaggregation{Mode: DisaggregationDecode, TransferBackend: "mooncake", BootstrapPort: 8998}).Obj(),
			want:   map[string]string{"disaggregation_mode": "decode", "tp_size": "16", "nnodes": "2", "disaggregation_bootstrap_port": "8998"},
			absent: []string{"enable_hierarchical_cache", "hicache_storage_backend", "disaggregation_decode_enable_radix_cache", "disaggregation_decode_enable_offload_kvcache"},
		},
		"decode with HiCache on the decode radix cache, MTP": {
			cfg:  dsv4().TP(16).Spec(Speculative{Algorithm: "NEXTN"}).Role(Disaggregation{Mode: DisaggregationDecode, DecodeL3: DecodeL3HiCache}).HiCache(HiCache{}).Mooncake(t, store()).Obj(),
			want: map[string]string{"disaggregation_mode": "decode", "enable_hierarchical_cache": "true", "disaggregation_decode_enable_radix_cache": "true", "hicache_storage_backend": "mooncake"},
		},
		"decode offload writes without the hierarchical cache": {
			cfg:    model("Qwen/Qwen3-32B").TP(4).Role(Disaggregation{Mode: DisaggregationDecode, TransferBackend: "mooncake_tcp", DecodeL3: DecodeL3Offload}).HiCache(HiCache{}).Mooncake(t, store()).Obj(),
			want:   map[string]string{"disaggregation_decode_enable_offload_kvcache": "true", "hicache_storage_backend": "mooncake", "hicache_mem_layout": "page_first", "disaggregation_transfer_backend": "mooncake_tcp"},
			absent: []string{"enable_hierarchical_cache", "disaggregation_decode_enable_radix_cache"},
		},
		"prefill with a draft and PP": {
			cfg:  model("deepseek-ai/DeepSeek-V3").TP(8).PP(2).Spec(Speculative{Algorithm: "EAGLE"}).Role(Disaggregation{Mode: DisaggregationPrefill, TransferBackend: "nixl"}).HiCache(HiCache{}).Obj(),
			want: map[string]string{"pp_size": "2", "disaggregation_transfer_backend": "nixl"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			args, err := Args(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range args {
				if a == "$(NODE_RANK)" {
					args[i] = "1"
				}
			}
			got := parsed(t, spec, args)
			for dest, v := range tc.want {
				if got[dest] != v {
					t.Errorf("%s = %q, want %q in %q", dest, got[dest], v, args)
				}
			}
			for _, dest := range tc.absent {
				if v, ok := got[dest]; ok {
					t.Errorf("%s is set (%q), want it absent: %q", dest, v, args)
				}
			}
		})
	}
}

func TestDisaggregationRefusesWhatTheReleaseRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  ServerConfig
		want string
	}{
		"unknown mode":         {cfg: model("m").Role(Disaggregation{Mode: "both"}).Obj(), want: `Disaggregation.Mode "both"`},
		"unknown transfer":     {cfg: model("m").Role(Disaggregation{Mode: DisaggregationPrefill, TransferBackend: "carrier-pigeon"}).Obj(), want: "use one of mooncake, nixl"},
		"fake on prefill":      {cfg: model("m").Role(Disaggregation{Mode: DisaggregationPrefill, TransferBackend: TransferFake}).Obj(), want: "a prefill server refuses it"},
		"bootstrap port":       {cfg: model("m").Role(Disaggregation{Mode: DisaggregationPrefill, BootstrapPort: 70000}).Obj(), want: "BootstrapPort 70000"},
		"decode L3 on prefill": {cfg: model("m").Role(Disaggregation{Mode: DisaggregationPrefill, DecodeL3: DecodeL3HiCache}).HiCache(HiCache{}).Obj(), want: "only applies to decode servers"},
		"decode HiCache without the decode radix cache": {
			cfg: model("m").Role(Disaggregation{Mode: DisaggregationDecode}).HiCache(HiCache{}).Obj(), want: "runs no hierarchical cache"},
		"decode offload without storage": {
			cfg: model("m").Role(Disaggregation{Mode: DisaggregationDecode, DecodeL3: DecodeL3Offload}).HiCache(HiCache{}).Obj(), want: "set HiCache with a StorageBackend"},
		"decode radix cache with STANDALONE": {
			cfg:  model("m").Spec(Speculative{Algorithm: "STANDALONE", DraftModelPath: "d"}).Role(Disaggregation{Mode: DisaggregationDecode, DecodeL3: DecodeL3HiCache}).HiCache(HiCache{}).Obj(),
			want: "refuses with the STANDALONE draft"},
		"decode buffer_only": {
			cfg:  model("m").Role(Disaggregation{Mode: DisaggregationDecode, DecodeL3: DecodeL3HiCache}).HiCache(HiCache{HostMemoryMode: HostMemoryModeBufferOnly}).Mooncake(t, store()).Obj(),
			want: "buffer_only is refused on decode servers"},
		"draft with PP on decode": {
			cfg:  model("m").TP(8).PP(2).Spec(Speculative{Algorithm: "EAGLE"}).Role(Disaggregation{Mode: DisaggregationDecode}).Obj(),
			want: "runs only on prefill servers"},
		"the mode in extra args": {
			cfg:  model("m").Extra("--disaggregation-mode", "decode").Obj(),
			want: "spec.template.extraArgs sets --disaggregation-mode"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Args(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
