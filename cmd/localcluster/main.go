// Command localcluster runs the local demo cluster of internal/localcluster in the foreground
// (`up`, which hack/local-up.sh starts in the background) and takes it down again (`down`,
// used by hack/local-down.sh).
//
// All state lives in one directory (default .local/ under the repository):
//
//	cluster/          data, certificates and logs of the cluster's processes
//	kubeconfig        the admin kubeconfig
//	localcluster.pid  the pid of the running `up`
//	ready             written once the nodes are Ready
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/hicache-io/hicache-operator/internal/localcluster"
)

type state struct{ dir string }

func (s state) clusterDir() string { return filepath.Join(s.dir, "cluster") }
func (s state) kubeconfig() string { return filepath.Join(s.dir, "kubeconfig") }
func (s state) pidfile() string    { return filepath.Join(s.dir, "localcluster.pid") }
func (s state) readyFile() string  { return filepath.Join(s.dir, "ready") }

func main() {
	// envtest logs through controller-runtime; its progress is reported by Options.Progress.
	crlog.SetLogger(logr.Discard())
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var stateDir string
	root := &cobra.Command{
		Use:           "localcluster",
		Short:         "Run the local Kubernetes control plane with fake GPU nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&stateDir, "state-dir", ".local", "directory for the cluster's data, kubeconfig and pidfile")
	st := func() state { return state{dir: stateDir} }
	root.AddCommand(newUp(st), newDown(st))
	return root
}

func newUp(st func() state) *cobra.Command {
	var (
		nodes     int
		gpus      int64
		crdDirs   []string
		timeout   time.Duration
		realNode  bool
		nodeName  string
		imageDir  string
		imageTars []string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the cluster and keep it running until SIGTERM or SIGINT",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := localcluster.Options{
				CRDDirectoryPaths: crdDirs,
				Nodes:             localcluster.GPUNodes(nodes, gpus),
				Timeout:           timeout,
				Progress:          cmd.ErrOrStderr(),
			}
			if realNode {
				opts.RealNode = &localcluster.RealNodeOptions{Name: nodeName, ImageDir: imageDir, Images: imageTars}
			}
			return up(cmd.Context(), st(), opts)
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 4, "number of fake GPU nodes")
	cmd.Flags().Int64Var(&gpus, "gpus", 8, "nvidia.com/gpu per node")
	cmd.Flags().StringArrayVar(&crdDirs, "crd-dir", nil, "directory of CRDs to install (repeatable)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long the start may take")
	cmd.Flags().BoolVar(&realNode, "real-node", false, "also start one real node (kubelet, containerd, kube-proxy, CoreDNS; needs root)")
	cmd.Flags().StringVar(&nodeName, "real-node-name", localcluster.RealNodeName, "name of the real node")
	cmd.Flags().StringVar(&imageDir, "image-dir", "", "directory of image tarballs (*.tar) to import into the real node (default bin/images)")
	cmd.Flags().StringArrayVar(&imageTars, "image", nil, "another image tarball to import into the real node (repeatable)")
	return cmd
}

func up(ctx context.Context, st state, opts localcluster.Options) error {
	if pid, alive := running(st); alive {
		return fmt.Errorf("a local cluster already runs (pid %d, state in %s): run hack/local-down.sh first", pid, st.dir)
	}
	if err := os.MkdirAll(st.dir, 0o700); err != nil {
		return fmt.Errorf("create the state directory: %w", err)
	}
	// What a previous, killed run left behind must not be mistaken for this one.
	if err := cleanup(st); err != nil {
		return err
	}
	if err := os.WriteFile(st.pidfile(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the pidfile: %w", err)
	}
	defer os.Remove(st.pidfile())

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()

	opts.Dir = st.clusterDir()
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		_ = os.RemoveAll(st.clusterDir())
		return err
	}
	defer func() {
		_ = os.Remove(st.readyFile())
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: stop:", err)
		}
		_ = os.RemoveAll(st.clusterDir())
		_ = os.Remove(st.kubeconfig())
		fmt.Fprintln(os.Stderr, "localcluster: stopped")
	}()
	if err := c.WriteKubeconfig(st.kubeconfig()); err != nil {
		return err
	}
	if err := os.WriteFile(st.readyFile(), []byte(c.Config().Host+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the ready file: %w", err)
	}
	fmt.Fprintf(os.Stderr, "localcluster: ready at %s; logs in %s\n", c.Config().Host, c.LogDir())
	<-ctx.Done()
	return nil
}

func newDown(st func() state) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop a running cluster and remove its data",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return down(cmd.OutOrStdout(), st(), grace)
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 45*time.Second, "how long `up` may take to stop before it is killed")
	return cmd
}

func down(out io.Writer, st state, grace time.Duration) error {
	pid, alive := running(st)
	if alive {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal the local cluster (pid %d): %w", pid, err)
		}
		deadline := time.Now().Add(grace)
		for processAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if processAlive(pid) {
			fmt.Fprintf(out, "the local cluster (pid %d) did not stop within %s: killing it\n", pid, grace)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		fmt.Fprintf(out, "stopped the local cluster (pid %d)\n", pid)
	} else {
		fmt.Fprintln(out, "no local cluster is running")
	}
	return cleanup(st)
}

// cleanup kills whatever still runs from the cluster directory (after a killed `up`), tears
// down its real node and removes the cluster's data, keeping the log of `up` itself.
func cleanup(st state) error {
	if _, err := os.Stat(st.clusterDir()); err == nil {
		dir, err := filepath.Abs(st.clusterDir())
		if err != nil {
			return err
		}
		if err := localcluster.Reap(dir); err != nil {
			return fmt.Errorf("clean up what the last run left in %s: %w", dir, err)
		}
		for range 50 {
			if pids, _ := localcluster.ProcessesUsing(dir); len(pids) == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if pids, _ := localcluster.ProcessesUsing(dir); len(pids) > 0 {
			return fmt.Errorf("processes %v still use %s", pids, dir)
		}
	}
	for _, p := range []string{st.clusterDir(), st.kubeconfig(), st.readyFile(), st.pidfile()} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return nil
}

// running reads the pidfile and tells whether that process is a live `localcluster up`.
func running(st state) (int, bool) {
	data, err := os.ReadFile(st.pidfile())
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 || !processAlive(pid) {
		return 0, false
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), "localcluster") {
		return 0, false // the pid was reused by something else
	}
	return pid, true
}

func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie has exited; its stat state is Z.
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	return true
}
