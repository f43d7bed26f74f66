// Package engine runs the pinned SGLang release's real HTTP server (on CPU, image
// localhost/sglang-cpu built by `make image-sglang-cpu`) in the rank pod the operator renders, on the
// local cluster's real node, against a managed Mooncake backend there, and shows with real KV
// bytes what the operator's L3 namespaces prevent: a server that changes its KV layout and reads
// the objects another layout wrote under the same extra_backend_tag returns wrong tokens, with no
// error anywhere. `make test-engine` runs it; `make test` does not (it imports a several-GB image
// and starts the server a few times: see docs/benchmarks.md for its time).
//
// The real node has no GPU. It advertises nvidia.com/gpu as an extended resource no device plugin
// manages, so the scheduler and the kubelet count the one the rank pod requests and nothing is
// attached; the server runs with --device cpu (spec.template.extraArgs) and the image's
// SGLANG_USE_CPU_ENGINE=1.
package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const (
	operatorNS = "hicache-system"
	release    = "hicache-operator"
	// gpus is the nvidia.com/gpu the real node advertises: one rank pod, and one more for a
	// rollout that starts the new group before the old one is gone.
	gpus = 2
)

var (
	cluster *localcluster.Cluster
	node    *localcluster.RealNode
	k8s     client.Client
	cs      kubernetes.Interface
	// inNetns reaches pod and Service addresses inside the cluster's network namespace. Its
	// timeout covers a generation on two loaded cores.
	inNetns *http.Client
	// serverImage is the SGLang CPU image pinned by the digest the real node's containerd gives
	// it: an image whose release the operator does not read is accepted only by digest.
	serverImage string
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var logf = testutil.SuiteLogger("engine")

func serverTarball() string {
	for _, im := range images.All {
		if im.Ref == images.SGLangCPU {
			return filepath.Join(repoRoot(), images.Dir, im.File)
		}
	}
	return ""
}

func TestMain(m *testing.M) {
	if _, err := os.Stat(serverTarball()); err != nil {
		fmt.Fprintf(os.Stderr, "test/engine: the SGLang CPU image is not built (%v): run make image-sglang-cpu (make test-engine does)\n", err)
		os.Exit(1)
	}
	os.Exit(testutil.RunClusterSuite(m, testutil.ClusterSuite{
		Name: "test/engine",
		Options: localcluster.Options{
			RealNode: &localcluster.RealNodeOptions{},
			KeepDir:  os.Getenv("ENGINE_KEEP") != "",
		},
		Setup:     setup,
		OnFailure: dumpOperator,
	}))
}

func setup(ctx context.Context, c *localcluster.Cluster) error {
	cluster, node = c, c.RealNode()
	inNetns = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{DialContext: node.DialContext}}
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, hicachev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	var err error
	if k8s, err = client.New(cluster.Config(), client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if cs, err = kubernetes.NewForConfig(cluster.Config()); err != nil {
		return err
	}
	// The server image is imported after the cluster is up: several GB take longer than the
	// cluster's start budget.
	began := time.Now()
	if _, err := node.ImportImage(ctx, serverTarball()); err != nil {
		return err
	}
	digest, err := imageDigest(ctx, images.SGLangCPU)
	if err != nil {
		return err
	}
	// containerd 1.6's CRI resolves repo@digest only by an image of that name (a pull records
	// one; an import does not): name the imported image so, as a registry's pull would.
	repo, _, _ := strings.Cut(images.SGLangCPU, ":")
	if err := node.TagImage(ctx, images.SGLangCPU, repo+"@"+digest); err != nil {
		return err
	}
	serverImage = images.SGLangCPU + "@" + digest
	logf("%s imported into the real node in %s", serverImage, time.Since(began).Round(time.Millisecond))
	if err := advertiseGPUs(ctx); err != nil {
		return err
	}
	installed := time.Now()
	if err := installOperator(ctx); err != nil {
		return err
	}
	logf("operator installed with Helm and Ready in its pod in %s", time.Since(installed).Round(time.Millisecond))
	return nil
}

// imageDigest is the manifest digest the node's containerd records for ref, which the CRI
// resolves ref@digest by.
func imageDigest(ctx context.Context, ref string) (string, error) {
	out, err := exec.CommandContext(ctx, "ctr", "--address", node.ContainerdSocket, "-n", localcluster.ContainerdNamespace,
		"images", "ls", "name=="+ref).Output()
	if err != nil {
		return "", fmt.Errorf("ctr images ls %s: %w", ref, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == ref && strings.HasPrefix(f[2], "sha256:") {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("the real node's containerd has no image %s:\n%s", ref, out)
}

// advertiseGPUs gives the real node nvidia.com/gpu capacity, as the Kubernetes task "Advertise
// Extended Resources for a Node" does, and waits until the kubelet reports it allocatable.
func advertiseGPUs(ctx context.Context) error {
	patch := fmt.Sprintf(`{"status":{"capacity":{%q:"%d"}}}`, hicachedeployment.GPUResource, gpus)
	if _, err := cs.CoreV1().Nodes().PatchStatus(ctx, node.Name, []byte(patch)); err != nil {
		return fmt.Errorf("advertising %s on the real node: %w", hicachedeployment.GPUResource, err)
	}
	want := resource.MustParse(fmt.Sprint(gpus))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q, ok := n.Status.Allocatable[hicachedeployment.GPUResource]; ok && q.Cmp(want) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the real node's allocatable %s is not %d after 2m: %v", hicachedeployment.GPUResource, gpus, n.Status.Allocatable)
		}
		time.Sleep(time.Second)
	}
}

func installOperator(ctx context.Context) error {
	if err := createNamespace(ctx, operatorNS, "restricted"); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "engine-helm-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	v := images.LocalChartValues()
	v["nodeSelector"] = localcluster.RealNodeSelector()
	v["tolerations"] = []corev1.Toleration{localcluster.RealNodeToleration()}
	v["backendPollInterval"] = "2s"
	values, err := json.Marshal(v)
	if err != nil {
		return err
	}
	valuesFile := filepath.Join(dir, "values.json")
	if err := os.WriteFile(valuesFile, values, 0o600); err != nil {
		return err
	}
	hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(hctx, filepath.Join(repoRoot(), "bin", "helm"), "install", release,
		filepath.Join(repoRoot(), "charts", "hicache-operator"), "--kubeconfig", kubeconfig,
		"-n", operatorNS, "-f", valuesFile, "--wait", "--timeout", "150s")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "data"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm install %s: %v\n%s", release, err, out)
	}
	return nil
}

func createNamespace(ctx context.Context, name, level string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": level,
	}}}
	if err := k8s.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return cluster.WaitForServiceAccount(ctx, name)
}

// dumpOperator prints the operator's log and every pod's state and the sglang containers' logs
// of the test's namespaces, for a failure.
func dumpOperator(ctx context.Context) {
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, ns := range nss.Items {
		if ns.Name != operatorNS && !strings.HasPrefix(ns.Name, "engine-") {
			continue
		}
		pods, err := cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			fmt.Fprintf(os.Stderr, "pod %s/%s on %q: phase %s, conditions %+v\n", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
			for _, c := range p.Spec.Containers {
				if c.Name != "manager" && c.Name != "sglang" && c.Name != "guard" {
					continue
				}
				tail := int64(40)
				logs, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &tail}).DoRaw(ctx)
				if err == nil {
					fmt.Fprintf(os.Stderr, "--- log of %s/%s %s ---\n%s\n", p.Namespace, p.Name, c.Name, strings.TrimSpace(string(logs)))
				}
			}
		}
		evs, err := cs.CoreV1().Events(ns.Name).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, e := range evs.Items {
				fmt.Fprintf(os.Stderr, "event %s %s/%s %s: %s\n", ns.Name, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
}
