package localcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// reapStaleClusters cleans up after clusters whose owning process died without Stop (a test
// binary killed by its timeout, for example): it kills the processes that still run from such
// a cluster's temporary directory and removes the directory. Clusters of live processes are
// left alone. Errors are ignored: this is best effort before a new start.
func reapStaleClusters(tempDir string) {
	dirs, _ := filepath.Glob(filepath.Join(tempDir, tempDirPrefix+"*"))
	for _, dir := range dirs {
		if ownerAlive(dir) {
			continue
		}
		_ = Reap(dir)
		_ = os.RemoveAll(dir)
	}
}

// Reap cleans up after a cluster whose Dir is dir and whose owner died without Stop: it
// kills the processes that name dir, tears down a real node of that cluster (its containers,
// network namespace, cgroups and host files, as Stop would) and unmounts what is mounted
// below dir, so that dir can be removed. The real node's registration says whether its
// owner is gone; a live cluster's real node is left alone.
func Reap(dir string) error {
	dir = filepath.Clean(dir)
	var errs []error
	if err := KillProcessesUsing(dir); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(registryDir); err == nil {
		err := withRegistry(func(reg *registry) error {
			for _, rec := range reg.stale() {
				if filepath.Clean(rec.Dir) != dir {
					continue
				}
				if err := teardownRecord(context.Background(), rec); err != nil {
					errs = append(errs, err)
				}
				if err := reg.remove(rec.Index); err != nil {
					errs = append(errs, err)
				}
			}
			return reg.finishIfLast()
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ownerAlive reads dir/owner.pid; a directory without it counts as alive (it may be
// being created right now).
func ownerAlive(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return true
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return true
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// KillProcessesUsing sends SIGKILL to every process whose command line mentions dir (see
// ProcessesUsing). It is the last resort for a cluster whose owner is gone.
func KillProcessesUsing(dir string) error {
	pids, err := ProcessesUsing(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
