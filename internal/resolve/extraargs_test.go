package resolve_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// Extra arguments that change the bytes behind unchanged keys are layout facts: a deployment
// given them writes under its own namespace, never under the one of the same spec without them.
func TestLayoutRelevantExtraArgsMoveTheNamespace(t *testing.T) {
	base := mustResolve(t, makeHCD("a").Profile("Qwen3").TP(4).Obj())
	cases := map[string]struct {
		args []string
		fact string
	}{
		"dtype":             {args: []string{"--dtype", "float16"}, fact: "extra_arg.--dtype=float16"},
		"dtype=value":       {args: []string{"--dtype=bfloat16"}, fact: "extra_arg.--dtype=bfloat16"},
		"model overrides":   {args: []string{"--json-model-override-args", `{"num_hidden_layers": 30}`}, fact: `extra_arg.--json-model-override-args={"num_hidden_layers": 30}`},
		"attention backend": {args: []string{"--attention-backend", "triton"}, fact: "extra_arg.--attention-backend=triton"},
		"load format":       {args: []string{"--load-format", "dummy"}, fact: "extra_arg.--load-format=dummy"},
		"deterministic":     {args: []string{"--enable-deterministic-inference"}, fact: "extra_arg.--enable-deterministic-inference=true"},
		"with neutral ones": {args: []string{"--log-level", "debug", "--dtype", "half"}, fact: "extra_arg.--dtype=half"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := mustResolve(t, makeHCD("a").Profile("Qwen3").TP(4).ExtraArgs(tc.args...).Obj())
			if r.Namespace == base.Namespace || r.Fingerprint == base.Fingerprint {
				t.Errorf("extraArgs %q keep namespace %s: two layouts would share its keys", tc.args, r.Namespace)
			}
			if !slices.Contains(r.FactList(), tc.fact) {
				t.Errorf("layout facts %q lack %q", r.FactList(), tc.fact)
			}
		})
	}
}

// Extra arguments that change neither bytes nor layout (or only the keys by themselves) keep the
// fingerprint of the same spec without them, so existing namespaces stay in use.
func TestOtherExtraArgsKeepTheFingerprint(t *testing.T) {
	base := mustResolve(t, makeHCD("a").Profile("Qwen3").TP(4).Obj())
	for name, args := range map[string][]string{
		"log level":               {"--log-level", "debug"},
		"memory fraction":         {"--mem-fraction-static", "0.85"},
		"chat template (keys)":    {"--chat-template", "chatml"},
		"dtype at its default":    {"--dtype", "auto"},
		"expert parallel":         {"--ep-size", "4"},
		"deterministic seed only": {"--random-seed", "7"},
	} {
		t.Run(name, func(t *testing.T) {
			r := mustResolve(t, makeHCD("a").Profile("Qwen3").TP(4).ExtraArgs(args...).Obj())
			if r.Fingerprint != base.Fingerprint {
				t.Errorf("extraArgs %q changed the fingerprint: facts %q, want %q", args, r.FactList(), base.FactList())
			}
		})
	}
}

// Flags the spec owns, or the cache cannot stay correct with, fail at resolve with a sentence
// naming spec.template.extraArgs and the field to use: the controller shows it as a condition
// and an Event and creates nothing, and kubectl hicache plan/diff print it.
func TestRefusedExtraArgsFailAtResolve(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
	}{
		"kv dtype":                   {args: []string{"--kv-cache-dtype", "fp8_e4m3"}, want: []string{"spec.template.extraArgs sets --kv-cache-dtype", "set spec.hicache.kvCacheDType instead"}},
		"kv dtype=value":             {args: []string{"--kv-cache-dtype=fp8_e4m3"}, want: []string{"set spec.hicache.kvCacheDType instead"}},
		"mamba dtype":                {args: []string{"--mamba-ssm-dtype", "bfloat16"}, want: []string{"set spec.hicache.mambaSSMDType instead"}},
		"served name":                {args: []string{"--served-model-name", "other"}, want: []string{"set spec.model.servedName instead"}},
		"revision":                   {args: []string{"--revision", "abc"}, want: []string{"set spec.model.revision instead"}},
		"draft kv dtype":             {args: []string{"--speculative-draft-kv-cache-dtype", "fp8_e4m3"}, want: []string{"set spec.topology.draft.kvCacheDType instead"}},
		"an abbreviation":            {args: []string{"--kv-cache-dt", "fp8_e4m3"}, want: []string{"--kv-cache-dt (--kv-cache-dtype)"}},
		"extra config":               {args: []string{"--hicache-storage-backend-extra-config", `{"extra_backend_tag": "x"}`}, want: []string{"extra_backend_tag", "set spec.storage instead"}},
		"context parallel":           {args: []string{"--dcp-size", "2"}, want: []string{"sets --dcp-size", "remove it"}},
		"prefill context parallel":   {args: []string{"--enable-prefill-cp"}, want: []string{"sets --enable-prefill-cp", "context parallelism", "remove it"}},
		"DWDP turns on attention DP": {args: []string{"--dwdp-size", "8"}, want: []string{"sets --dwdp-size", "attention data parallelism", "remove it"}},
		"an unknown flag":            {args: []string{"--turbo"}, want: []string{"spec.template.extraArgs: ", "unknown flag --turbo"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := resolve.Resolve(makeHCD("a").Profile("Qwen3").TP(4).ExtraArgs(tc.args...).Obj())
			var fe *resolve.FieldError
			if !errors.As(err, &fe) || fe.Field != "spec.template.extraArgs" {
				t.Fatalf("Resolve returned %v; want a FieldError on spec.template.extraArgs", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if strings.HasPrefix(err.Error(), "spec.template.extraArgs: spec.template.extraArgs") {
				t.Errorf("the field is named twice: %v", err)
			}
		})
	}
}

// hc-<hash> names are the operator's LayoutHash namespaces; a Fixed deployment may not take one
// (another deployment may be writing there under its layout), nor anything else under hc-.
func TestFixedNamespacesMayNotLookLikeLayoutHashNames(t *testing.T) {
	other := mustResolve(t, makeHCD("b").Profile("Qwen3").TP(4).Storage("m").Obj())
	for _, ns := range []string{other.Namespace, "hc-0123456789", "hc-mine"} {
		_, err := resolve.Resolve(makeHCD("a").Profile("Qwen3").TP(4).Storage("m").Fixed(ns).Obj())
		var fe *resolve.FieldError
		if !errors.As(err, &fe) || fe.Field != "spec.storage.namespace" || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("Fixed namespace %s: %v; want a FieldError on spec.storage.namespace saying hc- is reserved", ns, err)
		}
	}
	for _, ns := range []string{"hc", "qwen3-hc-1", "hcx-1"} {
		if _, err := resolve.Resolve(makeHCD("a").Profile("Qwen3").TP(4).Storage("m").Fixed(ns).Obj()); err != nil {
			t.Errorf("Fixed namespace %s refused: %v", ns, err)
		}
	}
}
