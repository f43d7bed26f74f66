package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// registryDir records the real nodes running on this host, one file per node named by its
// index (which picks its addresses), with what teardown needs if its owner dies. It also
// records which shared host paths existed before the first real node started, so that the
// last one to stop removes exactly those that the nodes created. It lives in /run: a reboot
// forgets it along with everything it describes.
const registryDir = "/run/hicache-localcluster"

const (
	registryHostFile = "host.json"
	maxRealNodes     = 200
)

// nodeRecord is what the registry keeps of one real node.
type nodeRecord struct {
	Index      int    `json:"index"`
	OwnerPID   int    `json:"ownerPID"`
	Dir        string `json:"dir"`
	NetNS      string `json:"netns"`
	HostLink   string `json:"hostLink"`
	CgroupRoot string `json:"cgroupRoot"`
}

// hostState is what the host was like before the first real node started.
type hostState struct {
	// Preexisting are the sharedHostPaths that existed.
	Preexisting map[string]bool `json:"preexisting"`
	// Sysctls are the values of the kernel settings the kubelet changes.
	Sysctls map[string]string `json:"sysctls"`
}

// sharedHostPaths are written by kubelet, containerd or the CNI plugins whatever their
// configuration says; they are removed when the last real node stops, unless they existed
// before the first started.
var sharedHostPaths = []string{
	"/var/log/containers", "/var/log/pods", "/var/lib/cni", "/var/lib/kubelet", "/run/containerd", netnsDir,
}

// kubeletSysctls are the kernel settings the kubelet sets at start (unless told to protect
// kernel defaults, in which case it refuses to start on a host that differs).
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// registry is the locked registry; only withRegistry makes one.
type registry struct {
	records map[int]nodeRecord
	host    hostState
}

// withRegistry runs fn with the registry locked (flock on its directory) and loaded.
func withRegistry(fn func(*registry) error) error {
	for {
		created := false
		if err := os.Mkdir(registryDir, 0o700); err == nil {
			created = true
		} else if !os.IsExist(err) {
			return fmt.Errorf("create %s: %w", registryDir, err)
		}
		d, err := os.Open(registryDir)
		if err != nil {
			if os.IsNotExist(err) {
				continue // removed by the last node in between
			}
			return err
		}
		if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
			_ = d.Close()
			return fmt.Errorf("lock %s: %w", registryDir, err)
		}
		// The last node may have removed the directory while we waited for the lock.
		var held, now syscall.Stat_t
		if syscall.Fstat(int(d.Fd()), &held) != nil || syscall.Stat(registryDir, &now) != nil || held.Ino != now.Ino {
			_ = d.Close()
			continue
		}
		err = func() error {
			defer d.Close()
			r := &registry{records: map[int]nodeRecord{}, host: hostState{Preexisting: map[string]bool{}}}
			if created {
				// Only the host paths that exist before the first real node are the host's own.
				for _, p := range sharedHostPaths {
					if _, err := os.Lstat(p); err == nil {
						r.host.Preexisting[p] = true
					}
				}
				r.host.Sysctls = readSysctls()
				if err := writeJSON(filepath.Join(registryDir, registryHostFile), r.host); err != nil {
					return err
				}
			} else if err := readJSON(filepath.Join(registryDir, registryHostFile), &r.host); err != nil && !os.IsNotExist(err) {
				return err
			}
			entries, err := os.ReadDir(registryDir)
			if err != nil {
				return err
			}
			for _, e := range entries {
				idx, ok := strings.CutPrefix(e.Name(), "node-")
				if !ok {
					continue
				}
				n, err := strconv.Atoi(strings.TrimSuffix(idx, ".json"))
				if err != nil {
					continue
				}
				var rec nodeRecord
				if err := readJSON(filepath.Join(registryDir, e.Name()), &rec); err == nil {
					r.records[n] = rec
				}
			}
			return fn(r)
		}()
		return err
	}
}

func recordPath(index int) string {
	return filepath.Join(registryDir, fmt.Sprintf("node-%d.json", index))
}

func (r *registry) put(rec nodeRecord) error {
	r.records[rec.Index] = rec
	return writeJSON(recordPath(rec.Index), rec)
}

func (r *registry) remove(index int) error {
	delete(r.records, index)
	if err := os.Remove(recordPath(index)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// stale lists the records whose owner process is gone, by index.
func (r *registry) stale() []nodeRecord {
	var out []nodeRecord
	for _, rec := range r.records {
		if !pidAlive(rec.OwnerPID) {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// freeIndex is the smallest node index neither registered nor in use by an address of the host.
func freeIndex(used map[int]bool, hostAddrs []string) (int, error) {
	taken := map[int]bool{}
	for i := range used {
		taken[i] = true
	}
	for _, a := range hostAddrs {
		var third, fourth int
		if n, _ := fmt.Sscanf(a, "10.10.%d.%d", &third, &fourth); n == 2 {
			taken[third] = true
		}
	}
	for i := range maxRealNodes {
		if !taken[i] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("all %d real-node address ranges (10.10.0.0/24 … 10.10.%d.0/24) are in use: stop other local clusters", maxRealNodes, maxRealNodes-1)
}

// finishIfLast removes the shared host paths the real nodes created, restores the kernel
// settings and removes the registry itself, once no real node is registered.
func (r *registry) finishIfLast() error {
	if len(r.records) > 0 {
		return nil
	}
	var errs []error
	for _, p := range sharedHostPaths {
		if r.host.Preexisting[p] {
			continue
		}
		if p == netnsDir {
			// Other network namespaces may live there; only an empty directory goes.
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
				errs = append(errs, err)
			}
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	if err := restoreSysctls(r.host.Sysctls); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(registryDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func readSysctls() map[string]string {
	out := map[string]string{}
	for _, k := range kubeletSysctls {
		if data, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			out[k] = strings.TrimSpace(string(data))
		}
	}
	return out
}

func restoreSysctls(values map[string]string) error {
	var errs []error
	for k, v := range values {
		path := filepath.Join("/proc/sys", k)
		if cur, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore %s to %s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}

func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}
