package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/hfcli"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// dsv4FromClaim is DeepSeek-V4 over two nodes with its weights, and its DSpark draft's, in a
// claim.
const dsv4FromClaim = `
metadata: {name: dsv4}
spec:
  model:
    servedName: deepseek-v4
    revision: 5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b
    weightsSize: 700Gi
    source:
      pvc: {claimName: dsv4-weights}
      subPath: deepseek-ai/DeepSeek-V4
  profile: DeepSeekV4
  topology:
    tensorParallel: 16
    gpusPerNode: 8
    draft: {algorithm: DSPARK, modelPath: /models/deepseek-ai/DeepSeek-V4-DSpark}
  hicache: {ratio: "2", pageSize: 64}
  storage: {backendRef: {name: mooncake}, globalSegmentSize: 4Gi}
`

// dsv4FromHub is DeepSeek-V4 downloaded from the hub at start with a token from a Secret.
const dsv4FromHub = `
metadata: {name: dsv4}
spec:
  model:
    revision: 5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b
    source:
      hub:
        repo: deepseek-ai/DeepSeek-V4
        tokenSecretRef: {name: hf-token, key: token}
        cacheSizeLimit: 900Gi
  profile: DeepSeekV4
  topology: {tensorParallel: 16, gpusPerNode: 8}
  hicache: {ratio: "2", pageSize: 64}
  storage: {backendRef: {name: mooncake}, globalSegmentSize: 4Gi}
`

// checkProbes checks that a rank's SGLang container carries the startup, readiness and
// liveness probes the operator renders, the startup one within budget seconds.
func checkProbes(t *testing.T, p corev1.Pod, budget int32) {
	t.Helper()
	c := p.Spec.Containers[0]
	for kind, want := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{
		"startup":   {c.StartupProbe, "/health"},
		"readiness": {c.ReadinessProbe, "/health"},
		"liveness":  {c.LivenessProbe, "/health_generate"},
	} {
		if want.probe == nil || want.probe.HTTPGet == nil {
			t.Errorf("pod %s: %s probe %+v, want an HTTP GET of %s", p.Name, kind, want.probe, want.path)
			continue
		}
		// Port 30000 by number: the proxy's in front of SGLang, which passes the probe on.
		if want.probe.HTTPGet.Path != want.path || want.probe.HTTPGet.Port.IntValue() != hicachedeployment.SGLangPort {
			t.Errorf("pod %s: %s probe asks %s on %s, want %s on port %d", p.Name, kind, want.probe.HTTPGet.Path, want.probe.HTTPGet.Port.String(), want.path, hicachedeployment.SGLangPort)
		}
	}
	if c.StartupProbe != nil {
		if got := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; got != budget {
			t.Errorf("pod %s: the startup probe gives up after %d s, want %d s", p.Name, got, budget)
		}
	}
}

func modelVolumeOf(p corev1.Pod) (*corev1.Volume, *corev1.VolumeMount) {
	var vol *corev1.Volume
	for i := range p.Spec.Volumes {
		if p.Spec.Volumes[i].Name == "model" {
			vol = &p.Spec.Volumes[i]
		}
	}
	for i, m := range p.Spec.Containers[0].VolumeMounts {
		if m.Name == "model" {
			return vol, &p.Spec.Containers[0].VolumeMounts[i]
		}
	}
	return vol, nil
}

// TestDeepSeekV4WeightsFromAClaimGoReady: a two-node DeepSeek-V4 group mounts its weights and
// its draft's from one ReadOnlyMany claim, read-only in every rank, loads them from there, and
// goes Ready. (kwok runs no container: the mount is checked in the pods the scheduler placed
// with the claim bound.)
func TestDeepSeekV4WeightsFromAClaimGoReady(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	weightsClaim(t, ns, "dsv4-weights")
	create(t, hcd(t, ns, dsv4FromClaim))
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "dsv4", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 60*time.Second)
	checkRankFlags(t, ns, "dsv4", 2, m.RPCAddr)

	pods := rankPods(t, ns, "dsv4")
	for _, p := range pods {
		vol, mount := modelVolumeOf(p)
		if vol == nil || vol.PersistentVolumeClaim == nil || vol.PersistentVolumeClaim.ClaimName != "dsv4-weights" || !vol.PersistentVolumeClaim.ReadOnly {
			t.Errorf("pod %s: model volume %+v, want the claim dsv4-weights read-only", p.Name, vol)
		}
		if mount == nil || mount.MountPath != "/models" || !mount.ReadOnly {
			t.Errorf("pod %s: model mount %+v, want /models read-only", p.Name, mount)
		}
		args := p.Spec.Containers[0].Args
		if got, _ := flagValue(args, "--model-path"); got != "/models/deepseek-ai/DeepSeek-V4" {
			t.Errorf("pod %s: --model-path %q", p.Name, got)
		}
		if got, _ := flagValue(args, "--speculative-draft-model-path"); got != "/models/deepseek-ai/DeepSeek-V4-DSpark" {
			t.Errorf("pod %s: --speculative-draft-model-path %q", p.Name, got)
		}
		if _, ok := flagValue(args, "--revision"); ok {
			t.Errorf("pod %s passes --revision for a mounted directory", p.Name)
		}
		if len(p.Spec.InitContainers) != 0 {
			t.Errorf("pod %s has init containers %v; a claim needs none", p.Name, p.Spec.InitContainers)
		}
		// 10 minutes plus 1 minute per 8Gi of 700Gi.
		checkProbes(t, p, 600+5250)
	}
	h := getHCD(t, ns, "dsv4")
	if !strings.Contains(strings.Join(h.Status.Cache.Facts, "\n"), "model=pvc:dsv4-weights/deepseek-ai/DeepSeek-V4") ||
		!strings.Contains(strings.Join(h.Status.Cache.Facts, "\n"), "model.revision=5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b") {
		t.Errorf("layout facts %q lack the claim's model and its revision", h.Status.Cache.Facts)
	}
}

