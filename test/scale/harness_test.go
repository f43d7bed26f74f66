// Package scale measures the operator at scale against the raw baseline: N two-node DeepSeek-V4
// deployments on a fresh local control plane (real kube-apiserver, etcd, kube-controller-manager,
// kube-scheduler; kwok nodes; a real Mooncake master), once created by a client that writes the
// very children the operator would (rendered with the controllers' own builders) and once by the
// manager binary as shipped. BenchmarkScale (make bench-scale) writes its table into
// docs/benchmarks.md; TestScaleSmoke runs the same harness at N = 5.
package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/scalebench"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const (
	// nodesPerDeployment is the rank pods (and nodes) of one deployment: every deployment of the
	// benchmark is testutil.DeepSeekV4, writing to the backend "mooncake".
	nodesPerDeployment = testutil.DeepSeekV4Nodes
	// namespace holds the benchmark's objects.
	namespace = "bench"
	// creators create the deployments (and in the raw run their children) side by side.
	creators = 8
)

var scheme = runtime.NewScheme()

func init() {
	// The benchmark's own watch logs nothing.
	ctrllog.SetLogger(logr.Discard())
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, hicachev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
}

func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// config is one benchmark run.
type config struct {
	n int
	// rest is how long the manager is watched at rest after every deployment is Ready.
	rest time.Duration
	// managerBin is the manager binary; managerFlags are added to a default install's.
	managerBin   string
	managerFlags []string
	progress     io.Writer
	// profileDir, when set, receives the manager's heap profile at rest and a CPU profile of the
	// first cpuProfile of the convergence.
	profileDir string
	cpuProfile time.Duration
	// audit runs the operator's API server with an audit log, from which the manager's writes and
	// requests are broken down by resource.
	audit bool
}

// run measures one N: the raw baseline on one fresh cluster, then the operator on another.
func run(tb testing.TB, cfg config) scalebench.Result {
	tb.Helper()
	res := scalebench.Result{N: cfg.n, Nodes: nodesPerDeployment, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Commit: commit(), Flags: strings.Join(cfg.managerFlags, " "), CPUs: goruntime.NumCPU()}
	p := func(format string, args ...any) {
		fmt.Fprintf(cfg.progress, "%s [N=%d] %s\n", time.Now().Format("15:04:05"), cfg.n, fmt.Sprintf(format, args...))
	}
	m := mooncaketest.Start(tb)
	defer m.Stop()

	p("raw: starting a cluster with %d nodes", cfg.n*nodesPerDeployment)
	res.RawSeconds = runRaw(tb, cfg, m, p).Seconds()
	p("raw: every deployment's pods Ready in %.1f s", res.RawSeconds)

	p("operator: starting a cluster with %d nodes", cfg.n*nodesPerDeployment)
	runOperator(tb, cfg, m, p, &res)
	p("operator: done: %.1f s to all Ready (%.2f × raw), %.2f writes and %.2f reconciles per deployment, lag p99 %v, heap %.0f KiB per deployment",
		res.OperatorSeconds, res.OperatorSeconds/res.RawSeconds, res.Writes/float64(cfg.n), res.Reconciles/float64(cfg.n), res.LagP99,
		res.HeapBytes/float64(cfg.n)/1024)
	return res
}

// startCluster starts a fresh control plane with nodes for n deployments, and the benchmark's
// namespace and CacheBackend (an external master: m).
func startCluster(tb testing.TB, n int, m *mooncaketest.Master, progress io.Writer, audit bool) (*localcluster.Cluster, client.Client, *hicachev1alpha1.CacheBackend) {
	tb.Helper()
	ctx := context.Background()
	opts := testutil.GPUCluster(n * nodesPerDeployment)
	opts.Timeout = 2*time.Minute + time.Duration(n)*200*time.Millisecond
	opts.Progress, opts.Audit = progress, audit
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Stop() })
	k8s, err := client.New(unlimited(c.Config()), client.Options{Scheme: scheme})
	if err != nil {
		tb.Fatal(err)
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		tb.Fatal(err)
	}
	cb := testutil.ExternalBackend(namespace, "mooncake", m.RPCAddr, m.AdminURL)
	if err := k8s.Create(ctx, cb); err != nil {
		tb.Fatal(err)
	}
	return c, k8s, cb
}

