package main

// Tests of flush and status against a real local control plane (kube-apiserver, etcd,
// controller-manager, scheduler, kwok GPU nodes), the operator running in this process, and a
// real Mooncake master per test. The cluster starts once, when the first such test runs, so the
// tests that need no cluster stay fast; TestMain stops it.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller"
	"github.com/hicache-io/hicache-operator/internal/controller/cacheflush"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopSharedCluster()
	os.Exit(code)
}

// sharedCluster is the local cluster and the operator every cluster test uses.
type sharedCluster struct {
	cluster *localcluster.Cluster
	// kubeconfig is the admin kubeconfig, the plugin's --kubeconfig.
	kubeconfig string
	dir        string
	k8s        client.Client
	stop       context.CancelFunc
	done       chan error
}

var (
	clusterOnce sync.Once
	shared      *sharedCluster
	sharedErr   error
)

// testCluster starts the cluster and the operator on first use and returns them.
func testCluster(t *testing.T) *sharedCluster {
	t.Helper()
	// It installs once per test binary and needs a *testing.T: outside the Once.
	python := mooncaketest.Python(t)
	clusterOnce.Do(func() {
		began := time.Now()
		shared, sharedErr = startSharedCluster(python)
		if sharedErr == nil {
			t.Logf("local cluster and operator started in %s", time.Since(began).Round(time.Millisecond))
		}
	})
	if sharedErr != nil {
		t.Fatalf("starting the local cluster: %v", sharedErr)
	}
	return shared
}

func startSharedCluster(python string) (_ *sharedCluster, err error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.DPanicLevel)))
	s := &sharedCluster{done: make(chan error, 1)}
	if s.dir, err = os.MkdirTemp("", "kubectl-hicache-test-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.cluster, err = localcluster.Start(context.Background(), testutil.GPUCluster(4))
	if err != nil {
		return nil, err
	}
	s.kubeconfig = filepath.Join(s.dir, "kubeconfig")
	if err := s.cluster.WriteKubeconfig(s.kubeconfig); err != nil {
		return nil, err
	}
	// The operator owns Jobs and writes Events: it needs every built-in kind.
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, hicachev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	if s.k8s, err = client.New(s.cluster.Config(), client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(s.cluster.Config(), ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	// kwok runs no containers: namespace flushes run flush.py on this host, against the
	// master on loopback.
	if err := controller.Setup(mgr, storeuse.Options{
		BackendPollInterval: time.Second,
		Flusher:             cacheflush.LocalFlusher{Python: python},
	}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() {
		err := mgr.Start(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "the operator stopped: %v\n", err)
		}
		s.done <- err
	}()
	return s, nil
}

func (s *sharedCluster) close() {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	if s.cluster != nil {
		_ = s.cluster.Stop()
	}
	_ = os.RemoveAll(s.dir)
}

func stopSharedCluster() {
	if shared != nil {
		shared.close()
	}
}

// newNamespace creates a Kubernetes namespace for one test, deleted when it ends.
func (s *sharedCluster) newNamespace(t *testing.T) string {
	t.Helper()
	base := strings.ToLower(strings.TrimPrefix(t.Name(), "TestCluster"))
	base = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, base)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(base[:min(len(base), 40)], "-") + "-"}}
	if err := s.k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() { _ = s.k8s.Delete(context.Background(), ns) })
	return ns.Name
}

// plugin runs the plugin in-process against the cluster, in Kubernetes namespace ns.
func (s *sharedCluster) plugin(t *testing.T, ns string, args ...string) result {
	t.Helper()
	r := runPlugin(t, "", append(args, "--kubeconfig", s.kubeconfig, "-n", ns)...)
	t.Logf("$ kubectl hicache %s -n %s\n%s%s(exit code %d)", strings.Join(args, " "), ns, r.stdout, r.stderr, r.code)
	return r
}

// master is a real mooncake_master for one test, with its admin client.
type master struct {
	*mooncaketest.Master
	admin *mooncake.Client
}

