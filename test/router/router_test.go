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
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/sglang"
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

const (
	podIndex = "apps.kubernetes.io/pod-index"
	// roleLabel is the role label of the serving groups of a deployment with spec.roles.
	roleLabel = hicachev1alpha1.LabelPrefix + "role"
)

// pdDeployment is the PD sample as shipped (prefill TP 8 x 2 groups of one node, decode TP 16 x 1
// group of two nodes, and its router: one pod, the default policy, the resources it asks for), in
// namespace ns, as the API server defaults it.
func pdDeployment(t *testing.T, ns string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	h := testutil.LoadSample(t, "pd_deepseek_v4.yaml")
	if h.Spec.Router == nil {
		t.Fatal("the PD sample has no spec.router")
	}
	h.Namespace = ns
	h.Default()
	return h
}

// rankPod is rank index of serving group g of a role, as the operator renders it for SGLang, run
// by the SGLang stand-in (cmd/sglang-standin: it checks the rendered command line against the
// pinned release's arguments, exiting on a refusal, and answers the HTTP API the router reads):
// the role's rendered command line, the labels of a role group's pods and the annotations the
// router reads (hicachedeployment.RolePodAnnotations). ready false points its readiness probe at a
// path the stand-in does not serve, so it never becomes Ready.
func rankPod(t *testing.T, h *hicachev1alpha1.HiCacheDeployment, roles *resolve.Roles, role hicachev1alpha1.Role, g, index int, ready bool) *corev1.Pod {
	t.Helper()
	rr := roles.Prefill
	if role == hicachev1alpha1.RoleDecode {
		rr = roles.Decode
	}
	group := fmt.Sprintf("%s-%s-%d", h.Name, role, g)
	addr := ""
	if rr.Nodes > 1 {
		addr = fmt.Sprintf("%s-0.%s.%s.svc:%d", group, group, h.Namespace, hicachedeployment.DistInitPort)
	}
	cfg, _, err := resolve.RoleServerConfig(roles, rr, testBackend(h.Namespace), addr)
	if err != nil {
		t.Fatal(err)
	}
	args, err := sglang.Args(cfg)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{
		"app.kubernetes.io/name": "sglang", hicachev1alpha1.LabelDeployment: h.Name, roleLabel: string(role),
		hicachev1alpha1.LabelGroup: fmt.Sprint(g), podIndex: fmt.Sprint(index),
	}
	var bootstrap int32
	if role == hicachev1alpha1.RolePrefill {
		bootstrap = roles.Transfer.BootstrapPort
	}
	return standInPod(h, fmt.Sprintf("%s-%d", group, index), labels, hicachedeployment.RolePodAnnotations(roles, role), args, bootstrap, ready)
}

// groupLeader is the leader of serving group g of a deployment without roles, as the operator
// renders it (see rankPod).
func groupLeader(t *testing.T, h *hicachev1alpha1.HiCacheDeployment, res *resolve.Resolved, g int, ready bool) *corev1.Pod {
	t.Helper()
	if res.Nodes != 1 {
		t.Fatalf("%s: groups of %d nodes; the stand-in leaders here are of one-node groups", h.Name, res.Nodes)
	}
	cfg, _, err := resolve.ServerConfig(h, res, testBackend(h.Namespace), "")
	if err != nil {
		t.Fatal(err)
	}
	args, err := sglang.Args(cfg)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{
		"app.kubernetes.io/name": "sglang", hicachev1alpha1.LabelDeployment: h.Name,
		hicachev1alpha1.LabelGroup: fmt.Sprint(g), podIndex: "0",
	}
	return standInPod(h, fmt.Sprintf("%s-%d-0", h.Name, g), labels, nil, args, 0, ready)
}

// testBackend is a CacheBackend's endpoints as a rank's command line names them; nothing here
// connects to them.
func testBackend(ns string) *resolve.Backend {
	return &resolve.Backend{Name: "mooncake", RPCAddress: "mooncake-master." + ns + ".svc:50051", MetadataServer: "P2PHANDSHAKE", MetricsPort: 9003}
}

