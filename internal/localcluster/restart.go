package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RestartAPIServer kills kube-apiserver (SIGKILL, as a crash or the OOM killer would: under load a
// graceful stop can take longer than a restart), keeps it down for down, and starts it again with
// the same flags on the same address, certificates and etcd, so that every client, kubeconfig and
// object survives the outage. etcd and the node side keep running. It returns the outage as
// measured, from the kill to /healthz answering again.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) (time.Duration, error) {
	if c.env == nil {
		return 0, errors.New("RestartAPIServer: the cluster is not running")
	}
	pid, err := c.apiServerPID()
	if err != nil {
		return 0, err
	}
	began := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill kube-apiserver (pid %d): %w", pid, err)
	}
	// Once envtest has seen the process end, its Stop only forgets it; until then Stop would
	// signal a process that is gone.
	api := c.env.ControlPlane.GetAPIServer()
	for {
		err := api.Stop()
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ESRCH) && !errors.Is(err, os.ErrProcessDone) {
			return time.Since(began), fmt.Errorf("stop kube-apiserver: %w", err)
		}
		if time.Since(began) > stopGrace {
			return time.Since(began), fmt.Errorf("kube-apiserver (pid %d) not seen to end %s after SIGKILL: %w", pid, stopGrace, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.logf("API server killed")
	select {
	case <-ctx.Done():
		return time.Since(began), ctx.Err()
	case <-time.After(down - time.Since(began)):
	}
	// Start re-runs envtest's preparation: the serving certificate, the client CA and the
	// service-account keys it wrote the first time are kept, since they are in the cluster's Dir.
	if err := api.Start(); err != nil {
		return time.Since(began), fmt.Errorf("start kube-apiserver again: %w\nthe end of its log:\n%s", err,
			tailFile(filepath.Join(c.LogDir(), "kube-apiserver.log"), logTailSize))
	}
	took := time.Since(began)
	c.logf("API server back after %s", took.Round(time.Millisecond))
	return took, nil
}

// apiServerPID finds the running kube-apiserver of this cluster among the processes whose
// command line names its Dir.
func (c *Cluster) apiServerPID() (int, error) {
	pids, err := ProcessesUsing(c.dir)
	if err != nil {
		return 0, err
	}
	for _, pid := range pids {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); filepath.Base(argv0) == "kube-apiserver" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver process uses %s", c.dir)
}

// UserConfig returns a client configuration for user name in groups, with a client certificate
// of its own: what it may do is what RBAC grants it (system:masters may do anything), and the
// API server's audit log tells its requests from those of Config's admin user.
func (c *Cluster) UserConfig(name string, groups ...string) (*rest.Config, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, &rest.Config{})
	if err != nil {
		return nil, fmt.Errorf("provision a client certificate for %s: %w", name, err)
	}
	return u.Config(), nil
}

// UserKubeconfig is UserConfig as a kubeconfig, with the certificates embedded.
func (c *Cluster) UserKubeconfig(name string, groups ...string) ([]byte, error) {
	cfg, err := c.UserConfig(name, groups...)
	if err != nil {
		return nil, err
	}
	return kubeconfigFor(cfg, name)
}
