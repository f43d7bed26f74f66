package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// modulePath identifies the repository root when walking up from the working directory.
const modulePath = "github.com/hicache-io/hicache-operator"

type binPaths struct {
	binDir   string
	stageDir string
	// shown is how error messages name binDir: "bin" under the repository, else the path.
	shown string
}

func (p binPaths) bin(name string) string { return filepath.Join(p.binDir, name) }

func resolvePaths(opts Options) (binPaths, error) {
	p := binPaths{binDir: opts.BinDir, stageDir: opts.StageDir, shown: opts.BinDir}
	if p.binDir == "" || p.stageDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return p, fmt.Errorf("find the repository root: %w", err)
		}
		root, err := repoRoot(wd)
		if err != nil {
			return p, err
		}
		if p.binDir == "" {
			p.binDir, p.shown = filepath.Join(root, "bin"), "bin"
		}
		if p.stageDir == "" {
			p.stageDir = filepath.Join(root, "hack", "kwok")
		}
	}
	var err error
	if p.binDir, err = filepath.Abs(p.binDir); err != nil {
		return p, err
	}
	if p.stageDir, err = filepath.Abs(p.stageDir); err != nil {
		return p, err
	}
	return p, nil
}

// repoRoot walks up from dir to the directory whose go.mod declares modulePath.
func repoRoot(dir string) (string, error) {
	for d := dir; ; {
		if mod, err := moduleOf(filepath.Join(d, "go.mod")); err == nil && mod == modulePath {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("cannot find the repository root (a go.mod for %s) at or above %s: run from inside the repository or set Options.BinDir and Options.StageDir", modulePath, dir)
		}
		d = parent
	}
}

func moduleOf(goMod string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", errors.New("no module line")
}

// requiredBinaries lists what Start runs; the node side only without APIServerOnly.
func requiredBinaries(nodeSide bool) []string {
	names := []string{"etcd", "kube-apiserver"}
	if nodeSide {
		names = append(names, "kube-controller-manager", "kube-scheduler", "kwok")
	}
	return names
}

// check reports every missing binary and a missing stage directory in one error.
func (p binPaths) check(nodeSide bool) error {
	var missing []string
	for _, name := range requiredBinaries(nodeSide) {
		info, err := os.Stat(p.bin(name))
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	var errs []error
	switch len(missing) {
	case 0:
	case 1:
		errs = append(errs, fmt.Errorf("%s/%s is missing: run hack/tools.sh %s", p.shown, missing[0], missing[0]))
	default:
		shown := make([]string, len(missing))
		for i, m := range missing {
			shown[i] = p.shown + "/" + m
		}
		errs = append(errs, fmt.Errorf("%s are missing: run hack/tools.sh %s", strings.Join(shown, ", "), strings.Join(missing, " ")))
	}
	if nodeSide {
		stages, _ := filepath.Glob(filepath.Join(p.stageDir, "*.yaml"))
		if len(stages) == 0 {
			errs = append(errs, fmt.Errorf("no kwok stage files (*.yaml) in %s: kwok needs them to run nodes and pods; they live in hack/kwok/ of the repository", p.stageDir))
		}
	}
	return errors.Join(errs...)
}
