// Package localcluster runs a local Kubernetes control plane for integration tests and the
// local demo: etcd and kube-apiserver through controller-runtime's envtest, plus
// kube-controller-manager, kube-scheduler and kwok as subprocesses, and fake GPU nodes that
// kwok keeps Ready. Pods created on it are scheduled by the real scheduler (which counts
// nvidia.com/gpu), owned objects are garbage-collected by the real controller-manager, and
// kwok marks bound pods Running and Ready.
//
// Every binary comes from the repository's bin/ directory, built by hack/tools.sh; Start
// never builds anything. Every server listens on 127.0.0.1 only.
//
// In a test:
//
//	c, err := localcluster.Start(ctx, localcluster.Options{
//		CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
//	})
//	if err != nil {
//		t.Fatal(err) // names a missing binary and the hack/tools.sh command that builds it
//	}
//	t.Cleanup(func() { _ = c.Stop() })
//	k8s, err := client.New(c.Config(), client.Options{Scheme: scheme})
//
// The fake nodes have no taints, so pods need no toleration; they request nvidia.com/gpu
// as on a real cluster. (*Cluster).FailPod makes a pod fail. Without a real node, envtest's
// API server runs without the ServiceAccount admission plugin, so pods get no token volume.
//
// # The real node
//
// With Options.RealNode set, Start also runs one real node beside the fake ones, where pods
// run for real: containerd and runc (Debian packages, hack/node-packages.sh), the kubelet and
// kube-proxy (iptables mode) built like the control plane, and CoreDNS (hack/tools.sh kubelet
// kube-proxy coredns). It needs root.
//
//	c, err := localcluster.Start(ctx, localcluster.Options{
//		RealNode: &localcluster.RealNodeOptions{}, // imports bin/images/*.tar (make images)
//	})
//	node := c.RealNode()                          // Name, IP, NetNS, ContainerdSocket
//	_, err = node.ImportImage(ctx, "my-image.tar") // another image, after Start
//	err = c.WaitForServiceAccount(ctx, namespace)  // before creating pods in a new namespace
//
// Only pods meant for it land there: the node is labelled RealNodeRoleLabel=RealNodeRoleValue
// (hicache.io/node-role=system) and tainted RealNodeTaintKey:NoSchedule (hicache.io/real-node);
// such pods carry RealNodeSelector() as nodeSelector and RealNodeToleration() as toleration.
// The node has no nvidia.com/gpu, so GPU pods keep going to the fake nodes. Its images come
// from tarballs imported into its containerd at start (RealNodeOptions.ImageDir, default
// bin/images, and RealNodeOptions.Images); pods use them with imagePullPolicy: Never (there is
// no registry). Pod sandboxes run SandboxImage (localhost/pause:local), which one of the
// tarballs must carry.
//
// All of the node's networking lives in a network namespace the cluster creates,
// /run/netns/<RealNode.NetNS>: a veth pair gives the node its address (RealNode.IP,
// 10.10.<n>.1, with 10.10.<n>.2 on the host's side; n is the smallest free index, so several
// clusters may run real nodes at once), a bridge gives pods addresses in RealNodePodCIDR, and
// kube-proxy's iptables rules stay inside. containerd, the kubelet, kube-proxy and CoreDNS run
// in it through nsenter --net. The API server keeps listening on the host's 127.0.0.1; a
// forwarder listening on RealNode.IP inside the namespace carries the node's and the pods'
// connections to it, and is the advertised address, so that kubernetes.default (10.96.0.1)
// reaches the API server through kube-proxy. CoreDNS runs as a process (no image needed) on
// the node's address, behind kube-system/kube-dns at KubeDNSServiceIP; it serves
// cluster.local only and refuses other names, so no query leaves the namespace.
// RealNode.DialContext and RealNode.Command reach pod IPs and ClusterIPs from a test.
//
// With a real node the API server also runs with Node and RBAC authorization, NodeRestriction
// and ServiceAccount admission, ServiceAccount token signing (issuer
// https://kubernetes.default.svc.cluster.local), a serving certificate for the node's view of
// it and client certificates for the kubelet (CN=system:node:<name>, O=system:nodes); every
// certificate is made with crypto/x509. Start returns once the node is Ready, kube-proxy and
// CoreDNS are healthy and the default ServiceAccount exists.
//
// Stop removes everything the node made: its pods (through containerd's CRI), its processes
// and containers, the mounts below Dir, the network namespace and veth pair (and with them
// the iptables rules), its cgroups, the kubelet's links in /var/log/containers, and, when the
// last real node on the host stops, the host paths kubelet and containerd write whatever
// their configuration says (/var/lib/kubelet, /var/lib/cni, /run/containerd, /var/log/pods,
// /var/log/containers, /run/netns) unless they existed before, and the kernel settings the
// kubelet changes. Real nodes are registered in /run/hicache-localcluster, so that one whose
// owner died is cleaned up by the next Start or by Reap.
//
// A cluster whose test binary died (a -timeout panic, SIGKILL) leaves etcd and
// kube-apiserver behind; the next Start with a temporary Dir reaps them.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options configures Start. The zero value starts the full cluster with DefaultNodes in a
// temporary directory, with binaries from the repository's bin/.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.
	// Empty means bin/ of the repository that contains the working directory.
	BinDir string
	// StageDir holds the kwok Stage files (every *.yaml in it is passed to kwok).
	// Empty means hack/kwok/ of the repository that contains the working directory.
	StageDir string
	// CRDDirectoryPaths are files or directories of CustomResourceDefinitions to install
	// before Start returns. A path that does not exist is an error.
	CRDDirectoryPaths []string
	// Webhooks, when it lists webhook configurations, are installed as envtest does: with
	// a serving certificate and a local host and port for the webhook server, which
	// (*Cluster).Webhooks reports after Start.
	Webhooks envtest.WebhookInstallOptions
	// APIServerOnly starts etcd and kube-apiserver only: no controller-manager, scheduler,
	// kwok or nodes. Enough for tests that only read and write objects; about 4 s faster.
	APIServerOnly bool
	// Nodes are the fake nodes to create. Empty means DefaultNodes().
	Nodes []NodeSpec
	// SchedulerNames are scheduler names the cluster's kube-scheduler serves besides
	// default-scheduler (each a profile of its configuration), for pods that name another
	// scheduler (spec.schedulerName), as a gang scheduler's would.
	SchedulerNames []string
	// Dir receives the data, certificates, kubeconfigs and logs (logs/<component>.log) of
	// this cluster. Empty means a new temporary directory, which Stop removes unless KeepDir
	// is set. A directory given here is never removed by Stop.
	Dir string
	// KeepDir keeps a temporary Dir after Stop, for reading the logs.
	KeepDir bool
	// Timeout bounds the whole start. Zero means two minutes.
	Timeout time.Duration
	// Progress, when set, receives one line per start step.
	Progress io.Writer
	// RealNode, when set, also starts one real node (kubelet, containerd, kube-proxy, CoreDNS)
	// beside the fake ones, and runs the API server with what a node needs. It needs root,
	// hack/node-packages.sh and hack/tools.sh kubelet kube-proxy coredns; not with
	// APIServerOnly. See the package documentation.
	RealNode *RealNodeOptions
	// Audit runs kube-apiserver with an audit log of every request at the Metadata level (who,
	// which verb, which object; no bodies), one JSON event per line in AuditLogPath, written
	// when the response is complete. A user whose requests impersonate another is logged as
	// itself with the other in impersonatedUser.
	Audit bool
}

