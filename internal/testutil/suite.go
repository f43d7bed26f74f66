package testutil

import (
	"context"
	"fmt"
	"os"
	"path"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/hicache-io/hicache-operator/internal/localcluster"
)

// ClusterSuite is a test package whose tests share one local cluster, started before them and
// stopped after them.
//
//	func TestMain(m *testing.M) {
//		os.Exit(testutil.RunClusterSuite(m, testutil.ClusterSuite{Name: "test/faults", Options: opts, Setup: setup}))
//	}
type ClusterSuite struct {
	// Name is the package as messages name it, such as "test/realnode"; its last element
	// prefixes the suite's log lines.
	Name string
	// Options start the cluster (Progress, when unset, is standard error). With RealNode set,
	// the suite needs root.
	Options localcluster.Options
	// Setup, when set, runs once the cluster is up and before the tests: clients, an operator.
	// Its error ends the run before any test.
	Setup func(ctx context.Context, c *localcluster.Cluster) error
	// OnFailure, when set, runs after a failed Setup or failed tests, to print what explains
	// the failure (an operator's log, events).
	OnFailure func(ctx context.Context)
}

// RunClusterSuite starts the suite's cluster, runs Setup and the tests, stops the cluster and
// returns the exit code for TestMain. The clients' own logs are discarded: they say nothing a
// test's output needs.
func RunClusterSuite(m *testing.M, s ClusterSuite) int {
	logf := SuiteLogger(path.Base(s.Name))
	what := "the cluster"
	if s.Options.RealNode != nil {
		what = "the cluster with its real node"
		if os.Geteuid() != 0 {
			fmt.Fprintf(os.Stderr, "%s: the real node needs root (network namespace, mounts, cgroups, containerd); run the tests as root\n", s.Name)
			return 1
		}
	}
	if s.Options.Progress == nil {
		s.Options.Progress = os.Stderr
	}
	ctrllog.SetLogger(logr.Discard())
	ctx := context.Background()
	began := time.Now()
	cluster, err := localcluster.Start(ctx, s.Options)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: starting %s: %v\n", s.Name, what, err)
		return 1
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: stopping %s: %v\n", s.Name, what, err)
		}
	}()
	logf("%s up in %s", what, time.Since(began).Round(time.Millisecond))
	if s.Setup != nil {
		if err := s.Setup(ctx, cluster); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", s.Name, err)
			if s.OnFailure != nil {
				s.OnFailure(ctx)
			}
			return 1
		}
	}
	code := m.Run()
	if code != 0 && s.OnFailure != nil {
		s.OnFailure(ctx)
	}
	logf("done in %s", time.Since(began).Round(time.Millisecond))
	return code
}

// SuiteLogger returns a printf to standard error whose lines start with "[name 15:04:05]": a
// suite's progress, shown even when its tests pass.
func SuiteLogger(name string) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s %s] %s\n", name, time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}
