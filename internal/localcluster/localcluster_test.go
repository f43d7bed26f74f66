package localcluster_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
)

// TestCluster runs the whole cluster once and checks, in order, what the operator's tests
// rely on: GPU nodes, StatefulSet pods created, bound and made Ready, GPU accounting, garbage
// collection, pod failure, and a clean stop.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	began := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{KeepDir: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("cluster started in %s (dir %s)", time.Since(began).Round(time.Millisecond), c.Dir())
	dir := c.Dir()
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, c.LogDir())
		}
		if !stopped {
			_ = c.Stop()
		}
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})

	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns := makeNamespace(ctx, t, cs, "cluster")

	t.Run("nodes are Ready with eight GPUs each", func(t *testing.T) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, n := range nodes.Items {
			gpus := n.Status.Allocatable[localcluster.GPUResource]
			got[n.Name] = fmt.Sprintf("ready=%v gpus=%s product=%s", isNodeReady(&n), gpus.String(), n.Labels[localcluster.GPUProductLabel])
		}
		want := map[string]string{}
		for _, name := range []string{"gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3"} {
			want[name] = "ready=true gpus=8 product=" + localcluster.DefaultGPUProduct
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("nodes (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3"}, c.NodeNames()); diff != "" {
			t.Errorf("NodeNames (-want +got):\n%s", diff)
		}
	})

	t.Run("the API server listens on 127.0.0.1 and the kubeconfig works", func(t *testing.T) {
		u, err := url.Parse(c.Config().Host)
		if err != nil {
			t.Fatal(err)
		}
		if u.Hostname() != "127.0.0.1" {
			t.Errorf("API server host = %q, want 127.0.0.1", u.Hostname())
		}
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := c.WriteKubeconfig(path); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatalf("load the written kubeconfig: %v", err)
		}
		viaFile, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := viaFile.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Errorf("get namespace through the written kubeconfig: %v", err)
		}
	})

	sts := gpuStatefulSet(ns, "rank", 2)
	t.Run("StatefulSet pods are created, bound to distinct nodes and become Ready", func(t *testing.T) {
		began := time.Now()
		if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods := waitReadyPods(ctx, t, cs, ns, "app=rank", 2)
		t.Logf("2 pods Ready in %s", time.Since(began).Round(time.Millisecond))
		assertDistinctNodes(t, pods)
		for _, p := range pods {
			if p.Status.PodIP == "" {
				t.Errorf("pod %s has no IP", p.Name)
			}
		}
	})

	t.Run("the scheduler counts GPUs: a fifth 8-GPU pod stays Pending", func(t *testing.T) {
		scale := &autoscalingScale{replicas: 4}
		scale.apply(ctx, t, cs, ns, "rank")
		pods := waitReadyPods(ctx, t, cs, ns, "app=rank", 4)
		assertDistinctNodes(t, pods)

		if _, err := cs.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "extra"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var msg string
		waitFor(ctx, t, 30*time.Second, "pod extra to be reported Unschedulable", func(ctx context.Context) (bool, string, error) {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, "extra", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					msg = cond.Message
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("phase %s, node %q, conditions %v", p.Status.Phase, p.Spec.NodeName, p.Status.Conditions), nil
		})
		if !strings.Contains(msg, "Insufficient nvidia.com/gpu") {
			t.Errorf("Unschedulable message = %q, want it to name the GPUs", msg)
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "extra", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
			t.Errorf("pod extra: node %q phase %s, want unbound and Pending", p.Spec.NodeName, p.Status.Phase)
		}
	})

	t.Run("deleting the StatefulSet garbage-collects its pods and frees the GPUs", func(t *testing.T) {
		began := time.Now()
		if err := cs.AppsV1().StatefulSets(ns).Delete(ctx, "rank", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 60*time.Second, "the StatefulSet's pods to be garbage-collected", func(ctx context.Context) (bool, string, error) {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=rank"})
			if err != nil {
				return false, "", err
			}
			return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items)), nil
		})
		t.Logf("pods garbage-collected in %s", time.Since(began).Round(time.Millisecond))
		waitReadyPods(ctx, t, cs, ns, "app=extra", 1)
	})

	t.Run("FailPod makes a pod Failed", func(t *testing.T) {
		if err := c.FailPod(ctx, ns, "extra"); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 30*time.Second, "pod extra to fail", func(ctx context.Context) (bool, string, error) {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, "extra", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return p.Status.Phase == corev1.PodFailed, "phase " + string(p.Status.Phase), nil
		})
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "extra", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if kubeutil.PodReady(p) {
			t.Errorf("failed pod is still Ready")
		}
		var got []string
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Terminated == nil {
				got = append(got, s.Name+": not terminated")
				continue
			}
			got = append(got, fmt.Sprintf("%s: exit %d", s.Name, s.State.Terminated.ExitCode))
		}
		if diff := cmp.Diff([]string{"server: exit 1"}, got); diff != "" {
			t.Errorf("container states (-want +got):\n%s", diff)
		}
	})

	t.Run("a failed StatefulSet pod is replaced and becomes Ready again", func(t *testing.T) {
		if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, gpuStatefulSet(ns, "group", 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		first := waitReadyPods(ctx, t, cs, ns, "app=group", 1)[0]
		if err := c.FailPod(ctx, ns, first.Name); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 60*time.Second, "a new, Ready group-0", func(ctx context.Context) (bool, string, error) {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, "deleted, not yet recreated", nil
			}
			if err != nil {
				return false, "", err
			}
			return p.UID != first.UID && kubeutil.PodReady(p), fmt.Sprintf("uid %s phase %s", p.UID, p.Status.Phase), nil
		})
	})

	t.Run("Stop leaves no process and removes nothing it was told to keep", func(t *testing.T) {
		pids, err := localcluster.ProcessesUsing(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) != 5 {
			t.Errorf("before Stop, %d processes use %s, want 5 (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)", len(pids), dir)
		}
		began := time.Now()
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		stopped = true
		t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond))
		pids, err = localcluster.ProcessesUsing(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) != 0 {
			t.Errorf("after Stop, processes %v still use %s", pids, dir)
		}
		if _, err := os.Stat(filepath.Join(c.LogDir(), "kwok.log")); err != nil {
			t.Errorf("KeepDir: the logs should survive Stop: %v", err)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("a second Stop: %v", err)
		}
	})
}