// standInPod runs the SGLang stand-in with a rendered command line on the real node, which
// binds it to loopback, behind the proxy the operator renders beside it (hicachedeployment.GuardContainer,
// from the operator's image): the router, the probes and these tests reach the stand-in only
// through the proxy, as they reach SGLang. bootstrap is a prefill's bootstrap port the proxy
// also serves (0 for none). ready false points its readiness probe at a path the stand-in does
// not serve, so it never becomes Ready.
func standInPod(h *hicachev1alpha1.HiCacheDeployment, name string, labels, annotations map[string]string, args []string, bootstrap int32, ready bool) *corev1.Pod {
	probe := hicachedeployment.HealthPath
	if !ready {
		probe = "/never-ready"
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	// The clients' keys go to the proxy only; SGLang holds the server keys.
	keys := []corev1.EnvVar{{Name: resolve.AdminAPIKeyEnv, Value: testAdminKey}}
	serverKeys := []corev1.EnvVar{{Name: resolve.ServerAdminKeyEnv, Value: testServerAdminKey}}
	if resolve.APIKeySecret(h) != nil {
		keys = append(keys, corev1.EnvVar{Name: resolve.APIKeyEnv, Value: testAPIKey})
		serverKeys = append(serverKeys, corev1.EnvVar{Name: resolve.ServerAPIKeyEnv, Value: testServerAPIKey})
	}
	guard := hicachedeployment.GuardContainer(h, bootstrap, images.Operator)
	guard.ImagePullPolicy = corev1.PullNever
	// The keys as values rather than from the deployment's Secrets, which these tests do not make.
	guard.Env = append(append([]corev1.EnvVar{fieldEnv("POD_IP", "status.podIP")}, keys...), serverKeys...)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.Namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeSelector:                  localcluster.RealNodeSelector(),
			Tolerations:                   []corev1.Toleration{localcluster.RealNodeToleration()},
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: resolve.ServingContainer, Image: images.SGLangStandin, ImagePullPolicy: corev1.PullNever,
				Command: sglang.Command(), Args: args,
				Env: append([]corev1.EnvVar{
					fieldEnv("POD_IP", "status.podIP"), fieldEnv("NODE_RANK", "metadata.labels['"+podIndex+"']"),
				}, serverKeys...),
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: probe, Port: intstr.FromInt32(hicachedeployment.SGLangPort)}},
					PeriodSeconds: 1, FailureThreshold: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}, guard},
		},
	}
}

// The keys of these tests: the servers' admin key and API key (given to the stand-ins and their
// proxies as values), and the router's control-plane key (in the Secret the operator would
// generate, which startRouter creates). Each is a key the operator accepts.
const (
	testAdminKey = "a-test-admin-key-0123456789abcdefghij"
	testAPIKey   = "a-test-api-key-0123456789abcdefghijklmn"
	// The keys the stand-in holds (SGLang logs its own); only the proxy presents them.
	testServerAdminKey = "a-test-server-admin-key-0123456789abcd"
	testServerAPIKey   = "a-test-server-api-key-0123456789abcdefg"
	testRouterKey      = "a-test-router-key-0123456789abcdefghijk"
)

func get(url string) (int, string, error) { return request(http.MethodGet, url, "", "") }

// request sends method to url with a bearer token (none when empty) and a JSON body (none when
// empty); it answers the status and the body.
func request(method, url, token, body string) (int, string, error) {
	code, _, b, err := exchange(method, url, token, body)
	return code, b, err
}

// exchange is request that also answers the response's header fields, one "Name: value" a line.
func exchange(method, url, token, body string) (int, string, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := inNetns.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	var hdr strings.Builder
	for k, vs := range resp.Header {
		for _, v := range vs {
			fmt.Fprintf(&hdr, "%s: %s\n", k, v)
		}
	}
	return resp.StatusCode, hdr.String(), string(b), err
}

