package main

import (
	"strings"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/cache"
)

const src = `// +kubebuilder:validation:Enum=Old;Names
type Profile string

// +kubebuilder:validation:XValidation:rule="self.a in {'DeepSeekV3': ['WRONG']}[self.profile]",message="spec.topology.draft.hostPool is for a sidecar draft: ..."
// +kubebuilder:validation:XValidation:rule="self.b == {'Qwen3': 'X'}[self.profile]",message="spec.topology.draft.hostPool MLA needs a rank-replicated target"
`

// A stale table and the enum are written from the profiles; writing again changes nothing.
func TestRewriteWritesTheTables(t *testing.T) {
	tables := Tables()[3:] // the packed algorithms and the default attention
	out, err := Rewrite([]byte(src), tables)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"Enum=" + strings.Join(cache.ProfileNames(), ";") + "\ntype Profile string", // none of Old and Names is a profile
		"'DeepSeekV4': ['DSPARK', 'EAGLE', 'NEXTN']",                                // DeepSeek-V4 packs MTP, EAGLE and DSpark
		"'KimiK2': []", // no draft of Kimi-K2 is packed
		"'Qwen3Next': 'HybridMambaMHA'",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in\n%s", want, s)
		}
	}
	if strings.Contains(s, "WRONG") || strings.Contains(s, "Old;Names") {
		t.Errorf("a stale table is left:\n%s", s)
	}
	again, err := Rewrite(out, tables)
	if err != nil || string(again) != s {
		t.Errorf("a second run changed the file (%v)", err)
	}
}

// A rule that indexes a map by the profile and is not one of the tables is refused, and so is a
// table no rule holds: the profiles are restated nowhere by hand.
func TestRewriteRefusesUnknownTables(t *testing.T) {
	unknown := src + `// +kubebuilder:validation:XValidation:rule="self.c in {'Qwen3': ['MHA']}[self.profile]",message="another rule"` + "\n"
	if _, err := Rewrite([]byte(unknown), Tables()[3:]); err == nil || !strings.Contains(err.Error(), "does not know") {
		t.Errorf("an unknown profile-indexed map: %v", err)
	}
	if _, err := Rewrite([]byte(src), Tables()); err == nil || !strings.Contains(err.Error(), "no rule with the message") {
		t.Errorf("tables no rule holds: %v", err)
	}
}

// The attention kinds a profile's pools fit are the resolver's: DeepSeek-V4's pools take only
// its compressed MLA, a hybrid's mamba pool only the hybrid kinds.
func TestAttentionTable(t *testing.T) {
	fit := Tables()[0].Value
	for name, want := range map[string]string{"DeepSeekV4": "DSV4", "Qwen3Next": "HybridMambaMHA HybridMambaMLA", "Qwen3": "MHA MLA"} {
		p, _ := cache.LookupProfile(name)
		if got := strings.Join(fit(p).([]string), " "); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// The enum keeps its order: a profile it lists stays where it is, one it lacks comes last, one
// that is gone leaves.
func TestEnumOrder(t *testing.T) {
	got := enumOrder("Qwen3;Gone;DeepSeekV3", []string{"DeepSeekV3", "GLM5", "Qwen3"})
	if strings.Join(got, ";") != "Qwen3;DeepSeekV3;GLM5" {
		t.Errorf("%v", got)
	}
}