// TestAPIServerOnly checks the light mode: CRDs from CRDDirectoryPaths are served, no
// node-side process runs, and a temporary Dir disappears with Stop.
func TestAPIServerOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crds := t.TempDir()
	if err := os.WriteFile(filepath.Join(crds, "widgets.yaml"), []byte(widgetCRD), 0o600); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	webhook := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets"},
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "widgets.example.hicache.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "w", Namespace: "default", Path: ptr("/validate")}},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.hicache.io"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
			}},
		}},
	}
	c, err := localcluster.Start(ctx, localcluster.Options{
		APIServerOnly:     true,
		CRDDirectoryPaths: []string{crds},
		Webhooks:          envtest.WebhookInstallOptions{ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{webhook}},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("API server started in %s", time.Since(began).Round(time.Millisecond))
	dir := c.Dir()
	t.Cleanup(func() { _ = c.Stop() })

	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.hicache.io/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "default"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	gvr := schema.GroupVersionResource{Group: "example.hicache.io", Version: "v1", Resource: "widgets"}
	if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, widget, metav1.CreateOptions{}); err != nil {
		t.Errorf("create a Widget of the installed CRD: %v", err)
	}

	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	installed, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "widgets", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook configuration from Options.Webhooks is not installed: %v", err)
	}
	wh := c.Webhooks()
	// envtest points the webhook at the local server it prepared (and joins the path with
	// an extra slash).
	wantPrefix := "https://" + net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort)) + "/"
	got := ptrString(installed.Webhooks[0].ClientConfig.URL)
	if wh.LocalServingPort == 0 || !strings.HasPrefix(got, wantPrefix) || !strings.HasSuffix(got, "/validate") || len(installed.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Errorf("installed webhook URL = %s (CA bundle of %d bytes), want %s…/validate and a CA bundle", got, len(installed.Webhooks[0].ClientConfig.CABundle), wantPrefix)
	}

	pids, err := localcluster.ProcessesUsing(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 2 {
		t.Errorf("%d processes use %s, want 2 (etcd and kube-apiserver)", len(pids), dir)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if pids, _ := localcluster.ProcessesUsing(dir); len(pids) != 0 {
		t.Errorf("after Stop, processes %v still use %s", pids, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the temporary dir %s should be gone after Stop (stat: %v)", dir, err)
	}
}

// The API server killed and started again on its address and etcd keeps every object, every client, and the
// users provisioned before the restart; the audit log goes on.
func TestRestartAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{APIServerOnly: true, Audit: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	admin, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	userCfg, err := c.UserConfig("restart-test", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	user, err := kubernetes.NewForConfig(userCfg)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := user.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	audited, err := os.Stat(c.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}

	const down = 2 * time.Second
	took, err := c.RestartAPIServer(ctx, down)
	if err != nil {
		t.Fatalf("RestartAPIServer: %v", err)
	}
	t.Logf("API server down for %s", took.Round(time.Millisecond))
	if took < down {
		t.Errorf("RestartAPIServer returned after %s, want at least the %s asked for", took, down)
	}
	for name, cs := range map[string]kubernetes.Interface{"admin": admin, "restart-test": user} {
		got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		if err != nil || got.Data["k"] != "v" {
			t.Errorf("after the restart, %s reads ConfigMap before: %v %v", name, got, err)
		}
	}
	if fi, err := os.Stat(c.AuditLogPath()); err != nil || fi.Size() <= audited.Size() {
		t.Errorf("the audit log did not grow after the restart (%v)", err)
	}
	if pids, _ := localcluster.ProcessesUsing(c.Dir()); len(pids) != 2 {
		t.Errorf("%d processes use the cluster's directory after the restart, want 2 (etcd and kube-apiserver)", len(pids))
	}
}

func TestStartNamesMissingBinaries(t *testing.T) {
	_, err := localcluster.Start(context.Background(), localcluster.Options{BinDir: t.TempDir()})
	if err == nil {
		t.Fatal("Start with an empty bin directory succeeded")
	}
	for _, want := range []string{"kube-scheduler", "are missing: run hack/tools.sh etcd kube-apiserver kube-controller-manager kube-scheduler kwok"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.hicache.io
spec:
  group: example.hicache.io
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
`

func ptr[T any](v T) *T { return &v }

func makeNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func gpuContainer() corev1.Container {
	eight := resource.MustParse("8")
	return corev1.Container{
		Name:  "server",
		Image: "sglang:test",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{localcluster.GPUResource: eight, corev1.ResourceCPU: resource.MustParse("8")},
			Limits:   corev1.ResourceList{localcluster.GPUResource: eight},
		},
	}
}

func gpuPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{gpuContainer()}},
	}
}

func gpuStatefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{gpuContainer()}},
			},
		},
	}
}

type autoscalingScale struct{ replicas int32 }

func (s *autoscalingScale) apply(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	scale, err := cs.AppsV1().StatefulSets(ns).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = s.replicas
	if _, err := cs.AppsV1().StatefulSets(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitReadyPods waits until exactly n pods match selector, all Running and Ready.
func waitReadyPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, selector string, n int) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	waitFor(ctx, t, 60*time.Second, fmt.Sprintf("%d Ready pods %s", n, selector), func(ctx context.Context) (bool, string, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, "", err
		}
		ready = ready[:0]
		var states []string
		for _, p := range pods.Items {
			states = append(states, fmt.Sprintf("%s: node %q phase %s ready %v", p.Name, p.Spec.NodeName, p.Status.Phase, kubeutil.PodReady(&p)))
			if p.Status.Phase == corev1.PodRunning && kubeutil.PodReady(&p) && p.DeletionTimestamp == nil {
				ready = append(ready, p)
			}
		}
		return len(pods.Items) == n && len(ready) == n, strings.Join(states, "; "), nil
	})
	return ready
}

func assertDistinctNodes(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	nodes := map[string][]string{}
	for _, p := range pods {
		nodes[p.Spec.NodeName] = append(nodes[p.Spec.NodeName], p.Name)
	}
	for node, names := range nodes {
		if node == "" || len(names) > 1 {
			sort.Strings(names)
			t.Errorf("node %q runs pods %v, want one 8-GPU pod per node", node, names)
		}
	}
}

// waitFor polls cond every 200 ms until it holds, failing the test with the last state
// cond described when timeout passes.
func waitFor(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(context.Context) (bool, string, error)) {
	t.Helper()
	var state string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, s, err := cond(ctx)
		state = s
		return ok, err
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last state: %s", what, err, state)
	}
}

func isNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func dumpLogs(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		t.Logf("=== the end of %s:\n%s", e.Name(), strings.Join(lines, "\n"))
	}
}

func ptrString(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