// TestPrefillDecodeRouterDiscoversTheReadyLeaders: the router the operator builds for the PD
// sample as shipped (hicachedeployment.BuildRouter), in prefill/decode mode with Kubernetes discovery
// and the sample's resources, starts on the real node in front of the roles' rank pods as the operator renders
// them, lists exactly the leaders of the Ready groups (prefill and decode apart, the prefill's
// bootstrap port from its annotation), drops a group that goes away, and its own readiness
// follows whether it has workers.
func TestPrefillDecodeRouterDiscoversTheReadyLeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t)
	h := pdDeployment(t, ns)
	roles, err := resolve.RolesOf(h)
	if err != nil {
		t.Fatal(err)
	}
	deployment := h.Name

	// Two prefill groups of one pod, one decode group of two pods whose leader is Ready, and one
	// whose leader is not.
	pods := []*corev1.Pod{
		rankPod(t, h, roles, hicachev1alpha1.RolePrefill, 0, 0, true), rankPod(t, h, roles, hicachev1alpha1.RolePrefill, 1, 0, true),
		rankPod(t, h, roles, hicachev1alpha1.RoleDecode, 0, 0, true), rankPod(t, h, roles, hicachev1alpha1.RoleDecode, 0, 1, true),
		rankPod(t, h, roles, hicachev1alpha1.RoleDecode, 1, 0, false),
	}
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rt := startRouter(ctx, t, h)
	listed := func() (prefill, decode []string, err error) {
		by, body, err := rt.workers()
		if err != nil {
			return nil, nil, err
		}
		for _, x := range by["prefill"] {
			// The decode side learns the prefill's bootstrap port from the router, which reads
			// it from the pod's annotation.
			if want := int(roles.Transfer.BootstrapPort); x.Bootstrap == nil || *x.Bootstrap != want {
				return nil, nil, fmt.Errorf("prefill worker %s has bootstrap port %v, want %d: %s", x.URL, x.Bootstrap, want, body)
			}
			prefill = append(prefill, x.URL)
		}
		for _, x := range by["decode"] {
			decode = append(decode, x.URL)
		}
		for typ := range by {
			if typ != "prefill" && typ != "decode" {
				return nil, nil, fmt.Errorf("a worker of type %q: %s", typ, body)
			}
		}
		slices.Sort(prefill)
		slices.Sort(decode)
		return prefill, decode, nil
	}
	routerPod := rt.pod
	podIP := func(name string) string { return podIP(ctx, ns, name) }
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

	rt.waitReady(t)
	if p, _ := routerPod(); p == nil || !equality.Semantic.DeepEqual(p.Spec.Containers[0].Resources, h.Spec.Router.Resources) {
		t.Errorf("the router pod does not run with the sample's spec.router.resources %+v", h.Spec.Router.Resources)
	}
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
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, rankPod(t, h, roles, hicachev1alpha1.RoleDecode, 2, 0, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the router Ready again with a decode worker", func() (bool, string) {
		p, ready := routerPod()
		return ready, fmt.Sprintf("router pod %v", p != nil)
	})
	expect("the new decode group listed", urls(deployment+"-prefill-0-0"), urls(deployment+"-decode-2-0"))
}

// newNamespace is a namespace of its own for a test, at the restricted Pod Security level.
func newNamespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("router-%d", time.Now().UnixNano()%1_000_000)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForServiceAccount(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

func podIP(ctx context.Context, ns, name string) string {
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return p.Status.PodIP
}

// runningRouter is the router of a deployment started on the real node.
type runningRouter struct {
	ctx      context.Context
	ns       string
	selector string
	started  time.Time
}

// startRouter creates the router's objects as the operator renders them
// (hicachedeployment.BuildRouter), with what the real node needs: the router on it, from the image
// imported there. The deployment itself is not created (nothing here runs the operator), so
// the objects own nothing. It dumps the namespace when the test fails.
func startRouter(ctx context.Context, t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *runningRouter {
	t.Helper()
	objs, err := hicachedeployment.BuildRouter(h, images.Router)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &objs.Deployment.Spec.Template.Spec
	tmpl.NodeSelector, tmpl.Tolerations = localcluster.RealNodeSelector(), []corev1.Toleration{localcluster.RealNodeToleration()}
	tmpl.Containers[0].ImagePullPolicy = corev1.PullNever
	for _, o := range []metav1.Object{objs.ServiceAccount, objs.Role, objs.RoleBinding, objs.Deployment} {
		o.SetOwnerReferences(nil)
	}
	ns := h.Namespace
	// The Secrets the router's key variables name: its control-plane key's, which the operator
	// generates, and the API key's, which a user makes.
	secrets := map[hicachev1alpha1.SecretKeyReference]string{resolve.RouterAdminKeySecret(h): testRouterKey}
	if ref := resolve.APIKeySecret(h); ref != nil {
		secrets[*ref] = testAPIKey
	}
	for ref, key := range secrets {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ns}, Data: map[string][]byte{ref.Key: []byte(key)}}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
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
	rt := &runningRouter{ctx: ctx, ns: ns, selector: metav1.FormatLabelSelector(objs.Deployment.Spec.Selector), started: time.Now()}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, objs.Deployment, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dump(ns)
		}
	})
	return rt
}