func startMaster(t *testing.T) *master {
	t.Helper()
	m := mooncaketest.Start(t)
	c, err := mooncake.NewClient(m.AdminURL, &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &master{Master: m, admin: c}
}

func (m *master) count(t *testing.T, prefix string) int64 {
	t.Helper()
	n, err := m.admin.CountKeysWithPrefix(context.Background(), prefix)
	if err != nil {
		t.Fatalf("counting keys under %q: %v", prefix, err)
	}
	return n
}

// backend creates a CacheBackend for an existing master and waits until it is Ready.
func (s *sharedCluster) backend(t *testing.T, ns, name string, m *master) {
	t.Helper()
	cb := testutil.ExternalBackend(ns, name, m.RPCAddr, m.AdminURL)
	if err := s.k8s.Create(context.Background(), cb); err != nil {
		t.Fatalf("creating CacheBackend %s: %v", name, err)
	}
	eventually(t, 30*time.Second, "CacheBackend "+name+" Ready", func() (bool, string) {
		if err := s.k8s.Get(context.Background(), client.ObjectKeyFromObject(cb), cb); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
}

// flushes lists the CacheFlushes of a namespace.
func (s *sharedCluster) flushes(t *testing.T, ns string) []hicachev1alpha1.CacheFlush {
	t.Helper()
	var list hicachev1alpha1.CacheFlushList
	if err := s.k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// eventually polls until a condition holds (see testutil.Eventually).
var eventually = testutil.Eventually

// keys are n keys of an L3 namespace, shaped as SGLang names them.
func keys(namespace string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s_qwen3-32b_%064x_0_k", namespace, i)
	}
	return out
}

// lines splits output into its lines.
func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

// flush --prefix removes exactly one namespace of a real store, following the CacheFlush to the
// end.
func TestClusterFlushPrefix(t *testing.T) {
	t.Parallel()
	s := testCluster(t)
	ns := s.newNamespace(t)
	m := startMaster(t)
	s.backend(t, ns, "mooncake", m)
	gone, kept := keys("hc-aaaaaaaaaa", 6), keys("hc-bbbbbbbbbb", 4)
	m.PutKeys(t, append(append([]string{}, gone...), kept...), 4096)
	if n := m.count(t, "hc-aaaaaaaaaa_"); n != 6 {
		t.Fatalf("%d keys under hc-aaaaaaaaaa before the flush, want 6", n)
	}

	r := s.plugin(t, ns, "flush", "mooncake", "--prefix", "hc-aaaaaaaaaa", "--reason", "drop the old layout").mustSucceed(t)

	out := lines(r.stdout)
	flushes := s.flushes(t, ns)
	if len(flushes) != 1 {
		t.Fatalf("%d CacheFlushes, want 1; output:\n%s", len(flushes), r.stdout)
	}
	cf := flushes[0]
	wantFirst := fmt.Sprintf("cacheflush/%s created: removes namespace hc-aaaaaaaaaa (keys hc-aaaaaaaaaa_*) of CacheBackend mooncake", cf.Name)
	wantLast := cf.Name + ": complete: removed 6 objects, 0 left"
	if out[0] != wantFirst || out[len(out)-1] != wantLast {
		t.Errorf("output:\n%s\nwant first line %q and last line %q", r.stdout, wantFirst, wantLast)
	}
	for _, l := range out[1:] {
		if !strings.HasPrefix(l, cf.Name+": ") {
			t.Errorf("progress line %q does not name the flush", l)
		}
	}
	if !strings.HasPrefix(cf.Name, "mooncake-manual-") || cf.Spec.Scope != hicachev1alpha1.FlushScopeNamespace ||
		cf.Spec.Namespace != "hc-aaaaaaaaaa" || cf.Spec.Force == nil || !*cf.Spec.Force || cf.Spec.Reason != "drop the old layout" {
		t.Errorf("CacheFlush %s: %+v", cf.Name, cf.Spec)
	}
	if cf.Status.Removed != 6 || !meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete) {
		t.Errorf("CacheFlush status %+v, want Complete with 6 removed", cf.Status)
	}
	if n := m.count(t, "hc-aaaaaaaaaa_"); n != 0 {
		t.Errorf("%d keys left under hc-aaaaaaaaaa", n)
	}
	if n := m.count(t, "hc-bbbbbbbbbb_"); n != 4 {
		t.Errorf("%d keys left under hc-bbbbbbbbbb, want all 4", n)
	}
}

// flush --all empties the store.
func TestClusterFlushAll(t *testing.T) {
	t.Parallel()
	s := testCluster(t)
	ns := s.newNamespace(t)
	m := startMaster(t)
	s.backend(t, ns, "store", m)
	m.PutKeys(t, append(append(keys("hc-aaaaaaaaaa", 3), keys("hc-bbbbbbbbbb", 2)...), "unrelated-key"), 4096)

	r := s.plugin(t, ns, "flush", "store", "--all").mustSucceed(t)

	if !strings.HasSuffix(r.stdout, ": complete: removed 6 objects, 0 left\n") || !strings.Contains(r.stdout, "created: removes every object of CacheBackend store\n") {
		t.Errorf("output:\n%s", r.stdout)
	}
	if n := m.count(t, ""); n != 0 {
		t.Errorf("%d objects left in the store", n)
	}
	fl := s.flushes(t, ns)
	if len(fl) != 1 || fl[0].Spec.Scope != hicachev1alpha1.FlushScopeAll || fl[0].Spec.Reason != defaultFlushReason {
		t.Fatalf("CacheFlushes %+v, want one of scope All with the default reason", fl)
	}

	// --wait=false creates the flush and leaves it to the operator.
	r = s.plugin(t, ns, "flush", "store", "--prefix", "hc-cccccccccc", "--force=false", "--wait=false").mustSucceed(t)
	var name string
	for _, f := range s.flushes(t, ns) {
		if f.Name != fl[0].Name {
			name = f.Name
		}
	}
	want := fmt.Sprintf("cacheflush/%s created: removes namespace hc-cccccccccc (keys hc-cccccccccc_*) of CacheBackend store, sparing objects under a read lease\n"+
		"Follow it with: kubectl get cacheflush %s -n %s -w\n", name, name, ns)
	if r.stdout != want {
		t.Errorf("output:\n%s\nwant:\n%s", r.stdout, want)
	}
	eventually(t, 60*time.Second, "the flush without --wait completes", func() (bool, string) {
		var cf hicachev1alpha1.CacheFlush
		if err := s.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cf); err != nil {
			return false, err.Error()
		}
		line, state := flushProgress(&cf)
		return state == flushDone && cf.Spec.Force != nil && !*cf.Spec.Force, line
	})
}

// What flush refuses in a cluster creates nothing.
func TestClusterFlushRefusals(t *testing.T) {
	t.Parallel()
	s := testCluster(t)
	ns := s.newNamespace(t)
	// A backend that exists, but not multi-tenant (its master need not answer for this).
	cb := &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns},
		Spec: hicachev1alpha1.CacheBackendSpec{Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "127.0.0.1:1", AdminURL: "http://127.0.0.1:1"}}},
	}
	if err := s.k8s.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args []string
		want string
	}{
		"missing backend": {args: []string{"flush", "mooncake", "--all"},
			want: fmt.Sprintf(`error: CacheBackend "mooncake" not found in namespace %s (there are: shared): check the name, or pick the namespace with -n`, ns)},
		"tenant of a single-tenant master": {args: []string{"flush", "shared", "--tenant", "team-a"},
			want: `error: CacheBackend "shared" is not multi-tenant (spec.mooncake.multiTenant is false): its master ignores tenants and would remove every object`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := s.plugin(t, ns, tt.args...)
			if r.code != 1 || !strings.HasPrefix(r.stderr, tt.want) || r.stdout != "" {
				t.Errorf("exit code %d, stdout %q, stderr:\n%s\nwant code 1 and %q", r.code, r.stdout, r.stderr, tt.want)
			}
		})
	}
	r := runPlugin(t, "", "flush", "mooncake", "--all", "--kubeconfig", s.kubeconfig, "-n", "no-such-namespace")
	if want := `CacheBackend "mooncake" not found in namespace no-such-namespace (there are none)`; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	if fl := s.flushes(t, ns); len(fl) != 0 {
		t.Errorf("%d CacheFlushes created by refused commands", len(fl))
	}
}

