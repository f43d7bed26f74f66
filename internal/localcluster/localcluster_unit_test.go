package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

func TestNodeSpecNode(t *testing.T) {
	type want struct {
		Labels      map[string]string
		Annotations map[string]string
		Capacity    map[corev1.ResourceName]string
		Addresses   []corev1.NodeAddress
		Taints      []corev1.Taint
	}
	noSchedule := corev1.Taint{Key: "dedicated", Value: "serving", Effect: corev1.TaintEffectNoSchedule}
	cases := map[string]struct {
		spec  NodeSpec
		index int
		want  want
	}{
		"defaults of a GPU node": {
			spec:  NodeSpec{Name: "gpu-node-0", GPUs: 8},
			index: 0,
			want: want{
				Labels: map[string]string{
					"kubernetes.io/hostname": "gpu-node-0", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"type": "kwok", "nvidia.com/gpu.present": "true",
					"nvidia.com/gpu.product": DefaultGPUProduct, "nvidia.com/gpu.count": "8",
				},
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Capacity:    map[corev1.ResourceName]string{"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeInternalIP, Address: "10.1.0.1"},
					{Type: corev1.NodeHostName, Address: "gpu-node-0"},
				},
			},
		},
		"a node without GPUs has no GPU labels or resource": {
			spec:  NodeSpec{Name: "cpu-node", CPU: resource.MustParse("16"), Memory: resource.MustParse("64Gi"), Pods: 30},
			index: 251,
			want: want{
				Labels: map[string]string{
					"kubernetes.io/hostname": "cpu-node", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
				},
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Capacity:    map[corev1.ResourceName]string{"cpu": "16", "memory": "64Gi", "pods": "30"},
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeInternalIP, Address: "10.1.1.2"},
					{Type: corev1.NodeHostName, Address: "cpu-node"},
				},
			},
		},
		"explicit product, address, labels and taints": {
			spec: NodeSpec{
				Name: "h200", GPUs: 4, GPUProduct: "NVIDIA-H200", InternalIP: "192.168.0.7",
				Labels: map[string]string{"zone": "a", "type": "gpu"}, Taints: []corev1.Taint{noSchedule},
			},
			want: want{
				Labels: map[string]string{
					"kubernetes.io/hostname": "h200", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"type": "gpu", "zone": "a", "nvidia.com/gpu.present": "true",
					"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "4",
				},
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Capacity:    map[corev1.ResourceName]string{"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "4"},
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeInternalIP, Address: "192.168.0.7"},
					{Type: corev1.NodeHostName, Address: "h200"},
				},
				Taints: []corev1.Taint{noSchedule},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := tc.spec.Node(tc.index)
			if n.Name != tc.spec.Name {
				t.Errorf("name = %q, want %q", n.Name, tc.spec.Name)
			}
			got := want{
				Labels:      n.Labels,
				Annotations: n.Annotations,
				Capacity:    quantities(n.Status.Capacity),
				Addresses:   n.Status.Addresses,
				Taints:      n.Spec.Taints,
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("node (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(quantities(n.Status.Capacity), quantities(n.Status.Allocatable)); diff != "" {
				t.Errorf("allocatable differs from capacity (-capacity +allocatable):\n%s", diff)
			}
		})
	}
}

func quantities(l corev1.ResourceList) map[corev1.ResourceName]string {
	out := map[corev1.ResourceName]string{}
	for k, v := range l {
		out[k] = v.String()
	}
	return out
}

func TestGPUNodesNamesAndCounts(t *testing.T) {
	got := GPUNodes(3, 2)
	want := []NodeSpec{{Name: "gpu-node-0", GPUs: 2}, {Name: "gpu-node-1", GPUs: 2}, {Name: "gpu-node-2", GPUs: 2}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUNodes(3, 2) (-want +got):\n%s", diff)
	}
}

func TestMentions(t *testing.T) {
	const dir = "/tmp/hicache-localcluster-123"
	cases := map[string]struct {
		cmdline string
		want    bool
	}{
		"flag value inside the dir":  {"etcd\x00--data-dir=/tmp/hicache-localcluster-123/etcd\x00", true},
		"the dir itself":             {"kwok\x00--config\x00/tmp/hicache-localcluster-123\x00", true},
		"a sibling with longer name": {"etcd\x00--data-dir=/tmp/hicache-localcluster-1234/etcd\x00", false},
		"sibling then the dir":       {"x\x00--a=/tmp/hicache-localcluster-1234,/tmp/hicache-localcluster-123/k\x00", true},
		"unrelated":                  {"bash\x00-c\x00sleep 1\x00", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := mentions([]byte(tc.cmdline), dir); got != tc.want {
				t.Errorf("mentions(%q) = %v, want %v", tc.cmdline, got, tc.want)
			}
		})
	}
}

