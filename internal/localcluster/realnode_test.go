package localcluster_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/hicache-io/hicache-operator/internal/imagebuild"
	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const probeImage = "localhost/nodeprobe:test"

// TestRealNode starts the cluster with its real node and checks what the operator's pods
// will rely on: the node is Ready and marked, a pod from a locally imported image runs and
// passes an httpGet probe, Services, CoreDNS and kubernetes.default work from a pod, only
// tolerating pods land on the node, GPU pods still go to the fake nodes, and Stop leaves
// nothing on the host.
func TestRealNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the real node needs root (network namespace, mounts, cgroups, containerd); run the tests as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	probe := buildProbeImage(t)
	host := snapshotHost(t)

	began := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{
		KeepDir:  true,
		Progress: testWriter{t},
		// bin/images (make images: the pause, operator and Mooncake images), and the probe.
		RealNode: &localcluster.RealNodeOptions{Images: []string{probe}},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("cluster with a real node started in %s (dir %s)", time.Since(began).Round(time.Millisecond), c.Dir())
	dir := c.Dir()
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, c.LogDir())
		}
		if !stopped {
			_ = c.Stop()
		}
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	node := c.RealNode()
	if node == nil {
		t.Fatal("RealNode() is nil with Options.RealNode set")
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns := makeNamespace(ctx, t, cs, "realnode")
	if err := c.WaitForServiceAccount(ctx, ns); err != nil {
		t.Fatal(err)
	}

	t.Run("the real node is Ready, labelled and tainted; the fake nodes are Ready too", func(t *testing.T) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ip string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		got := fmt.Sprintf("ready=%v label=%s ip=%s kubelet=%s", isNodeReady(n), n.Labels[localcluster.RealNodeRoleLabel], ip, n.Status.NodeInfo.KubeletVersion)
		want := fmt.Sprintf("ready=true label=%s ip=%s kubelet=v1.37.2", localcluster.RealNodeRoleValue, node.IP)
		if got != want {
			t.Errorf("real node: %s, want %s", got, want)
		}
		var taints []string
		for _, taint := range n.Spec.Taints {
			taints = append(taints, taint.Key+":"+string(taint.Effect))
		}
		if diff := cmp.Diff([]string{localcluster.RealNodeTaintKey + ":NoSchedule"}, taints); diff != "" {
			t.Errorf("real node taints (-want +got):\n%s", diff)
		}
		for _, name := range c.NodeNames() {
			fake, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !isNodeReady(fake) {
				t.Errorf("fake node %s is not Ready", name)
			}
		}
		imported, err := node.Images(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{images.Pause, images.Operator, images.Mooncake, probeImage} {
			if !slices.Contains(imported, want) {
				t.Errorf("images of the real node %v lack %s", imported, want)
			}
		}
	})

	t.Run("a pod from a locally imported image runs on the real node and passes its httpGet probe", func(t *testing.T) {
		began := time.Now()
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, probePod(ns, "web", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitReadyPods(ctx, t, cs, ns, "app=web", 1)[0]
		t.Logf("pod Ready in %s", time.Since(began).Round(time.Millisecond))
		if p.Spec.NodeName != node.Name {
			t.Errorf("pod web runs on %q, want the real node %s", p.Spec.NodeName, node.Name)
		}
		_, podNet, _ := net.ParseCIDR(localcluster.RealNodePodCIDR)
		if ip := net.ParseIP(p.Status.PodIP); ip == nil || !podNet.Contains(ip) {
			t.Errorf("pod IP %q is not in %s", p.Status.PodIP, localcluster.RealNodePodCIDR)
		}
		// From the test, through the node's network namespace.
		body := httpGetVia(ctx, t, node, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/")
		if !strings.Contains(body, "hello from web") {
			t.Errorf("GET of the pod answered %q", body)
		}
	})

	t.Run("a Service ClusterIP, CoreDNS names and kubernetes.default work from a pod", func(t *testing.T) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "web"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		svc, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// kube-proxy programs the ClusterIP once the Service's endpoints reach it; until then the
		// node rejects connections to it. Pods started before that would test kube-proxy's lag.
		target := net.JoinHostPort(svc.Spec.ClusterIP, "80")
		testutil.Eventually(t, 30*time.Second, "kube-proxy forwards the Service's ClusterIP", func() (bool, string) {
			conn, err := node.DialContext(ctx, "tcp", target)
			if err != nil {
				return false, err.Error()
			}
			_ = conn.Close()
			return true, ""
		})
		fqdn := "web." + ns + ".svc.cluster.local"
		checks := map[string]struct {
			args []string
			want string
		}{
			"resolve": {[]string{"resolve", fqdn}, svc.Spec.ClusterIP},
			"short":   {[]string{"resolve", "web"}, svc.Spec.ClusterIP},
			"get":     {[]string{"get", "http://" + fqdn + "/"}, "200 hello from web"},
			"api":     {[]string{"api"}, `200 {"kind":"APIVersions"`},
		}
		for name, check := range checks {
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, probePod(ns, "probe-"+name, check.args), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for name, check := range checks {
			logs := waitSucceeded(ctx, t, cs, ns, "probe-"+name)
			if !strings.Contains(logs, check.want) {
				t.Errorf("nodeprobe %s printed %q, want it to contain %q", strings.Join(check.args, " "), logs, check.want)
			}
		}
		// The ClusterIP from the test, through kube-proxy's rules in the node's namespace.
		if body := httpGetVia(ctx, t, node, "http://"+net.JoinHostPort(svc.Spec.ClusterIP, "80")+"/"); !strings.Contains(body, "hello from web") {
			t.Errorf("GET of the ClusterIP answered %q", body)
		}
	})

	t.Run("a pod without the toleration does not land on the real node", func(t *testing.T) {
		intruder := probePod(ns, "intruder", nil)
		intruder.Spec.Tolerations = nil
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, intruder, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var msg string
		waitFor(ctx, t, 30*time.Second, "pod intruder to be reported Unschedulable", func(ctx context.Context) (bool, string, error) {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, "intruder", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable {
					msg = cond.Message
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("node %q phase %s", p.Spec.NodeName, p.Status.Phase), nil
		})
		if !strings.Contains(msg, "1 node(s) had untolerated taint") {
			t.Errorf("Unschedulable message %q does not say that one node's taint was not tolerated", msg)
		}
		// Without the node selector either, a pod goes to a fake node, never the real one.
		loose := probePod(ns, "loose", nil)
		loose.Spec.Tolerations, loose.Spec.NodeSelector = nil, nil
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, loose, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitReadyPods(ctx, t, cs, ns, "app=loose", 1)[0]
		if p.Spec.NodeName == node.Name || !slices.Contains(c.NodeNames(), p.Spec.NodeName) {
			t.Errorf("pod loose runs on %q, want a fake node", p.Spec.NodeName)
		}
	})

	t.Run("GPU pods go to the fake nodes", func(t *testing.T) {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "rank"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitReadyPods(ctx, t, cs, ns, "app=rank", 1)[0]
		if !strings.HasPrefix(p.Spec.NodeName, "gpu-node-") {
			t.Errorf("GPU pod runs on %q, want a gpu-node", p.Spec.NodeName)
		}
	})

	t.Run("Stop leaves nothing on the host", func(t *testing.T) {
		fp := takeFootprint(t, node, dir)
		began := time.Now()
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		stopped = true
		t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond))
		fp.assertGone(t, host)
	})
}

// footprint is what one running real node has on the host, found before it stops.
type footprint struct {
	dir, netns, cgroupRoot string
	link                   string
	containers             []int
	// podNetns are the mount points that pin its pods' network namespaces.
	podNetns []string
	// ids are the container and sandbox ids of its containers (their cgroups' names).
	ids []string
}

func takeFootprint(t *testing.T, node *localcluster.RealNode, dir string) footprint {
	t.Helper()
	fp := footprint{dir: dir, netns: node.NetNS, cgroupRoot: node.CgroupRoot, link: "hc-" + strings.TrimPrefix(node.NetNS, "hicache-")}
	fp.containers = cgroupProcs(t, node)
	if len(fp.containers) == 0 {
		t.Errorf("no container process in the real node's cgroups: the checks below would prove nothing")
	}
	inodes := map[uint64]bool{}
	for _, pid := range fp.containers {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"), &st) == nil {
			inodes[st.Ino] = true
		}
	}
	for _, mp := range mountPoints() {
		var st syscall.Stat_t
		if syscall.Stat(mp, &st) == nil && inodes[st.Ino] {
			fp.podNetns = append(fp.podNetns, mp)
		}
	}
	if len(fp.podNetns) == 0 {
		t.Errorf("no mount pins a pod network namespace of the real node")
	}
	_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/pids", node.CgroupRoot), func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && len(d.Name()) == 64 {
			fp.ids = append(fp.ids, d.Name())
		}
		return nil
	})
	mounts, _ := localcluster.MountsUnder(dir)
	t.Logf("before the real node goes: %d container processes, %d pod network namespaces, %d containers, %d mounts below its directory",
		len(fp.containers), len(fp.podNetns), len(fp.ids), len(mounts))
	return fp
}

