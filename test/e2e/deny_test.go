package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// The deny-by-default cases, each the way a user meets it: the spec applied to the real API
// server and reconciled by the operator, and the same spec given to `kubectl hicache plan` and
// `diff`. Every case is one of
//
//   - refused at apply: the CRD's own rule (CEL) rejects the object, and plan rejects the file
//     with the same sentence;
//   - refused by the operator: the object is stored, its Ready condition is InvalidSpec with the
//     sentence, no group is created, and plan rejects the file with the sentence;
//   - Breaking: the edit moves the deployment to another L3 namespace, and diff calls it Breaking
//     for the reason given;
//   - kept (the control that keeps the Breaking rows honest): a neutral edit is observed by the
//     operator and keeps the namespace, and diff does not call it Breaking.
type denyCase struct {
	name string
	// sample is the config/samples file the case starts from.
	sample string
	// edit turns the sample into the case's spec.
	edit func(h *hicachev1alpha1.HiCacheDeployment)
	// verdict is what must happen; want is a part of the sentence the API server, the operator
	// and the plugin give (for Breaking and kept, of diff's line).
	verdict denyVerdict
	want    string
}

type denyVerdict int

const (
	refusedAtApply denyVerdict = iota
	refusedByOperator
	breaking
	kept
)

func (v denyVerdict) String() string {
	return [...]string{"refused at apply", "refused by the operator", "Breaking", "kept"}[v]
}

func withEnv(name, value string) func(h *hicachev1alpha1.HiCacheDeployment) {
	return func(h *hicachev1alpha1.HiCacheDeployment) {
		h.Spec.Template.Env = append(h.Spec.Template.Env, corev1.EnvVar{Name: name, Value: value})
	}
}

// mountEmptyDir mounts a new emptyDir volume into the serving container at path.
func mountEmptyDir(h *hicachev1alpha1.HiCacheDeployment, name, path string) {
	h.Spec.Template.Volumes = append(h.Spec.Template.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	h.Spec.Template.VolumeMounts = append(h.Spec.Template.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path})
}

