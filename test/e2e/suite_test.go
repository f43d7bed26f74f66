// Package e2e runs the operator against a real local control plane (kube-apiserver, etcd,
// kube-controller-manager, kube-scheduler, kwok GPU nodes) and real Mooncake masters.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller"
	"github.com/hicache-io/hicache-operator/internal/controller/cacheflush"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

var (
	scheme = runtime.NewScheme()
	// k8s is the tests' own client (not counted).
	k8s     client.Client
	cluster *localcluster.Cluster
	// operatorRequests counts every API request the operator sends, but watches.
	operatorRequests atomic.Int64
	// operatorWrites counts the operator's mutating requests.
	operatorWrites atomic.Int64
	// lastWrites keeps the latest mutating requests, for failure messages.
	lastWrites   []string
	lastWritesMu sync.Mutex
	repo         string
	stopManager  context.CancelFunc
	managerDone  = make(chan error, 1)

	// writesByNamespace keeps every mutating request of the operator about a namespace's objects
	// ("PATCH /apis/apps/v1/namespaces/ns/statefulsets/name"), under lastWritesMu.
	writesByNamespace = map[string][]string{}
)

func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// countingTransport counts the operator's requests.
type countingTransport struct{ next http.RoundTripper }

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") != "true" {
		operatorRequests.Add(1)
		if req.Method != http.MethodGet {
			operatorWrites.Add(1)
			lastWritesMu.Lock()
			lastWrites = append(lastWrites, req.Method+" "+req.URL.Path)
			if len(lastWrites) > 20 {
				lastWrites = lastWrites[len(lastWrites)-20:]
			}
			if _, rest, ok := strings.Cut(req.URL.Path, "/namespaces/"); ok {
				ns, _, _ := strings.Cut(rest, "/")
				writesByNamespace[ns] = append(writesByNamespace[ns], req.Method+" "+req.URL.Path)
			}
			lastWritesMu.Unlock()
		}
	}
	return c.next.RoundTrip(req)
}

// operatorWritesTo are the operator's writes to one object of namespace ns, named by its path
// under the namespace ("statefulsets/dsv4-0", "hicachedeployments/dsv4/status").
func operatorWritesTo(ns, object string) []string {
	lastWritesMu.Lock()
	defer lastWritesMu.Unlock()
	var out []string
	for _, w := range writesByNamespace[ns] {
		if strings.HasSuffix(w, "/namespaces/"+ns+"/"+object) {
			out = append(out, w)
		}
	}
	return out
}

// operatorWritesIn are the operator's writes to the objects of namespace ns so far, oldest first.
func operatorWritesIn(ns string) []string {
	lastWritesMu.Lock()
	defer lastWritesMu.Unlock()
	return slices.Clone(writesByNamespace[ns])
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	repo = repoRoot()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, hicachev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	// The operator's log, at every level, also passes through operatorLog, where tests look for
	// the secrets they plant.
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel()),
		zap.RawZapOpts(uberzap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewTee(c, zapcore.NewCore(zapcore.NewJSONEncoder(uberzap.NewDevelopmentEncoderConfig()), zapcore.AddSync(operatorLog), zapcore.Level(-127)))
		}))))
	ctx := context.Background()
	var err error
	opts := testutil.GPUCluster(6)
	opts.SchedulerNames = []string{secondScheduler}
	cluster, err = localcluster.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the local cluster: %v\n", err)
		return 1
	}
	defer func() { _ = cluster.Stop() }()
	k8s, err = client.New(cluster.Config(), client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := startManager(); err != nil {
		fmt.Fprintf(os.Stderr, "starting the operator: %v\n", err)
		return 1
	}
	code := m.Run()
	stopManager()
	<-managerDone
	return code
}

// startManager runs the operator in this process, as cmd/manager does, with its requests
// counted and namespace flushes run by flush.py on this host (kwok runs no Job containers).
func startManager() error {
	cancel, done, err := newManager("", nil)
	if err != nil {
		return err
	}
	stopManager = cancel
	go func() { managerDone <- <-done }()
	return nil
}

