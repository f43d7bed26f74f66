package sglang

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// classificationProblems says what is wrong between a release's argument table and a
// classification, in words that tell how to fix it; "" when every argument has one class.
func classificationProblems(spec *argspec.Spec, rules map[string]ArgRule) string {
	missing, stale := UnclassifiedArgs(spec, rules)
	var b strings.Builder
	if len(missing) > 0 {
		fmt.Fprintf(&b, "sglang %s has %d argument(s) that internal/sglang/extra_args.txt does not classify:\n", spec.Version(), len(missing))
		for _, f := range missing {
			fmt.Fprintf(&b, "  %s\n", f)
		}
		b.WriteString(`Add one line for each, decided from what the release does with the flag:
  <flag> layout <reason>            it changes the bytes behind unchanged L3 keys (dtype, model config,
                                    weights, pool shape or byte order): it becomes a layout fact
  <flag> keys <reason>              it changes the keys by itself (token ids, adapter ids), never the bytes
  <flag> refused <field>|- <reason> the spec has a field for it, the operator sets it, or the cache cannot
                                    stay correct with it (the reason completes "..., which <reason>")
  <flag> neutral                    it changes neither (scheduling, kernels, logging, HTTP)
and, for a refused flag, add its spellings to the map of the extraArgs CEL rule (make generate).
`)
	}
	if len(stale) > 0 {
		fmt.Fprintf(&b, "internal/sglang/extra_args.txt classifies %d flag(s) that sglang %s does not have; remove them: %s\n",
			len(stale), spec.Version(), strings.Join(stale, ", "))
	}
	return b.String()
}

// Every argument of the pinned release has exactly one class, and nothing else is classified.
func TestEveryArgumentIsClassified(t *testing.T) {
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := ArgRules()
	if err != nil {
		t.Fatalf("internal/sglang/extra_args.txt: %v", err)
	}
	if msg := classificationProblems(spec, rules); msg != "" {
		t.Error(msg)
	}
	counts := map[ArgClass]int{}
	for _, r := range rules {
		counts[r.Class]++
	}
	t.Logf("sglang %s: %d arguments: %d layout, %d keys, %d refused, %d neutral", spec.Version(), len(spec.Arguments()),
		counts[ArgLayout], counts[ArgKeys], counts[ArgRefused], counts[ArgNeutral])

	// The compatibility page's table says the same counts.
	doc, err := os.ReadFile("../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []ArgClass{ArgLayout, ArgKeys, ArgRefused, ArgNeutral} {
		if row := fmt.Sprintf("| `%s` | %d |", c, counts[c]); !strings.Contains(string(doc), row) {
			t.Errorf("docs/compatibility.md lacks the row %q: update its table of extra-argument classes", row)
		}
	}
}