// While the master is down every attempt fails; flush reports each and gives up at --timeout,
// and the flush completes in the cluster once the master is back.
func TestClusterFlushTimeoutWhileTheMasterIsDown(t *testing.T) {
	t.Parallel()
	s := testCluster(t)
	ns := s.newNamespace(t)
	m := startMaster(t)
	s.backend(t, ns, "mooncake", m)
	m.Stop()

	r := s.plugin(t, ns, "flush", "mooncake", "--all", "--timeout", "3s")

	fl := s.flushes(t, ns)
	if len(fl) != 1 {
		t.Fatalf("%d CacheFlushes, want 1", len(fl))
	}
	name := fl[0].Name
	wantErr := fmt.Sprintf("error: CacheFlush %s did not finish within 3s (last: attempt ", name)
	if r.code != 1 || !strings.HasPrefix(r.stderr, wantErr) ||
		!strings.HasSuffix(r.stderr, fmt.Sprintf("; it goes on in the cluster: kubectl get cacheflush %s -n %s -w\n", name, ns)) {
		t.Errorf("exit code %d, stderr:\n%s\nwant code 1 and %q", r.code, r.stderr, wantErr)
	}
	// The operator retries at once, many times within the timeout; the same failure is shown
	// once.
	failures := regexp.MustCompile(`(?m)^`+name+`: attempt \d+ failed: .*connection refused.*, retrying$`).FindAllString(r.stdout, -1)
	if len(failures) != 1 {
		t.Errorf("output:\n%s\nwant one line saying an attempt failed and is retried", r.stdout)
	}

	m.Restart()
	eventually(t, 60*time.Second, "the flush completes once the master is back", func() (bool, string) {
		var cf hicachev1alpha1.CacheFlush
		if err := s.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cf); err != nil {
			return false, err.Error()
		}
		line, state := flushProgress(&cf)
		return state == flushDone, line
	})
}

