package main

import (
	"testing"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// What the stand-in reports is what its command line says, typed as the release's parser types
// it, over the release's defaults: the router registers a prefill or decode server by it.
func TestServerArgsFollowTheCommandLine(t *testing.T) {
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	occ, err := spec.Parse([]string{"--model-path", "deepseek-ai/DeepSeek-V4", "--tp-size", "8", "--disaggregation-mode", "prefill",
		"--disaggregation-bootstrap-port", "9100", "--enable-hierarchical-cache", "--hicache-ratio", "2.5"})
	if err != nil {
		t.Fatal(err)
	}
	args := serverArgs(spec, occ)
	for k, want := range map[string]any{
		"model_path": "deepseek-ai/DeepSeek-V4", "served_model_name": "deepseek-ai/DeepSeek-V4", "tp_size": int64(8),
		"disaggregation_mode": "prefill", "disaggregation_bootstrap_port": int64(9100), "enable_hierarchical_cache": true,
		"hicache_ratio": 2.5,
	} {
		if args[k] != want {
			t.Errorf("%s = %#v, want %#v", k, args[k], want)
		}
	}
	// A default the release states, for an argument not on the command line.
	if args["dp_size"] != float64(1) {
		t.Errorf("dp_size = %#v, want the release's default 1", args["dp_size"])
	}
	info := serverInfo(args, []string{"--model-path", "deepseek-ai/DeepSeek-V4", "--admin-api-key", "k"}, spec.Version())
	if info["version"] != spec.Version() || info["tp_size"] != int64(8) {
		t.Errorf("server_info %v", info)
	}
	// The release reports the command line as given, and every scheduler's arguments.
	if info["launch_command"] != "--model-path deepseek-ai/DeepSeek-V4 --admin-api-key k" {
		t.Errorf("launch_command %q", info["launch_command"])
	}
	if st, ok := info["internal_states"].([]any); !ok || len(st) != 1 || st[0].(map[string]any)["tp_size"] != int64(8) {
		t.Errorf("internal_states %v", info["internal_states"])
	}
	if m := modelInfo(args); m["disaggregation_mode"] != "prefill" || m["is_generation"] != true || m["tokenizer_path"] != "deepseek-ai/DeepSeek-V4" {
		t.Errorf("model_info %v", m)
	}
	list := models(args, 1)["data"].([]map[string]any)
	if len(list) != 1 || list[0]["id"] != "deepseek-ai/DeepSeek-V4" || list[0]["owned_by"] != "sglang" {
		t.Errorf("/v1/models %v", list)
	}

	occ, err = spec.Parse([]string{"--model-path", "m", "--served-model-name", "qwen3"})
	if err != nil {
		t.Fatal(err)
	}
	if got := serverArgs(spec, occ)["served_model_name"]; got != "qwen3" {
		t.Errorf("served_model_name = %v, want the one given", got)
	}
}

// The start-up line holds every argument, the keys in clear, as the release's does.
func TestServerArgsLogLine(t *testing.T) {
	got := serverArgsLogLine(map[string]any{"admin_api_key": "k'1", "tp_size": float64(8), "x": nil, "on": true, "l": []any{"a", 1.5}})
	want := `server_args={'admin_api_key': 'k\'1', 'l': ['a', 1.5], 'on': True, 'tp_size': 8, 'x': None}`
	if got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
}
