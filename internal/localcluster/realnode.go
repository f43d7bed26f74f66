package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hicache-io/hicache-operator/internal/images"
)

// The real node's identity, as pods meant for it select and tolerate it.
const (
	// RealNodeName is the real node's name unless RealNodeOptions.Name says otherwise.
	RealNodeName = "real-node"
	// RealNodeRoleLabel is set to RealNodeRoleValue on the real node: select it with
	// RealNodeSelector.
	RealNodeRoleLabel = "hicache.io/node-role"
	RealNodeRoleValue = "system"
	// RealNodeTaintKey is the NoSchedule taint on the real node (no value): only pods with
	// RealNodeToleration land there.
	RealNodeTaintKey = "hicache.io/real-node"
	// SandboxImage is the pause image the node's containerd runs pod sandboxes from; one of
	// the imported image tarballs must carry it (make images builds it into bin/images).
	SandboxImage = images.Pause
	// KubeDNSServiceIP is the ClusterIP of kube-system/kube-dns, the real node's cluster DNS.
	KubeDNSServiceIP = "10.96.0.10"
	// RealNodePodCIDR is the range pods on the real node get their IPs from.
	RealNodePodCIDR = "10.244.0.0/24"
	// ContainerdNamespace is the containerd namespace the kubelet uses (ctr -n k8s.io).
	ContainerdNamespace = "k8s.io"
)

// RealNodeSelector is the nodeSelector of pods meant for the real node.
func RealNodeSelector() map[string]string {
	return map[string]string{RealNodeRoleLabel: RealNodeRoleValue}
}

// RealNodeToleration is the toleration of pods meant for the real node.
func RealNodeToleration() corev1.Toleration {
	return corev1.Toleration{Key: RealNodeTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
}

// RealNodeOptions turns on the real node: a kubelet with containerd and runc that runs pods
// for real, beside the fake GPU nodes. See the package documentation.
type RealNodeOptions struct {
	// Name of the node; empty means RealNodeName.
	Name string
	// ImageDir holds OCI image tarballs (*.tar) that are imported into the node's containerd
	// before the kubelet starts. Empty means bin/images of the repository (what make images
	// writes). One of them must carry SandboxImage.
	ImageDir string
	// Images are more image tarballs to import, after those of ImageDir.
	Images []string
}

// RealNode is the running real node of a cluster.
type RealNode struct {
	// Name of the Node object.
	Name string
	// IP is the node's InternalIP, on the node's side of a veth pair in NetNS; the host
	// reaches it (and only it) through the other side.
	IP string
	// NetNS names the network namespace (/run/netns/<NetNS>) the node's processes, its pods
	// and kube-proxy's iptables rules live in.
	NetNS string
	// ContainerdSocket is the node's containerd endpoint (ctr --address).
	ContainerdSocket string
	// CgroupRoot is the cgroup (in every hierarchy) the node's pods run under.
	CgroupRoot string

	ctr string
}

// nodeAddresses are the addresses of real node number index: 10.10.<index>.1 in its
// namespace, .2 on the host side of the veth pair.
func nodeAddresses(index int) (nodeIP, hostIP string) {
	return fmt.Sprintf("10.10.%d.1", index), fmt.Sprintf("10.10.%d.2", index)
}

// realNode is the running real node and everything its teardown needs.
type realNode struct {
	layout     nodeLayout
	record     nodeRecord
	hostIP     string
	ca         *authority
	proxy      *proxy
	components []*component
	bin        binPaths
	imageFiles []string
	// imported receives the outcome of starting containerd and importing the images.
	imported chan error
}

// ImportImage imports an image tarball (OCI or docker-archive, as make images writes) into
// the node's containerd, where pods with imagePullPolicy: Never find it. It returns the
// image names it imported.
func (n *RealNode) ImportImage(ctx context.Context, tarball string) ([]string, error) {
	before, err := n.Images(ctx)
	if err != nil {
		return nil, err
	}
	if err := run(ctx, n.ctr, "--address", n.ContainerdSocket, "-n", ContainerdNamespace, "images", "import", tarball); err != nil {
		return nil, fmt.Errorf("import the image tarball %s into the real node: %w", tarball, err)
	}
	after, err := n.Images(ctx)
	if err != nil {
		return nil, err
	}
	had := map[string]bool{}
	for _, b := range before {
		had[b] = true
	}
	var added []string
	for _, a := range after {
		if !had[a] {
			added = append(added, a)
		}
	}
	return added, nil
}

// Images lists the names of the images in the node's containerd, sorted.
func (n *RealNode) Images(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, n.ctr, "--address", n.ContainerdSocket, "-n", ContainerdNamespace, "images", "ls", "-q").Output()
	if err != nil {
		return nil, fmt.Errorf("list the images of the real node: %w", err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "sha256:") {
			names = append(names, l)
		}
	}
	sort.Strings(names)
	return names, nil
}