// assertGone checks that nothing of the node is left. When no other real node runs on the
// host any more, the whole host must be as it was before (snapshot before).
func (fp footprint) assertGone(t *testing.T, before hostSnapshot) {
	t.Helper()
	if pids, _ := localcluster.ProcessesUsing(fp.dir); len(pids) != 0 {
		t.Errorf("processes %v still name %s", pids, fp.dir)
	}
	for _, pid := range fp.containers {
		if processRuns(pid) {
			t.Errorf("container process %d still runs", pid)
		}
	}
	if left, _ := localcluster.MountsUnder(fp.dir); len(left) != 0 {
		t.Errorf("still mounted: %v", left)
	}
	if _, err := os.Lstat(filepath.Join("/run/netns", fp.netns)); !os.IsNotExist(err) {
		t.Errorf("the network namespace %s is still there (lstat: %v)", fp.netns, err)
	}
	for _, mp := range mountPoints() {
		if slices.Contains(fp.podNetns, mp) {
			t.Errorf("a pod's network namespace is still mounted at %s", mp)
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", fp.link)); err == nil {
		t.Errorf("the host's side of the veth pair, %s, is still there", fp.link)
	}
	hierarchies, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h.Name(), fp.cgroupRoot)); err == nil {
			t.Errorf("the cgroup %s/%s is still there", h.Name(), fp.cgroupRoot)
		}
	}
	for _, d := range []string{"/var/lib/cni", "/var/log/containers", "/run/containerd"} {
		_ = filepath.WalkDir(d, func(path string, _ os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			for _, id := range fp.ids {
				if strings.Contains(filepath.Base(path), id) {
					t.Errorf("%s is left, of container %s", path, id)
				}
			}
			if target, err := os.Readlink(path); err == nil && strings.HasPrefix(target, fp.dir+"/") {
				t.Errorf("%s is left, a link into %s", path, fp.dir)
			}
			return nil
		})
	}
	// containerd 1.6's shim sockets: /run/containerd/s/<sha256 of address/namespace/sandbox id>.
	address := filepath.Join(fp.dir, "node", "containerd", "containerd.sock")
	for _, id := range fp.ids {
		sum := sha256.Sum256([]byte(filepath.Join(address, localcluster.ContainerdNamespace, id)))
		if p := filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])); fileExists(p) {
			t.Errorf("the shim socket %s of sandbox %s is left", p, id)
		}
	}
	// The snapshot is taken before the registry is looked at: a node that registers in between
	// (other packages' tests run in parallel) is then seen, instead of showing up as a change.
	after := snapshotHost(t)
	if _, err := os.Stat("/run/hicache-localcluster"); err == nil || before.Registered {
		t.Logf("another real node ran on this host meanwhile: the host-wide comparison is skipped")
		return
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the host differs (-before +after):\n%s", diff)
	}
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// mountPoints lists every mount point of the host.
func mountPoints() []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	return out
}

