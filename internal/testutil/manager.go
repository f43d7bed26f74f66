package testutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
)

// BuildManager builds the operator's binary (cmd/manager) from the repository's sources into
// dir and returns its path: what a test that runs the manager as a process starts.
func BuildManager(dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(dir, "manager")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/manager: %v\n%s", err, out)
	}
	return bin, nil
}

// BuildStandin builds the SGLang stand-in (cmd/sglang-standin) into dir and returns its path:
// run as `sglang-standin -m sglang.launch_server ARGS`, it checks ARGS against the pinned
// release's arguments and serves the release's HTTP endpoints that the tests use.
func BuildStandin(dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(dir, "sglang-standin")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sglang-standin")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/sglang-standin: %v\n%s", err, out)
	}
	return bin, nil
}
