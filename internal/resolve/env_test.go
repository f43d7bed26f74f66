package resolve_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

func fieldErr(t *testing.T, err error) *resolve.FieldError {
	t.Helper()
	var fe *resolve.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a FieldError", err)
	}
	return fe
}

// A layout variable is a layout fact of its own; unset (or at the release's default) it adds no
// fact, so existing fingerprints stay.
func TestLayoutEnvIsALayoutFact(t *testing.T) {
	base := mustResolve(t, makeHCD("a").Profile("DeepSeekV4").TP(8).Obj())
	r := mustResolve(t, makeHCD("a").Profile("DeepSeekV4").TP(8).Env("SGLANG_DSV4_KV_LAYOUT", "v4_fused").Obj())
	if r.Namespace == base.Namespace || !slices.Contains(r.FactList(), "env.SGLANG_DSV4_KV_LAYOUT=v4_fused") {
		t.Errorf("SGLANG_DSV4_KV_LAYOUT kept namespace %s; facts %q", r.Namespace, r.FactList())
	}
	for name, kv := range map[string][]string{
		"at its default":  {"SGLANG_DSV4_KV_LAYOUT", "v4"},
		"neutral (log)":   {"SGLANG_LOG_FORWARD_ITERS", "1"},
		"a neutral token": {"HF_TOKEN", "x"},
	} {
		got := mustResolve(t, makeHCD("a").Profile("DeepSeekV4").TP(8).Env(kv...).Obj())
		if got.Fingerprint != base.Fingerprint {
			t.Errorf("%s: %s changed the fingerprint: facts %q", name, kv[0], got.FactList())
		}
	}
	// A user's own variable is read by no one the operator knows of, but a library of the
	// serving process may read any name: it is a layout fact.
	mine := mustResolve(t, makeHCD("a").Profile("DeepSeekV4").TP(8).Env("MY_VAR", "1", "TORCH_SOMETHING", "2").Obj())
	if !slices.Contains(mine.FactList(), "env.MY_VAR=1") || !slices.Contains(mine.FactList(), "env.TORCH_SOMETHING=2") {
		t.Errorf("facts %q lack the unknown variables", mine.FactList())
	}
}

func TestEnvRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		env       []corev1.EnvVar
		field     string
		substring string
	}{
		"device plugin's": {env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "CUDA_VISIBLE_DEVICES", Value: "0"}},
			field: "spec.template.env[1]", substring: "set spec.resources instead"},
		"a test hook": {env: []corev1.EnvVar{{Name: "SGLANG_IS_IN_CI", Value: "1"}}, field: "spec.template.env[0]", substring: "remove it"},
		"unknown SGLANG_ name": {env: []corev1.EnvVar{{Name: "SGLANG_NO_SUCH_THING", Value: "1"}},
			field: "spec.template.env[0]", substring: "internal/sglang/env_vars.txt"},
		"unknown MC_ name": {env: []corev1.EnvVar{{Name: "MC_NO_SUCH_THING", Value: "1"}},
			field: "spec.template.env[0]", substring: "hack/sglang-env.sh"},
		"layout from a ConfigMap": {env: []corev1.EnvVar{{Name: "SGLANG_DSV4_KV_LAYOUT", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Key: "k"}}}},
			field: "spec.template.env[0]", substring: "a ConfigMap"},
		"unknown from a field": {env: []corev1.EnvVar{{Name: "MY_VAR", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			field: "spec.template.env[0]", substring: "write the value itself"},
	} {
		t.Run(name, func(t *testing.T) {
			h := makeHCD("a").Profile("Qwen3").TP(4).Obj()
			h.Spec.Template.Env = tc.env
			_, err := resolve.Resolve(h)
			if err == nil {
				t.Fatal("accepted")
			}
			fe := fieldErr(t, err)
			if fe.Field != tc.field || !strings.Contains(err.Error(), tc.substring) {
				t.Errorf("error %q (field %s); want field %s and %q", err, fe.Field, tc.field, tc.substring)
			}
		})
	}
	// A neutral variable may come from a Secret.
	h := makeHCD("a").Profile("Qwen3").TP(4).Obj()
	h.Spec.Template.Env = []corev1.EnvVar{{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}}
	if _, err := resolve.Resolve(h); err != nil {
		t.Errorf("HF_TOKEN from a Secret: %v", err)
	}
}

