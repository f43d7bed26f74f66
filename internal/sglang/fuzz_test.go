package sglang

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// FuzzClassifyExtraArgs feeds arbitrary argument lists (NUL-separated) to the parser of
// spec.template.extraArgs: it never panics, it answers the same twice, every flag it reports is a
// canonical flag of the release in the class of its rule, and every refusal is a sentence about
// spec.template.extraArgs.
func FuzzClassifyExtraArgs(f *testing.F) {
	for _, s := range []string{
		"--dtype\x00float16", "--dtype=bfloat16", "--mem-fraction-static\x000.8\x00--dtype\x00half\x00--tokenizer-path\x00/t",
		"--kv-cache-dt\x00fp8_e4m3", "--no-enable-fused-qk-norm-rope", "--json-model-over\x00{\"a\": 1}", "--tp-size=8",
		"--chunked-prefill-size\x00-1", "--enable-metrics\x00--enable-metrics", "--", "-h", "x", "--=", "--log-level", "",
	} {
		f.Add(s)
	}
	spec, err := argspec.Default()
	if err != nil {
		f.Fatal(err)
	}
	rules, err := ArgRules()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var args []string
		if in != "" {
			args = strings.Split(in, "\x00")
		}
		if len(args) > 32 {
			return
		}
		got, err := ClassifyExtraArgs(args)
		again, err2 := ClassifyExtraArgs(args)
		if !reflect.DeepEqual(got, again) || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("two classifications of %q differ: %+v, %v and %+v, %v", args, got, err, again, err2)
		}
		for class, m := range map[ArgClass]map[string]string{ArgLayout: got.Layout, ArgKeys: got.Keys, ArgNeutral: got.Neutral} {
			if m != nil && len(m) == 0 {
				t.Fatalf("an empty, non-nil %s map", class)
			}
			for flag := range m {
				a, ok := spec.Lookup(flag)
				if !ok || a.Flags[0] != flag {
					t.Fatalf("%s flag %q is not a canonical flag of the release", class, flag)
				}
				if r := rules[flag]; r.Class != class {
					t.Fatalf("flag %q is reported as %s, its rule says %s", flag, class, r.Class)
				}
			}
		}
		if err == nil {
			return
		}
		var joined interface{ Unwrap() []error }
		parts := []error{err}
		if errors.As(err, &joined) {
			parts = joined.Unwrap()
		}
		for _, e := range parts {
			if !strings.HasPrefix(e.Error(), "spec.template.extraArgs") {
				t.Fatalf("a refusal of %q does not start with the field it is about: %q", args, e)
			}
		}
	})
}

// FuzzGlobalSegmentSize checks the size SGLang is given: the product of the size per rank and
// the ranks when it fits in 64 bits, an error otherwise.
func FuzzGlobalSegmentSize(f *testing.F) {
	f.Add(int64(16<<20), 8, 1)
	f.Add(int64(math.MaxInt64), 2, 1)
	f.Add(int64(-1), 1, 1)
	f.Add(int64(1<<40), 64, 4)
	f.Add(int64(0), 0, 0)
	f.Add(int64(1), 1<<32, 1<<32)
	f.Fuzz(func(t *testing.T, perRank int64, tp, pp int) {
		got, err := GlobalSegmentSize(perRank, tp, pp)
		if err != nil {
			if got != 0 {
				t.Fatalf("GlobalSegmentSize(%d, %d, %d) = %d with an error", perRank, tp, pp, got)
			}
			return
		}
		if perRank < 0 || tp < 1 || pp < 1 || got < 0 {
			t.Fatalf("GlobalSegmentSize(%d, %d, %d) = %d, no error", perRank, tp, pp, got)
		}
		if ranks := int64(tp) * int64(pp); ranks/int64(pp) != int64(tp) || got/ranks != perRank || got%ranks != 0 {
			t.Fatalf("GlobalSegmentSize(%d, %d, %d) = %d: not the size per rank times the ranks", perRank, tp, pp, got)
		}
	})
}
