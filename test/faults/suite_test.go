// Package faults runs the operator's own binary (cmd/manager, which make build writes to
// bin/manager) as processes against a local control plane (real kube-apiserver, etcd,
// controller-manager, scheduler; kwok GPU nodes) and a real Mooncake master, and breaks what
// the operator depends on: the manager SIGKILLed mid-rollout, down while the world changes, the
// API server restarted under load, the leader killed with a standby waiting, children deleted
// and disowned, a storm of writes to the deployments. Each test states what must hold after the
// fault and logs its figure; the API server's audit log tells which process wrote what.
//
// Run it with make test-faults (it builds bin/manager first). Without $HICACHE_MANAGER the suite
// builds cmd/manager itself, so that go test ./test/faults tests the sources as they are.
package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

var (
	cluster *localcluster.Cluster
	// k8s is the tests' own client, as the admin user (never the managers').
	k8s    client.Client
	scheme = kruntime.NewScheme()
	// managerBin is the manager binary every test runs.
	managerBin string
	logf       = testutil.SuiteLogger("faults")
)

func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestMain(m *testing.M) {
	// One 8-GPU node per DeepSeek-V4 rank pod: the largest test runs 20 two-node deployments, and
	// the next test starts while the last one's pods are going.
	opts := testutil.GPUCluster(48)
	opts.Audit = true
	os.Exit(testutil.RunClusterSuite(m, testutil.ClusterSuite{Name: "test/faults", Options: opts, Setup: setup}))
}

func setup(_ context.Context, c *localcluster.Cluster) error {
	cluster = c
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, hicachev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	var err error
	// The tests poll every deployment and its pods several times a second.
	cfg := c.Config()
	cfg.QPS, cfg.Burst = 500, 1000
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if managerBin = os.Getenv("HICACHE_MANAGER"); managerBin != "" {
		if _, err := os.Stat(managerBin); err != nil {
			return fmt.Errorf("$HICACHE_MANAGER: %w (make build writes bin/manager)", err)
		}
		logf("manager binary %s", managerBin)
		return nil
	}
	began := time.Now()
	if managerBin, err = testutil.BuildManager(c.Dir()); err != nil {
		return err
	}
	logf("manager built from the sources in %s", time.Since(began).Round(time.Millisecond))
	return nil
}

// newNamespace creates a namespace for one test, deleted when it ends (with everything in it:
// the next tests' managers then have nothing of it to look at).
func newNamespace(t *testing.T) string {
	t.Helper()
	prefix := strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	if len(prefix) > 24 {
		prefix = prefix[:24]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}