// TestDeepSeekV4FromTheHubWithASecretTokenGoesReady: every rank pod downloads the weights in an
// init container running the serving image's hub CLI, with a command line the pinned release
// accepts and the token only as a secretKeyRef; the group goes Ready, and the token's value is in
// no object but its Secret.
func TestDeepSeekV4FromTheHubWithASecretTokenGoesReady(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	token := canary(t, "hf-token")
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hf-token", Namespace: ns},
		StringData: map[string]string{"token": token},
	})
	create(t, hcd(t, ns, dsv4FromHub))
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "dsv4", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 60*time.Second)

	cli, err := hfcli.Default()
	if err != nil {
		t.Fatal(err)
	}
	pods := rankPods(t, ns, "dsv4")
	if len(pods) != 2 {
		t.Fatalf("%d rank pods, want 2", len(pods))
	}
	for _, p := range pods {
		if len(p.Spec.InitContainers) != 1 {
			t.Fatalf("pod %s: %d init containers, want the download", p.Name, len(p.Spec.InitContainers))
		}
		init := p.Spec.InitContainers[0]
		if init.Image != p.Spec.Containers[0].Image {
			t.Errorf("pod %s: the download runs %s, the server %s", p.Name, init.Image, p.Spec.Containers[0].Image)
		}
		if err := cli.Validate(append(init.Command, init.Args...)); err != nil {
			t.Errorf("pod %s: the pinned hub CLI (huggingface_hub %s) refuses %q: %v", p.Name, cli.Version, init.Command, err)
		}
		dir := resolve.HubDownloadDir("deepseek-ai/DeepSeek-V4")
		if got := strings.Join(init.Command, " "); got != "hf download deepseek-ai/DeepSeek-V4 --revision 5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b --local-dir "+dir {
			t.Errorf("pod %s: download %q", p.Name, got)
		}
		if got, _ := flagValue(p.Spec.Containers[0].Args, "--model-path"); got != dir {
			t.Errorf("pod %s: the server loads %q, not the download's %s", p.Name, got, dir)
		}
		var tokenEnv *corev1.EnvVar
		for i := range init.Env {
			if init.Env[i].Name == "HF_TOKEN" {
				tokenEnv = &init.Env[i]
			}
		}
		if tokenEnv == nil || tokenEnv.Value != "" || tokenEnv.ValueFrom == nil || tokenEnv.ValueFrom.SecretKeyRef == nil ||
			tokenEnv.ValueFrom.SecretKeyRef.Name != "hf-token" || tokenEnv.ValueFrom.SecretKeyRef.Key != "token" {
			t.Errorf("pod %s: HF_TOKEN %+v, want a secretKeyRef to hf-token's key token", p.Name, tokenEnv)
		}
		vol, mount := modelVolumeOf(p)
		if vol == nil || vol.EmptyDir == nil || vol.EmptyDir.SizeLimit == nil || vol.EmptyDir.SizeLimit.String() != "900Gi" {
			t.Errorf("pod %s: model volume %+v, want an emptyDir of at most 900Gi", p.Name, vol)
		}
		if mount == nil || !mount.ReadOnly {
			t.Errorf("pod %s: the server mounts the download %+v, want read-only", p.Name, mount)
		}
		// Size unknown: 16 GPUs x 40Gi.
		checkProbes(t, p, 600+4800)
	}
	found := searchCluster(t, forms(token))
	secret := fmt.Sprintf("secrets %s/hf-token", ns)
	if got := found.holders[forms(token)[1]]; len(got) != 1 || got[0] != secret {
		t.Errorf("the token's Secret data is held by %v, want %s only (is the search looking?)", got, secret)
	}
	for _, f := range forms(token) {
		for _, h := range found.holders[f] {
			if h != secret {
				t.Errorf("%s holds the token (as %.12s...)", h, f)
			}
		}
	}
	t.Logf("searched %d objects of %d resources", found.objects, found.resources)
}

// TestMissingWeightsClaimIsReportedThenRecovers: a claim that does not exist yet keeps the
// ranks unscheduled, and Ready says so in the scheduler's words, naming the claim; once the
// claim is there the group goes Ready.
func TestMissingWeightsClaimIsReportedThenRecovers(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	create(t, hcd(t, ns, dsv4FromClaim))
	eventually(t, 60*time.Second, "Ready names the missing claim", func() (bool, string) {
		h := getHCD(t, ns, "dsv4")
		for _, c := range h.Status.Conditions {
			if c.Type == hicachev1alpha1.ConditionReady {
				return c.Status == metav1.ConditionFalse && strings.Contains(c.Message, `persistentvolumeclaim "dsv4-weights" not found`), c.Message
			}
		}
		return false, "no Ready condition"
	})
	weightsClaim(t, ns, "dsv4-weights")
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "dsv4", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 90*time.Second)
}