// status of a ready two-node deployment shows its groups and pods, its writers and namespace;
// -o json is the object's status; after a layout change it shows the last flush.
func TestClusterStatus(t *testing.T) {
	t.Parallel()
	s := testCluster(t)
	ns := s.newNamespace(t)
	m := startMaster(t)
	s.backend(t, ns, "mooncake", m)
	h := testutil.DeepSeekV4(ns, "dsv4")
	if err := s.k8s.Create(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	waitReady := func(what string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() (bool, string) {
			if err := s.k8s.Get(context.Background(), client.ObjectKeyFromObject(h), h); err != nil {
				return false, err.Error()
			}
			ready := meta.IsStatusConditionTrue(h.Status.Conditions, hicachev1alpha1.ConditionReady)
			layout := meta.IsStatusConditionTrue(h.Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
			return ready && layout && h.Status.ObservedGeneration == h.Generation && h.Status.ReadyReplicas == 1,
				fmt.Sprintf("ready %v, layout current %v, %s groups", ready, layout, h.Status.Ready)
		})
	}
	waitReady("dsv4 ready")
	var pods corev1.PodList
	if err := s.k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: "dsv4"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("%d pods, want 2", len(pods.Items))
	}
	nodeOf := map[string]string{}
	for _, p := range pods.Items {
		nodeOf[p.Name] = p.Spec.NodeName
	}

	r := s.plugin(t, ns, "status", "dsv4").mustSucceed(t)
	for _, want := range []string{
		"Ready:      1/1 serving groups",
		"Serving groups: 1/1 ready, 2 pods and 16 ranks each",
		"L3 duties of one serving group (writers: 1 of 16 ranks; ConfigMap dsv4-hicache):",
		"  L3 namespace:  " + h.Status.Cache.Namespace,
		"  Layout hash:   " + h.Status.Cache.ShortHash,
		"Stale namespaces: none",
		"Last flush: none",
	} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("status lacks the line %q:\n%s", want, r.stdout)
		}
	}
	for i, pod := range []string{"dsv4-0-0", "dsv4-0-1"} {
		want := fmt.Sprintf("%s  %s  yes    %d          %d-%d", pod, nodeOf[pod], i, i*8, i*8+7)
		if nodeOf[pod] == "" || !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks the pod row %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "  Ready:        True (Healthy) Mooncake master at "+m.RPCAddr) {
		t.Errorf("status lacks the backend's health:\n%s", r.stdout)
	}

	// -o json is one document that carries the object's status.
	var rep statusReport
	js := s.plugin(t, ns, "status", "dsv4", "-o", "json").mustSucceed(t)
	if err := yaml.UnmarshalStrict([]byte(js.stdout), &rep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, js.stdout)
	}
	if err := s.k8s.Get(context.Background(), client.ObjectKeyFromObject(h), h); err != nil {
		t.Fatal(err)
	}
	if diff := cmpStatus(h, &rep); diff != "" {
		t.Errorf("status -o json against the object (-object +json):\n%s", diff)
	}
	if g := rep.Groups; len(g) != 1 || !g[0].Ready || len(g[0].Members) != 2 ||
		g[0].Members[0].Node != nodeOf["dsv4-0-0"] || g[0].Members[1].Node != nodeOf["dsv4-0-1"] ||
		g[0].Members[0].Writers != 1 || g[0].Members[1].Writers != 0 {
		t.Errorf("groups %+v", g)
	}
	if rep.Backend == nil || !rep.Backend.Found || rep.Backend.Ready == nil || rep.Backend.Ready.Status != metav1.ConditionTrue {
		t.Errorf("backend %+v, want found and Ready", rep.Backend)
	}
	if rep.Duties.Source != "ConfigMap dsv4-hicache" || rep.Duties.Plan == nil || rep.Duties.Plan.NumRanks() != 16 {
		t.Errorf("duties from %q with %+v", rep.Duties.Source, rep.Duties.Plan)
	}

	// The namespace comes from the kubeconfig's context when -n is not given, and --context
	// picks the context.
	kc := s.kubeconfigWithContext(t, ns)
	r = runPlugin(t, "", "status", "dsv4", "-o", "yaml", "--kubeconfig", kc, "--context", "tests")
	var fromYAML statusReport
	if err := yaml.UnmarshalStrict([]byte(r.mustSucceed(t).stdout), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if fromYAML.Namespace != ns || fromYAML.Cache.Namespace != h.Status.Cache.Namespace {
		t.Errorf("status through the context: namespace %s, L3 namespace %v", fromYAML.Namespace, fromYAML.Cache)
	}

	r = s.plugin(t, ns, "status", "dsv")
	if want := fmt.Sprintf(`error: HiCacheDeployment "dsv" not found in namespace %s (there are: dsv4): check the name, or pick the namespace with -n`, ns); r.code != 1 || strings.TrimSpace(r.stderr) != want {
		t.Errorf("exit code %d, stderr %q, want %q", r.code, r.stderr, want)
	}

	// A breaking change: the old namespace is flushed and status shows the flush.
	oldNS := h.Status.Cache.Namespace
	m.PutKeys(t, keys(oldNS, 5), 4096)
	for i := 0; ; i++ {
		h.Spec.Topology.Draft = &hicachev1alpha1.DraftSpec{Algorithm: "DSPARK", ModelPath: "/models/deepseek-ai/DeepSeek-V4-DSpark"}
		err := s.k8s.Update(context.Background(), h)
		if err == nil {
			break
		}
		if i > 5 {
			t.Fatal(err)
		}
		_ = s.k8s.Get(context.Background(), client.ObjectKeyFromObject(h), h)
	}
	eventually(t, 90*time.Second, "the old namespace flushed", func() (bool, string) {
		if err := s.k8s.Get(context.Background(), client.ObjectKeyFromObject(h), h); err != nil {
			return false, err.Error()
		}
		c := h.Status.Cache
		return c.LastFlush != nil && c.LastFlush.Namespace == oldNS && len(c.StaleNamespaces) == 0, fmt.Sprintf("%+v", c)
	})
	waitReady("dsv4 ready with the draft")
	r = s.plugin(t, ns, "status", "dsv4").mustSucceed(t)
	want := fmt.Sprintf("Last flush: CacheFlush %s removed 5 objects of namespace %s, completed %s\n",
		h.Status.Cache.LastFlush.Name, oldNS, timeString(h.Status.Cache.LastFlush.CompletionTime))
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "  L3 namespace:  "+h.Status.Cache.Namespace+"\n") {
		t.Errorf("status after the flush lacks %q or the new namespace %s:\n%s", want, h.Status.Cache.Namespace, r.stdout)
	}
}