// TagImage gives an image of the node's containerd a second name, as a registry would serve a
// new tag of the same image: pods that name it run the same bytes under another reference.
func (n *RealNode) TagImage(ctx context.Context, source, target string) error {
	if err := run(ctx, n.ctr, "--address", n.ContainerdSocket, "-n", ContainerdNamespace, "images", "tag", "--force", source, target); err != nil {
		return fmt.Errorf("tag the real node's image %s as %s: %w", source, target, err)
	}
	return nil
}

// DialContext connects from inside the node's network namespace, where pod IPs, Service
// ClusterIPs (through kube-proxy's rules) and the node's own ports are reachable. Use it
// as an http.Transport's DialContext to talk to a pod from a test.
func (n *RealNode) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(n.NetNS, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	return conn, err
}

// Command prepares argv to run inside the node's network namespace (with nsenter; the
// mount namespace is the host's).
func (n *RealNode) Command(ctx context.Context, argv ...string) *exec.Cmd {
	full := nsenterCmd(n.NetNS, argv...)
	return exec.CommandContext(ctx, full[0], full[1:]...)
}

// RealNode returns the real node, or nil when Options.RealNode was not set.
func (c *Cluster) RealNode() *RealNode {
	if c.real == nil {
		return nil
	}
	return c.real.public()
}

func (r *realNode) public() *RealNode {
	return &RealNode{
		Name: r.layout.name, IP: r.layout.nodeIP, NetNS: r.layout.netns,
		ContainerdSocket: r.layout.containerdSocket(), CgroupRoot: r.layout.cgroupRoot, ctr: r.bin.hostCommand("ctr"),
	}
}

// hostCommands are the programs of Debian packages the real node runs (hack/node-packages.sh
// installs them).
var hostCommands = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "nsenter", "ip", "iptables", "conntrack"}

var cniPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

func (p binPaths) hostCommand(name string) string {
	if path, err := exec.LookPath(name); err == nil {
		return path
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	return name
}

// checkRealNode reports everything the real node misses in one error.
func (p binPaths) checkRealNode() error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("the real node needs root (it creates a network namespace, mounts and cgroups, and runs containerd): run as root or leave Options.RealNode unset"))
	}
	var missing []string
	for _, name := range []string{"kubelet", "kube-proxy", "coredns"} {
		if info, err := os.Stat(p.bin(name)); err != nil || info.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("the real node needs %s in %s: run hack/tools.sh %s", strings.Join(missing, ", "), p.shown, strings.Join(missing, " ")))
	}
	var pkgs []string
	for _, name := range hostCommands {
		if _, err := os.Stat(p.hostCommand(name)); err != nil {
			pkgs = append(pkgs, name)
		}
	}
	for _, name := range cniPlugins {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", name)); err != nil {
			pkgs = append(pkgs, "/usr/lib/cni/"+name)
		}
	}
	if len(pkgs) > 0 {
		errs = append(errs, fmt.Errorf("the real node needs %s: run hack/node-packages.sh", strings.Join(pkgs, ", ")))
	}
	return errors.Join(errs...)
}

// imageFiles lists the tarballs to import: ImageDir's *.tar, then Images.
func (o RealNodeOptions) imageFiles(root string) ([]string, error) {
	dir := o.ImageDir
	if dir == "" {
		dir = filepath.Join(root, "images")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	files = append(files, o.Images...)
	if len(files) == 0 {
		return nil, fmt.Errorf("no image tarballs (*.tar) in %s for the real node, which needs at least its sandbox image %s: run make images", dir, SandboxImage)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("image tarball for the real node: %w", err)
		}
	}
	return files, nil
}

