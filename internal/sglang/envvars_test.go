package sglang

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// Every variable the pinned releases read has exactly one class, and nothing else is classified.
func TestEveryEnvVarIsClassified(t *testing.T) {
	table, err := argspec.DefaultEnv()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := EnvRules()
	if err != nil {
		t.Fatalf("internal/sglang/env_vars.txt: %v", err)
	}
	missing, stale := UnclassifiedEnv(table, rules)
	if len(missing) > 0 {
		t.Errorf("sglang %s / mooncake %s read %d variable(s) that internal/sglang/env_vars.txt does not classify: %s\n"+
			"add one line for each (<NAME> layout|keys|refused <field>|-|neutral <reason>), decided from the code that reads it (argspec/sglang-env.json says where)",
			table.SGLangVersion, table.MooncakeVersion, len(missing), strings.Join(missing, ", "))
	}
	if len(stale) > 0 {
		t.Errorf("internal/sglang/env_vars.txt classifies %d variable(s) the pinned releases do not read; remove them: %s", len(stale), strings.Join(stale, ", "))
	}
	counts := map[ArgClass]int{}
	for _, r := range rules {
		counts[r.Class]++
	}
	t.Logf("%d variables: %d layout, %d keys, %d refused, %d neutral", len(table.Variables), counts[ArgLayout], counts[ArgKeys], counts[ArgRefused], counts[ArgNeutral])
	doc, err := os.ReadFile("../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []ArgClass{ArgLayout, ArgKeys, ArgRefused, ArgNeutral} {
		if row := fmt.Sprintf("| env `%s` | %d |", c, counts[c]); !strings.Contains(string(doc), row) {
			t.Errorf("docs/compatibility.md lacks the row %q: update its table of environment variable classes", row)
		}
	}
}

// A release that reads a new variable fails the comparison, naming it; a rule for a variable
// no longer read is stale.
func TestANewReleaseWithAnUnclassifiedEnvVarFails(t *testing.T) {
	table, err := argspec.EnvFromJSON([]byte(`{"sglang_version": "0.6.0", "mooncake_version": "0.4", "variables": [
		{"name": "SGLANG_DSV4_KV_LAYOUT", "readers": ["sglang"], "reads": []},
		{"name": "SGLANG_BRAND_NEW", "readers": ["sglang"], "reads": []}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := ParseEnvRules([]byte("SGLANG_DSV4_KV_LAYOUT layout changes bytes\nSGLANG_GONE neutral\n"))
	if err != nil {
		t.Fatal(err)
	}
	missing, stale := UnclassifiedEnv(table, rules)
	if fmt.Sprint(missing) != "[SGLANG_BRAND_NEW]" || fmt.Sprint(stale) != "[SGLANG_GONE]" {
		t.Errorf("missing %v, stale %v", missing, stale)
	}
}

func TestParseEnvRulesRefusesBadLines(t *testing.T) {
	for _, line := range []string{"A", "A layout", "A refused", "A refused nofield why", "A maybe why", "1A neutral", "A neutral\nA neutral"} {
		if _, err := ParseEnvRules([]byte(line)); err == nil {
			t.Errorf("%q parsed", line)
		}
	}
}

func TestEnvRuleOf(t *testing.T) {
	for name, want := range map[string]ArgClass{
		"SGLANG_DSV4_KV_LAYOUT": ArgLayout,  // the DeepSeek-V4 KV layout, read in environ.py
		"MY_VAR":                ArgLayout,  // read by no one known: deny by default
		"NCCL_ALGO":             ArgLayout,  // a library's, not in the table
		"SGLANG_NOT_A_VARIABLE": ArgRefused, // SGLang's prefix, not read
		"SGL_NOT_A_VARIABLE":    ArgRefused, //
		"MC_NOT_A_VARIABLE":     ArgRefused, // Mooncake's prefix, not read
		"CUDA_VISIBLE_DEVICES":  ArgRefused, // the device plugin's
		"MC_STORE_CLUSTER_ID":   ArgRefused, // the operator's
		"HF_TOKEN":              ArgNeutral, // authentication only
		"MC_TCP_BIND_ADDRESS":   ArgNeutral, // transport
	} {
		r, err := EnvRuleOf(name)
		if err != nil {
			t.Fatal(err)
		}
		if r.Class != want {
			t.Errorf("%s: %s (%s), want %s", name, r.Class, r.Reason, want)
		}
	}
	r, _ := EnvRuleOf("SGLANG_NOT_A_VARIABLE")
	if !strings.Contains(r.Reason, "hack/sglang-env.sh") || !strings.Contains(r.Reason, "internal/sglang/env_vars.txt") {
		t.Errorf("the refusal of an unknown SGLANG_ name does not say how to classify it: %s", r.Reason)
	}
}

// The table was read from both wheels: the registry, plain os.environ reads and the Mooncake
// client's native libraries.
func TestEnvTableSources(t *testing.T) {
	table, err := argspec.DefaultEnv()
	if err != nil {
		t.Fatal(err)
	}
	for name, where := range map[string]string{
		"SGLANG_DSV4_KV_LAYOUT": "sglang/srt/environ.py",
		"MC_TCP_BIND_ADDRESS":   "mooncake/store.so",
		"MOONCAKE_TENANT_ID":    "sglang/srt/environ.py",
	} {
		v, ok := table.Lookup(name)
		if !ok {
			t.Errorf("%s is not in the table", name)
			continue
		}
		if !strings.Contains(strings.Join(v.Reads, "\n"), where) {
			t.Errorf("%s is not read in %s: %q", name, where, v.Reads)
		}
	}
	if d, ok := EnvDefault("SGLANG_DSV4_KV_LAYOUT"); !ok || d != "v4" {
		t.Errorf("default of SGLANG_DSV4_KV_LAYOUT: %q %v", d, ok)
	}
}
