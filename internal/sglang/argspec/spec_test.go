package argspec

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func mustLoad(t *testing.T) *Spec {
	t.Helper()
	spec, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return spec
}

func mustChoices(t *testing.T, spec *Spec, flag string) []string {
	t.Helper()
	c, ok := spec.Choices(flag)
	if !ok {
		t.Fatalf("%s has no choices in sglang %s", flag, spec.Version())
	}
	return c
}

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error is %T, want *ValidationError: %v", err, err)
	}
	return ve.Problems
}

func TestLoadMatchesPinnedVersion(t *testing.T) {
	// hack/sglang-args.sh generates the table from the release hack/sglang/requirements.txt pins.
	reqs, err := os.ReadFile("../../../hack/sglang/requirements.txt")
	if err != nil {
		t.Fatalf("reading the pins: %v", err)
	}
	m := regexp.MustCompile(`(?m)^sglang==([^ \\\s]+)`).FindSubmatch(reqs)
	if m == nil {
		t.Fatal("hack/sglang/requirements.txt does not pin sglang==VERSION")
	}
	if got, want := mustLoad(t).Version(), string(m[1]); got != want {
		t.Errorf("embedded table is for sglang %s but hack/sglang/requirements.txt pins %s: run hack/sglang-args.sh", got, want)
	}
}

