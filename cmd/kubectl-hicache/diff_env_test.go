package main

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// An environment variable that sets the DeepSeek-V4 KV layout is a layout fact: diff calls its
// change Breaking and says why (the whole table is golden).
func TestDiffEnvLayoutChangeIsBreaking(t *testing.T) {
	old := edit(t, "deepseek_v4").Obj()
	cur := edit(t, "deepseek_v4").Obj()
	cur.Spec.Template.Env = append(cur.Spec.Template.Env, corev1.EnvVar{Name: "SGLANG_DSV4_KV_LAYOUT", Value: "v4_fused"})
	out := runPlugin(t, "", "diff", writeHCD(t, "old.yaml", old), writeHCD(t, "new.yaml", cur)).mustSucceed(t).stdout
	if !strings.HasPrefix(out, "Breaking:") || !strings.Contains(out, "env SGLANG_DSV4_KV_LAYOUT v4 → v4_fused (chooses the DeepSeek-V4 KV layout") {
		t.Errorf("diff of an env layout change:\n%s", out)
	}
	testutil.CompareGolden(t, filepath.Join("testdata", "diff_env_layout.golden"), []byte(out), *update)
}

// A refused variable and a $(NAME) reference make diff fail, naming the field.
func TestDiffRefusesEnvAndVarRefs(t *testing.T) {
	old := writeHCD(t, "old.yaml", edit(t, "qwen3").Obj())
	refused := edit(t, "qwen3").Obj()
	refused.Spec.Template.Env = []corev1.EnvVar{{Name: "SGLANG_NO_SUCH_VARIABLE", Value: "1"}}
	ref := edit(t, "qwen3").ExtraArgs("--json-model-override-args", "$(OVR)").Obj()
	envRef := edit(t, "qwen3").Obj()
	envRef.Spec.Template.Env = []corev1.EnvVar{{Name: "SGLANG_DSV4_KV_LAYOUT", Value: "$(OVR)"}}
	for name, tc := range map[string]struct {
		file string
		want string
	}{
		"unknown SGLANG_ variable":                  {writeHCD(t, "refused.yaml", refused), "spec.template.env[0]: sets SGLANG_NO_SUCH_VARIABLE"},
		"a reference in extraArgs (the CRD's rule)": {writeHCD(t, "ref.yaml", ref), "spec.template.extraArgs holds a $(NAME) reference"},
		"a reference in an env value":               {writeHCD(t, "envref.yaml", envRef), "spec.template.env[0].value: \"$(OVR)\" holds a $(NAME) reference"},
	} {
		res := runPlugin(t, "", "diff", old, tc.file)
		if res.code != 1 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 1 and %q", name, res.code, res.stderr, tc.want)
		}
	}
}
