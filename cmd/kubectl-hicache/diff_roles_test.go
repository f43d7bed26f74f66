package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/cache"
)

// diffRoles runs diff -o json between the prefill/decode sample and the sample edited by edit.
func diffRoles(t *testing.T, edit func(string) string) (diffReport, result) {
	t.Helper()
	b, err := os.ReadFile(pdSample)
	if err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(t.TempDir(), "changed.yaml")
	if err := os.WriteFile(changed, []byte(edit(string(b))), 0o600); err != nil {
		t.Fatal(err)
	}
	res := runPlugin(t, "", "diff", "-o", "json", pdSample, changed)
	var rep diffReport
	if res.code == 0 {
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
			t.Fatalf("diff -o json is not JSON: %v\n%s", err, res.stdout)
		}
	}
	return rep, res
}

func rolls(rep diffReport) map[string]bool {
	out := map[string]bool{}
	for _, r := range rep.Roles {
		out[r.Role] = r.Rolls
	}
	return out
}

// A change of the decode role alone rolls only the decode groups and keeps the namespace; a
// breaking change rolls both roles and moves the namespace both share.
func TestDiffSaysWhichRoleRolls(t *testing.T) {
	rep, res := diffRoles(t, func(s string) string { return strings.Replace(s, "tensorParallel: 16}", "tensorParallel: 8}", 1) })
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if rep.Kind != cache.Neutral || rep.OldNamespace != rep.NewNamespace || !rolls(rep)["decode"] || rolls(rep)["prefill"] {
		t.Errorf("decode TP 16 → 8: %s, %s → %s, rolls %v; want Neutral, one namespace, only decode rolling", rep.Kind, rep.OldNamespace, rep.NewNamespace, rolls(rep))
	}
	if !strings.Contains(rep.Action, "only the decode groups roll") || !strings.Contains(rep.Action, "nothing to flush") {
		t.Errorf("action %q", rep.Action)
	}

	rep, res = diffRoles(t, func(s string) string {
		return strings.Replace(s, "ratio: \"2\"", "ratio: \"2\"\n    kvCacheDType: fp8_e4m3", 1)
	})
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if rep.Kind != cache.Breaking || rep.OldNamespace == rep.NewNamespace || !rolls(rep)["decode"] || !rolls(rep)["prefill"] {
		t.Errorf("KV dtype auto → fp8: %s, %s → %s, rolls %v; want Breaking, a new namespace, both roles rolling", rep.Kind, rep.OldNamespace, rep.NewNamespace, rolls(rep))
	}

	rep, res = diffRoles(t, func(s string) string { return strings.Replace(s, "replicas: 2", "replicas: 3", 1) })
	if res.code != 0 || rolls(rep)["prefill"] || rolls(rep)["decode"] || !rep.Roles[0].Scales {
		t.Errorf("prefill 2 → 3 groups: %+v (exit %d %s); want the prefill scaling, nothing rolling", rep.Roles, res.code, res.stderr)
	}

	_, res = diffRoles(t, func(s string) string { return s[:strings.Index(s, "  roles:")] })
	if res.code == 0 || !strings.Contains(res.stderr, "one of") || !strings.Contains(res.stderr, "spec.roles") {
		t.Errorf("roles removed: exit %d, stderr %q; want a refusal naming spec.roles", res.code, res.stderr)
	}
}