// Every field whose text reaches SGLang's command line, environment or a layout fact refuses a
// $(NAME) reference, naming the field; "$$(" is a literal and passes.
func TestVarRefsAreRefused(t *testing.T) {
	cases := map[string]struct {
		mutate func(b *hicachev1alpha1.HiCacheDeployment)
		field  string
	}{
		"extraArgs": {func(b *hicachev1alpha1.HiCacheDeployment) {
			b.Spec.Template.ExtraArgs = []string{"--json-model-override-args", "$(OVR)"}
		}, "spec.template.extraArgs[1]"},
		"servedName": {func(b *hicachev1alpha1.HiCacheDeployment) { b.Spec.Model.ServedName = "$(HICACHE_ADMIN_API_KEY)" }, "spec.model.servedName"},
		"revision":   {func(b *hicachev1alpha1.HiCacheDeployment) { b.Spec.Model.Revision = "x$(REV)" }, "spec.model.revision"},
		"model path": {func(b *hicachev1alpha1.HiCacheDeployment) { b.Spec.Model.Path = "/m/$(P)" }, "spec.model.path"},
		"env value": {func(b *hicachev1alpha1.HiCacheDeployment) {
			b.Spec.Template.Env = []corev1.EnvVar{{Name: "SGLANG_LOG_FORWARD_ITERS", Value: "$(X)"}}
		}, "spec.template.env[0].value"},
		"escaped then a reference": {func(b *hicachev1alpha1.HiCacheDeployment) { b.Spec.Model.ServedName = "$$$(K)" }, "spec.model.servedName"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := makeHCD("a").Profile("Qwen3").TP(4).Obj()
			tc.mutate(h)
			_, err := resolve.Resolve(h)
			if err == nil {
				t.Fatal("accepted")
			}
			if fe := fieldErr(t, err); fe.Field != tc.field || !strings.Contains(err.Error(), "$$(") {
				t.Errorf("error %q (field %s); want field %s", err, fe.Field, tc.field)
			}
		})
	}
	h := makeHCD("a").Profile("Qwen3").TP(4).Served("price-$$(usd)").ExtraArgs("--log-level", "info").Obj()
	if _, err := resolve.Resolve(h); err != nil {
		t.Errorf("an escaped $$( was refused: %v", err)
	}
	for s, want := range map[string]bool{"$(A)": true, "$$(A)": false, "$$$(A)": true, "a$b(": false, "$": false, "x$(": true, "$$$$(A)": false} {
		if got := resolve.HasVarRef(s); got != want {
			t.Errorf("HasVarRef(%q) = %v, want %v", s, got, want)
		}
	}
}

// A layout variable's change is Breaking and says why; a neutral one's is Neutral.
func TestEnvChangesAreClassified(t *testing.T) {
	cfg := func(kv ...string) cache.Config {
		h := makeHCD("a").Profile("DeepSeekV4").TP(8).Env(kv...).Obj()
		return mustResolve(t, h).Config(h)
	}
	ch := cache.Classify(cfg(), cfg("SGLANG_DSV4_KV_LAYOUT", "v4_fused"))
	if ch.Kind != cache.Breaking || len(ch.Changes) != 1 || !strings.Contains(ch.Changes[0].Description, "env SGLANG_DSV4_KV_LAYOUT v4 → v4_fused (chooses the DeepSeek-V4 KV layout") {
		t.Errorf("layout env change: %s %+v", ch.Kind, ch.Changes)
	}
	ch = cache.Classify(cfg("SGLANG_LOG_FORWARD_ITERS", "1"), cfg("SGLANG_LOG_FORWARD_ITERS", "0"))
	if ch.Kind != cache.Neutral || len(ch.Changes) != 1 || ch.Changes[0].Name != "other.env SGLANG_LOG_FORWARD_ITERS" {
		t.Errorf("neutral env change: %s %+v", ch.Kind, ch.Changes)
	}
}

// A layout variable set on one role only is a fact of the namespace both roles share.
func TestRoleEnvIsAFactOfTheSharedNamespace(t *testing.T) {
	base := mustRoles(t, dsv4PD())
	h := dsv4PD()
	h.Spec.Roles.Decode.Template.Env = []corev1.EnvVar{{Name: "SGLANG_DSV4_KV_LAYOUT", Value: "v4_fused"}}
	got := mustRoles(t, h)
	if got.Namespace() == base.Namespace() || got.Decode.Namespace != got.Namespace() {
		t.Errorf("a decode-only layout variable kept namespace %s (decode %s)", got.Namespace(), got.Decode.Namespace)
	}
	if !slices.Contains(got.Prefill.FactList(), "env.SGLANG_DSV4_KV_LAYOUT@decode=v4_fused") {
		t.Errorf("prefill facts %q lack the decode role's variable", got.Prefill.FactList())
	}
	// Decode servers that write L3 must store the prefill's bytes: a different variable is refused.
	w := makeHCD("a").Profile("DeepSeekV4").Storage("mooncake").Roles(8, 1, 8, 1).DecodeL3("HiCache").Obj()
	w.Spec.Roles.Decode.Template.Env = []corev1.EnvVar{{Name: "SGLANG_DSV4_KV_LAYOUT", Value: "v4_fused"}}
	if _, err := resolve.RolesOf(w); err == nil || !strings.Contains(err.Error(), "env.SGLANG_DSV4_KV_LAYOUT") {
		t.Errorf("decode HiCache with its own KV layout: %v", err)
	}
	// A role's refused variable is named by the role's field.
	r := dsv4PD()
	r.Spec.Roles.Prefill.Template.Env = []corev1.EnvVar{{Name: "OK", Value: "1"}, {Name: "SGLANG_NO_SUCH", Value: "1"}}
	_, err := resolve.RolesOf(r)
	if err == nil || fieldErr(t, err).Field != "spec.roles.prefill.template.env[1]" {
		t.Errorf("a refused prefill variable: %v", err)
	}
}