// pod is the router's pod and whether it is Ready.
func (r *runningRouter) pod() (*corev1.Pod, bool) {
	list, err := cs.CoreV1().Pods(r.ns).List(r.ctx, metav1.ListOptions{LabelSelector: r.selector})
	if err != nil || len(list.Items) != 1 {
		return nil, false
	}
	p := &list.Items[0]
	return p, kubeutil.PodReady(p)
}

// worker is one entry of the router's /workers answer, as far as the tests read it.
type worker struct {
	URL        string `json:"url"`
	Model      string `json:"model_id"`
	WorkerType string `json:"worker_type"`
	Healthy    bool   `json:"is_healthy"`
	Bootstrap  *int   `json:"bootstrap_port"`
	// Labels hold what the router read from the server's /server_info, among them the
	// --disaggregation-mode of its command line.
	Labels map[string]string `json:"labels"`
}

// workers are the router's healthy workers by type, and its /workers answer. Every worker runs
// the --disaggregation-mode of its type (neither prefill nor decode for a regular worker): its
// rendered command line says so.
func (r *runningRouter) workers() (map[string][]worker, string, error) {
	p, _ := r.pod()
	if p == nil || p.Status.PodIP == "" {
		return nil, "", fmt.Errorf("no router pod with an address yet")
	}
	// The router's management routes take only its control-plane key.
	code, body, err := request(http.MethodGet, fmt.Sprintf("http://%s:%d/workers", p.Status.PodIP, router.DefaultPort), testRouterKey, "")
	if err != nil || code != http.StatusOK {
		return nil, body, fmt.Errorf("GET /workers: %d %v %s", code, err, body)
	}
	var w struct {
		Workers []worker `json:"workers"`
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		return nil, body, fmt.Errorf("GET /workers: %v: %s", err, body)
	}
	by := map[string][]worker{}
	for _, x := range w.Workers {
		if !x.Healthy {
			continue
		}
		mode := x.Labels["disaggregation_mode"]
		if x.WorkerType == "regular" && (mode == "prefill" || mode == "decode") || x.WorkerType != "regular" && mode != x.WorkerType {
			return nil, body, fmt.Errorf("%s worker %s runs --disaggregation-mode %q: %s", x.WorkerType, x.URL, mode, body)
		}
		by[x.WorkerType] = append(by[x.WorkerType], x)
	}
	return by, body, nil
}

// waitReady waits for the router pod to be Ready, saying what its /readiness answers meanwhile.
func (r *runningRouter) waitReady(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "the router pod Ready", func() (bool, string) {
		p, ready := r.pod()
		if p == nil {
			return false, "no router pod"
		}
		if ready || p.Status.PodIP == "" {
			return ready, fmt.Sprintf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
		}
		code, body, err := get(fmt.Sprintf("http://%s:%d/readiness", p.Status.PodIP, router.DefaultHealthPort))
		return false, fmt.Sprintf("phase %s, /readiness %d %q %v", p.Status.Phase, code, body, err)
	})
	logf("router Ready %s after its Deployment was created", time.Since(r.started).Round(100*time.Millisecond))
}

