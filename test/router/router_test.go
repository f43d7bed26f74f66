// Package router runs the router the operator deploys (smg, from the image `make images` builds)
// on a real node, in front of stand-in leader pods that answer the HTTP API the router uses
// (/health, /server_info, /v1/models, ...), and checks what it discovers through Kubernetes.
package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

var (
	cluster *localcluster.Cluster
	cs      kubernetes.Interface
	inNetns *http.Client
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var logf = testutil.SuiteLogger("router")

func TestMain(m *testing.M) {
	routerImage := filepath.Join(repoRoot(), images.Dir, "router", "smg.tar")
	if _, err := os.Stat(routerImage); err != nil {
		fmt.Fprintf(os.Stderr, "test/router: the router image is not built (%v): run make images\n", err)
		os.Exit(1)
	}
	os.Exit(testutil.RunClusterSuite(m, testutil.ClusterSuite{
		Name:    "test/router",
		Options: localcluster.Options{RealNode: &localcluster.RealNodeOptions{Images: []string{routerImage}}},
		Setup: func(_ context.Context, c *localcluster.Cluster) error {
			cluster = c
			var err error
			if cs, err = kubernetes.NewForConfig(c.Config()); err != nil {
				return err
			}
			inNetns = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: c.RealNode().DialContext}}
			return nil
		},
	}))
}

// standIn answers the router's questions the way an SGLang leader would, well enough for it to
// register the server: 200 with a small JSON document on every GET, and on /health only while
// the file /tmp/unhealthy is absent.
const standIn = `
import http.server, json, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/health") and os.path.exists("/tmp/unhealthy"):
            self.send_response(503); self.end_headers(); return
        body = {"model_path": "deepseek-ai/DeepSeek-V4", "is_generation": True, "dp_size": 1}
        if self.path.startswith("/v1/models"):
            body = {"object": "list", "data": [{"id": "deepseek-v4", "object": "model"}]}
        b = json.dumps(body).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_POST(self):
        self.do_GET()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 30000), H).serve_forever()
`

const (
	deployment = "dsv4"
	roleLabel  = "hicache.io/role"
	podIndex   = "apps.kubernetes.io/pod-index"
	groupLabel = "hicache.io/group"
	depLabel   = "hicache.io/deployment"
)

// leaderPod is a stand-in rank pod of one serving group: role, group and pod index as the
// operator labels them; ready false makes its readiness probe fail.
func leaderPod(ns, role string, group, index int, ready bool) *corev1.Pod {
	cmd := "python3 -c \"$STANDIN\""
	if !ready {
		cmd = "touch /tmp/unhealthy && " + cmd
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%s-%d-%d", deployment, role, group, index), Namespace: ns,
			Labels: map[string]string{depLabel: deployment, roleLabel: role, groupLabel: fmt.Sprint(group), podIndex: fmt.Sprint(index)},
		},
		Spec: corev1.PodSpec{
			NodeSelector:                  localcluster.RealNodeSelector(),
			Tolerations:                   []corev1.Toleration{localcluster.RealNodeToleration()},
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "sglang", Image: images.Mooncake, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", cmd},
				Env:     []corev1.EnvVar{{Name: "STANDIN", Value: standIn}},
				Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 30000}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}},
					PeriodSeconds: 1, FailureThreshold: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if role == "prefill" {
		p.Annotations = map[string]string{router.BootstrapPortAnnotation: "8998"}
	}
	return p
}

// workers is the router's /workers answer, as far as the test reads it.
type workers struct {
	Workers []struct {
		URL        string `json:"url"`
		WorkerType string `json:"worker_type"`
		Healthy    bool   `json:"is_healthy"`
		Bootstrap  *int   `json:"bootstrap_port"`
	} `json:"workers"`
}