// prepareRealNode runs before the API server: it registers the node on the host, creates
// its network namespace and cgroup root, and makes the certificates the API server and the
// node need.
func (c *Cluster) prepareRealNode(ctx context.Context, paths binPaths, opts RealNodeOptions) error {
	name := opts.Name
	if name == "" {
		name = RealNodeName
	}
	tarballs, err := opts.imageFiles(paths.binDir)
	if err != nil {
		return err
	}
	r := &realNode{bin: paths, imageFiles: tarballs}
	id := randomID()
	r.layout = nodeLayout{name: name, dir: filepath.Join(c.dir, "node"), netns: "hicache-" + id, cgroupRoot: "/hicache-" + id}
	r.record = nodeRecord{OwnerPID: os.Getpid(), Dir: c.dir, NetNS: r.layout.netns, HostLink: "hc-" + id, CgroupRoot: r.layout.cgroupRoot}
	for _, d := range []string{"pki", "containerd", "cni/net.d", "cni/ipam", "pod-logs", "kubelet"} {
		if err := os.MkdirAll(r.layout.path(d), 0o700); err != nil {
			return fmt.Errorf("create the real node's directory: %w", err)
		}
	}

	err = withRegistry(func(reg *registry) error {
		for _, rec := range reg.stale() {
			c.logf("cleaning up real node %d left by process %d", rec.Index, rec.OwnerPID)
			if err := teardownRecord(ctx, rec); err != nil {
				c.logf("cleanup of stale real node %d: %v", rec.Index, err)
			}
			_ = reg.remove(rec.Index)
		}
		used := map[int]bool{}
		for i := range reg.records {
			used[i] = true
		}
		index, err := freeIndex(used, hostAddresses())
		if err != nil {
			return err
		}
		r.record.Index = index
		r.layout.nodeIP, r.hostIP = nodeAddresses(index)
		// Recorded before anything is created, so that a crash from here on is cleaned up.
		return reg.put(r.record)
	})
	if err != nil {
		return err
	}
	c.real = r
	if err := r.createNetwork(ctx); err != nil {
		return err
	}
	if err := createCgroupRoot(r.layout.cgroupRoot); err != nil {
		return err
	}
	return r.makePKI()
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func hostAddresses() []string {
	addrs, _ := net.InterfaceAddrs()
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out
}

// createNetwork makes the node's network namespace with a veth pair: eth0 with the node's
// address inside, the host's side with hostIP, loopback up, and a route for Service IPs.
func (r *realNode) createNetwork(ctx context.Context) error {
	ns, link := r.layout.netns, r.record.HostLink
	if err := createNetns(ns); err != nil {
		return err
	}
	inside := func(argv ...string) []string { return nsenterCmd(ns, argv...) }
	for _, argv := range [][]string{
		{"ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "addr", "add", r.hostIP + "/24", "dev", link},
		{"ip", "link", "set", link, "up"},
		inside("ip", "addr", "add", r.layout.nodeIP+"/24", "dev", "eth0"),
		inside("ip", "link", "set", "eth0", "up"),
		inside("ip", "link", "set", "lo", "up"),
		// The namespace has no default route; a connection from the node itself (a test's
		// DialContext, a hostNetwork pod) to a ClusterIP needs a route before kube-proxy's
		// rules rewrite its destination.
		inside("ip", "route", "add", serviceCIDR, "dev", "eth0"),
	} {
		if err := run(ctx, argv...); err != nil {
			return fmt.Errorf("set up the real node's network: %w", err)
		}
	}
	return nil
}

// makePKI writes the node's CA and certificates: the API server's serving certificate (for
// the node's view of it, kubernetes.default and 127.0.0.1), the kubelet's serving
// certificate and the API server's client certificate for the kubelet, and the
// ServiceAccount signing key.
func (r *realNode) makePKI() error {
	ca, err := newAuthority("hicache-local-node-ca")
	if err != nil {
		return err
	}
	r.ca = ca
	dir := r.layout.path("pki")
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.pem, 0o600); err != nil {
		return err
	}
	nodeIP := net.ParseIP(r.layout.nodeIP)
	certs := map[string]certRequest{
		"apiserver": {
			commonName: "kube-apiserver",
			dnsNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips:        []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(kubernetesServiceIP), nodeIP},
		},
		"kubelet-serving":          {commonName: r.layout.name, dnsNames: []string{r.layout.name}, ips: []net.IP{nodeIP}},
		"apiserver-kubelet-client": {commonName: "kube-apiserver-kubelet-client", organization: []string{"system:masters"}},
	}
	for name, req := range certs {
		crt, key, err := ca.issue(req)
		if err != nil {
			return err
		}
		if err := writePair(dir, name, crt, key); err != nil {
			return err
		}
	}
	saCrt, saKey, err := serviceAccountKeys()
	if err != nil {
		return err
	}
	return writePair(dir, "sa-signer", saCrt, saKey)
}