// restartManagerAs stops the operator and starts another under a new identity, as a new pod
// taking over from one that died would; the test's end brings back the suite's own.
func restartManagerAs(t *testing.T, identity string) {
	t.Helper()
	restartManagerWith(t, identity, nil)
}

// restartManagerWith is restartManagerAs with the operator's options changed by change (nil:
// the suite's).
func restartManagerWith(t *testing.T, identity string, change func(*storeuse.Options)) {
	t.Helper()
	stopManager()
	if err := <-managerDone; err != nil {
		t.Fatalf("the operator stopped with an error: %v", err)
	}
	cancel, done, err := newManager(identity, change)
	if err != nil {
		t.Fatalf("starting the operator as %s: %v", identity, err)
	}
	stopManager = cancel
	go func() { managerDone <- <-done }()
	t.Cleanup(func() { restartManager(t) })
}

// newManager starts an operator in this process under identity ("": the default, which
// restartManager keeps), with its options changed by change (nil: none), and returns how to
// stop it and where its end is reported.
func newManager(identity string, change func(*storeuse.Options)) (context.CancelFunc, <-chan error, error) {
	cfg := rest.CopyConfig(cluster.Config())
	cfg.QPS, cfg.Burst = 200, 400
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt} }
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  reconcile.CacheOptions(cache.Options{}),
		// The same controllers are started again by restartManager, in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, nil, err
	}
	python := filepath.Join(repo, "bin", "mooncake-venv", "bin", "python")
	opts := storeuse.Options{
		BackendPollInterval: time.Second,
		Flusher:             flushRuns.runner(cacheflush.LocalFlusher{Python: python}, cacheflush.JobFlusher{Client: mgr.GetClient()}),
		Identity:            identity,
		FlushAttemptTimeout: flushAttemptTimeout,
		FlushBackoff:        time.Second,
		FlushBackoffMax:     8 * time.Second,
		// As the chart's pod would be told: the policies admit the operator from there.
		OperatorNamespace: operatorNamespace,
	}
	if change != nil {
		change(&opts)
	}
	if err := controller.Setup(mgr, opts); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return cancel, done, nil
}

// flushAttemptTimeout is the operator's deadline per flush attempt in these tests: above what
// flush.py takes on a loaded machine (a few seconds), short enough to wait for.
const flushAttemptTimeout = 30 * time.Second

// startSecondManager runs another operator beside the suite's, without leader election, as a
// second replica or a lease hand-over would, until the test ends.
func startSecondManager(t *testing.T, identity string) {
	t.Helper()
	cancel, done, err := newManager(identity, nil)
	if err != nil {
		t.Fatalf("starting a second operator: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the second operator stopped with an error: %v", err)
		}
	})
}

func zapLevel() zapcore.Level {
	if os.Getenv("E2E_VERBOSE") != "" {
		return -2
	}
	// Only what would crash: a test's namespace going away makes event writes fail, by design.
	return zapcore.DPanicLevel
}

// restartManager stops the operator and starts a new one, as a crash and restart would.
func restartManager(t *testing.T) {
	t.Helper()
	whileManagerStopped(t, func() {})
}

// whileManagerStopped stops the operator, runs change, and starts a new one, as the upgrade that
// replaces the operator's pod does; the new one starts even when change fails the test.
func whileManagerStopped(t *testing.T, change func()) {
	t.Helper()
	stopManager()
	if err := <-managerDone; err != nil {
		t.Fatalf("the operator stopped with an error: %v", err)
	}
	defer func() {
		if err := startManager(); err != nil {
			t.Fatalf("restarting the operator: %v", err)
		}
	}()
	change()
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))[:min(20, len(t.Name()))] + "-"}}
	ns.GenerateName = sanitize(ns.GenerateName)
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
	}
	return strings.TrimLeft(b.String(), "-")
}

// eventually polls until a condition holds (see testutil.Eventually).
var eventually = testutil.Eventually
