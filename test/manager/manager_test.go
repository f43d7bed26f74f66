// Package manager runs the operator's own binary, as a user does, against a real API server.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// buildManager builds cmd/manager into a temporary directory.
func buildManager(t *testing.T) string {
	t.Helper()
	bin, err := testutil.BuildManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestManagerBinaryServesProbesMetricsAndLeadership(t *testing.T) {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Options{
		APIServerOnly:     true,
		CRDDirectoryPaths: []string{filepath.Join(repoRoot(), "config", "crd", "bases")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	bin := buildManager(t)
	probes, metrics := freePort(t), freePort(t)
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--leader-elect", "--leader-election-namespace=default",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probes), fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics))
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("manager log:\n%s", logs.String())
		}
	})

	for _, path := range []string{"/healthz", "/readyz"} {
		testutil.Eventually(t, 30*time.Second, "the manager's "+path, func() (bool, string) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", probes, path))
			if err != nil {
				return false, err.Error()
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
	}

	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	var lease *coordinationv1.Lease
	testutil.Eventually(t, 30*time.Second, "the leader-election lease held", func() (bool, string) {
		l, err := cs.CoordinationV1().Leases("default").Get(ctx, "hicache-operator.hicache.io", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		lease = l
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder"
	})

	// Metrics are served over HTTPS (a self-signed certificate here) and only to callers the API
	// server authorizes.
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	testutil.Eventually(t, 30*time.Second, "metrics refused without credentials", func() (bool, string) {
		resp, err := insecure.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", metrics))
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden, resp.Status
	})

	// SIGTERM stops it cleanly.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the manager exited with %v on SIGTERM, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the manager did not stop within 30 s of SIGTERM (lease holder %v)", lease.Spec.HolderIdentity)
	}
}

func TestManagerRefusesABadFlushRunner(t *testing.T) {
	out, err := exec.Command(buildManager(t), "--flush-runner=cloud").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "use job or local") {
		t.Errorf("manager --flush-runner=cloud: %v\n%s\nwant exit 2 and a message naming job and local", err, out)
	}
}

func TestManagerRefusesBadWorkersAndRateLimits(t *testing.T) {
	bin := buildManager(t)
	for _, c := range []struct{ flag, says string }{
		{"--deployment-workers=0", "--deployment-workers must be between 1 and 64"},
		{"--deployment-workers=65", "--deployment-workers must be between 1 and 64"},
		{"--kube-api-burst=-1", "--kube-api-burst must not be negative"},
	} {
		out, err := exec.Command(bin, c.flag).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), c.says) {
			t.Errorf("manager %s: %v\n%s\nwant exit 2 and %q", c.flag, err, out, c.says)
		}
	}
}

// runningManager is one manager process of a test.
type runningManager struct {
	cmd    *exec.Cmd
	logs   *strings.Builder
	exited chan error
}

func startManagerBinary(t *testing.T, bin, kubeconfig string) *runningManager {
	t.Helper()
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--leader-elect", "--leader-election-namespace=default",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", freePort(t)), "--metrics-bind-address=0")
	m := &runningManager{cmd: cmd, logs: &strings.Builder{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = m.logs, m.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("manager %d log:\n%s", cmd.Process.Pid, m.logs.String())
		}
	})
	return m
}

// A manager stopped with SIGTERM gives up its lease as it exits, so that a standby (or the
// replacement pod of a rolling update) leads within its retry period rather than waiting for the
// lease to expire.
func TestManagerReleasesItsLeaseOnSIGTERM(t *testing.T) {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Options{
		APIServerOnly:     true,
		CRDDirectoryPaths: []string{filepath.Join(repoRoot(), "config", "crd", "bases")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	holder := func() (string, error) {
		l, err := cs.CoordinationV1().Leases("default").Get(ctx, "hicache-operator.hicache.io", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if l.Spec.HolderIdentity == nil {
			return "", nil
		}
		return *l.Spec.HolderIdentity, nil
	}

	bin := buildManager(t)
	first := startManagerBinary(t, bin, kubeconfig)
	var leader string
	testutil.Eventually(t, 30*time.Second, "the first manager leading", func() (bool, string) {
		h, err := holder()
		leader = h
		return err == nil && h != "", fmt.Sprint(h, err)
	})
	standby := startManagerBinary(t, bin, kubeconfig)
	// The standby is up and trying: give it one retry period against the held lease.
	time.Sleep(3 * time.Second)
	if h, _ := holder(); h != leader {
		t.Fatalf("the lease moved from %s to %s while its holder ran", leader, h)
	}

	start := time.Now()
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-first.exited:
		if err != nil {
			t.Fatalf("the manager exited with %v on SIGTERM, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not stop within 30 s of SIGTERM")
	}
	stopped := time.Since(start)
	// Released: no holder, unless the standby took it already.
	if h, err := holder(); err != nil || h == leader {
		t.Errorf("after the leader exited the lease is held by %q (%v); want it released", h, err)
	}
	var took time.Duration
	testutil.Eventually(t, 30*time.Second, "the standby leading", func() (bool, string) {
		h, err := holder()
		took = time.Since(start)
		return err == nil && h != "" && h != leader, fmt.Sprint(h, err)
	})
	t.Logf("SIGTERM to exit %v; the standby led %v after SIGTERM", stopped.Round(100*time.Millisecond), took.Round(100*time.Millisecond))
	// The standby retries every 2 s (controller-runtime's RetryPeriod); the lease lasts 15 s.
	if took > 5*time.Second {
		t.Errorf("the standby led %v after the leader's SIGTERM; want within its retry period (2 s) plus the leader's shutdown, not the lease's 15 s expiry", took)
	}
	if err := standby.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-standby.exited:
		if err != nil {
			t.Errorf("the second manager exited with %v on SIGTERM, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the second manager did not stop within 30 s of SIGTERM")
	}
	if h, err := holder(); err != nil || h != "" {
		t.Errorf("after the last manager exited the lease is held by %q (%v); want it released", h, err)
	}
}