// Cluster is a running local control plane. Stop it when done.
type Cluster struct {
	dir        string
	removeDir  bool
	env        *envtest.Environment
	config     *rest.Config
	kubeconfig []byte
	client     kubernetes.Interface
	components []*component
	// logMu guards logFiles: the control plane's components open their logs concurrently.
	logMu    sync.Mutex
	logFiles []*os.File
	nodes    []string
	progress io.Writer
	real     *realNode

	stopOnce sync.Once
	stopErr  error
}

const (
	defaultTimeout = 2 * time.Minute
	// tempDirPrefix names the temporary directories of clusters; stale ones are reaped.
	tempDirPrefix = "hicache-localcluster-"
	ownerFile     = "owner.pid"
)

// Start runs a local cluster as Options says and returns when it is usable: the API server
// answers, CRDs are installed, and (unless APIServerOnly) the controller-manager and
// scheduler are healthy and every node is Ready without the not-ready taint. On error,
// everything started so far is stopped again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	paths, err := resolvePaths(opts)
	if err != nil {
		return nil, err
	}
	if err := paths.check(!opts.APIServerOnly); err != nil {
		return nil, err
	}
	if opts.RealNode != nil {
		if opts.APIServerOnly {
			return nil, errors.New("Options.RealNode needs the controller-manager and the scheduler: leave Options.APIServerOnly unset")
		}
		if err := paths.checkRealNode(); err != nil {
			return nil, err
		}
	}

	c := &Cluster{progress: opts.Progress}
	if err := c.makeDir(opts); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()

	began := time.Now()
	if opts.RealNode != nil {
		if err := c.prepareRealNode(ctx, paths, *opts.RealNode); err != nil {
			return nil, err
		}
		if err := c.startContainerd(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.startAPIServer(ctx, paths, opts); err != nil {
		return nil, err
	}
	c.logf("API server ready at %s after %s", c.config.Host, time.Since(began).Round(time.Millisecond))
	if c.real != nil {
		u, err := url.Parse(c.config.Host)
		if err != nil {
			return nil, fmt.Errorf("the API server's address %q: %w", c.config.Host, err)
		}
		if err := c.real.startAPIProxy(u.Host); err != nil {
			return nil, err
		}
	}
	if !opts.APIServerOnly {
		if err := c.startNodeSide(ctx, paths, opts.Nodes, opts.SchedulerNames); err != nil {
			return nil, err
		}
		c.logf("cluster ready with %d fake nodes after %s", len(c.nodes), time.Since(began).Round(time.Millisecond))
	}
	if c.real != nil {
		if err := c.startRealNode(ctx); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// Config returns a copy of the admin (system:masters) client configuration.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// Kubeconfig returns the admin kubeconfig, with certificates embedded.
func (c *Cluster) Kubeconfig() []byte { return append([]byte(nil), c.kubeconfig...) }

// WriteKubeconfig writes the admin kubeconfig to path with mode 0600.
func (c *Cluster) WriteKubeconfig(path string) error {
	if err := os.WriteFile(path, c.kubeconfig, 0o600); err != nil {
		return fmt.Errorf("write the kubeconfig of the local cluster: %w", err)
	}
	return nil
}

// Dir is the directory of this cluster's data, certificates, kubeconfigs and logs. Every
// process of the cluster has it in its command line.
func (c *Cluster) Dir() string { return c.dir }

// LogDir holds one <component>.log per process: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok.
func (c *Cluster) LogDir() string { return filepath.Join(c.dir, "logs") }

// AuditLogPath is the API server's audit log when Options.Audit is set.
func (c *Cluster) AuditLogPath() string { return filepath.Join(c.LogDir(), "kube-apiserver-audit.log") }

// Webhooks returns the webhook install options as envtest completed them: LocalServingHost,
// LocalServingPort and LocalServingCertDir are where the webhook server must listen.
func (c *Cluster) Webhooks() *envtest.WebhookInstallOptions { return &c.env.WebhookInstallOptions }

// NodeNames lists the fake nodes Start created, in order.
func (c *Cluster) NodeNames() []string { return append([]string(nil), c.nodes...) }

// Stop stops every process of the cluster (each in its own process group, SIGTERM then
// SIGKILL) and removes a temporary Dir unless Options.KeepDir. It is safe to call twice.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		// The real node first: its pods and processes go before the control plane does.
		if c.real != nil {
			if err := c.real.stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop the real node: %w", err))
			}
		}
		// The node side first, so nothing reacts to the API server going away.
		for i := len(c.components) - 1; i >= 0; i-- {
			if err := c.components[i].stop(); err != nil {
				errs = append(errs, err)
			}
		}
		if c.env != nil {
			if err := c.env.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop etcd and kube-apiserver: %w", err))
			}
		}
		c.logMu.Lock()
		for _, f := range c.logFiles {
			_ = f.Close()
		}
		c.logFiles = nil
		c.logMu.Unlock()
		if c.removeDir && c.dir != "" {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, fmt.Errorf("remove the cluster directory: %w", err))
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

func (c *Cluster) makeDir(opts Options) error {
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return fmt.Errorf("create the cluster directory: %w", err)
		}
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return fmt.Errorf("resolve the cluster directory: %w", err)
		}
		c.dir = dir
	} else {
		reapStaleClusters(os.TempDir())
		dir, err := os.MkdirTemp("", tempDirPrefix)
		if err != nil {
			return fmt.Errorf("create a temporary cluster directory: %w", err)
		}
		c.dir = dir
		c.removeDir = !opts.KeepDir
	}
	if err := os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return fmt.Errorf("record the owner of the cluster directory: %w", err)
	}
	return os.MkdirAll(c.LogDir(), 0o700)
}

func (c *Cluster) openLog(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(c.LogDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the log file of %s: %w", name, err)
	}
	c.logMu.Lock()
	c.logFiles = append(c.logFiles, f)
	c.logMu.Unlock()
	return f, nil
}

func (c *Cluster) logf(format string, args ...any) {
	if c.progress != nil {
		_, _ = fmt.Fprintf(c.progress, "localcluster: "+format+"\n", args...)
	}
}
