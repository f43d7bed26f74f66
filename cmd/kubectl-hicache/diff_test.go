package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
)

func TestDiff(t *testing.T) {
	type wantFn func(oldNS, newNS string) []string
	cases := map[string]struct {
		old, new *hicachev1alpha1.HiCacheDeployment
		kind     cache.ChangeKind
		// contains are strings the table output must hold, given the two namespaces.
		contains wantFn
	}{
		"draft none to DSPARK on DeepSeekV4 is breaking": {
			old:  edit(t, "deepseek_v4").NoDraft().Obj(),
			new:  edit(t, "deepseek_v4").Obj(),
			kind: cache.Breaking,
			contains: func(o, n string) []string {
				return []string{"packed draft layers 0 → 3 (none → DSPARK)", o + " → " + n,
					fmt.Sprintf("moves writers to namespace %s and flushes %s once nothing uses it", n, o)}
			},
		},
		"KV dtype with a manual flush policy records the old namespace": {
			old:  edit(t, "qwen3").FlushPolicy(hicachev1alpha1.FlushManual).Obj(),
			new:  edit(t, "qwen3").FlushPolicy(hicachev1alpha1.FlushManual).KVCacheDType("fp8_e4m3").Obj(),
			kind: cache.Breaking,
			contains: func(o, n string) []string {
				return []string{"KV cache dtype", fmt.Sprintf("records %s as stale for a manual flush", o)}
			},
		},
		"replicas is neutral": {
			old:  edit(t, "deepseek_v4").Obj(),
			new:  edit(t, "deepseek_v4").Replicas(4).Obj(),
			kind: cache.Neutral,
			contains: func(o, n string) []string {
				return []string{"replicas 1 → 4", "nothing to flush", n + " (unchanged)"}
			},
		},
		"page size is compatible": {
			old:  edit(t, "deepseek_v4").Obj(),
			new:  edit(t, "deepseek_v4").PageSize(128).Obj(),
			kind: cache.Compatible,
			contains: func(o, n string) []string {
				return []string{"page size 64 → 128", "new keys, nothing flushed"}
			},
		},
		"--dtype float16 in extra args is breaking, naming the flag": {
			old:  edit(t, "qwen3").Obj(),
			new:  edit(t, "qwen3").ExtraArgs("--dtype", "float16").Obj(),
			kind: cache.Breaking,
			contains: func(o, n string) []string {
				return []string{"extra arg --dtype auto → float16", o + " → " + n,
					fmt.Sprintf("moves writers to namespace %s and flushes %s once nothing uses it", n, o)}
			},
		},
		"model overrides in extra args are breaking": {
			old:  edit(t, "qwen3").ExtraArgs("--json-model-override-args", `{"rope_scaling": {"type": "yarn", "factor": 4}}`).Obj(),
			new:  edit(t, "qwen3").ExtraArgs("--json-model-override-args", `{"rope_scaling": {"type": "yarn", "factor": 2}}`).Obj(),
			kind: cache.Breaking,
			contains: func(o, n string) []string {
				return []string{"extra arg --json-model-override-args", `"factor": 4}} → {"rope_scaling"`, o + " → " + n}
			},
		},
		"--log-level in extra args is neutral": {
			old:  edit(t, "qwen3").Obj(),
			new:  edit(t, "qwen3").ExtraArgs("--log-level", "debug").Obj(),
			kind: cache.Neutral,
			contains: func(o, n string) []string {
				return []string{"extra arg --log-level info → debug", "nothing to flush", n + " (unchanged)"}
			},
		},
		"a chat template in extra args changes keys only": {
			old:  edit(t, "qwen3").ExtraArgs("--log-level", "debug").Obj(),
			new:  edit(t, "qwen3").ExtraArgs("--log-level", "debug", "--chat-template", "chatml").Obj(),
			kind: cache.Compatible,
			contains: func(o, n string) []string {
				return []string{"extra arg --chat-template none → chatml (requests hash to other keys", "new keys, nothing flushed"}
			},
		},
		"another claim over the model path is breaking, naming the mount": {
			old:  edit(t, "qwen3").Mount("/data", "qwen3-a").Obj(),
			new:  edit(t, "qwen3").Mount("/data", "qwen3-b").Obj(),
			kind: cache.Breaking,
			contains: func(o, n string) []string {
				return []string{"mount /data", "qwen3-a", "qwen3-b", o + " → " + n}
			},
		},
		"an emptyDir at /tmp is neutral": {
			old:  edit(t, "qwen3").Obj(),
			new:  edit(t, "qwen3").Scratch("/tmp").Obj(),
			kind: cache.Neutral,
			contains: func(o, n string) []string {
				return []string{"nothing to flush", n + " (unchanged)"}
			},
		},
		"a policy left to its default shows the default SGLang runs": {
			old:  edit(t, "qwen3").Obj(),
			new:  edit(t, "qwen3").WritePolicy("write_back").IOBackend("direct").MemLayout("page_first_direct").Obj(),
			kind: cache.Breaking,
			contains: func(o, n string) []string {
				return []string{"write policy write_through → write_back", "io backend kernel → direct"}
			},
		},
		"writing a default out is no change": {
			old:  edit(t, "qwen3").Obj(),
			new:  edit(t, "qwen3").WritePolicy("write_through").IOBackend("kernel").Obj(),
			kind: cache.Neutral,
			contains: func(o, n string) []string {
				return []string{"nothing to flush: the new spec reads and writes the same objects"}
			},
		},
		"a breaking change under the Fixed strategy stops, flushes and starts": {
			old:  edit(t, "qwen3_next").Obj(),
			new:  edit(t, "qwen3_next").MambaSSMDType("bfloat16").Obj(),
			kind: cache.Breaking,
			contains: func(o, n string) []string {
				return []string{"Mamba SSM dtype float32 → bfloat16",
					"stops every writer, flushes namespace qwen3-next, then starts the new generation"}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			oldPath, newPath := writeHCD(t, "old.yaml", tc.old), writeHCD(t, "new.yaml", tc.new)
			oldRes, newRes := resolveHCD(t, tc.old), resolveHCD(t, tc.new)

			table := runPlugin(t, "", "diff", oldPath, newPath).mustSucceed(t).stdout
			if !strings.HasPrefix(table, string(tc.kind)+":") {
				t.Errorf("verdict line is not %s:\n%s", tc.kind, table)
			}
			for _, s := range tc.contains(oldRes.Namespace, newRes.Namespace) {
				if !strings.Contains(table, s) {
					t.Errorf("output lacks %q:\n%s", s, table)
				}
			}

			var rep diffReport
			out := runPlugin(t, "", "diff", oldPath, newPath, "-o", "json").mustSucceed(t).stdout
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("diff -o json is not JSON: %v\n%s", err, out)
			}
			want := cache.Classify(effective(oldRes.Config(tc.old)), effective(newRes.Config(tc.new)))
			if rep.Kind != tc.kind || want.Kind != tc.kind {
				t.Errorf("kind = %s, Classify says %s, want %s", rep.Kind, want.Kind, tc.kind)
			}
			if want.Changes == nil {
				want.Changes = []cache.FactChange{} // diff -o json writes [], not null
			}
			if diff := cmp.Diff(want.Changes, rep.Changes); diff != "" {
				t.Errorf("changes differ from Classify (-classify +diff):\n%s", diff)
			}
			if rep.OldNamespace != oldRes.Namespace || rep.NewNamespace != newRes.Namespace {
				t.Errorf("namespaces %s → %s, resolve gives %s → %s", rep.OldNamespace, rep.NewNamespace, oldRes.Namespace, newRes.Namespace)
			}
		})
	}
}

