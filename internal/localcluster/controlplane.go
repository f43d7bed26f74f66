package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// portAttempts bounds the retries after losing a race for a free port.
	portAttempts = 3
	// serviceCIDR keeps Service IPs apart from kwok's pod CIDR (10.0.0.0/16).
	serviceCIDR = "10.96.0.0/16"
	podCIDR     = "10.0.0.0/16"
	kwokNodeIP  = "10.0.0.1"
	clusterName = "hicache-local"
)

// startAPIServer runs etcd and kube-apiserver through envtest on 127.0.0.1 and installs the CRDs.
func (c *Cluster) startAPIServer(ctx context.Context, paths binPaths, opts Options) error {
	etcdLog, err := c.openLog("etcd")
	if err != nil {
		return err
	}
	apiLog, err := c.openLog("kube-apiserver")
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("start the API server: %w", err)
		}
		env, err := c.newEnvironment(paths, opts, etcdLog, apiLog)
		if err != nil {
			return err
		}
		cfg, err := env.Start()
		if err == nil {
			c.env = env
			c.config = cfg
			break
		}
		_ = env.Stop()
		if attempt < portAttempts && (portTaken(etcdLog.Name()) || portTaken(apiLog.Name())) {
			continue
		}
		return fmt.Errorf("start etcd and kube-apiserver: %w\nthe end of %s:\n%s\nthe end of %s:\n%s",
			err, etcdLog.Name(), tailFile(etcdLog.Name(), logTailSize), apiLog.Name(), tailFile(apiLog.Name(), logTailSize))
	}

	admin, err := kubeconfigFor(c.config, "admin")
	if err != nil {
		return err
	}
	c.kubeconfig = admin
	if err := c.WriteKubeconfig(filepath.Join(c.dir, "kubeconfig")); err != nil {
		return err
	}
	c.client, err = kubernetes.NewForConfig(c.config)
	if err != nil {
		return fmt.Errorf("create a client for the local API server: %w", err)
	}
	return nil
}

func (c *Cluster) newEnvironment(paths binPaths, opts Options, etcdLog, apiLog *os.File) (*envtest.Environment, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	etcdDir := filepath.Join(c.dir, "etcd")
	certDir := filepath.Join(c.dir, "kube-apiserver")
	for _, d := range []string{etcdDir, certDir} {
		// A previous attempt (or a previous run in a reused Dir) must not leave state behind.
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("clean %s: %w", d, err)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory:    paths.binDir,
		CRDDirectoryPaths:        opts.CRDDirectoryPaths,
		WebhookInstallOptions:    opts.Webhooks,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: defaultTimeout / 2,
		ControlPlaneStopTimeout:  stopGrace * 2,
	}
	etcd := &envtest.Etcd{
		Path:    paths.bin("etcd"),
		DataDir: etcdDir,
		URL:     &url.URL{Scheme: "http", Host: loopback(ports[0])},
		Out:     etcdLog,
		Err:     etcdLog,
	}
	etcd.Configure().Set("listen-peer-urls", "http://"+loopback(ports[1]))
	env.ControlPlane.Etcd = etcd

	api := env.ControlPlane.GetAPIServer()
	api.Path = paths.bin("kube-apiserver")
	api.CertDir = certDir
	api.SecureServing.Port = strconv.Itoa(ports[2])
	api.SecureServing.Address = "127.0.0.1"
	api.Out, api.Err = apiLog, apiLog
	api.Configure().Set("service-cluster-ip-range", serviceCIDR)
	if opts.Audit {
		policy := filepath.Join(certDir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return nil, fmt.Errorf("write the audit policy: %w", err)
		}
		api.Configure().Set("audit-policy-file", policy)
		api.Configure().Set("audit-log-path", c.AuditLogPath())
		api.Configure().Set("audit-log-format", "json")
	}
	if c.real != nil {
		if err := c.real.configureAPIServer(api); err != nil {
			return nil, fmt.Errorf("configure the API server for the real node: %w", err)
		}
	}
	return env, nil
}

