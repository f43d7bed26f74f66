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