// cmpStatus compares what status -o json reports with the object's status.
func cmpStatus(h *hicachev1alpha1.HiCacheDeployment, rep *statusReport) string {
	type view struct {
		Name, Namespace                string
		Generation, ObservedGeneration int64
		Ready                          string
		ReadyGroups                    int32
		Attention                      hicachev1alpha1.AttentionKind
		Draft                          string
		Conditions                     []metav1.Condition
		Plan                           *hicachev1alpha1.PlanStatus
		Cache                          *hicachev1alpha1.CacheStatus
	}
	want := view{h.Name, h.Namespace, h.Generation, h.Status.ObservedGeneration, h.Status.Ready, h.Status.ReadyReplicas,
		h.Status.Attention, h.Status.Draft, h.Status.Conditions, h.Status.Plan, h.Status.Cache}
	got := view{rep.Name, rep.Namespace, rep.Generation, rep.ObservedGeneration, rep.Ready, rep.ReadyGroups,
		rep.Attention, rep.Draft, rep.Conditions, rep.Plan, rep.Cache}
	return cmp.Diff(want, got)
}

// kubeconfigWithContext writes a kubeconfig whose current context points nowhere and whose
// context "tests" is the cluster with namespace ns.
func (s *sharedCluster) kubeconfigWithContext(t *testing.T, ns string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext].DeepCopy()
	ctx.Namespace = ns
	cfg.Contexts["tests"] = ctx
	cfg.Clusters["nowhere"] = cfg.Clusters[ctx.Cluster].DeepCopy()
	cfg.Clusters["nowhere"].Server = "https://127.0.0.1:1"
	nowhere := ctx.DeepCopy()
	nowhere.Cluster, nowhere.Namespace = "nowhere", "default"
	cfg.Contexts["nowhere"] = nowhere
	cfg.CurrentContext = "nowhere"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// On a cluster without the CRDs, both commands say so and what to install.
func TestClusterWithoutTheCRDs(t *testing.T) {
	t.Parallel()
	c, err := localcluster.Start(context.Background(), localcluster.Options{APIServerOnly: true})
	if err != nil {
		t.Fatalf("starting a bare API server: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args []string
		want string
	}{
		"flush":  {args: []string{"flush", "mooncake", "--all"}, want: `error: reading CacheBackend "mooncake": the cluster does not serve hicache.io/v1alpha1: install the CRDs of hicache-operator first (its Helm chart does)`},
		"status": {args: []string{"status", "dsv4"}, want: `error: reading HiCacheDeployment "dsv4": the cluster does not serve hicache.io/v1alpha1: install the CRDs of hicache-operator first (its Helm chart does)`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := runPlugin(t, "", append(tt.args, "--kubeconfig", kc)...)
			if r.code != 1 || strings.TrimSpace(r.stderr) != tt.want {
				t.Errorf("exit code %d, stderr:\n%s\nwant code 1 and:\n%s", r.code, r.stderr, tt.want)
			}
		})
	}
}