// processRuns tells whether pid is alive and not a zombie waiting for its new parent.
func processRuns(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// hostSnapshot is what a real node may touch on the host.
type hostSnapshot struct {
	Paths      map[string]string // path → "absent" or every path below it
	Links      []string          // network interfaces
	Netns      []string          // /run/netns entries
	Mounts     []string          // mount points under /run and /var
	Cgroups    []string          // top-level cgroups of every hierarchy
	Iptables   string            // the host's iptables rules, without counters
	Sysctls    map[string]string
	Registered bool // /run/hicache-localcluster exists
}

func snapshotHost(t *testing.T) hostSnapshot {
	t.Helper()
	s := hostSnapshot{Paths: map[string]string{}, Sysctls: map[string]string{}}
	for _, p := range []string{"/var/log/containers", "/var/log/pods", "/var/lib/cni", "/var/lib/kubelet", "/var/lib/containerd", "/run/containerd", "/run/netns", "/etc/cni", "/opt/cni"} {
		if _, err := os.Lstat(p); err != nil {
			s.Paths[p] = "absent"
			continue
		}
		var below []string
		_ = filepath.WalkDir(p, func(path string, _ os.DirEntry, err error) error {
			if err == nil && path != p {
				below = append(below, strings.TrimPrefix(path, p+"/"))
			}
			return nil
		})
		s.Paths[p] = strings.Join(below, ",")
	}
	ifaces, _ := net.Interfaces()
	for _, i := range ifaces {
		s.Links = append(s.Links, i.Name)
	}
	sort.Strings(s.Links)
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			s.Netns = append(s.Netns, e.Name())
		}
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (strings.HasPrefix(f[4], "/run/") || strings.HasPrefix(f[4], "/var/")) {
			s.Mounts = append(s.Mounts, f[4])
		}
	}
	sort.Strings(s.Mounts)
	hierarchies, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hierarchies {
		entries, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h.Name()))
		for _, e := range entries {
			if e.IsDir() {
				s.Cgroups = append(s.Cgroups, h.Name()+"/"+e.Name())
			}
		}
	}
	var rules []string
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, err := exec.Command("iptables", "-t", table, "-S").Output()
		if err != nil {
			t.Fatalf("iptables -t %s -S: %v", table, err)
		}
		rules = append(rules, string(out))
	}
	s.Iptables = strings.Join(rules, "")
	for _, k := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"} {
		v, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		s.Sysctls[k] = strings.TrimSpace(string(v))
	}
	_, err := os.Stat("/run/hicache-localcluster")
	s.Registered = err == nil
	return s
}