// A release with an argument nobody classified fails, naming the flag and how to classify it.
func TestANewReleaseWithAnUnclassifiedArgumentFails(t *testing.T) {
	spec, err := argspec.FromJSON([]byte(`{"sglang_version": "0.6.0", "arguments": [
		{"flags": ["--dtype"], "dest": "dtype", "action": "store", "type": "str"},
		{"flags": ["--kv-pack-layers", "--kv-pack"], "dest": "kv_pack_layers", "action": "store", "type": "int"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := ParseArgRules([]byte("--dtype layout sets the model dtype\n--gone neutral\n"))
	if err != nil {
		t.Fatal(err)
	}
	msg := classificationProblems(spec, rules)
	for _, want := range []string{"sglang 0.6.0 has 1 argument(s)", "  --kv-pack-layers\n", "<flag> layout <reason>",
		"<flag> refused <field>|- <reason>", "the extraArgs CEL rule", "classifies 1 flag(s) that sglang 0.6.0 does not have; remove them: --gone"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message lacks %q:\n%s", want, msg)
		}
	}
}

func TestParseArgRules(t *testing.T) {
	good := "# comment\n\n--a layout changes the dtype\n--b refused spec.x.y is rendered from the spec\n--c refused - the operator sets it\n--d neutral\n--e keys changes token ids\n"
	rules, err := ParseArgRules([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ArgRule{
		"--a": {Flag: "--a", Class: ArgLayout, Reason: "changes the dtype"},
		"--b": {Flag: "--b", Class: ArgRefused, Field: "spec.x.y", Reason: "is rendered from the spec"},
		"--c": {Flag: "--c", Class: ArgRefused, Reason: "the operator sets it"},
		"--d": {Flag: "--d", Class: ArgNeutral},
		"--e": {Flag: "--e", Class: ArgKeys, Reason: "changes token ids"},
	}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	bad := map[string]struct{ text, want string }{
		"no class":          {"--a\n", "has no class"},
		"unknown class":     {"--a breaking because\n", `has the class "breaking"`},
		"layout, no reason": {"--a layout\n", "--a layout has no reason"},
		"refused, no field": {"--a refused\n", "names no spec field"},
		"refused, Go field": {"--a refused KVCacheDType because\n", "not a spec field"},
		"refused no reason": {"--a refused spec.a\n", "has no reason"},
		"twice":             {"--a neutral\n--a neutral\n", "classified twice"},
		"not a flag":        {"a neutral\n", "is not a flag"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseArgRules([]byte(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestClassifyExtraArgs(t *testing.T) {
	cases := map[string]struct {
		args []string
		want ExtraArgs
		// refused are substrings of the error, in order of the flags.
		refused []string
	}{
		"dtype is a layout fact":          {args: []string{"--dtype", "float16"}, want: ExtraArgs{Layout: map[string]string{"--dtype": "float16"}}},
		"dtype=value":                     {args: []string{"--dtype=bfloat16"}, want: ExtraArgs{Layout: map[string]string{"--dtype": "bfloat16"}}},
		"the default dtype is no fact":    {args: []string{"--dtype", "auto"}, want: ExtraArgs{}},
		"the last value wins":             {args: []string{"--dtype", "float16", "--dtype", "bfloat16"}, want: ExtraArgs{Layout: map[string]string{"--dtype": "bfloat16"}}},
		"model overrides are a fact":      {args: []string{"--json-model-override-args", `{"num_hidden_layers": 30}`}, want: ExtraArgs{Layout: map[string]string{"--json-model-override-args": `{"num_hidden_layers": 30}`}}},
		"a switch is true":                {args: []string{"--enable-deterministic-inference"}, want: ExtraArgs{Layout: map[string]string{"--enable-deterministic-inference": "true"}}},
		"an abbreviation is its flag":     {args: []string{"--json-model-over", `{"a": 1}`}, want: ExtraArgs{Layout: map[string]string{"--json-model-override-args": `{"a": 1}`}}},
		"the default overrides are none":  {args: []string{"--json-model-override-args", "{}"}, want: ExtraArgs{}},
		"a boolean-optional no- is false": {args: []string{"--no-enable-fused-qk-norm-rope"}, want: ExtraArgs{Neutral: map[string]string{"--enable-fused-qk-norm-rope": "false"}}},
		"log level is neutral":            {args: []string{"--log-level", "debug"}, want: ExtraArgs{Neutral: map[string]string{"--log-level": "debug"}}},
		"a chat template changes keys":    {args: []string{"--chat-template", "chatml"}, want: ExtraArgs{Keys: map[string]string{"--chat-template": "chatml"}}},
		"every class at once": {
			args: []string{"--mem-fraction-static", "0.8", "--dtype", "half", "--tokenizer-path", "/t"},
			want: ExtraArgs{Layout: map[string]string{"--dtype": "half"}, Keys: map[string]string{"--tokenizer-path": "/t"}, Neutral: map[string]string{"--mem-fraction-static": "0.8"}},
		},
		"kv dtype names its field": {args: []string{"--kv-cache-dtype", "fp8_e4m3"},
			refused: []string{"spec.template.extraArgs sets --kv-cache-dtype, which decides the bytes behind every L3 key; set spec.hicache.kvCacheDType instead"}},
		"kv dtype=value": {args: []string{"--kv-cache-dtype=fp8_e4m3"}, refused: []string{"set spec.hicache.kvCacheDType instead"}},
		"an abbreviation is refused as its flag": {args: []string{"--kv-cache-dt", "fp8_e4m3"},
			refused: []string{"sets --kv-cache-dt (--kv-cache-dtype), which"}},
		"an alias is refused": {args: []string{"--tensor-parallel-size", "8"}, refused: []string{"(--tp-size)", "set spec.topology.tensorParallel instead"}},
		"a flag the operator sets": {args: []string{"--port", "8000"},
			refused: []string{"sets --port, which the operator sets so that the readiness probe and the Services reach the server; remove it"}},
		"a config file":           {args: []string{"--config", "/etc/sglang.yaml"}, refused: []string{"sets --config, which reads more flags from a file"}},
		"context parallel":        {args: []string{"--attn-cp-size", "2"}, refused: []string{"context-parallel", "remove it"}},
		"two refusals, both said": {args: []string{"--page-size", "32", "--log-level", "debug", "--served-model-name", "x"}, refused: []string{"set spec.hicache.pageSize instead", "set spec.model.servedName instead"}},
		"an unknown flag":         {args: []string{"--turbo"}, refused: []string{"spec.template.extraArgs: ", "unknown flag --turbo"}},
		"a literal admin key": {args: []string{"--admin-api-key", "s3cret"},
			refused: []string{"sets --admin-api-key, which would put the key in the pod spec", "set spec.security.adminAPIKeySecretRef instead"}},
		"a literal API key":      {args: []string{"--api-key=s3cret"}, refused: []string{"set spec.security.apiKeySecretRef instead"}},
		"several tokenizers":     {args: []string{"--tokenizer-worker-num", "4"}, refused: []string{"enforces neither --api-key nor --admin-api-key"}},
		"an unguarded gRPC port": {args: []string{"--grpc-port", "30001"}, refused: []string{"gRPC listener that no API key guards"}},
		"a bad choice":           {args: []string{"--dtype", "fp6"}, refused: []string{`flag --dtype does not accept "fp6"`}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ClassifyExtraArgs(tc.args)
			if len(tc.refused) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("classes (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %q as %+v", tc.args, got)
			}
			msg := err.Error()
			at := 0
			for _, want := range tc.refused {
				i := strings.Index(msg[at:], want)
				if i < 0 {
					t.Fatalf("error lacks %q (in order):\n%s", want, msg)
				}
				at += i + len(want)
			}
		})
	}
}

// Every refused argument reads as a sentence that names what to do.
func TestRefusalsNameWhatToDo(t *testing.T) {
	rules, err := ArgRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Class != ArgRefused {
			continue
		}
		msg := (&RefusedArgError{Flag: r.Flag, Rule: r}).Error()
		if !strings.HasSuffix(msg, "; remove it") && !strings.HasSuffix(msg, " instead") {
			t.Errorf("%s: %q says neither which field to set nor to remove it", r.Flag, msg)
		}
		if strings.HasSuffix(r.Reason, ".") || strings.Contains(r.Reason, "  ") {
			t.Errorf("%s: the reason %q does not continue a sentence", r.Flag, r.Reason)
		}
	}
}

// The CRD refuses the refused spellings at kubectl apply: its extraArgs rule maps exactly the
// option strings of every refused argument to what to do instead, and its message reads it.
func TestTheCRDRefusesEveryRefusedSpelling(t *testing.T) {
	data, err := os.ReadFile("../../config/crd/bases/hicache.io_hicachedeployments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]struct {
								Properties map[string]struct {
									Validations []struct {
										Rule              string `json:"rule"`
										MessageExpression string `json:"messageExpression"`
									} `json:"x-kubernetes-validations"`
								} `json:"properties"`
							} `json:"properties"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	all := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["template"].Properties["extraArgs"].Validations
	// One rule refuses the refused flags; another refuses $(NAME) references.
	vals := all[:0:0]
	for _, v := range all {
		if strings.Contains(v.Rule, "a.split('=')[0] in {") {
			vals = append(vals, v)
		}
	}
	if len(vals) != 1 {
		t.Fatalf("spec.template.extraArgs has %d CEL rules that look flags up, want 1", len(vals))
	}
	want := map[string]string{}
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := ArgRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range spec.Arguments() {
		r := rules[a.Flags[0]]
		if r.Class != ArgRefused {
			continue
		}
		what := "the operator sets it or the L3 cache cannot stay correct with it; remove it"
		if r.Field != "" {
			what = "set " + r.Field + " instead"
		}
		for _, f := range a.Flags {
			want[f] = what
		}
	}
	entry := regexp.MustCompile(`'(-[^']*)': '([^']*)'`)
	for name, expr := range map[string]string{"rule": vals[0].Rule, "messageExpression": vals[0].MessageExpression} {
		got := map[string]string{}
		for _, m := range entry.FindAllStringSubmatch(expr, -1) {
			got[m[1]] = m[2]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			var lit []string
			for _, f := range slices.Sorted(maps.Keys(want)) {
				lit = append(lit, fmt.Sprintf("'%s': '%s'", f, want[f]))
			}
			t.Errorf("the map in the %s of spec.template.extraArgs (api/v1alpha1/hicachedeployment_types.go) and the refused flags of extra_args.txt differ (-refused +CEL); set the map to\n{%s}\nand run make generate:\n%s",
				name, strings.Join(lit, ", "), diff)
		}
	}
	if !strings.Contains(vals[0].Rule, "a.split('=')[0] in {") {
		t.Errorf("the rule %q does not look the flag up with the text before =", vals[0].Rule)
	}
}

func TestArgDefault(t *testing.T) {
	for flag, want := range map[string]string{"--dtype": "auto", "--log-level": "info", "--tensor-parallel-size": "1",
		"--enable-deterministic-inference": "false", "--attention-backend": "", "--turbo": ""} {
		got, ok := ArgDefault(flag)
		if got != want || ok != (want != "") {
			t.Errorf("ArgDefault(%s) = %q, %v; want %q", flag, got, ok, want)
		}
	}
}
