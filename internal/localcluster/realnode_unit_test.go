package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFreeIndex(t *testing.T) {
	cases := map[string]struct {
		used      map[int]bool
		hostAddrs []string
		want      int
		wantErr   string
	}{
		"nothing in use":                    {want: 0},
		"registered nodes are skipped":      {used: map[int]bool{0: true, 1: true}, want: 2},
		"a gap is reused":                   {used: map[int]bool{0: true, 2: true}, want: 1},
		"host addresses in 10.10.x are too": {hostAddrs: []string{"127.0.0.1/8", "10.10.0.2/24", "10.10.1.7/16"}, used: map[int]bool{2: true}, want: 3},
		"other ranges do not count":         {hostAddrs: []string{"10.100.0.2/24", "192.0.2.2/24", "fd00::2/64"}, want: 0},
		"all taken": {
			used: func() map[int]bool {
				m := map[int]bool{}
				for i := range maxRealNodes {
					m[i] = true
				}
				return m
			}(),
			wantErr: "are in use: stop other local clusters",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := freeIndex(tc.used, tc.hostAddrs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("freeIndex = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestMountsUnder(t *testing.T) {
	mountinfo := strings.Join([]string{
		`22 1 0:21 / /run rw shared:5 - tmpfs tmpfs rw`,
		`40 22 0:4 net:[4026532] /run/netns/hicache-1 rw shared:6 - nsfs nsfs rw`,
		`41 1 0:50 / /tmp/c/node/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw - overlay overlay rw`,
		`42 1 0:51 / /tmp/c/node/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access rw - tmpfs tmpfs rw`,
		`43 1 0:52 / /tmp/c/node/with\040space rw - tmpfs tmpfs rw`,
		`44 1 0:53 / /tmp/c/nodeother rw - tmpfs tmpfs rw`,
		`45 1 0:54 / /tmp/c rw - tmpfs tmpfs rw`,
	}, "\n")
	got := mountsUnder(mountinfo, "/tmp/c/node/")
	// Deepest first; equally deep ones in mount order.
	want := []string{
		"/tmp/c/node/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
		"/tmp/c/node/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access",
		"/tmp/c/node/with space",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mountsUnder (-want +got):\n%s", diff)
	}
	if got := mountsUnder(mountinfo, "/tmp/c"); len(got) != 5 || got[len(got)-1] != "/tmp/c" {
		t.Errorf("mountsUnder(/tmp/c) = %v, want the four below it, deepest first, then /tmp/c itself", got)
	}
}

// TestRealNodeConfigs pins the settings this host needs (see the comments in the configs);
// each one was seen failing without it.
func TestRealNodeConfigs(t *testing.T) {
	l := nodeLayout{name: "real-node", dir: "/d/node", netns: "hicache-x", nodeIP: "10.10.3.1", cgroupRoot: "/hicache-x", apiServer: "https://10.10.3.1:4443"}
	cases := map[string]struct {
		config string
		want   []string
	}{
		"containerd": {containerdConfig(l), []string{
			`sandbox_image = "localhost/pause:local"`, `restrict_oom_score_adj = true`, `SystemdCgroup = false`, `netns_mounts_under_state_dir = true`,
			`address = "/d/node/containerd/containerd.sock"`, `Root = "/d/node/containerd/runc"`, `conf_dir = "/d/node/cni/net.d"`,
		}},
		"cni": {cniConfig(l), []string{`"subnet": "10.244.0.0/24"`, `"hairpinMode": true`, `"dataDir": "/d/node/cni/ipam"`}},
		"kubelet": {kubeletConfig(l), []string{
			"failCgroupV1: false", "cgroupDriver: cgroupfs", "cgroupRoot: /hicache-x", "oomScoreAdj: 0", "address: 10.10.3.1",
			"clusterDNS: [10.96.0.10]", `nodefs.available: "1%"`, "key: hicache.io/real-node, effect: NoSchedule",
			"containerRuntimeEndpoint: unix:///d/node/containerd/containerd.sock", "podLogsDir: /d/node/pod-logs",
		}},
		"kube-proxy": {kubeProxyConfig(l), []string{"mode: iptables", "hostnameOverride: real-node", "healthzBindAddress: 10.10.3.1:10256", "maxPerCore: 0"}},
		"coredns":    {corefile(l), []string{"kubeconfig /d/node/coredns.kubeconfig", "ready 10.10.3.1:8181"}},
	}
	for name, tc := range cases {
		for _, w := range tc.want {
			if !strings.Contains(tc.config, w) {
				t.Errorf("%s config lacks %q:\n%s", name, w, tc.config)
			}
		}
	}
	if strings.Contains(corefile(l), "forward") {
		t.Errorf("the Corefile forwards queries out of the node's network namespace:\n%s", corefile(l))
	}
}

func TestRealNodeImageFiles(t *testing.T) {
	bin := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bin, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"pause.tar", "mooncake.tar", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(bin, "images", f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	extra := filepath.Join(t.TempDir(), "extra.tar")
	if err := os.WriteFile(extra, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	got, err := RealNodeOptions{Images: []string{extra}}.imageFiles(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(bin, "images", "mooncake.tar"), filepath.Join(bin, "images", "pause.tar"), extra}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("imageFiles (-want +got):\n%s", diff)
	}

	_, err = RealNodeOptions{ImageDir: t.TempDir()}.imageFiles(bin)
	if err == nil || !strings.Contains(err.Error(), "run make images") {
		t.Errorf("an empty image directory: err = %v, want it to say run make images", err)
	}
	_, err = RealNodeOptions{ImageDir: filepath.Join(bin, "images"), Images: []string{"/nonexistent.tar"}}.imageFiles(bin)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent.tar") {
		t.Errorf("a missing tarball: err = %v, want it named", err)
	}
}
