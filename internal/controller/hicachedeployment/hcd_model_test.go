package hicachedeployment

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/hfcli"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

func volumeNamed(pod corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

func mountNamed(c corev1.Container, name string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == name {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func argValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func TestBuildGroupModelSource(t *testing.T) {
	cases := map[string]struct {
		hcd       *hicachev1alpha1.HiCacheDeployment
		wantPath  string
		check     func(t *testing.T, v *corev1.Volume)
		wantInits int
	}{
		"no source: spec.model.path as it is, nothing mounted": {
			hcd: testsupport.MakeHCD("q").Obj(), wantPath: "org/q",
		},
		"a claim, read-only on both sides": {
			hcd: testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).FromClaim("dsv4-weights", "DeepSeek-V4").Obj(), wantPath: "/models/DeepSeek-V4",
			check: func(t *testing.T, v *corev1.Volume) {
				if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "dsv4-weights" || !v.PersistentVolumeClaim.ReadOnly {
					t.Errorf("volume %+v, want the claim dsv4-weights read-only", v.VolumeSource)
				}
			},
		},
		"a node's directory, which must exist": {
			hcd: testsupport.MakeHCD("q").FromHostPath("/mnt/models", "").Obj(), wantPath: "/models",
			check: func(t *testing.T, v *corev1.Volume) {
				if v.HostPath == nil || v.HostPath.Path != "/mnt/models" || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
					t.Errorf("volume %+v, want hostPath /mnt/models of type Directory", v.VolumeSource)
				}
			},
		},
		"a hub download into the pod's own volume": {
			hcd: testsupport.MakeHCD("q").FromHub("Qwen/Qwen3-32B", "9e1a111111111111111111111111111111111111", "hf-token", "token").Obj(), wantPath: "/models/Qwen/Qwen3-32B", wantInits: 1,
			check: func(t *testing.T, v *corev1.Volume) {
				if v.EmptyDir == nil {
					t.Errorf("volume %+v, want an emptyDir", v.VolumeSource)
				}
			},
		},
	}
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sts := mustBuildGroup(t, tc.hcd, 0)
			pod := sts.Spec.Template.Spec
			c := pod.Containers[0]
			if err := spec.Validate(sglang.ExpandVarRefs(c.Args, map[string]string{"NODE_RANK": "0", "POD_IP": "10.0.0.1"})); err != nil {
				t.Errorf("the pinned SGLang refuses the command line: %v", err)
			}
			if got, _ := argValue(c.Args, "--model-path"); got != tc.wantPath {
				t.Errorf("--model-path %q, want %q", got, tc.wantPath)
			}
			if len(pod.InitContainers) != tc.wantInits {
				t.Errorf("%d init containers, want %d", len(pod.InitContainers), tc.wantInits)
			}
			v, m := volumeNamed(pod, modelVolume), mountNamed(c, modelVolume)
			if tc.check == nil {
				if v != nil || m != nil {
					t.Errorf("a deployment without a source mounts %+v", v)
				}
				return
			}
			if v == nil || m == nil {
				t.Fatalf("no model volume (%v) or mount (%v)", v, m)
			}
			tc.check(t, v)
			if m.MountPath != "/models" || !m.ReadOnly {
				t.Errorf("the serving container mounts the model at %s, read-only %v; want /models read-only", m.MountPath, m.ReadOnly)
			}
		})
	}
}

// TestHubDownloadContainer: the serving image's own hub CLI, a command line the pinned release
// accepts, and the token only as a secretKeyRef.
func TestHubDownloadContainer(t *testing.T) {
	h := testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Storage("mooncake").
		FromHub("deepseek-ai/DeepSeek-V4", "5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b", "hf-token", "token").Image("lmsysorg/sglang:v0.5.23").Obj()
	sts := mustBuildGroup(t, h, 0)
	pod := sts.Spec.Template.Spec
	if len(pod.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the download", len(pod.InitContainers))
	}
	init := pod.InitContainers[0]
	if init.Image != "sglang:test" || init.Image != pod.Containers[0].Image {
		t.Errorf("the download runs %q, the server %q: want the serving image", init.Image, pod.Containers[0].Image)
	}
	cli, err := hfcli.Default()
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Validate(append(init.Command, init.Args...)); err != nil {
		t.Errorf("the pinned hub CLI (huggingface_hub %s) refuses %q: %v", cli.Version, init.Command, err)
	}
	want := []string{"hf", "download", "deepseek-ai/DeepSeek-V4", "--revision", "5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b", "--local-dir", "/models/deepseek-ai/DeepSeek-V4"}
	if strings.Join(init.Command, " ") != strings.Join(want, " ") {
		t.Errorf("command %q, want %q", init.Command, want)
	}
	if got, _ := argValue(pod.Containers[0].Args, "--model-path"); got != "/models/deepseek-ai/DeepSeek-V4" {
		t.Errorf("the server loads %q, not where the download went", got)
	}
	if m := mountNamed(init, modelVolume); m == nil || m.ReadOnly || m.MountPath != "/models" {
		t.Errorf("the download mounts %+v, want /models writable", m)
	}
	if len(init.Env) != 1 || init.Env[0].Name != HubTokenEnv || init.Env[0].Value != "" || init.Env[0].ValueFrom == nil ||
		init.Env[0].ValueFrom.SecretKeyRef == nil || init.Env[0].ValueFrom.SecretKeyRef.Name != "hf-token" || init.Env[0].ValueFrom.SecretKeyRef.Key != "token" {
		t.Errorf("download env %+v, want HF_TOKEN from the Secret hf-token's key token only", init.Env)
	}
	// The serving container gets no token: it loads a local directory.
	for _, e := range pod.Containers[0].Env {
		if e.Name == HubTokenEnv {
			t.Errorf("the serving container has %s", HubTokenEnv)
		}
	}
	// A public repository: no variable at all.
	pub := mustBuildGroup(t, testsupport.MakeHCD("q").FromHub("Qwen/Qwen3-8B", "1111111111111111111111111111111111111111", "", "").Obj(), 0)
	if env := pub.Spec.Template.Spec.InitContainers[0].Env; len(env) != 0 {
		t.Errorf("a download without a token has env %+v", env)
	}
}