func TestValidate(t *testing.T) {
	spec := mustLoad(t)
	model := []string{"--model-path", "org/model"}
	with := func(extra ...string) []string { return append(append([]string{}, model...), extra...) }
	layouts := mustChoices(t, spec, "--hicache-mem-layout")
	modules := mustChoices(t, spec, "--lora-target-modules")
	chunkSizes := mustChoices(t, spec, "--max-lora-chunk-size")

	cases := map[string]struct {
		args []string
		want []Problem
	}{
		"minimal line": {args: model},
		"alias of the model flag": {
			args: []string{"--model", "org/model"},
		},
		"full hicache line": {args: with(
			"--tp-size", "4", "--enable-hierarchical-cache", "--hicache-ratio", "2.5",
			"--hicache-mem-layout", "page_first", "--hicache-io-backend", "kernel",
			"--hicache-write-policy", "write_through", "--hicache-storage-backend", "mooncake",
			"--hicache-storage-prefetch-policy", "timeout",
			"--hicache-storage-backend-extra-config", `{"master_server_address":"m:50051"}`,
		)},
		"flag=value form":                {args: with("--hicache-mem-layout=page_head", "--tp-size=8")},
		"negative number is a value":     {args: with("--node-rank", "-1", "--hicache-ratio", "-.5")},
		"python int spellings":           {args: with("--tp-size", " +1_6 ")},
		"python float spellings":         {args: with("--hicache-ratio", "1e1", "--mem-fraction-static", ".8")},
		"unique abbreviation":            {args: with("--tp", "2", "--hicache-mem-lay", "layer_first")},
		"switch alias":                   {args: with("--enable-hicache")},
		"boolean optional negative":      {args: with("--no-enable-tf32-matmul")},
		"int choices compare as ints":    {args: with("--max-lora-chunk-size", "032")},
		"list of choices":                {args: with("--lora-target-modules", "q_proj", "k_proj")},
		"empty list for nargs star":      {args: with("--lora-target-modules", "--tp-size", "2")},
		"human readable int":             {args: with("--context-length", "128Ki", "--max-total-tokens", "2.5M")},
		"json value":                     {args: with("--radix-eviction-policy-config", `{"protected_threshold": 4}`)},
		"deprecated flag still accepted": {args: with("--dp-size", "2", "--enable-dp-attention")},
		"unknown flag": {
			args: with("--no-such-flag", "value"),
			want: []Problem{{Kind: UnknownFlag, Flag: "--no-such-flag"}},
		},
		"unknown flag with value": {
			args: with("--no-such-flag=value"),
			want: []Problem{{Kind: UnknownFlag, Flag: "--no-such-flag"}},
		},
		"single dash flag": {
			args: with("-x"),
			want: []Problem{{Kind: UnknownFlag, Flag: "-x"}},
		},
		"value missing at the end": {
			args: with("--tp-size"),
			want: []Problem{{Kind: MissingValue, Flag: "--tp-size", Detail: "needs a value"}},
		},
		"value missing before the next flag": {
			args: with("--hicache-mem-layout", "--tp-size", "2"),
			want: []Problem{{Kind: MissingValue, Flag: "--hicache-mem-layout", Detail: "needs a value", Allowed: layouts}},
		},
		"nargs plus without values": {
			args: with("--cuda-graph-bs-decode"),
			want: []Problem{{Kind: MissingValue, Flag: "--cuda-graph-bs-decode", Detail: "needs at least 1 value(s)"}},
		},
		"invalid choice": {
			args: with("--hicache-mem-layout", "page_last"),
			want: []Problem{{Kind: InvalidChoice, Flag: "--hicache-mem-layout", Value: "page_last", Allowed: layouts}},
		},
		"invalid choice in flag=value form": {
			args: with("--hicache-mem-layout=Page_First"),
			want: []Problem{{Kind: InvalidChoice, Flag: "--hicache-mem-layout", Value: "Page_First", Allowed: layouts}},
		},
		"invalid choice inside a list": {
			args: with("--lora-target-modules", "q_proj", "nope"),
			want: []Problem{{Kind: InvalidChoice, Flag: "--lora-target-modules", Value: "nope", Allowed: modules}},
		},
		"int choice out of range": {
			args: with("--max-lora-chunk-size", "48"),
			want: []Problem{{Kind: InvalidChoice, Flag: "--max-lora-chunk-size", Value: "48", Allowed: chunkSizes}},
		},
		"int type mismatch": {
			args: with("--tp-size", "four"),
			want: []Problem{{Kind: InvalidType, Flag: "--tp-size", Value: "four", Detail: "an integer"}},
		},
		"int given a float": {
			args: with("--port", "30000.0"),
			want: []Problem{{Kind: InvalidType, Flag: "--port", Value: "30000.0", Detail: "an integer"}},
		},
		"float type mismatch": {
			args: with("--hicache-ratio", "two"),
			want: []Problem{{Kind: InvalidType, Flag: "--hicache-ratio", Value: "two", Detail: "a number"}},
		},
		"int list element mismatch": {
			args: with("--cuda-graph-bs-decode", "1", "2", "x"),
			want: []Problem{{Kind: InvalidType, Flag: "--cuda-graph-bs-decode", Value: "x", Detail: "an integer"}},
		},
		"human readable int rejects IEC decimals": {
			args: with("--context-length", "1.5Ki"),
			want: []Problem{{Kind: InvalidType, Flag: "--context-length", Value: "1.5Ki", Detail: typeDescription[TypeHumanReadableInt]}},
		},
		"json value that does not parse": {
			args: with("--radix-eviction-policy-config", "{bad"),
			want: []Problem{{Kind: InvalidType, Flag: "--radix-eviction-policy-config", Value: "{bad", Detail: "a JSON document"}},
		},
		"store_true given a value with =": {
			args: with("--enable-hierarchical-cache=true"),
			want: []Problem{{Kind: UnexpectedValue, Flag: "--enable-hierarchical-cache", Value: "true"}},
		},
		"store_true followed by a word": {
			args: with("--enable-hierarchical-cache", "true"),
			want: []Problem{{Kind: UnexpectedArgument, Value: "true"}},
		},
		"boolean optional given a value": {
			args: with("--no-enable-tf32-matmul=1"),
			want: []Problem{{Kind: UnexpectedValue, Flag: "--no-enable-tf32-matmul", Value: "1"}},
		},
		"second value for a single-value flag": {
			args: with("--tp-size", "2", "4"),
			want: []Problem{{Kind: UnexpectedArgument, Value: "4"}},
		},
		"ambiguous abbreviation": {
			args: with("--hicache-s", "4"),
			want: []Problem{{Kind: AmbiguousFlag, Flag: "--hicache-s", Allowed: []string{
				"--hicache-size", "--hicache-storage-backend", "--hicache-storage-backend-extra-config",
				"--hicache-storage-prefetch-policy", "--hicache-storage-prefetch-retry-max-attempts",
				"--hicache-storage-prefetch-retry-poll-interval",
			}}},
		},
		"words after a double dash": {
			args: with("--", "--tp-size", "2"),
			want: []Problem{{Kind: UnexpectedArgument, Value: "--tp-size"}, {Kind: UnexpectedArgument, Value: "2"}},
		},
		"required flag missing": {
			args: []string{"--tp-size", "2"},
			want: []Problem{{Kind: MissingRequired, Flag: "--model-path"}},
		},
		"every problem is reported": {
			args: []string{"--tp-size", "x", "--hicache-io-backend", "disk", "--bogus", "--enable-hicache=1"},
			want: []Problem{
				{Kind: InvalidType, Flag: "--tp-size", Value: "x", Detail: "an integer"},
				{Kind: InvalidChoice, Flag: "--hicache-io-backend", Value: "disk", Allowed: mustChoices(t, spec, "--hicache-io-backend")},
				{Kind: UnknownFlag, Flag: "--bogus"},
				{Kind: UnexpectedValue, Flag: "--enable-hicache", Value: "1"},
				{Kind: MissingRequired, Flag: "--model-path"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := problemsOf(t, spec.Validate(tc.args))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProblemMessagesNameFlagAndAllowedValues(t *testing.T) {
	spec := mustLoad(t)
	err := spec.Validate([]string{"--model-path", "m", "--hicache-write-policy", "write_around"})
	if err == nil {
		t.Fatal("an invalid write policy was accepted")
	}
	msg := err.Error()
	for _, want := range append([]string{"--hicache-write-policy", `"write_around"`, spec.Version()}, mustChoices(t, spec, "--hicache-write-policy")...) {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
	var p Problem
	if !errors.As(err, &p) || p.Kind != InvalidChoice {
		t.Errorf("errors.As did not find the InvalidChoice problem in %v", err)
	}
}

func TestParseResolvesAliasesAndAbbreviations(t *testing.T) {
	spec := mustLoad(t)
	occ, err := spec.Parse([]string{"--model", "m", "--tensor-parallel-size=4", "--tp", "8", "--lora-target-modules", "q_proj", "v_proj"})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	type use struct {
		Index  int
		Flag   string
		Dest   string
		Values []string
	}
	var got []use
	for _, o := range occ {
		got = append(got, use{o.Index, o.Flag, o.Argument.Dest, o.Values})
	}
	want := []use{
		{0, "--model", "model_path", []string{"m"}},
		{2, "--tensor-parallel-size", "tp_size", []string{"4"}},
		{3, "--tp", "tp_size", []string{"8"}},
		{5, "--lora-target-modules", "lora_target_modules", []string{"q_proj", "v_proj"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("occurrences (-want +got):\n%s", diff)
	}
}

func TestChoicesAndLookup(t *testing.T) {
	spec := mustLoad(t)
	if _, ok := spec.Choices("--tp-size"); ok {
		t.Error("--tp-size reported choices")
	}
	if _, ok := spec.Choices("--no-such-flag"); ok {
		t.Error("an unknown flag reported choices")
	}
	c, _ := spec.Choices("--hicache-mem-layout")
	c[0] = "mutated"
	if again, _ := spec.Choices("--hicache-mem-layout"); again[0] == "mutated" {
		t.Error("Choices returned the spec's own slice")
	}
	a, ok := spec.Lookup("--enable-dp-attention")
	if !ok || !a.Deprecated || a.Replacement == "" {
		t.Errorf("--enable-dp-attention: got %+v, want a deprecated flag naming its replacement", a)
	}
	algos, ok := spec.RuntimeChoices("--speculative-algorithm")
	if !ok || len(algos) == 0 {
		t.Fatal("--speculative-algorithm has no runtime choices")
	}
	if _, ok := spec.Choices("--speculative-algorithm"); ok {
		t.Error("--speculative-algorithm has argparse choices; the renderer's runtime check may be stale")
	}
}

func TestFromJSONRejectsBrokenTables(t *testing.T) {
	cases := map[string]string{
		"not json":          `{`,
		"no version":        `{"arguments": []}`,
		"no flags":          `{"sglang_version": "1", "arguments": [{"flags": []}]}`,
		"duplicate flag":    `{"sglang_version": "1", "arguments": [{"flags": ["--a"]}, {"flags": ["--b", "--a"]}]}`,
		"unknown nargs":     `{"sglang_version": "1", "arguments": [{"flags": ["--a"], "nargs": "many"}]}`,
		"negative nargs":    `{"sglang_version": "1", "arguments": [{"flags": ["--a"], "nargs": -2}]}`,
		"odd choices":       `{"sglang_version": "1", "arguments": [{"flags": ["--a"], "choices": "some"}]}`,
		"non-scalar choice": `{"sglang_version": "1", "arguments": [{"flags": ["--a"], "choices": [{"x": 1}]}]}`,
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := FromJSON([]byte(doc)); err == nil {
				t.Errorf("FromJSON accepted %s", doc)
			}
		})
	}
}

func TestDynamicChoicesAcceptAnyValue(t *testing.T) {
	spec, err := FromJSON([]byte(`{"sglang_version": "t", "arguments": [
		{"flags": ["--backend"], "dest": "backend", "action": "store", "type": "str", "choices": "any", "nargs": null},
		{"flags": ["--mode"], "dest": "mode", "action": "store", "type": "str", "choices": ["a", "b"], "nargs": null}]}`))
	if err != nil {
		t.Fatalf("FromJSON: %v", err)
	}
	if err := spec.Validate([]string{"--backend", "anything"}); err != nil {
		t.Errorf("dynamic choices refused a value: %v", err)
	}
	got := problemsOf(t, spec.Validate([]string{"--mode", "c"}))
	want := []Problem{{Kind: InvalidChoice, Flag: "--mode", Value: "c", Allowed: []string{"a", "b"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