// unlimited is cfg without a client-side rate limit: the benchmark's own client must not be
// what bounds it.
func unlimited(cfg *rest.Config) *rest.Config {
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// newDeployment is deployment i of the benchmark.
func newDeployment(i int) *hicachev1alpha1.HiCacheDeployment {
	return testutil.DeepSeekV4(namespace, fmt.Sprintf("dsv4-%d", i))
}

// createAll runs create(i) for i in 0..n-1 on creators goroutines; the first error stops it.
func createAll(n int, create func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan int)
	)
	for range creators {
		wg.Go(func() {
			for i := range next {
				if err := create(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// runRaw creates the deployments and every child the operator would write for them, with no
// operator, and returns how long until every deployment's pods were Ready.
func runRaw(tb testing.TB, cfg config, m *mooncaketest.Master, p func(string, ...any)) time.Duration {
	tb.Helper()
	c, k8s, cb := startCluster(tb, cfg.n, m, cfg.progress, false)
	defer func() { _ = c.Stop() }()
	w := startWatch(tb, c, cfg.n)
	ctx := context.Background()
	p("raw: creating %d deployments and their children", cfg.n)
	start := time.Now()
	err := createAll(cfg.n, func(i int) error {
		h := newDeployment(i)
		if err := k8s.Create(ctx, h); err != nil {
			return err
		}
		children, err := hicachedeployment.RenderChildren(h, cb, storeuse.Options{})
		if err != nil {
			return err
		}
		for _, o := range children {
			if err := k8s.Create(ctx, o); err != nil {
				return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	p("raw: created in %.1f s; waiting for the pods", time.Since(start).Seconds())
	last := w.wait(tb, p, "raw", start, func(s *state) map[string]time.Time { return s.podsReady })
	return last.Sub(start)
}

// runOperator runs the manager binary, creates the deployments and measures it into res.
func runOperator(tb testing.TB, cfg config, m *mooncaketest.Master, p func(string, ...any), res *scalebench.Result) {
	tb.Helper()
	c, k8s, cb := startCluster(tb, cfg.n, m, cfg.progress, cfg.audit)
	defer func() { _ = c.Stop() }()
	mgr := startManager(tb, c, cfg)
	defer mgr.stop(tb)
	ctx := context.Background()
	p("operator: waiting for the CacheBackend to be Ready")
	waitFor(tb, 2*time.Minute, "CacheBackend mooncake Ready", func() bool {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(cb), cb); err != nil {
			return false
		}
		return meta.IsStatusConditionTrue(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
	})
	w := startWatch(tb, c, cfg.n)
	res.HeapIdleBytes = mgr.heapAfterGC(tb)
	before := mgr.scrape(tb)
	res.LoadStart = loadAverage()
	p("operator: creating %d deployments (load average %.2f)", cfg.n, res.LoadStart)
	start := time.Now()
	cpuProfile := mgr.profileCPU(tb, cfg)
	if err := createAll(cfg.n, func(i int) error { return k8s.Create(ctx, newDeployment(i)) }); err != nil {
		tb.Fatal(err)
	}
	p("operator: created in %.1f s; waiting for them to be Ready", time.Since(start).Seconds())
	last := w.wait(tb, p, "operator", start, func(s *state) map[string]time.Time { return s.hcdReady })
	res.OperatorSeconds = last.Sub(start).Seconds()
	// The last Ready status is seen before the reconcile that wrote it returns and is counted:
	// the counts are read once no reconcile is in flight.
	after := mgr.scrapeIdle(tb, "hicachedeployment")
	res.LoadEnd = loadAverage()

	writes := func(m scalebench.Metrics) map[string]float64 {
		return m.SumBy("rest_client_requests_total", "method", nil)
	}
	wb, wa := writes(before), writes(after)
	res.WritesByVerb = map[string]float64{}
	for _, verb := range []string{http.MethodPost, http.MethodPatch, http.MethodDelete} {
		if d := wa[verb] - wb[verb]; d > 0 {
			res.WritesByVerb[verb] = d
			res.Writes += d
		}
	}
	res.LeaseWrites = wa[http.MethodPut] - wb[http.MethodPut]
	throttled := map[string]string{"code": "429"}
	res.Throttled = after.Sum("rest_client_requests_total", throttled) - before.Sum("rest_client_requests_total", throttled)
	hcd := map[string]string{"controller": "hicachedeployment"}
	res.Reconciles = after.Sum("controller_runtime_reconcile_total", hcd) - before.Sum("controller_runtime_reconcile_total", hcd)
	h := scalebench.Delta(before.Histogram("controller_runtime_reconcile_time_seconds", hcd), after.Histogram("controller_runtime_reconcile_time_seconds", hcd))
	res.ReconcileP50 = time.Duration(scalebench.Quantile(0.5, h) * float64(time.Second))
	res.ReconcileP99 = time.Duration(scalebench.Quantile(0.99, h) * float64(time.Second))
	res.LagP50, res.LagP99 = w.lags()

	p("operator: at rest for %v", cfg.rest)
	time.Sleep(cfg.rest)
	rested := mgr.scrape(tb)
	wr := writes(rested)
	for _, verb := range []string{http.MethodPost, http.MethodPatch, http.MethodDelete} {
		res.RestWrites += wr[verb] - wa[verb]
	}
	res.RestReconciles = rested.Sum("controller_runtime_reconcile_total", hcd) - after.Sum("controller_runtime_reconcile_total", hcd)
	res.RestSeconds = cfg.rest.Seconds()
	res.HeapBytes = mgr.heapAfterGC(tb)
	res.PeakRSSBytes = mgr.peakRSS(tb)
	if cfg.profileDir != "" {
		mgr.saveProfile(tb, "/debug/pprof/heap", filepath.Join(cfg.profileDir, fmt.Sprintf("heap-%d.pprof", cfg.n)))
		<-cpuProfile
		p("operator: profiles in %s", cfg.profileDir)
	}
	if cfg.n <= 20 {
		checkSameChildren(tb, k8s, cb, cfg.n)
	}
	if cfg.audit {
		p("operator: the manager's writes per deployment, by resource and verb, from the API server's audit log:\n%s", auditWrites(tb, c.AuditLogPath(), cfg.n, time.Time{}))
		p("operator: the manager's writes at rest:\n%s", auditWrites(tb, c.AuditLogPath(), 1, last))
		p("operator: the manager's writes of deployment %s, in order:\n%s", newDeployment(0).Name, auditTimeline(tb, c.AuditLogPath(), newDeployment(0).Name))
		p("operator: the manager's requests per deployment (reads too: start-up lists and watches spread over N), by resource and verb:\n%s", auditRequests(tb, c.AuditLogPath(), cfg.n))
	}
}

// auditEvent is what the benchmark reads of one audit event.
type auditEvent struct {
	Verb      string    `json:"verb"`
	UserAgent string    `json:"userAgent"`
	Stage     string    `json:"stage"`
	Received  time.Time `json:"requestReceivedTimestamp"`
	ObjectRef struct {
		Resource, Subresource, Name string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// managerWrites calls f with each of the manager's completed writes in the audit log at path.
func managerWrites(tb testing.TB, path string, f func(e *auditEvent)) {
	tb.Helper()
	managerRequests(tb, path, func(e *auditEvent) {
		switch e.Verb {
		case "create", "patch", "update", "delete":
			f(e)
		}
	})
}

// managerRequests calls f with each of the manager's completed requests in the audit log at path,
// reads included (a watch is logged when it ends).
func managerRequests(tb testing.TB, path string, f func(e *auditEvent)) {
	tb.Helper()
	file, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" || !strings.HasPrefix(e.UserAgent, "manager/") {
			continue
		}
		f(&e)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
}

func (e *auditEvent) resource() string {
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

// auditTimeline lists the manager's writes of the objects of deployment name in the order the API
// server received them: the deployment, its children (named name-…) and its Events (name.…), with
// the time since the first and the answer's code.
func auditTimeline(tb testing.TB, path, name string) string {
	tb.Helper()
	var b strings.Builder
	var first time.Time
	managerWrites(tb, path, func(e *auditEvent) {
		n := e.ObjectRef.Name
		if n != name && !strings.HasPrefix(n, name+"-") && !strings.HasPrefix(n, name+".") {
			return
		}
		if first.IsZero() {
			first = e.Received
		}
		fmt.Fprintf(&b, "  %+8.3fs %-6s %-36s %-28s %d\n", e.Received.Sub(first).Seconds(), e.Verb, e.resource(), n, e.ResponseStatus.Code)
	})
	return b.String()
}

// auditWrites counts the manager's writes in an audit log by resource and verb, per deployment.
// Only the writes received after since count.
func auditWrites(tb testing.TB, path string, n int, since time.Time) string {
	tb.Helper()
	counts := map[string]int{}
	managerWrites(tb, path, func(e *auditEvent) {
		if !e.Received.Before(since) {
			counts[e.resource()+" "+e.Verb]++
		}
	})
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-40s %.2f\n", k, float64(counts[k])/float64(n))
	}
	return b.String()
}

// auditRequests counts the manager's requests in an audit log by resource and verb, per
// deployment, with the total per verb.
func auditRequests(tb testing.TB, path string, n int) string {
	tb.Helper()
	counts, verbs, total := map[string]int{}, map[string]int{}, 0
	managerRequests(tb, path, func(e *auditEvent) {
		res := e.resource()
		if res == "" {
			res = "(discovery, health)"
		}
		counts[res+" "+e.Verb]++
		verbs[e.Verb]++
		total++
	})
	var b strings.Builder
	for _, m := range []map[string]int{counts, verbs} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-40s %.2f\n", k, float64(m[k])/float64(n))
		}
	}
	fmt.Fprintf(&b, "  %-40s %.2f\n", "every request", float64(total)/float64(n))
	return b.String()
}

// checkSameChildren: what the raw run creates is what the operator applied, object for object
// (the applied-hash annotation the operator stamps hashes the whole desired object).
func checkSameChildren(tb testing.TB, k8s client.Client, cb *hicachev1alpha1.CacheBackend, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := range n {
		h := &hicachev1alpha1.HiCacheDeployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fmt.Sprintf("dsv4-%d", i)}, h); err != nil {
			tb.Fatal(err)
		}
		children, err := hicachedeployment.RenderChildren(h, cb, storeuse.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		for _, want := range children {
			got := want.DeepCopyObject().(client.Object)
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
				tb.Errorf("the raw run creates %T %s, which the operator did not: %v", want, want.GetName(), err)
				continue
			}
			if _, ok := want.(*corev1.Secret); ok {
				continue // a fresh key each time
			}
			if a, b := want.GetAnnotations()[hicachev1alpha1.AnnotationAppliedHash], got.GetAnnotations()[hicachev1alpha1.AnnotationAppliedHash]; a != b {
				tb.Errorf("%T %s: the raw run creates applied hash %s, the operator applied %s", want, want.GetName(), a, b)
			}
		}
	}
}

// state is what the benchmark's watch saw: when each deployment's pods were all Ready, and when
// the deployment first reported Ready.
type state struct {
	mu        sync.Mutex
	podReady  map[string]map[string]bool // deployment → pod → Ready seen
	podsReady map[string]time.Time
	hcdReady  map[string]time.Time
}

type watch struct {
	s *state
	n int
}

// startWatch watches the namespace's rank pods and deployments from the benchmark's side.
func startWatch(tb testing.TB, c *localcluster.Cluster, n int) *watch {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	ca, err := cache.New(unlimited(c.Config()), cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		tb.Fatal(err)
	}
	s := &state{podReady: map[string]map[string]bool{}, podsReady: map[string]time.Time{}, hcdReady: map[string]time.Time{}}
	onPod := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !kubeutil.PodReady(pod) {
			return
		}
		now := time.Now()
		d := pod.Labels[hicachev1alpha1.LabelDeployment]
		if d == "" {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.podReady[d] == nil {
			s.podReady[d] = map[string]bool{}
		}
		s.podReady[d][pod.Name] = true
		if _, seen := s.podsReady[d]; !seen && len(s.podReady[d]) == nodesPerDeployment {
			s.podsReady[d] = now
		}
	}
	onHCD := func(obj any) {
		h, ok := obj.(*hicachev1alpha1.HiCacheDeployment)
		if !ok || h.Status.ObservedGeneration != h.Generation || h.Status.ReadyReplicas != 1 ||
			!meta.IsStatusConditionTrue(h.Status.Conditions, hicachev1alpha1.ConditionReady) {
			return
		}
		now := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, seen := s.hcdReady[h.Name]; !seen {
			s.hcdReady[h.Name] = now
		}
	}
	handlers := func(f func(any)) toolscache.ResourceEventHandlerFuncs {
		return toolscache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, o any) { f(o) }}
	}
	for _, h := range []struct {
		obj client.Object
		f   func(any)
	}{{&corev1.Pod{}, onPod}, {&hicachev1alpha1.HiCacheDeployment{}, onHCD}} {
		inf, err := ca.GetInformer(ctx, h.obj)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := inf.AddEventHandler(handlers(h.f)); err != nil {
			tb.Fatal(err)
		}
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		tb.Fatal("the benchmark's watch did not sync")
	}
	return &watch{s: s, n: n}
}

// wait returns when done (podsReady or hcdReady) holds every deployment, with the latest time
// in it.
func (w *watch) wait(tb testing.TB, p func(string, ...any), phase string, start time.Time, done func(*state) map[string]time.Time) time.Time {
	tb.Helper()
	deadline := start.Add(5*time.Minute + time.Duration(w.n)*time.Second)
	lastReport := time.Now()
	for {
		w.s.mu.Lock()
		m, pods := done(w.s), len(w.s.podsReady)
		count := len(m)
		var last time.Time
		for _, t := range m {
			if t.After(last) {
				last = t
			}
		}
		w.s.mu.Unlock()
		if count == w.n {
			return last
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: %d of %d deployments done (%d with their pods Ready) after %v", phase, count, w.n, pods, time.Since(start).Round(time.Second))
		}
		if time.Since(lastReport) > 10*time.Second {
			p("%s: %d of %d done, %d with their pods Ready, at %.0f s", phase, count, w.n, pods, time.Since(start).Seconds())
			lastReport = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lags are the p50 and p99 of the time from a group's pods all Ready to its deployment Ready (a
// deployment seen Ready before its pods, by the benchmark's own watch, counts 0).
func (w *watch) lags() (time.Duration, time.Duration) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	var ds []time.Duration
	for d, ready := range w.s.hcdReady {
		if pods, ok := w.s.podsReady[d]; ok {
			ds = append(ds, max(ready.Sub(pods), 0))
		}
	}
	return scalebench.Percentile(ds, 0.5), scalebench.Percentile(ds, 0.99)
}

func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// manager is the running manager binary.
type manager struct {
	cmd            *exec.Cmd
	metrics, pprof string
	logPath        string
	exited         chan error
}

func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// defaultFlags are those the chart gives the manager (leader election on, the chart's poll
// interval and log level), with this host's addresses; metrics over plain HTTP on loopback so that
// the benchmark can read them without a token, and Go's profiler for the heap after a GC.
func defaultFlags(kubeconfig, metrics, pprof, probes string) []string {
	return []string{"--kubeconfig=" + kubeconfig, "--leader-elect=true", "--leader-election-namespace=default",
		"--health-probe-bind-address=" + probes, "--metrics-bind-address=" + metrics, "--metrics-secure=false",
		"--pprof-bind-address=" + pprof, "--backend-poll-interval=15s", "--zap-log-level=info"}
}

func startManager(tb testing.TB, c *localcluster.Cluster, cfg config) *manager {
	tb.Helper()
	dir := tb.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		tb.Fatal(err)
	}
	m := &manager{metrics: freeAddr(tb), pprof: freeAddr(tb), logPath: filepath.Join(dir, "manager.log"), exited: make(chan error, 1)}
	logFile, err := os.Create(m.logPath)
	if err != nil {
		tb.Fatal(err)
	}
	args := append(defaultFlags(kubeconfig, m.metrics, m.pprof, freeAddr(tb)), cfg.managerFlags...)
	m.cmd = exec.Command(cfg.managerBin, args...)
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { m.exited <- m.cmd.Wait(); _ = logFile.Close() }()
	tb.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		if tb.Failed() {
			tb.Logf("manager log (last lines):\n%s", tail(m.logPath, 40))
		}
	})
	waitFor(tb, time.Minute, "the manager's metrics endpoint", func() bool {
		resp, err := http.Get("http://" + m.metrics + "/metrics")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return m
}

func (m *manager) get(tb testing.TB, url string) []byte {
	tb.Helper()
	select {
	case err := <-m.exited:
		tb.Fatalf("the manager exited: %v\n%s", err, tail(m.logPath, 40))
	default:
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return b
}

func (m *manager) scrape(tb testing.TB) scalebench.Metrics {
	tb.Helper()
	ms, err := scalebench.ParseMetrics(string(m.get(tb, "http://"+m.metrics+"/metrics")))
	if err != nil {
		tb.Fatal(err)
	}
	return ms
}

// scrapeIdle is the manager's metrics once no reconcile of controller is in flight (within 30 s),
// so that a reconcile whose writes were already seen is counted with them.
func (m *manager) scrapeIdle(tb testing.TB, controller string) scalebench.Metrics {
	tb.Helper()
	busy := map[string]string{"controller": controller}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ms := m.scrape(tb)
		if len(ms.SumBy("controller_runtime_active_workers", "controller", busy)) == 0 {
			tb.Fatalf("the manager exports no controller_runtime_active_workers of the %s controller: the reconcile counts could miss one in flight", controller)
		}
		if ms.Sum("controller_runtime_active_workers", busy) == 0 {
			return ms
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the %s controller still had reconciles in flight 30 s after the deployments were Ready", controller)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heapAfterGC is the manager's heap in use right after a GC (the profiler's gc=1 runs one).
func (m *manager) heapAfterGC(tb testing.TB) float64 {
	tb.Helper()
	m.get(tb, "http://"+m.pprof+"/debug/pprof/heap?gc=1")
	return m.scrape(tb).Sum("go_memstats_heap_alloc_bytes", nil)
}

// saveProfile writes the profile at path of the manager's profiler into file.
func (m *manager) saveProfile(tb testing.TB, path, file string) {
	tb.Helper()
	if err := os.WriteFile(file, m.get(tb, "http://"+m.pprof+path), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// profileCPU starts a CPU profile of cfg.cpuProfile when profiles are asked for; the channel is
// closed once it is written.
func (m *manager) profileCPU(tb testing.TB, cfg config) <-chan struct{} {
	done := make(chan struct{})
	if cfg.profileDir == "" || cfg.cpuProfile <= 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", m.pprof, int(cfg.cpuProfile.Seconds()))
		resp, err := (&http.Client{Timeout: cfg.cpuProfile + time.Minute}).Get(url)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		_ = os.WriteFile(filepath.Join(cfg.profileDir, fmt.Sprintf("cpu-%d.pprof", cfg.n)), b, 0o644)
	}()
	return done
}

// peakRSS is the manager's peak resident set (VmHWM).
func (m *manager) peakRSS(tb testing.TB) float64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb * 1024
		}
	}
	tb.Fatal("no VmHWM in the manager's /proc status")
	return 0
}

// stop stops the manager with SIGTERM, as Kubernetes would.
func (m *manager) stop(tb testing.TB) {
	tb.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		tb.Errorf("the manager did not stop within 30 s of SIGTERM")
	}
}

func tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// loadAverage is the host's 1-minute load average.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return -1
	}
	return f
}

// buildManager builds cmd/manager into a temporary directory: the binary users run
// ($BENCH_MANAGER_BIN instead, when set).
func buildManager(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv("BENCH_MANAGER_BIN"); bin != "" {
		return bin
	}
	bin, err := testutil.BuildManager(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// commit is the checked-out commit, marked when the tree differs from it.
func commit() string {
	out, err := exec.Command("git", "-C", repoRoot(), "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", repoRoot(), "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += " (modified)"
	}
	return c
}