// cgroupProcs lists the processes in the real node's pod cgroups (its containers).
func cgroupProcs(t *testing.T, node *localcluster.RealNode) []int {
	t.Helper()
	var pids []int
	root := filepath.Join("/sys/fs/cgroup/pids", node.CgroupRoot)
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// buildProbeImage builds testdata/nodeprobe into an image tarball in a new directory.
func buildProbeImage(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	rootfs := filepath.Join(work, "rootfs")
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(rootfs, "nodeprobe"), "./testdata/nodeprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nodeprobe: %v\n%s", err, out)
	}
	path := filepath.Join(work, "nodeprobe.tar")
	spec := imagebuild.Spec{Ref: probeImage, RootFS: rootfs, Config: v1.Config{Entrypoint: []string{"/nodeprobe"}, User: "65532:65532"}}
	if _, err := imagebuild.Write(spec, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// probePod runs the probe image on the real node; without args it serves HTTP with an
// httpGet readiness probe, with args it runs once.
func probePod(ns, name string, args []string) *corev1.Pod {
	nonRoot := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector: localcluster.RealNodeSelector(),
			Tolerations:  []corev1.Toleration{localcluster.RealNodeToleration()},
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           probeImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: &nonRoot},
			}},
			TerminationGracePeriodSeconds: ptr(int64(1)),
		},
	}
	if args == nil {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1,
		}
	} else {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	return p
}