func get(url string) (int, string, error) {
	resp, err := inNetns.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestPrefillDecodeRouterDiscoversTheReadyLeaders: the router the operator builds, in
// prefill/decode mode with Kubernetes discovery, starts on the real node, lists exactly the
// leaders of the Ready groups (prefill and decode apart), drops a group that goes away, and its
// own readiness follows whether it has workers.
func TestPrefillDecodeRouterDiscoversTheReadyLeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("router-%d", time.Now().UnixNano()%1_000_000)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForServiceAccount(ctx, ns); err != nil {
		t.Fatal(err)
	}

	// Two prefill groups of two pods, one decode group whose leader is Ready, and one whose
	// leader is not.
	pods := []*corev1.Pod{
		leaderPod(ns, "prefill", 0, 0, true), leaderPod(ns, "prefill", 0, 1, true),
		leaderPod(ns, "prefill", 1, 0, true), leaderPod(ns, "prefill", 1, 1, true),
		leaderPod(ns, "decode", 0, 0, true), leaderPod(ns, "decode", 1, 0, false),
	}
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	leader := func(role string) map[string]string {
		return map[string]string{depLabel: deployment, roleLabel: role, podIndex: "0"}
	}
	cfg := router.Config{Namespace: ns, WorkerPort: 30000, PrefillSelector: leader("prefill"), DecodeSelector: leader("decode")}
	labels := map[string]string{"app.kubernetes.io/name": "router", depLabel: deployment}
	objs, err := router.Build(router.Deployment{
		Name: deployment + "-router", Namespace: ns, Image: images.Router, PullPolicy: corev1.PullNever, Replicas: 1,
		Labels: labels, Selector: labels,
		NodeSelector: localcluster.RealNodeSelector(), Tolerations: []corev1.Toleration{localcluster.RealNodeToleration()},
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, objs.ServiceAccount, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, objs.Role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, objs.RoleBinding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, objs.Service, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, objs.Deployment, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			dump(ns)
		}
	}()

	podIP := func(name string) string {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" {
			return ""
		}
		return p.Status.PodIP
	}
	routerPod := func() (*corev1.Pod, bool) {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=router"})
		if err != nil || len(list.Items) != 1 {
			return nil, false
		}
		p := &list.Items[0]
		return p, kubeutil.PodReady(p)
	}
	listed := func() (prefill, decode []string, err error) {
		p, _ := routerPod()
		if p == nil || p.Status.PodIP == "" {
			return nil, nil, fmt.Errorf("no router pod with an address yet")
		}
		code, body, err := get(fmt.Sprintf("http://%s:%d/workers", p.Status.PodIP, router.DefaultPort))
		if err != nil || code != http.StatusOK {
			return nil, nil, fmt.Errorf("GET /workers: %d %v %s", code, err, body)
		}
		var w workers
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			return nil, nil, fmt.Errorf("GET /workers: %v: %s", err, body)
		}
		for _, x := range w.Workers {
			if !x.Healthy {
				continue
			}
			switch x.WorkerType {
			case "prefill":
				// The decode side learns the prefill's bootstrap port from the router, which reads
				// it from the pod's annotation.
				if x.Bootstrap == nil || *x.Bootstrap != 8998 {
					return nil, nil, fmt.Errorf("prefill worker %s has bootstrap port %v, want 8998: %s", x.URL, x.Bootstrap, body)
				}
				prefill = append(prefill, x.URL)
			case "decode":
				decode = append(decode, x.URL)
			default:
				return nil, nil, fmt.Errorf("a worker of type %q: %s", x.WorkerType, body)
			}
		}
		slices.Sort(prefill)
		slices.Sort(decode)
		return prefill, decode, nil
	}
	urls := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, fmt.Sprintf("http://%s:30000", podIP(n)))
		}
		slices.Sort(out)
		return out
	}
	expect := func(what string, wantPrefill, wantDecode []string) {
		t.Helper()
		testutil.Eventually(t, 2*time.Minute, what, func() (bool, string) {
			p, d, err := listed()
			if err != nil {
				return false, err.Error()
			}
			return slices.Equal(p, wantPrefill) && slices.Equal(d, wantDecode), fmt.Sprintf("prefill %v, decode %v; want %v, %v", p, d, wantPrefill, wantDecode)
		})
	}

	testutil.Eventually(t, 3*time.Minute, "the router pod Ready", func() (bool, string) {
		p, ready := routerPod()
		if p == nil {
			return false, "no router pod"
		}
		return ready, fmt.Sprintf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
	})
	logf("router Ready %s after its Deployment was created", time.Since(started).Round(100*time.Millisecond))
	expect("the leaders of the Ready groups, by role",
		urls(deployment+"-prefill-0-0", deployment+"-prefill-1-0"), urls(deployment+"-decode-0-0"))

	// A group that rolls away leaves the router's list.
	gone := time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, deployment+"-prefill-1-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("prefill group 1 dropped", urls(deployment+"-prefill-0-0"), urls(deployment+"-decode-0-0"))
	logf("prefill group 1 dropped %s after its leader was deleted", time.Since(gone).Round(100*time.Millisecond))

	// The router's readiness is its own health endpoint: without a decode worker it is not
	// ready, and the Service stops sending it clients; with one again it is.
	if err := cs.CoreV1().Pods(ns).Delete(ctx, deployment+"-decode-0-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the router not Ready without decode workers", func() (bool, string) {
		p, ready := routerPod()
		if p == nil {
			return false, "no router pod"
		}
		code, body, err := get(fmt.Sprintf("http://%s:%d/readiness", p.Status.PodIP, router.DefaultHealthPort))
		return !ready && code == http.StatusServiceUnavailable, fmt.Sprintf("pod ready %v, /readiness %d %q %v", ready, code, body, err)
	})
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, leaderPod(ns, "decode", 2, 0, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the router Ready again with a decode worker", func() (bool, string) {
		p, ready := routerPod()
		return ready, fmt.Sprintf("router pod %v", p != nil)
	})
	expect("the new decode group listed", urls(deployment+"-prefill-0-0"), urls(deployment+"-decode-2-0"))
}

func dump(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		logf("listing pods: %v", err)
		return
	}
	for _, p := range list.Items {
		logf("pod %s: phase %s, ip %s, conditions %v", p.Name, p.Status.Phase, p.Status.PodIP, p.Status.Conditions)
		if !strings.Contains(p.Name, "router") {
			continue
		}
		raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To(int64(60))}).DoRaw(ctx)
		if err != nil && !apierrors.IsNotFound(err) {
			logf("logs of %s: %v", p.Name, err)
		}
		logf("logs of %s:\n%s", p.Name, raw)
	}
}