func denyCases() []denyCase {
	return []denyCase{
		// Environment variables: the DeepSeek-V4 KV layout set by env is a layout fact.
		{name: "env layout variable", sample: "hicachedeployment_deepseek_v4.yaml",
			edit: withEnv("SGLANG_DSV4_KV_LAYOUT", "v4_fused"), verdict: breaking,
			want: "env SGLANG_DSV4_KV_LAYOUT v4 → v4_fused (chooses the DeepSeek-V4 KV layout"},
		// A layout variable of one role of a prefill/decode deployment is a fact of the namespace
		// both roles share.
		{name: "decode-only env layout variable", sample: "pd_deepseek_v4.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.Roles.Decode.Template.Env = []corev1.EnvVar{{Name: "SGLANG_DSV4_KV_LAYOUT", Value: "v4_fused"}}
			}, verdict: breaking, want: "SGLANG_DSV4_KV_LAYOUT"},
		{name: "neutral env variable", sample: "hicachedeployment_qwen3.yaml",
			edit: withEnv("SGLANG_TORCH_PROFILER_DIR", "/tmp/profiles"), verdict: kept},
		{name: "unknown SGLANG_ variable", sample: "hicachedeployment_qwen3.yaml",
			edit: withEnv("SGLANG_NO_SUCH_VARIABLE", "1"), verdict: refusedByOperator,
			want: "spec.template.env[0]: sets SGLANG_NO_SUCH_VARIABLE"},
		{name: "unknown MC_ variable", sample: "hicachedeployment_qwen3.yaml",
			edit: withEnv("MC_NO_SUCH_VARIABLE", "1"), verdict: refusedByOperator,
			want: "spec.template.env[0]: sets MC_NO_SUCH_VARIABLE"},
		{name: "layout variable from a ConfigMap", sample: "hicachedeployment_deepseek_v4.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.Template.Env = append(h.Spec.Template.Env, corev1.EnvVar{Name: "SGLANG_DSV4_KV_LAYOUT", ValueFrom: &corev1.EnvVarSource{
					ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "layout"}, Key: "kv"}}})
			}, verdict: refusedByOperator, want: "SGLANG_DSV4_KV_LAYOUT"},

		// $( expansion: the kubelet would substitute a value per pod under one namespace.
		{name: "reference in extraArgs", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.Template.ExtraArgs = []string{"--json-model-override-args", "$(OVR)"}
				h.Spec.Template.Env = []corev1.EnvVar{{Name: "OVR", Value: `{"num_hidden_layers": 2}`}}
			}, verdict: refusedAtApply, want: "spec.template.extraArgs holds a $(NAME) reference"},
		{name: "reference in the served name", sample: "hicachedeployment_qwen3.yaml",
			edit:    func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Model.ServedName = "$(HICACHE_ADMIN_API_KEY)" },
			verdict: refusedAtApply, want: "spec.model.servedName holds a $(NAME) reference"},
		{name: "reference in an env value", sample: "hicachedeployment_qwen3.yaml",
			edit: withEnv("SGLANG_DSV4_KV_LAYOUT", "$(OVR)"), verdict: refusedByOperator,
			want: `spec.template.env[0].value: "$(OVR)" holds a $(NAME) reference`},

		// The SGLang release is read from the image.
		{name: "image of an unchecked release", sample: "hicachedeployment_qwen3.yaml",
			edit:    func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.SGLang.Image = "lmsysorg/sglang:v0.6.0" },
			verdict: refusedAtApply, want: "spec.sglang.image: the operator has the arguments of SGLang 0.5.23 only"},
		{name: "unchecked release declared compatible", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.SGLang.Image = "lmsysorg/sglang:v0.6.0"
				h.Spec.SGLang.CompatibleRelease = "0.5.23"
			}, verdict: breaking, want: "SGLang version line 0.5 → 0.6.0"},
		{name: "image whose release is not read", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.SGLang.Image = "registry.example/team/sglang:latest"
			},
			verdict: refusedAtApply, want: "spec.sglang.image: the operator has the arguments of SGLang 0.5.23 only"},
		// A private build declared compatible: without a digest its bytes can change under the
		// same reference.
		{name: "unread release by tag, declared compatible", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.SGLang.Image = "registry.example/team/sglang:latest"
				h.Spec.SGLang.CompatibleRelease = "0.5.23"
			}, verdict: refusedAtApply, want: "spec.sglang.image: its SGLang release is not read from its tag"},

		// Model identity: a hub model moves under a branch.
		{name: "hub model at a branch", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.Model.Source, h.Spec.Model.Path, h.Spec.Model.Revision = nil, "Qwen/Qwen3-32B", "main"
			}, verdict: refusedAtApply, want: "spec.model.revision must be a commit (40 lowercase hex characters) when spec.model.path is a hub id"},
		{name: "hub draft without a revision", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.Topology.Draft = &hicachev1alpha1.DraftSpec{Algorithm: "EAGLE3", ModelPath: "org/qwen3-eagle3"}
			}, verdict: refusedAtApply, want: "spec.topology.draft.revision must be a commit"},

		// Pod parts that can change the bytes SGLang reads.
		{name: "a claim over SGLang's install", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				h.Spec.Template.Volumes = append(h.Spec.Template.Volumes, corev1.Volume{Name: "patch",
					VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "sglang-patch", ReadOnly: true}}})
				h.Spec.Template.VolumeMounts = append(h.Spec.Template.VolumeMounts, corev1.VolumeMount{Name: "patch", MountPath: "/sgl-workspace", ReadOnly: true})
			}, verdict: breaking, want: "mount /sgl-workspace"},
		{name: "scratch space at /tmp", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				mountEmptyDir(h, "scratch", "/tmp")
			}, verdict: kept},
		{name: "a sidecar writing what SGLang reads", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				mountEmptyDir(h, "templates", "/etc/templates")
				h.Spec.Template.Containers = []corev1.Container{{Name: "sync", Image: "busybox",
					VolumeMounts: []corev1.VolumeMount{{Name: "templates", MountPath: "/out"}}}}
			}, verdict: refusedByOperator, want: `mounts volume "templates" writable`},
		{name: "a file flag on a volume made at run time", sample: "hicachedeployment_qwen3.yaml",
			edit: func(h *hicachev1alpha1.HiCacheDeployment) {
				mountEmptyDir(h, "templates", "/etc/templates")
				h.Spec.Template.ExtraArgs = []string{"--chat-template", "/etc/templates/chat.jinja"}
			}, verdict: refusedByOperator, want: "sets --chat-template /etc/templates/chat.jinja, which SGLang reads, on volume \"templates\""},
	}
}