// TestRouterDiscoversTheReadyLeaders: without roles, the router the operator builds lists
// exactly the leaders of the Ready groups as regular workers and drops a group that goes away.
func TestRouterDiscoversTheReadyLeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t)
	h := testutil.LoadSample(t, "hicachedeployment_qwen3.yaml")
	h.Namespace = ns
	h.Spec.Router = &hicachev1alpha1.RouterSpec{}
	h.Default()
	res, err := resolve.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	for g, ready := range []bool{true, true, false} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, groupLeader(t, h, res, g, ready), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rt := startRouter(ctx, t, h)
	rt.waitReady(t)
	expect := func(what string, groups ...int) {
		t.Helper()
		var want []string
		for _, g := range groups {
			want = append(want, fmt.Sprintf("http://%s:30000", podIP(ctx, ns, fmt.Sprintf("%s-%d-0", h.Name, g))))
		}
		slices.Sort(want)
		testutil.Eventually(t, 2*time.Minute, what, func() (bool, string) {
			by, body, err := rt.workers()
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, x := range by["regular"] {
				got = append(got, x.URL)
			}
			slices.Sort(got)
			return len(by) <= 1 && slices.Equal(got, want), fmt.Sprintf("regular workers %v, want %v: %s", got, want, body)
		})
	}
	expect("the leaders of the Ready groups", 0, 1)

	// What the router reads of a server, and serves its clients, holds no key: SGLang's
	// /server_info reports it, the proxy in front of it takes it out.
	leader := fmt.Sprintf("http://%s:%d", podIP(ctx, ns, h.Name+"-0-0"), hicachedeployment.SGLangPort)
	code, body, err := get(leader + "/server_info")
	if err != nil || code != http.StatusOK || strings.Contains(body, "a-test-admin-key-0123456789abcdefghij") || !strings.Contains(body, `"admin_api_key":"<redacted>"`) {
		t.Errorf("a leader's /server_info through its proxy: %d %v, the admin key in it: %v", code, err, strings.Contains(body, "a-test-admin-key-0123456789abcdefghij"))
	}
	if p, _ := rt.pod(); p != nil {
		code, body, err := get(fmt.Sprintf("http://%s:%d/get_server_info", p.Status.PodIP, router.DefaultPort))
		logf("the router's /get_server_info: %d %v", code, err)
		if strings.Contains(body, "a-test-admin-key-0123456789abcdefghij") {
			t.Error("the router's /get_server_info holds the admin key")
		}
	}
	gone := time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, h.Name+"-1-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("group 1 dropped", 0)
	logf("group 1 dropped %s after its leader was deleted", time.Since(gone).Round(100*time.Millisecond))
}