// kubernetesServiceIP is the first address of serviceCIDR, which the API server gives the
// kubernetes Service.
const kubernetesServiceIP = "10.96.0.1"

// configureAPIServer adds to envtest's API server what a kubelet and pods need. envtest
// takes certificates it finds in its CertDir as given, so the serving certificate (with the
// node's names) and the ServiceAccount keys are copied there before each start.
func (r *realNode) configureAPIServer(api *envtest.APIServer) error {
	for _, f := range []string{"apiserver.crt", "apiserver.key", "sa-signer.crt", "sa-signer.key"} {
		data, err := os.ReadFile(r.layout.pki(f))
		if err != nil {
			return err
		}
		//nolint:gosec // G703: CertDir is the cluster's own directory and f one of four fixed names.
		if err := os.WriteFile(filepath.Join(api.CertDir, f), data, 0o600); err != nil {
			return err
		}
	}
	api.SecureServing.CA = r.ca.pem
	args := api.Configure()
	args.Set("advertise-address", r.layout.nodeIP)
	args.Set("authorization-mode", "Node", "RBAC")
	// envtest turns ServiceAccount admission off; pods on a real node need their tokens.
	args.Disable("disable-admission-plugins")
	args.Set("enable-admission-plugins", "NodeRestriction")
	args.Set("service-account-issuer", "https://kubernetes.default.svc.cluster.local")
	args.Set("kubelet-client-certificate", r.layout.pki("apiserver-kubelet-client.crt"))
	args.Set("kubelet-client-key", r.layout.pki("apiserver-kubelet-client.key"))
	args.Set("kubelet-certificate-authority", r.layout.pki("ca.crt"))
	// The node's address, never its name: a name would be looked up in the host's DNS.
	args.Set("kubelet-preferred-address-types", "InternalIP")
	return nil
}

// startAPIProxy lets the node's namespace reach the API server, which listens on the
// host's loopback only: a listener at <nodeIP>:<port> inside the namespace forwards to it.
// The kubernetes Service's endpoint (the advertise address) is that listener.
func (r *realNode) startAPIProxy(apiHost string) error {
	port := apiHost[strings.LastIndexByte(apiHost, ':')+1:]
	var l net.Listener
	err := inNetns(r.layout.netns, func() error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(r.layout.nodeIP, port))
		return err
	})
	if err != nil {
		return fmt.Errorf("listen for the API server in the real node's network namespace: %w", err)
	}
	r.proxy = startProxy(l, apiHost)
	r.layout.apiServer = "https://" + net.JoinHostPort(r.layout.nodeIP, port)
	return nil
}

// startRealNode runs the node's processes once the control plane is up and waits until the
// node is Ready, cluster DNS answers and the default ServiceAccount exists.
func (c *Cluster) startRealNode(ctx context.Context) error {
	r := c.real
	began := time.Now()
	if err := c.createClusterDNSObjects(ctx); err != nil {
		return err
	}
	if err := r.writeKubeconfigs(c); err != nil {
		return err
	}
	if err := <-r.imported; err != nil {
		return err
	}

	kubelet := []string{
		"--config=" + r.layout.path("kubelet.yaml"),
		"--kubeconfig=" + r.layout.path("kubelet.kubeconfig"),
		"--root-dir=" + r.layout.path("kubelet"),
		"--cert-dir=" + r.layout.path("kubelet", "pki"),
		"--hostname-override=" + r.layout.name,
		"--node-ip=" + r.layout.nodeIP,
		"--node-labels=" + RealNodeRoleLabel + "=" + RealNodeRoleValue,
		"--v=1",
	}
	if _, err := r.startProcess(c, "kubelet", r.bin.bin("kubelet"), kubelet...); err != nil {
		return err
	}
	if _, err := r.startProcess(c, "kube-proxy", r.bin.bin("kube-proxy"), "--config="+r.layout.path("kube-proxy.yaml"), "--v=1"); err != nil {
		return err
	}
	if _, err := r.startProcess(c, "coredns", r.bin.bin("coredns"), "-conf", r.layout.path("Corefile")); err != nil {
		return err
	}
	if err := c.waitRealNodeReady(ctx); err != nil {
		return err
	}
	c.logf("real node %s Ready at %s after %s", r.layout.name, r.layout.nodeIP, time.Since(began).Round(time.Millisecond))
	return nil
}

