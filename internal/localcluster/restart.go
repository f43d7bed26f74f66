package localcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RestartAPIServer stops kube-apiserver (SIGTERM, as envtest stops it), keeps it down for down,
// and starts it again with the same flags on the same address, certificates and etcd, so that
// every client, kubeconfig and the objects survive: an outage as a control-plane upgrade or a
// crash of the API server makes it. etcd and the node side keep running. It returns the outage
// as measured, from the stop to /healthz answering again.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) (time.Duration, error) {
	if c.env == nil {
		return 0, errors.New("RestartAPIServer: the cluster is not running")
	}
	api := c.env.ControlPlane.GetAPIServer()
	began := time.Now()
	if err := api.Stop(); err != nil {
		return time.Since(began), fmt.Errorf("stop kube-apiserver: %w", err)
	}
	c.logf("API server stopped after %s", time.Since(began).Round(time.Millisecond))
	select {
	case <-ctx.Done():
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