func TestDiffExitCode(t *testing.T) {
	base := writeHCD(t, "base.yaml", edit(t, "deepseek_v4").Obj())
	breaking := writeHCD(t, "breaking.yaml", edit(t, "deepseek_v4").NoDraft().Obj())
	neutral := writeHCD(t, "neutral.yaml", edit(t, "deepseek_v4").Replicas(2).Obj())
	cases := map[string]struct {
		args []string
		code int
	}{
		"breaking without --exit-code": {args: []string{base, breaking}, code: 0},
		"breaking with --exit-code":    {args: []string{base, breaking, "--exit-code"}, code: exitBreaking},
		"neutral with --exit-code":     {args: []string{base, neutral, "--exit-code"}, code: 0},
		"json breaking with exit code": {args: []string{"-o", "json", "--exit-code", base, breaking}, code: exitBreaking},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := runPlugin(t, "", append([]string{"diff"}, tc.args...)...)
			if res.code != tc.code {
				t.Errorf("exit code %d, want %d; stderr: %s", res.code, tc.code, res.stderr)
			}
			if res.stderr != "" {
				t.Errorf("a verdict is not an error, but stderr says: %s", res.stderr)
			}
			if res.stdout == "" {
				t.Error("no verdict printed")
			}
		})
	}
}

// A refused flag in extra args is an error, not a verdict: its exact spelling is refused by the
// CRD's rule (as kubectl apply would), an abbreviation by resolve, which names the field to use.
func TestDiffRefusesARefusedExtraArg(t *testing.T) {
	old := writeHCD(t, "old.yaml", edit(t, "qwen3").Obj())
	for args, want := range map[string][]string{
		"--kv-cache-dtype=fp8_e4m3": {"spec.template.extraArgs sets --kv-cache-dtype: set spec.hicache.kvCacheDType instead"},
		"--kv-cache-dt fp8_e4m3":    {"spec.template.extraArgs sets --kv-cache-dt (--kv-cache-dtype)", "set spec.hicache.kvCacheDType instead"},
	} {
		bad := writeHCD(t, "new.yaml", edit(t, "qwen3").ExtraArgs(strings.Fields(args)...).Obj())
		res := runPlugin(t, "", "diff", old, bad)
		if res.code != 1 {
			t.Errorf("%s: exit %d, want 1; stdout %q", args, res.code, res.stdout)
		}
		for _, w := range want {
			if !strings.Contains(res.stderr, w) {
				t.Errorf("%s: stderr %q lacks %q", args, res.stderr, w)
			}
		}
	}
}

// One side of a diff may come from standard input, as from "kubectl get hcd NAME -o yaml".
func TestDiffStdin(t *testing.T) {
	old := readHCD(t, sample("qwen3"))
	stdinYAML := mustYAML(t, old)
	newPath := writeHCD(t, "new.yaml", edit(t, "qwen3").PageSize(32).Obj())
	res := runPlugin(t, stdinYAML, "diff", "-", newPath).mustSucceed(t)
	if !strings.HasPrefix(res.stdout, "Compatible:") {
		t.Errorf("got:\n%s", res.stdout)
	}
	if res := runPlugin(t, stdinYAML, "diff", "-", "-"); res.code != 1 || !strings.Contains(res.stderr, "standard input") {
		t.Errorf("diff - -: exit %d, stderr %q", res.code, res.stderr)
	}
}
