package imagebuild

import (
	"archive/zip"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Requirement is one pinned wheel of a requirements file written with `--hash=sha256:`.
type Requirement struct {
	Name, Version string
	// SHA256 are the hashes the requirement allows.
	SHA256 []string
}

var (
	requirementRe = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)`)
	hashRe        = regexp.MustCompile(`--hash=sha256:([0-9a-f]{64})`)
)

// ParseRequirements reads exact pins with their SHA-256 hashes (pip's --require-hashes format;
// continuation lines end with a backslash). A requirement without a hash is refused.
func ParseRequirements(data []byte) ([]Requirement, error) {
	var out []Requirement
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if m := requirementRe.FindStringSubmatch(line); m != nil {
			out = append(out, Requirement{Name: m[1], Version: m[2]})
		} else if !strings.HasPrefix(line, "--hash=") {
			return nil, fmt.Errorf("cannot read the requirement line %q: write name==version \\ and --hash=sha256:... lines", line)
		}
		for _, h := range hashRe.FindAllStringSubmatch(line, -1) {
			if len(out) == 0 {
				return nil, fmt.Errorf("a hash before any requirement: %q", line)
			}
			out[len(out)-1].SHA256 = append(out[len(out)-1].SHA256, h[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, r := range out {
		if len(r.SHA256) == 0 {
			return nil, fmt.Errorf("%s==%s has no --hash=sha256: every wheel must be pinned by its hash", r.Name, r.Version)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no requirement")
	}
	return out, nil
}

// InstallWheel unpacks a wheel into site (a site-packages directory of the image's root file
// system), as pip would for its importable files: the packages and the .dist-info directory at
// the top, the .data/purelib and .data/platlib trees merged into site. Scripts, headers and data
// files are left out (the image runs its programs with python3 -m). Files get mode 0644 (0755
// when the wheel marks them executable) and a fixed time, so the layer depends on the wheel only.
func InstallWheel(wheel, site string) error {
	z, err := zip.OpenReader(wheel)
	if err != nil {
		return fmt.Errorf("opening the wheel %s: %w", wheel, err)
	}
	defer z.Close()
	for _, f := range z.File {
		name := path.Clean(f.Name)
		if strings.HasPrefix(name, "../") || path.IsAbs(name) || name == ".." {
			return fmt.Errorf("the wheel %s holds %q, outside its root", filepath.Base(wheel), f.Name)
		}
		if top, rest, ok := strings.Cut(name, "/"); ok && strings.HasSuffix(top, ".data") {
			kind, inner, ok := strings.Cut(rest, "/")
			if !ok || (kind != "purelib" && kind != "platlib") {
				continue
			}
			name = inner
		}
		if f.FileInfo().IsDir() {
			continue
		}
		dst := filepath.Join(site, filepath.FromSlash(name))
		//nolint:gosec // the image's non-root user must read and enter the installed packages
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if f.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := writeEntry(f, dst, mode); err != nil {
			return fmt.Errorf("unpacking %s from %s: %w", f.Name, filepath.Base(wheel), err)
		}
	}
	// Directories carry the fixed time too.
	return filepath.WalkDir(site, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, time.Unix(0, 0), time.Unix(0, 0)) //nolint:gosec // site is the build's own stage directory, which nothing else writes
	})
}

func writeEntry(f *zip.File, dst string, mode os.FileMode) error {
	r, err := f.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	// The wheel's size is pinned by its hash; the entry may not outgrow what its header says.
	if _, err := io.CopyN(w, r, int64(f.UncompressedSize64)); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}