// TestRouterRequiresTheClientsKey: with spec.security.apiKeySecretRef the router the operator
// builds requires SGLang's API key of its clients (401 without it, or with any other key) and
// presents it to the leaders, whose proxies pass it to SGLang: the stand-ins refuse /server_info
// without it, so the router has workers only if it does. Its management routes take only its own
// control-plane key, not the clients' key. No answer of the router, on any of its ports and
// whatever key is sent, holds a key, nor do its logs.
func TestRouterRequiresTheClientsKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t)
	h := testutil.LoadSample(t, "hicachedeployment_qwen3.yaml")
	h.Namespace = ns
	h.Spec.Router = &hicachev1alpha1.RouterSpec{}
	h.Spec.Security = &hicachev1alpha1.ServingSecurity{APIKeySecretRef: &hicachev1alpha1.SecretKeyReference{Name: "clients", Key: "token"}}
	h.Default()
	res, err := resolve.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	for g := range 2 {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, groupLeader(t, h, res, g, true), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rt := startRouter(ctx, t, h)
	// Ready means it has healthy workers, which it registered with the API key.
	rt.waitReady(t)
	var model string
	testutil.Eventually(t, 2*time.Minute, "both leaders registered", func() (bool, string) {
		by, body, err := rt.workers()
		if err != nil || len(by["regular"]) != 2 {
			return false, fmt.Sprintf("%v %s", err, body)
		}
		model = by["regular"][0].Model
		return model != "", body
	})
	p, _ := rt.pod()
	base := fmt.Sprintf("http://%s:%d", p.Status.PodIP, router.DefaultPort)
	// With discovery the router serves many models: a request names its model.
	gen := fmt.Sprintf(`{"model":%q,"text":"The capital of France is","sampling_params":{"max_new_tokens":4}}`, model)

	// Who may do what: the serving routes take the API key only; the management routes the
	// control-plane key only.
	for _, tc := range []struct {
		method, path, body, token string
		want                      int
	}{
		{"POST", "/generate", gen, "", http.StatusUnauthorized},
		{"POST", "/generate", gen, "not-the-key-0123456789abcdefghijklmnop", http.StatusUnauthorized},
		{"POST", "/generate", gen, testAdminKey, http.StatusUnauthorized},
		{"POST", "/generate", gen, testRouterKey, http.StatusUnauthorized},
		{"POST", "/generate", gen, testAPIKey, http.StatusOK},
		{"GET", "/workers", "", "", http.StatusUnauthorized},
		{"GET", "/workers", "", testAPIKey, http.StatusUnauthorized},
		{"GET", "/workers", "", testAdminKey, http.StatusUnauthorized},
		{"GET", "/workers", "", testRouterKey, http.StatusOK},
		{"POST", "/workers", `{"url":"http://127.0.0.1:9"}`, testAPIKey, http.StatusUnauthorized},
		{"GET", "/get_loads", "", testAPIKey, http.StatusUnauthorized},
		{"POST", "/flush_cache", "", testAPIKey, http.StatusUnauthorized},
	} {
		code, body, err := request(tc.method, base+tc.path, tc.token, tc.body)
		who := map[string]string{"": "no key", testAPIKey: "the API key", testAdminKey: "the admin key", testRouterKey: "the router's key"}[tc.token]
		if who == "" {
			who = "another key"
		}
		if err != nil || code != tc.want {
			t.Errorf("%s %s with %s: %d %v %.200s, want %d", tc.method, tc.path, who, code, err, body, tc.want)
		}
	}

	// No key in any answer: the router's routes, a few spellings of the ones that forward to a
	// server, its probe and metrics ports, with every key and none.
	paths := []string{"/workers", "/get_server_info", "/get_server_info/", "/get_server_info?x=1", "//get_server_info", "/server_info",
		"/v1/models", "/get_model_info", "/model_info", "/get_loads", "/engine_metrics", "/health", "/health_generate", "/readiness",
		"/liveness", "/wasm", "/v1/tokenizers", "/metrics", "/", "/nothing-here"}
	var urls []string
	for _, path := range paths {
		urls = append(urls, base+path)
	}
	for _, path := range []string{"/health", "/readiness", "/liveness", "/workers"} {
		urls = append(urls, fmt.Sprintf("http://%s:%d%s", p.Status.PodIP, router.DefaultHealthPort, path))
	}
	urls = append(urls, fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, router.DefaultMetricsPort))
	type call struct{ method, url, body string }
	var calls []call
	for _, u := range urls {
		calls = append(calls, call{"GET", u, ""})
	}
	for _, path := range []string{"/generate", "/v1/completions", "/v1/chat/completions", "/flush_cache", "/parse/reasoning", "/v1/tokenize"} {
		calls = append(calls, call{"POST", base + path, gen})
	}
	secrets := map[string]string{"admin key": testAdminKey, "API key": testAPIKey, "router's key": testRouterKey}
	sent, answered := 0, 0
	for _, c := range calls {
		for _, token := range []string{"", testAPIKey, testRouterKey, testAdminKey} {
			code, hdr, body, err := exchange(c.method, c.url, token, c.body)
			sent++
			if err != nil {
				t.Errorf("%s %s: %v", c.method, c.url, err)
				continue
			}
			if code == http.StatusOK {
				answered++
			}
			for what, key := range secrets {
				if strings.Contains(hdr+body, key) {
					t.Errorf("%s %s (%d) answers the %s", c.method, c.url, code, what)
				}
			}
		}
	}
	logf("%d requests to the router, %d answered 200, none with a key", sent, answered)
	if answered == 0 {
		t.Error("no request was answered: the fuzz read nothing")
	}
	// The answers that forward to a server were read: the router's /get_server_info with the
	// API key is a server's, with its keys redacted.
	if code, body, _ := request(http.MethodGet, base+"/get_server_info", testAPIKey, ""); code != http.StatusOK || !strings.Contains(body, `"api_key":"<redacted>"`) {
		t.Errorf("the router's /get_server_info with the API key: %d %.300s, want a server's answer, redacted", code, body)
	}

	// Nor do its logs hold a key.
	raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "router"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for what, key := range secrets {
		if strings.Contains(string(raw), key) {
			t.Errorf("the router's log holds the %s", what)
		}
	}
	logf("the router's log: %d bytes, no key", len(raw))
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
		for _, c := range p.Status.ContainerStatuses {
			logf("pod %s container %s: ready %v, %d restarts, state %+v, last state %+v", p.Name, c.Name, c.Ready, c.RestartCount, c.State, c.LastTerminationState)
		}
		if !strings.Contains(p.Name, "router") {
			continue
		}
		for _, previous := range []bool{true, false} {
			raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To(int64(60)), Previous: previous}).DoRaw(ctx)
			if err != nil && !apierrors.IsNotFound(err) {
				logf("logs of %s (previous %v): %v", p.Name, previous, err)
			}
			logf("logs of %s (previous %v):\n%s", p.Name, previous, raw)
		}
	}
}