func TestCheckNamesMissingBinaries(t *testing.T) {
	withBinaries := func(t *testing.T, names ...string) string {
		dir := t.TempDir()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	stages := t.TempDir()
	if err := os.WriteFile(filepath.Join(stages, "s.yaml"), []byte("kind: Stage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		present  []string
		nodeSide bool
		stageDir string
		want     string
	}{
		"all present": {
			present:  []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"},
			nodeSide: true, stageDir: stages,
		},
		"API server only needs two": {
			present: []string{"etcd", "kube-apiserver"}, stageDir: stages,
		},
		"one missing": {
			present:  []string{"etcd", "kube-apiserver", "kube-controller-manager", "kwok"},
			nodeSide: true, stageDir: stages,
			want: "BIN/kube-scheduler is missing: run hack/tools.sh kube-scheduler",
		},
		"several missing": {
			present:  []string{"etcd"},
			nodeSide: true, stageDir: stages,
			want: "BIN/kube-apiserver, BIN/kube-controller-manager, BIN/kube-scheduler, BIN/kwok are missing: run hack/tools.sh kube-apiserver kube-controller-manager kube-scheduler kwok",
		},
		"no stages": {
			present:  []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"},
			nodeSide: true, stageDir: t.TempDir(),
			want: "no kwok stage files (*.yaml) in STAGES: kwok needs them to run nodes and pods; they live in hack/kwok/ of the repository",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			bin := withBinaries(t, tc.present...)
			err := binPaths{binDir: bin, stageDir: tc.stageDir, shown: "BIN"}.check(tc.nodeSide)
			got := ""
			if err != nil {
				got = strings.ReplaceAll(err.Error(), tc.stageDir, "STAGES")
			}
			if got != tc.want {
				t.Errorf("check() error = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRepoRootFindsTheOperatorModule(t *testing.T) {
	root := t.TempDir()
	nested := filepath.Join(root, "hack", "tools", "kube", "deep")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	// A tools module inside the repository must not be taken for the root.
	if err := os.WriteFile(filepath.Join(root, "hack", "tools", "kube", "go.mod"), []byte("module "+modulePath+"/hack/tools/kube\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("// c\nmodule "+modulePath+"\n\ngo 1.26.0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := repoRoot(nested)
	if err != nil {
		t.Fatalf("repoRoot: %v", err)
	}
	if got != root {
		t.Errorf("repoRoot = %q, want %q", got, root)
	}

	if _, err := repoRoot(t.TempDir()); err == nil || !strings.Contains(err.Error(), "set Options.BinDir and Options.StageDir") {
		t.Errorf("repoRoot outside a repository: error = %v, want one that says how to proceed", err)
	}
}

func TestNodeNotReady(t *testing.T) {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	cases := map[string]struct {
		node *corev1.Node
		want string
	}{
		"missing":        {nil, "missing"},
		"no conditions":  {&corev1.Node{}, "Ready is Unknown"},
		"not ready":      {&corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}}, "Ready is False"},
		"ready, tainted": {&corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}}}, "tainted node.kubernetes.io/not-ready"},
		"ready":          {&corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}}}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := nodeNotReady(tc.node); got != tc.want {
				t.Errorf("nodeNotReady = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReapStaleClusters(t *testing.T) {
	tmp := t.TempDir()
	// A finished process gives a pid that is (almost surely) dead.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tmp, tempDirPrefix+"stale")
	live := filepath.Join(tmp, tempDirPrefix+"live")
	for dir, owner := range map[string]int{stale: done.Process.Pid, live: os.Getpid()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Processes left behind by each cluster: the directory is in their command lines.
	orphan := exec.Command("sh", "-c", "sleep 60", filepath.Join(stale, "etcd"))
	kept := exec.Command("sh", "-c", "sleep 60", filepath.Join(live, "etcd"))
	for _, cmd := range []*exec.Cmd{orphan, kept} {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	waited := make(chan error, 1)
	go func() { waited <- orphan.Wait() }()

	reapStaleClusters(tmp)

	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Errorf("the process of the stale cluster still runs")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale cluster's directory is still there (stat: %v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live cluster's directory was removed: %v", err)
	}
	// The shell may be caught between fork and exec of its sleep, when the child still shows
	// the shell's command line: such a child of the kept process belongs to the live cluster.
	pids, _ := ProcessesUsing(live)
	if !slices.Contains(pids, kept.Process.Pid) {
		t.Errorf("processes of the live cluster = %v, want %d among them", pids, kept.Process.Pid)
	}
	for _, pid := range pids {
		if pid != kept.Process.Pid && parentPid(pid) != kept.Process.Pid {
			t.Errorf("process %d uses the live cluster's directory but is not the kept process %d or its child", pid, kept.Process.Pid)
		}
	}
}

// parentPid reads a process's parent from /proc (-1 when it is gone).
func parentPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name is in parentheses and may hold spaces: the fields after it are fixed.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return -1
	}
	return ppid
}

// The scheduler's configuration serves default-scheduler and every extra name, and carries the
// connection and leader election that its flags would (kube-scheduler reads them from the file
// once it has one).
func TestSchedulerConfig(t *testing.T) {
	c := &Cluster{dir: t.TempDir()}
	path, err := c.writeSchedulerConfig("/k/kube-scheduler.kubeconfig", []string{"gang", "other"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		APIVersion       string `json:"apiVersion"`
		Kind             string `json:"kind"`
		ClientConnection struct {
			Kubeconfig string `json:"kubeconfig"`
		} `json:"clientConnection"`
		LeaderElection struct {
			LeaderElect *bool `json:"leaderElect"`
		} `json:"leaderElection"`
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var names []string
	for _, p := range cfg.Profiles {
		names = append(names, p.SchedulerName)
	}
	if cfg.APIVersion != "kubescheduler.config.k8s.io/v1" || cfg.Kind != "KubeSchedulerConfiguration" || cfg.ClientConnection.Kubeconfig != "/k/kube-scheduler.kubeconfig" ||
		cfg.LeaderElection.LeaderElect == nil || *cfg.LeaderElection.LeaderElect || strings.Join(names, ",") != "default-scheduler,gang,other" {
		t.Errorf("configuration:\n%s", b)
	}
}