// TestDenyByDefaultCases runs every case against the real API server and the operator, and the
// plugin on the same spec files.
func TestDenyByDefaultCases(t *testing.T) {
	plugin := buildPlugin(t)
	for _, tc := range denyCases() {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			ns, _ := namespaceWithBackend(t)
			base := sampleHCD(t, ns, tc.sample)
			variant := base.DeepCopy()
			tc.edit(variant)
			dir := t.TempDir()
			baseFile, variantFile := writeSpec(t, dir, "base.yaml", base), writeSpec(t, dir, "variant.yaml", variant)
			switch tc.verdict {
			case refusedAtApply:
				err := k8s.Create(context.Background(), variant)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("kubectl apply: %v; want a refusal with %q", err, tc.want)
				}
				wantPluginRefuses(t, plugin, tc.want, "plan", "-f", variantFile)
				wantPluginRefuses(t, plugin, tc.want, "diff", baseFile, variantFile)
			case refusedByOperator:
				create(t, variant)
				waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, variant.Name, hicachev1alpha1.ConditionReady, metav1.ConditionFalse, 30*time.Second)
				eventually(t, 30*time.Second, "Ready InvalidSpec with the reason", func() (bool, string) {
					c := meta.FindStatusCondition(getHCD(t, ns, variant.Name).Status.Conditions, hicachev1alpha1.ConditionReady)
					return c != nil && c.Reason == hicachev1alpha1.ReasonInvalidSpec && strings.Contains(c.Message, tc.want), condString(c)
				})
				if g := groups(t, ns, variant.Name); len(g) != 0 {
					t.Errorf("%d serving groups were created for a refused spec", len(g))
				}
				wantPluginRefuses(t, plugin, tc.want, "plan", "-f", variantFile)
				wantPluginRefuses(t, plugin, tc.want, "diff", baseFile, variantFile)
			case breaking, kept:
				create(t, base)
				before := waitNamespace(t, ns, base.Name, 0)
				update(t, base, tc.edit)
				after := waitNamespace(t, ns, base.Name, getHCD(t, ns, base.Name).Generation)
				out := runPluginBinary(t, plugin, "diff", baseFile, variantFile)
				if out.code != 0 {
					t.Fatalf("kubectl hicache diff: exit %d\n%s", out.code, out.stderr)
				}
				if tc.verdict == breaking {
					if after == before {
						t.Errorf("the edit kept L3 namespace %s; want a new one", before)
					}
					if !strings.HasPrefix(out.stdout, "Breaking:") || !strings.Contains(out.stdout, tc.want) {
						t.Errorf("kubectl hicache diff does not call it Breaking for %q:\n%s", tc.want, out.stdout)
					}
				} else {
					if after != before {
						t.Errorf("a neutral edit moved the L3 namespace %s → %s", before, after)
					}
					if strings.HasPrefix(out.stdout, "Breaking:") {
						t.Errorf("kubectl hicache diff calls a neutral edit Breaking:\n%s", out.stdout)
					}
				}
			}
		})
	}
}

func condString(c *metav1.Condition) string {
	if c == nil {
		return "no Ready condition"
	}
	return string(c.Status) + " " + c.Reason + ": " + c.Message
}

// waitNamespace waits until the operator has observed generation gen (any, when 0) and reports
// an L3 namespace, and returns it.
func waitNamespace(t *testing.T, ns, name string, gen int64) string {
	t.Helper()
	var got string
	eventually(t, 60*time.Second, "the L3 namespace in status", func() (bool, string) {
		h := getHCD(t, ns, name)
		if h.Status.Cache == nil || h.Status.Cache.Namespace == "" {
			return false, "no namespace in status"
		}
		if gen != 0 && h.Status.ObservedGeneration < gen {
			return false, "generation not observed yet"
		}
		if c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionReady); c != nil && c.Reason == hicachev1alpha1.ReasonInvalidSpec {
			return false, "InvalidSpec: " + c.Message
		}
		got = h.Status.Cache.Namespace
		return true, ""
	})
	return got
}

// writeSpec writes a deployment as the YAML a user keeps.
func writeSpec(t *testing.T, dir, file string, h *hicachev1alpha1.HiCacheDeployment) string {
	t.Helper()
	h = h.DeepCopy()
	h.APIVersion, h.Kind = hicachev1alpha1.GroupVersion.String(), "HiCacheDeployment"
	h.Namespace, h.ResourceVersion = "", ""
	b, err := yaml.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	pluginOnce sync.Once
	pluginPath string
	pluginErr  error
)

// buildPlugin builds kubectl-hicache as a user installs it (once per run).
func buildPlugin(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kubectl-hicache-")
		if err != nil {
			pluginErr = err
			return
		}
		pluginPath = filepath.Join(dir, "kubectl-hicache")
		cmd := exec.Command("go", "build", "-o", pluginPath, "./cmd/kubectl-hicache")
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			pluginErr = err
			pluginPath = string(out)
		}
	})
	if pluginErr != nil {
		t.Fatalf("building kubectl-hicache: %v\n%s", pluginErr, pluginPath)
	}
	return pluginPath
}

type pluginRun struct {
	stdout, stderr string
	code           int
}

// runPluginBinary runs the plugin without a cluster: plan and diff read files only.
func runPluginBinary(t *testing.T, plugin string, args ...string) pluginRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plugin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := pluginRun{stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running kubectl-hicache: %v", err)
	}
	return r
}

func wantPluginRefuses(t *testing.T, plugin, want string, args ...string) {
	t.Helper()
	r := runPluginBinary(t, plugin, args...)
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("kubectl hicache %s: exit %d, stderr %q; want a refusal with %q", strings.Join(args, " "), r.code, r.stderr, want)
	}
}