// waitSucceeded waits for a run-once pod to succeed and returns its logs (read through the
// API server from the kubelet); a failed pod fails the test with them.
func waitSucceeded(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	var phase corev1.PodPhase
	waitFor(ctx, t, 90*time.Second, "pod "+name+" to finish", func(ctx context.Context) (bool, string, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, "phase " + string(phase), nil
	})
	raw, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of pod %s: %v", name, err)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod %s %s; its logs:\n%s", name, phase, raw)
	}
	return string(raw)
}

// httpGetVia GETs url from inside the real node's network namespace.
func httpGetVia(ctx context.Context, t *testing.T, node *localcluster.RealNode, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: node.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s through the real node: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestReapRealNode kills the process that owns a cluster with a real node and a running pod
// (as a -timeout panic would: the control plane, containerd and the kubelet die with it, the
// pod's containers and shims do not), then checks that Reap leaves nothing on the host.
func TestReapRealNode(t *testing.T) {
	if os.Getenv(reapChildEnv) != "" {
		reapChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("the real node needs root; run the tests as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	probe := buildProbeImage(t)
	host := snapshotHost(t)
	dir := filepath.Join(t.TempDir(), "cluster")
	ready := filepath.Join(t.TempDir(), "ready")

	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReapRealNode$", "-test.v")
	child.Env = append(os.Environ(), reapChildEnv+"=1", "REAP_DIR="+dir, "REAP_READY="+ready, "REAP_PROBE="+probe)
	out := &strings.Builder{}
	child.Stdout, child.Stderr = out, out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 4*time.Minute, "the owner to start its cluster and pod", func(context.Context) (bool, string, error) {
		if child.ProcessState != nil {
			return false, "", fmt.Errorf("the owner exited: %s", out)
		}
		_, err := os.Stat(ready)
		return err == nil, "", nil
	})
	data, err := os.ReadFile(ready)
	if err != nil {
		t.Fatal(err)
	}
	netns, cgroupRoot, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	fp := takeFootprint(t, &localcluster.RealNode{NetNS: netns, CgroupRoot: cgroupRoot}, dir)
	_ = child.Process.Kill()
	_ = child.Wait()
	// The control plane, containerd and the kubelet die with their owner; the pod does not.
	time.Sleep(time.Second)
	running := 0
	for _, pid := range fp.containers {
		if processRuns(pid) {
			running++
		}
	}
	if running == 0 {
		t.Fatalf("no container outlived its owner: the test would prove nothing; owner's output:\n%s", out)
	}
	t.Logf("after the owner died, %d of %d container processes still run", running, len(fp.containers))

	if err := localcluster.Reap(dir); err != nil {
		t.Errorf("Reap: %v", err)
	}
	fp.assertGone(t, host)
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("remove the reaped cluster directory: %v", err)
	}
}

const reapChildEnv = "LOCALCLUSTER_REAP_OWNER"

// reapChild is the owner TestReapRealNode kills: a cluster with a real node and one Ready pod.
func reapChild(t *testing.T) {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir:      os.Getenv("REAP_DIR"),
		RealNode: &localcluster.RealNodeOptions{Images: []string{os.Getenv("REAP_PROBE")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitForServiceAccount(ctx, metav1.NamespaceDefault); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, probePod(metav1.NamespaceDefault, "orphan", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReadyPods(ctx, t, cs, metav1.NamespaceDefault, "app=orphan", 1)
	if err := os.WriteFile(os.Getenv("REAP_READY"), []byte(c.RealNode().NetNS+" "+c.RealNode().CgroupRoot), 0o600); err != nil {
		t.Fatal(err)
	}
	select {} // until killed
}