// TestRankProbes: HTTP probes on the paths both the leader's server and a follower's stand-in
// serve, a startup budget from the model's size, and /health as a state check.
func TestRankProbes(t *testing.T) {
	cases := map[string]struct {
		hcd           *hicachev1alpha1.HiCacheDeployment
		wantStartupAt int32
	}{
		"DeepSeek-V4 TP16, size unknown": {hcd: testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Obj(), wantStartupAt: 5400},
		"700Gi of weights":               {hcd: testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).WeightsSize("700Gi").Obj(), wantStartupAt: 5850},
		"set by hand":                    {hcd: testsupport.MakeHCD("q").StartupSeconds(125).Obj(), wantStartupAt: 130},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := mustBuildGroup(t, tc.hcd, 0).Spec.Template.Spec.Containers[0]
			for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil || p.Exec != nil {
					t.Fatalf("%s probe %+v, want an HTTP GET", kind, p)
				}
				// SGLang's port by number: the proxy's, which passes the probe to SGLang.
				if p.HTTPGet.Port.IntValue() != SGLangPort {
					t.Errorf("%s probe asks port %s, want %d", kind, p.HTTPGet.Port.String(), SGLangPort)
				}
			}
			if c.StartupProbe.HTTPGet.Path != "/health" || c.ReadinessProbe.HTTPGet.Path != "/health" || c.LivenessProbe.HTTPGet.Path != "/health_generate" {
				t.Errorf("paths startup %s readiness %s liveness %s", c.StartupProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
			}
			if got := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; got != tc.wantStartupAt {
				t.Errorf("the startup probe gives up after %d s, want %d s", got, tc.wantStartupAt)
			}
			// SGLang gives /health_generate 20 s before answering 503.
			if c.LivenessProbe.TimeoutSeconds <= 20 {
				t.Errorf("liveness timeout %d s is within SGLang's own 20 s", c.LivenessProbe.TimeoutSeconds)
			}
			if e, ok := testsupport.EnvValue(c.Env, HealthGenerationEnv); !ok || e.Value != "false" {
				t.Errorf("%s = %q, want false so that /health checks state only", HealthGenerationEnv, e.Value)
			}
		})
	}
	// A user's own setting of the variable wins, once.
	c := mustBuildGroup(t, testsupport.MakeHCD("q").Env(HealthGenerationEnv, "true").Obj(), 0).Spec.Template.Spec.Containers[0]
	n := 0
	for _, e := range c.Env {
		if e.Name == HealthGenerationEnv {
			n++
			if e.Value != "true" {
				t.Errorf("%s = %q, want the user's true", e.Name, e.Value)
			}
		}
	}
	if n != 1 {
		t.Errorf("%s appears %d times; server-side apply refuses duplicates", HealthGenerationEnv, n)
	}
}

// TestModelSourceChangesRollTheGroups: a new claim or token reaches the pods (the template
// changes), and the spec's JSON names the token only by reference.
func TestModelSourceChangesRollTheGroups(t *testing.T) {
	a := mustBuildGroup(t, testsupport.MakeHCD("q").FromHub("Qwen/Qwen3-8B", "1111111111111111111111111111111111111111", "tok-a", "token").Obj(), 0)
	b := mustBuildGroup(t, testsupport.MakeHCD("q").FromHub("Qwen/Qwen3-8B", "1111111111111111111111111111111111111111", "tok-b", "token").Obj(), 0)
	if a.Annotations[hicachev1alpha1.AnnotationTemplateHash] == b.Annotations[hicachev1alpha1.AnnotationTemplateHash] {
		t.Error("another token Secret keeps the template hash: running pods would keep the old one")
	}
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"secretKeyRef":{"name":"tok-a","key":"token"}`) {
		t.Errorf("the StatefulSet does not reference the token's Secret: %s", raw)
	}
}
