package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hicache-io/hicache-operator/internal/localcluster"
)

// TestUpDown drives the built command as hack/local-up.sh and hack/local-down.sh do, in a
// state directory of its own: up becomes ready and writes a working kubeconfig, a second up
// refuses, down stops everything and removes the data; after a SIGKILL of up, down still
// leaves no process behind.
func TestUpDown(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "localcluster")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	st := state{dir: t.TempDir()}

	startUp := func(t *testing.T) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(bin, "--state-dir", st.dir, "up", "--nodes", "2", "--gpus", "4")
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if _, err := os.Stat(st.readyFile()); err == nil {
				return cmd
			}
			select {
			case <-exited:
				t.Fatalf("up exited before it was ready:\n%s", log.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("up was not ready within 2 minutes:\n%s", log.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	t.Run("up, a second up, down", func(t *testing.T) {
		startUp(t)
		cfg, err := clientcmd.BuildConfigFromFlags("", st.kubeconfig())
		if err != nil {
			t.Fatalf("load the kubeconfig up wrote: %v", err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list nodes through the kubeconfig up wrote: %v", err)
		}
		var got []string
		for _, n := range nodes.Items {
			gpus := n.Status.Allocatable[localcluster.GPUResource]
			got = append(got, n.Name+"="+gpus.String())
		}
		if diff := cmp.Diff([]string{"gpu-node-0=4", "gpu-node-1=4"}, got); diff != "" {
			t.Errorf("nodes and GPUs (-want +got):\n%s", diff)
		}

		second, err := exec.Command(bin, "--state-dir", st.dir, "up").CombinedOutput()
		if err == nil || !strings.Contains(string(second), "a local cluster already runs") {
			t.Errorf("a second up: err %v, output %q; want a refusal that names the running cluster", err, second)
		}

		clusterDir, _ := filepath.Abs(st.clusterDir())
		assertDown(t, bin, st, clusterDir, "stopped the local cluster")
	})

	t.Run("down after up was killed", func(t *testing.T) {
		up := startUp(t)
		clusterDir, _ := filepath.Abs(st.clusterDir())
		if err := up.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		assertDown(t, bin, st, clusterDir, "no local cluster is running")
	})
}

func assertDown(t *testing.T, bin string, st state, clusterDir, wantSaid string) {
	t.Helper()
	out, err := exec.Command(bin, "--state-dir", st.dir, "down").CombinedOutput()
	if err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), wantSaid) {
		t.Errorf("down said %q, want %q", out, wantSaid)
	}
	if pids, _ := localcluster.ProcessesUsing(clusterDir); len(pids) != 0 {
		t.Errorf("after down, processes %v still use %s", pids, clusterDir)
	}
	for _, p := range []string{st.clusterDir(), st.kubeconfig(), st.readyFile(), st.pidfile()} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after down, %s is still there (stat: %v)", p, err)
		}
	}
}
