package localcluster

import (
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
		_ = KillProcessesUsing(dir)
		_ = os.RemoveAll(dir)
	}
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