// startContainerd runs containerd in the node's namespace and imports the images in the
// background, while the control plane starts (the Mooncake image alone takes seconds to
// unpack); startRealNode waits for r.imported.
func (c *Cluster) startContainerd(ctx context.Context) error {
	r := c.real
	if err := r.writeConfigs(); err != nil {
		return err
	}
	containerd, err := r.startProcess(c, "containerd", r.bin.hostCommand("containerd"), "--config", r.layout.path("containerd", "config.toml"))
	if err != nil {
		return err
	}
	r.imported = make(chan error, 1)
	go func() {
		r.imported <- c.importImages(ctx, containerd)
	}()
	return nil
}

func (c *Cluster) importImages(ctx context.Context, containerd *component) error {
	r := c.real
	if err := r.waitContainerd(ctx, containerd); err != nil {
		return err
	}
	node := r.public()
	began := time.Now()
	for _, f := range r.imageFiles {
		if _, err := node.ImportImage(ctx, f); err != nil {
			return err
		}
	}
	have, err := node.Images(ctx)
	if err != nil {
		return err
	}
	if !contains(have, SandboxImage) {
		return fmt.Errorf("none of the image tarballs %s carries the sandbox image %s that pods on the real node need: run make images", strings.Join(r.imageFiles, ", "), SandboxImage)
	}
	c.logf("real node: containerd up, %d image tarballs imported in %s", len(r.imageFiles), time.Since(began).Round(time.Millisecond))
	return nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// startProcess runs a node process inside the node's network namespace.
func (r *realNode) startProcess(c *Cluster, name, path string, args ...string) (*component, error) {
	logFile, err := c.openLog(name)
	if err != nil {
		return nil, err
	}
	argv := nsenterCmd(r.layout.netns, append([]string{path}, args...)...)
	comp, err := startComponent(name, r.bin.hostCommand(argv[0]), argv[1:], nil, logFile)
	if err != nil {
		return nil, err
	}
	r.components = append(r.components, comp)
	return comp, nil
}

func (r *realNode) waitContainerd(ctx context.Context, comp *component) error {
	ctr := r.bin.hostCommand("ctr")
	var last error
	err := wait.PollUntilContextCancel(ctx, pollEvery, true, func(ctx context.Context) (bool, error) {
		if comp.exited() {
			return false, comp.exitError()
		}
		last = run(ctx, ctr, "--address", r.layout.containerdSocket(), "version")
		return last == nil, nil
	})
	if err != nil && !comp.exited() && ctx.Err() != nil {
		return fmt.Errorf("containerd did not answer in time (last: %v); see %s", last, comp.logPath)
	}
	return err
}

// writeConfigs writes the node's configuration files.
func (r *realNode) writeConfigs() error {
	l := r.layout
	files := map[string]string{
		l.path("containerd", "config.toml"):          containerdConfig(l),
		l.path("cni", "net.d", "10-bridge.conflist"): cniConfig(l),
		l.path("kubelet.yaml"):                       kubeletConfig(l),
		l.path("kube-proxy.yaml"):                    kubeProxyConfig(l),
		l.path("Corefile"):                           corefile(l),
		// No upstream resolver: pods resolve cluster names only.
		l.path("resolv.conf"): "",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// writeKubeconfigs provisions the client certificates of the kubelet, kube-proxy and CoreDNS
// and writes their kubeconfigs, which reach the API server through the node's forwarder.
func (r *realNode) writeKubeconfigs(c *Cluster) error {
	l := r.layout
	users := map[string]envtest.User{
		"kubelet":    {Name: "system:node:" + l.name, Groups: []string{"system:nodes"}},
		"kube-proxy": {Name: "system:kube-proxy"},
		"coredns":    {Name: corednsUser},
	}
	for file, user := range users {
		u, err := c.env.AddUser(user, &rest.Config{})
		if err != nil {
			return fmt.Errorf("provision a client certificate for %s: %w", file, err)
		}
		cfg := u.Config()
		cfg.Host = l.apiServer
		cfg.CAData = r.ca.pem
		data, err := kubeconfigFor(cfg, user.Name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(l.path(file+".kubeconfig"), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

const corednsUser = "system:coredns"

// createClusterDNSObjects creates kube-system/kube-dns at KubeDNSServiceIP, pointing at
// CoreDNS on the node's address, and lets CoreDNS read what it serves.
func (c *Cluster) createClusterDNSObjects(ctx context.Context) error {
	r := c.real
	ports := []corev1.ServicePort{
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
		{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec:       corev1.ServiceSpec{ClusterIP: KubeDNSServiceIP, Ports: ports},
	}
	if _, err := c.client.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the kube-dns Service: %w", err)
	}
	ready := true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kube-dns-real-node", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "localcluster"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{r.layout.nodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName: &r.layout.name,
		}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptrTo("dns"), Port: ptrTo(int32(53)), Protocol: ptrTo(corev1.ProtocolUDP)},
			{Name: ptrTo("dns-tcp"), Port: ptrTo(int32(53)), Protocol: ptrTo(corev1.ProtocolTCP)},
		},
	}
	if _, err := c.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the kube-dns EndpointSlice: %w", err)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: corednsUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "namespaces", "pods"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if _, err := c.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the ClusterRole of CoreDNS: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: corednsUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: corednsUser},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: corednsUser}},
	}
	if _, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the ClusterRoleBinding of CoreDNS: %w", err)
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// waitRealNodeReady waits for the Node to be Ready without the not-ready taints, for
// kube-proxy's and CoreDNS's health endpoints, and for the default ServiceAccount (pods
// are refused until the controller-manager made it).
func (c *Cluster) waitRealNodeReady(ctx context.Context) error {
	r := c.real
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	checks := []struct {
		what string
		ok   func(ctx context.Context) (bool, string)
	}{
		{"node " + r.layout.name + " Ready", func(ctx context.Context) (bool, string) {
			n, err := c.client.CoreV1().Nodes().Get(ctx, r.layout.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			why := nodeNotReady(n)
			return why == "", why
		}},
		{"kube-proxy healthy", httpOK(client, "http://"+net.JoinHostPort(r.layout.nodeIP, "10256")+"/healthz")},
		{"CoreDNS ready", httpOK(client, "http://"+net.JoinHostPort(r.layout.nodeIP, "8181")+"/ready")},
		{"the default ServiceAccount", func(ctx context.Context) (bool, string) {
			_, err := c.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return true, ""
		}},
	}
	for _, check := range checks {
		var last string
		err := wait.PollUntilContextCancel(ctx, 2*pollEvery, true, func(ctx context.Context) (bool, error) {
			for _, comp := range r.components {
				if comp.exited() {
					return false, comp.exitError()
				}
			}
			ok, why := check.ok(ctx)
			last = why
			return ok, nil
		})
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("waiting for %s on the real node: %s (last: %s); see kubelet.log, containerd.log, kube-proxy.log and coredns.log in %s", check.what, ctx.Err(), last, c.LogDir())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func httpOK(client *http.Client, url string) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, url + " answered " + strconv.Itoa(resp.StatusCode)
	}
}

// WaitForServiceAccount waits until the namespace's default ServiceAccount exists. With a
// real node the API server admits pods only then (its ServiceAccount admission is on), and
// the controller-manager creates the account a moment after the namespace.
func (c *Cluster) WaitForServiceAccount(ctx context.Context, namespace string) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, pollEvery, true, func(ctx context.Context) (bool, error) {
		_, last = c.client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the default ServiceAccount of namespace %s did not appear: %w (last: %v)", namespace, err, last)
	}
	return nil
}