// startNodeSide runs kwok, creates the nodes, runs the controller-manager and the scheduler,
// and waits until the nodes are Ready.
func (c *Cluster) startNodeSide(ctx context.Context, paths binPaths, specs []NodeSpec, schedulerNames []string) error {
	if len(specs) == 0 {
		specs = DefaultNodes()
	}
	kubeconfigs := map[string]string{}
	for component, user := range map[string]string{
		"kube-controller-manager": "system:kube-controller-manager",
		"kube-scheduler":          "system:kube-scheduler",
		"kwok":                    "kwok",
	} {
		path, err := c.writeUserKubeconfig(component, user)
		if err != nil {
			return err
		}
		kubeconfigs[component] = path
	}

	if err := c.startKwok(paths, kubeconfigs["kwok"]); err != nil {
		return err
	}
	if err := c.createNodes(ctx, specs); err != nil {
		return err
	}

	saKey := filepath.Join(c.env.ControlPlane.GetAPIServer().CertDir, "sa-signer.key")
	kcm := []string{
		"--use-service-account-credentials=false",
		"--controllers=*",
		"--service-account-private-key-file=" + saKey,
		"--cluster-name=" + clusterName,
		// The default 20 QPS slows down garbage collection and StatefulSets of many pods.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
	}
	if c.real != nil {
		// Published to every namespace as kube-root-ca.crt, which pods' token volumes carry.
		kcm = append(kcm, "--root-ca-file="+c.real.layout.pki("ca.crt"))
	}
	var scheduler []string
	if len(schedulerNames) > 0 {
		cfg, err := c.writeSchedulerConfig(kubeconfigs["kube-scheduler"], schedulerNames)
		if err != nil {
			return err
		}
		scheduler = append(scheduler, "--config="+cfg)
	}
	servers := []struct {
		name  string
		extra []string
	}{
		{"kube-controller-manager", kcm},
		{"kube-scheduler", scheduler},
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, s := range servers {
		wg.Go(func() {
			comp, err := c.startServing(ctx, paths, s.name, kubeconfigs[s.name], s.extra)
			mu.Lock()
			defer mu.Unlock()
			if comp != nil {
				c.components = append(c.components, comp)
			}
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.logf("kube-controller-manager and kube-scheduler healthy")
	return c.waitNodesReady(ctx)
}

// writeSchedulerConfig writes a kube-scheduler configuration with one profile for
// default-scheduler and one for each of names. With a configuration file kube-scheduler reads
// its kubeconfig and leader election from it, not from flags.
func (c *Cluster) writeSchedulerConfig(kubeconfig string, names []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
	fmt.Fprintf(&b, "clientConnection: {kubeconfig: %q, qps: 200, burst: 400}\nleaderElection: {leaderElect: false}\nprofiles:\n", kubeconfig)
	for _, n := range append([]string{"default-scheduler"}, names...) {
		fmt.Fprintf(&b, "- schedulerName: %q\n", n)
	}
	path := filepath.Join(c.dir, "kube-scheduler-config.yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// startServing runs kube-controller-manager or kube-scheduler with its secure port on
// 127.0.0.1 and waits for /healthz, retrying on another port if the chosen one was taken.
func (c *Cluster) startServing(ctx context.Context, paths binPaths, name, kubeconfig string, extra []string) (*component, error) {
	logFile, err := c.openLog(name)
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(c.dir, name)
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := append([]string{
			"--kubeconfig=" + kubeconfig,
			// The delegated authentication and authorization of the secure port ask the
			// API server; without these the component logs warnings on every start.
			// /healthz is always allowed. Skipping the lookup of the request-header CA,
			// which envtest's API server does not configure, avoids an error per resync.
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--authentication-skip-lookup=true",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			// Writes the self-signed serving certificate here (not /var/run/kubernetes),
			// where the health probe reads it to verify the connection.
			"--cert-dir=" + certDir,
			"--leader-elect=false",
			"--v=2",
		}, extra...)
		comp, err := startComponent(name, paths.bin(name), args, nil, logFile)
		if err != nil {
			return nil, err
		}
		err = comp.waitHealthy(ctx, port, filepath.Join(certDir, name+".crt"))
		if err == nil {
			return comp, nil
		}
		_ = comp.stop()
		if attempt < portAttempts && portTaken(logFile.Name()) {
			continue
		}
		return nil, err
	}
}

// startKwok runs kwok for the nodes annotated kwok.x-k8s.io/node=fake with the stages of
// StageDir. kwok has no health endpoint: the nodes turning Ready show that it works.
func (c *Cluster) startKwok(paths binPaths, kubeconfig string) error {
	stages, err := filepath.Glob(filepath.Join(paths.stageDir, "*.yaml"))
	if err != nil {
		return err
	}
	logFile, err := c.openLog("kwok")
	if err != nil {
		return err
	}
	home := filepath.Join(c.dir, "kwok")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("create kwok's home: %w", err)
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + kwokNodeValue,
		"--cidr=" + podCIDR,
		"--node-ip=" + kwokNodeIP,
		// kwok renews each node's Lease, which is what the node lifecycle controller
		// watches; the status heartbeat stage can then be rare.
		"--node-lease-duration-seconds=40",
	}
	for _, s := range stages {
		args = append(args, "--config="+s)
	}
	// kwok also loads ~/.kwok/kwok.yaml when it exists: give it a home of its own so
	// that a user's kwok configuration does not leak in.
	comp, err := startComponent("kwok", paths.bin("kwok"), args, []string{"HOME=" + home}, logFile)
	if err != nil {
		return err
	}
	c.components = append(c.components, comp)
	return nil
}

// checkComponents reports the first subprocess that has stopped.
func (c *Cluster) checkComponents() error {
	for _, comp := range c.components {
		if comp.exited() {
			return comp.exitError()
		}
	}
	return nil
}

// writeUserKubeconfig provisions a system:masters client certificate for user and writes
// a kubeconfig for it to <Dir>/<component>.kubeconfig.
func (c *Cluster) writeUserKubeconfig(component, user string) (string, error) {
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, &rest.Config{})
	if err != nil {
		return "", fmt.Errorf("provision a client certificate for %s: %w", component, err)
	}
	data, err := kubeconfigFor(u.Config(), user)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, component+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("write the kubeconfig of %s: %w", component, err)
	}
	return path, nil
}

// kubeconfigFor renders a kubeconfig with embedded certificates for a client certificate config.
func kubeconfigFor(cfg *rest.Config, user string) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[clusterName] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	kc.CurrentContext = clusterName
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("render a kubeconfig for %s: %w", user, err)
	}
	return data, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// auditPolicy logs every request at the Metadata level once its response is complete.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
`
