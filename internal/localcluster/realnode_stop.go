package localcluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	cgroupFS = "/sys/fs/cgroup"
	// hostLogLinks is where the kubelet links container logs, whatever its configuration says.
	hostLogLinks = "/var/log/containers"
)

// stop tears the real node down: the kubelet, kube-proxy and CoreDNS first, then every pod
// sandbox through containerd's CRI (which stops the containers, tears down their network
// and unmounts what it mounted), then containerd, and then whatever is left (see
// teardownRecord). It leaves nothing on the host that the node created.
func (r *realNode) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	var containerd *component
	for i := len(r.components) - 1; i >= 0; i-- {
		comp := r.components[i]
		if comp.name == "containerd" {
			containerd = comp
			continue
		}
		if err := comp.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if containerd != nil && !containerd.exited() {
		if err := removeSandboxes(ctx, r.layout.containerdSocket()); err != nil {
			errs = append(errs, fmt.Errorf("remove the real node's pods: %w", err))
		}
		if err := containerd.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if r.proxy != nil {
		r.proxy.close()
	}
	if err := teardownRecord(ctx, r.record); err != nil {
		errs = append(errs, err)
	}
	if err := withRegistry(func(reg *registry) error {
		if err := reg.remove(r.record.Index); err != nil {
			return err
		}
		return reg.finishIfLast()
	}); err != nil {
		errs = append(errs, fmt.Errorf("unregister the real node: %w", err))
	}
	return errors.Join(errs...)
}

// removeSandboxes stops and removes every pod sandbox of the containerd at socket.
func removeSandboxes(ctx context.Context, socket string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	cri := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range list.Items {
		if _, err := cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox of %s/%s: %w", sb.Metadata.GetNamespace(), sb.Metadata.GetName(), err))
			continue
		}
		if _, err := cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox of %s/%s: %w", sb.Metadata.GetNamespace(), sb.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// teardownRecord removes what a real node leaves when its processes are gone or killed:
// the processes in its cgroup root (containers) and those that name its directory
// (containerd's shims), the mounts under its directory, its network namespace and veth
// pair, its cgroups, and the kubelet's log links to its directory. It is also how the
// leftovers of a node whose owner died are cleaned up.
func teardownRecord(ctx context.Context, rec nodeRecord) error {
	var errs []error
	nodeDir := filepath.Join(rec.Dir, "node")
	// The ids of its containers and sandboxes (their cgroups' names), found before the
	// cgroups go: the CNI plugins' result cache names them.
	ids := containerIDs(rec.CgroupRoot)
	for attempt := 0; ; attempt++ {
		killed := killCgroupProcs(rec.CgroupRoot)
		if err := KillProcessesUsing(nodeDir); err != nil {
			errs = append(errs, err)
		}
		pids, _ := ProcessesUsing(nodeDir)
		if killed == 0 && len(pids) == 0 {
			break
		}
		if attempt == 50 || ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("processes of the real node keep running: %v", pids))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := unmountUnder(rec.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := run(ctx, "ip", "link", "del", rec.HostLink); err != nil && linkExists(rec.HostLink) {
		errs = append(errs, err)
	}
	if err := deleteNetns(rec.NetNS); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(rec.CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	if err := removeLogLinks(hostLogLinks, rec.Dir); err != nil {
		errs = append(errs, err)
	}
	// containerd removes these when it tears a sandbox down, and a shim its socket when it
	// exits; killed, they leave them behind.
	if err := removeNamed(cniResultCache, ids); err != nil {
		errs = append(errs, err)
	}
	socket := filepath.Join(nodeDir, "containerd", "containerd.sock")
	for _, id := range ids {
		if err := os.Remove(shimSocket(socket, id)); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// shimSocket is where containerd 1.6's runc shim of a sandbox listens, whatever containerd's
// configuration says: /run/containerd/s/<sha256 of address/namespace/id>.
func shimSocket(containerdAddress, id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(containerdAddress, ContainerdNamespace, id)))
	return filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:]))
}

// cniResultCache is where libcni caches each attachment's result, whatever the configuration.
const cniResultCache = "/var/lib/cni/results"

// containerIDs lists the names of the container cgroups (64 hex digits) below root.
func containerIDs(root string) []string {
	if root == "" || root == "/" {
		return nil
	}
	seen := map[string]bool{}
	var ids []string
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && isContainerID(d.Name()) && !seen[d.Name()] {
				seen[d.Name()] = true
				ids = append(ids, d.Name())
			}
			return nil
		})
	}
	return ids
}

func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// removeNamed removes the entries of dir whose names contain one of ids.
func removeNamed(dir string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range entries {
		for _, id := range ids {
			if strings.Contains(e.Name(), id) {
				if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
					errs = append(errs, err)
				}
				break
			}
		}
	}
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers, the named systemd
// one and the unified one of a hybrid host), each once.
func cgroupHierarchies() []string {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		p, err := filepath.EvalSymlinks(filepath.Join(cgroupFS, e.Name()))
		if err != nil || seen[p] {
			continue
		}
		if info, err := os.Stat(p); err != nil || !info.IsDir() {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) == 0 {
		out = []string{cgroupFS}
	}
	return out
}

// createCgroupRoot makes the node's cgroup root in every hierarchy; the kubelet puts the
// node's pods (kubepods) under it, apart from any other kubelet's.
func createCgroupRoot(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create the real node's cgroup %s: %w", dir, err)
		}
		// A new cpuset cgroup has no CPUs and memory nodes until given its parent's.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if data, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				//nolint:gosec // G703: a cgroup control file of the node's own cgroup.
				_ = os.WriteFile(filepath.Join(dir, f), data, 0o600)
			}
		}
	}
	return nil
}

// killCgroupProcs sends SIGKILL to every process in the cgroup root's subtree and returns
// how many it found.
func killCgroupProcs(root string) int {
	if root == "" || root == "/" {
		return 0
	}
	n := 0
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
	}
	return n
}

// removeCgroups removes the cgroup root's subtree in every hierarchy, deepest first.
func removeCgroups(root string) error {
	if root == "" || root == "/" {
		return nil
	}
	var errs []error
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for range 20 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(50 * time.Millisecond) // a killed process may still be leaving it
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove the cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder returns the mount points at or below dir in a /proc/self/mountinfo text,
// deepest first.
func mountsUnder(mountinfo, dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	s := bufio.NewScanner(strings.NewReader(mountinfo))
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder unmounts everything mounted at or below dir (container root filesystems,
// sandbox shm, volume tmpfs), deepest first.
func unmountUnder(dir string) error {
	for range 5 {
		data, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		mounts := mountsUnder(string(data), dir)
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	if left := mountsUnder(string(data), dir); len(left) > 0 {
		return fmt.Errorf("still mounted after unmounting: %s", strings.Join(left, ", "))
	}
	return nil
}

// MountsUnder lists the mount points at or below dir, such as those of a cluster whose Dir
// is dir (a real node's container root filesystems, shm and volumes).
func MountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return mountsUnder(string(data), dir), nil
}

// removeLogLinks removes the links in linkDir that point into dir.
func removeLogLinks(linkDir, dir string) error {
	entries, err := os.ReadDir(linkDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(linkDir, e.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		if target == dir || strings.HasPrefix(target, dir+"/") {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
