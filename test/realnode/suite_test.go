// Package realnode tests the operator as a user runs it: installed with Helm into its own pod on
// the local cluster's real node (kubelet, containerd, runc; images built by make images), with the
// managed Mooncake master, its store pods and the flush Jobs running there too. SGLang ranks
// need GPUs and stay on the kwok nodes. Every test shares one cluster and one operator; each
// uses namespaces of its own, labelled with the Pod Security level the user guide promises.
//
// Nothing here runs the operator on the host: what the operator does, its pod does. Traffic from
// the test goes only to loopback (the API server) or into the cluster's network namespace
// (through RealNode.DialContext).
package realnode

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const (
	// operatorNS is where the chart is installed; release is its release name.
	operatorNS = "hicache-system"
	release    = "hicache-operator"
	// leaderElectionID is cmd/manager's LeaderElectionID.
	leaderElectionID = "hicache-operator.hicache.io"
	// restricted is the Pod Security level the user guide promises for the operator's pod and
	// every pod it runs on a CPU node: the backend's master and store pods, the flush Jobs.
	restricted = "restricted"
	// baseline is the level of a namespace that also runs SGLang ranks: their image runs as
	// root.
	baseline = "baseline"
)

var (
	cluster *localcluster.Cluster
	node    *localcluster.RealNode
	k8s     client.Client
	cs      kubernetes.Interface
	// inNetns is an HTTP client whose connections start inside the cluster's network
	// namespace, where pod and Service addresses are reachable.
	inNetns *http.Client
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var logf = testutil.SuiteLogger("realnode")

func TestMain(m *testing.M) {
	os.Exit(testutil.RunClusterSuite(m, testutil.ClusterSuite{
		Name: "test/realnode",
		Options: localcluster.Options{
			// A failed test keeps its namespace and its serving group until the package ends, and a
			// passed one's go only as its namespace is deleted, in the background: six tests run a
			// Qwen3 group of 4 GPUs, 24 in all, so three 8-GPU nodes, and one to spare.
			Nodes:    localcluster.GPUNodes(4, 8),
			RealNode: &localcluster.RealNodeOptions{},
			KeepDir:  os.Getenv("REALNODE_KEEP") != "",
		},
		Setup:     setup,
		OnFailure: dumpOperator,
	}))
}

// setup makes the suite's clients and installs the operator with Helm.
func setup(ctx context.Context, c *localcluster.Cluster) error {
	cluster, node = c, c.RealNode()
	inNetns = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: node.DialContext}}
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
	installed := time.Now()
	if err := installOperator(ctx); err != nil {
		return err
	}
	logf("operator installed with Helm and Ready in its pod in %s", time.Since(installed).Round(time.Millisecond))
	return nil
}

// chartValues are the chart's values for the local cluster: the locally built images, never
// pulled, and the operator's pod placed on the real node.
func chartValues() map[string]any {
	v := images.LocalChartValues()
	v["nodeSelector"] = localcluster.RealNodeSelector()
	v["tolerations"] = []corev1.Toleration{localcluster.RealNodeToleration()}
	// Probes of the backends every 2 s, so that readiness changes show within seconds.
	v["backendPollInterval"] = "2s"
	return v
}

// installOperator runs helm install into a namespace that enforces the restricted Pod Security
// level, and waits until the operator's pod is Ready.
func installOperator(ctx context.Context) error {
	if err := createNamespace(ctx, operatorNS, restricted); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "realnode-helm-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	values, err := json.Marshal(chartValues())
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
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm install %s: %v\n%s", release, err, out)
	}
	return nil
}

// createNamespace creates a namespace that enforces a Pod Security level, and waits for its
// default ServiceAccount (pods are refused until it exists).
func createNamespace(ctx context.Context, name, level string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": level,
	}}}
	if err := k8s.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return cluster.WaitForServiceAccount(ctx, name)
}

// newNamespace is a namespace for one test that enforces the Pod Security level. It is deleted
// when the test passes, so that the GPUs and the real node's memory its pods hold go back to the
// next tests; a failed test's namespace stays for its pods and events to be read.
func newNamespace(t *testing.T, prefix, level string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := createNamespace(ctx, name, level); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("keeping namespace %s of the failed test", name)
			return
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := k8s.Delete(context.Background(), ns); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	return name
}

// operatorPod is the operator's running pod.
func operatorPod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := cs.CoreV1().Pods(operatorNS).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=manager"})
	if err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d operator pods, want 1", len(live))
	}
	return &live[0], nil
}

// dumpOperator prints the operator pod's state and log, for a failure.
func dumpOperator(ctx context.Context) {
	pods, err := cs.CoreV1().Pods(operatorNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		fmt.Fprintf(os.Stderr, "pod %s on %q: phase %s, conditions %+v\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
		tail := int64(60)
		logs, err := cs.CoreV1().Pods(operatorNS).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
		if err == nil {
			fmt.Fprintf(os.Stderr, "--- log of %s ---\n%s\n", p.Name, strings.TrimSpace(string(logs)))
		}
	}
	evs, err := cs.CoreV1().Events(operatorNS).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(os.Stderr, "event %s/%s %s: %s\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// admittedAsRestricted checks that the pod, as the operator made it, is admitted by Pod Security
// admission in a namespace enforcing restricted (a server-side dry run of a copy in the
// operator's namespace).
func admittedAsRestricted(t *testing.T, p *corev1.Pod) {
	t.Helper()
	cp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-", Namespace: operatorNS}, Spec: *p.Spec.DeepCopy()}
	cp.Spec.NodeName = ""
	// The copy runs as the operator's namespace's default account: the pod's own is elsewhere.
	cp.Spec.ServiceAccountName, cp.Spec.DeprecatedServiceAccount = "", ""
	if err := k8s.Create(context.Background(), cp, client.DryRunAll); err != nil {
		t.Errorf("pod %s/%s is not admitted under the %s level: %v", p.Namespace, p.Name, restricted, err)
	}
}
