// Package images_test checks that the images `make images` builds for local clusters agree with
// the Dockerfiles that stay the release path, on what matters to the pods the operator creates:
// entrypoint and command, user, the Mooncake release, the Debian base, the Python minor version,
// the libraries the wheel links, and that every command the operator runs in the image resolves.
// It builds nothing: it reads bin/images/*.tar (hack/test.sh runs `make images` first).
package images_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hicache-io/hicache-operator/internal/imagebuild"
	"github.com/hicache-io/hicache-operator/internal/images"
)

const root = "../.."

func image(t *testing.T, ref string) images.Image {
	t.Helper()
	for _, img := range images.All {
		if img.Ref == ref {
			return img
		}
	}
	t.Fatalf("internal/images.All has no %s", ref)
	return images.Image{}
}

// fsImage is a built image: its config and its flattened file tree.
type fsImage struct {
	cfg   *v1.ConfigFile
	files map[string]*tar.Header
	data  map[string][]byte
}

// load reads the tarball `make images` wrote for ref, by its tag, keeping the contents of the
// files that keep says to.
func load(t *testing.T, ref string, keep func(name string, h *tar.Header) bool) fsImage {
	t.Helper()
	img := image(t, ref)
	p := filepath.Join(root, images.Dir, img.File)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make images` first (hack/test.sh does): %v", filepath.Join(images.Dir, img.File), err)
	}
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	im, err := tarball.ImageFromPath(p, &tag)
	if err != nil {
		t.Fatalf("%s does not hold an image tagged %s: %v", p, ref, err)
	}
	cfg, err := im.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	out := fsImage{cfg: cfg, files: map[string]*tar.Header{}, data: map[string][]byte{}}
	rc := mutate.Extract(im)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the layer of %s: %v", p, err)
		}
		n := path.Clean(strings.TrimPrefix(h.Name, "./"))
		out.files[n] = h
		if keep(n, h) {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out.data[n] = b
		}
	}
	return out
}

// resolve follows symbolic links inside the image to the file p names.
func (im fsImage) resolve(p string) (string, *tar.Header) {
	p = path.Clean(strings.TrimPrefix(p, "/"))
	for range 40 {
		// A link in any directory of the path counts too (/bin -> usr/bin).
		parts := strings.Split(p, "/")
		changed := false
		for i := 1; i <= len(parts); i++ {
			prefix := strings.Join(parts[:i], "/")
			h, ok := im.files[prefix]
			if !ok {
				return p, nil
			}
			if h.Typeflag == tar.TypeSymlink {
				target := h.Linkname
				if !path.IsAbs(target) {
					target = path.Join(path.Dir(prefix), target)
				}
				p = path.Clean(strings.TrimPrefix(path.Join(append([]string{target}, parts[i:]...)...), "/"))
				changed = true
				break
			}
		}
		if !changed {
			return p, im.files[p]
		}
	}
	return p, nil
}

// lookPath finds an executable on the image's PATH as the runtime would.
func (im fsImage) lookPath(t *testing.T, cmd string) string {
	t.Helper()
	pathEnv := ""
	for _, e := range im.cfg.Config.Env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathEnv = v
		}
	}
	if pathEnv == "" {
		t.Fatalf("the image sets no PATH (env %v)", im.cfg.Config.Env)
	}
	for _, dir := range strings.Split(pathEnv, ":") {
		if p, h := im.resolve(path.Join(dir, cmd)); h != nil && h.Typeflag == tar.TypeReg && h.Mode&0o001 != 0 {
			return p
		}
	}
	t.Errorf("%s is not an executable on the image's PATH %s", cmd, pathEnv)
	return ""
}

func finalStage(t *testing.T, dockerfile string) (imagebuild.Stage, []imagebuild.Stage) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	stages, err := imagebuild.ParseDockerfile(data)
	if err != nil {
		t.Fatalf("%s: %v", dockerfile, err)
	}
	return stages[len(stages)-1], stages
}

func nonRoot(t *testing.T, user string) {
	t.Helper()
	u, g, _ := strings.Cut(user, ":")
	for _, id := range []string{u, g} {
		if n, err := strconv.Atoi(id); err != nil || n == 0 {
			t.Errorf("user %q is not a numeric non-root uid:gid (kubelet's runAsNonRoot needs numbers)", user)
		}
	}
}

// static checks that an ELF binary has no interpreter and links no shared library.
func static(t *testing.T, what string, b []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s is not an ELF binary: %v", what, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a dynamic loader (PT_INTERP): not a static CGO_ENABLED=0 build", what)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s links %v: not a static build", what, libs)
	}
}

// run writes a binary taken from an image to a temporary file and returns a command for it.
func run(t *testing.T, b []byte, args ...string) *exec.Cmd {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return exec.Command(p, args...)
}

func TestOperatorImageMatchesDockerfile(t *testing.T) {
	final, stages := finalStage(t, "Dockerfile")
	im := load(t, images.Operator, func(n string, _ *tar.Header) bool { return n == "manager" })
	c := im.cfg.Config
	if d := cmp.Diff(final.Entrypoint, c.Entrypoint); d != "" || len(c.Entrypoint) == 0 {
		t.Errorf("entrypoint: Dockerfile %q, image %q", final.Entrypoint, c.Entrypoint)
	}
	if d := cmp.Diff(final.Cmd, c.Cmd, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("cmd (-Dockerfile +image):\n%s", d)
	}
	if final.User != c.User {
		t.Errorf("user: Dockerfile %q, image %q", final.User, c.User)
	}
	nonRoot(t, c.User)
	if im.cfg.OS != "linux" || im.cfg.Architecture == "" {
		t.Errorf("platform %s/%s: ctr images import needs linux and the node's architecture", im.cfg.OS, im.cfg.Architecture)
	}
	// Both sides build the manager statically.
	if !slices.ContainsFunc(stages[0].Runs, func(r string) bool {
		return strings.Contains(r, "CGO_ENABLED=0") && strings.Contains(r, "./cmd/manager")
	}) {
		t.Errorf("the Dockerfile's build stage no longer builds ./cmd/manager with CGO_ENABLED=0: %q", stages[0].Runs)
	}
	h := im.files["manager"]
	if h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o005 != 0o005 {
		t.Fatalf("the image has no /manager executable by other users (the non-root user): %+v", h)
	}
	static(t, "/manager", im.data["manager"])
	out, err := run(t, im.data["manager"], "--help").CombinedOutput()
	if !strings.Contains(string(out), "-default-mooncake-image") {
		t.Errorf("/manager --help (%v) does not look like the operator's manager:\n%s", err, out)
	}
	if len(im.files) != 1 {
		t.Errorf("the image holds %d files, want /manager alone on an empty base", len(im.files))
	}
}

func TestPauseImage(t *testing.T) {
	im := load(t, images.Pause, func(n string, _ *tar.Header) bool { return n == "pause" })
	if c := im.cfg.Config; !slices.Equal(c.Entrypoint, []string{"/pause"}) {
		t.Errorf("entrypoint %q, want [/pause]", c.Entrypoint)
	}
	nonRoot(t, im.cfg.Config.User)
	static(t, "/pause", im.data["pause"])
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := run(t, im.data["pause"])
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			t.Fatalf("/pause exited before any signal: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		_ = cmd.Process.Signal(sig)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("/pause after %v: %v, want exit 0", sig, err)
			}
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("/pause still runs 5s after %v", sig)
		}
	}
}

var (
	pythonBaseRe = regexp.MustCompile(`^python:(\d+\.\d+)-slim-([a-z]+)$`)
	aptPinRe     = regexp.MustCompile(`\b([a-z0-9][a-z0-9.+-]+)=([0-9][A-Za-z0-9.+~:-]*)`)
)

func TestMooncakeImageMatchesDockerfile(t *testing.T) {
	final, _ := finalStage(t, "images/mooncake/Dockerfile")
	im := load(t, images.Mooncake, func(n string, _ *tar.Header) bool {
		return n == "etc/os-release" || n == "usr/lib/os-release" || n == "var/lib/dpkg/status" ||
			strings.HasSuffix(n, ".dist-info/METADATA") && strings.Contains(n, "mooncake_transfer_engine")
	})
	c := im.cfg.Config

	// Entrypoint, command and user as in the Dockerfile.
	if len(final.Entrypoint) != 0 || len(c.Entrypoint) != 0 {
		t.Errorf("entrypoint: Dockerfile %q, image %q; both should be empty, since the operator sets every container's command", final.Entrypoint, c.Entrypoint)
	}
	if !slices.Equal(final.Cmd, c.Cmd) {
		t.Errorf("cmd: Dockerfile %q, image %q", final.Cmd, c.Cmd)
	}
	if final.User != c.User {
		t.Errorf("user: Dockerfile %q, image %q", final.User, c.User)
	}
	nonRoot(t, c.User)

	// The Mooncake release: Dockerfile ARG, the image's label and installed wheel, the pin.
	if v := final.Args["MOONCAKE_VERSION"]; v != images.MooncakeVersion {
		t.Errorf("images/mooncake/Dockerfile builds Mooncake %q, the repository pins %s", v, images.MooncakeVersion)
	}
	if v := c.Labels[imagebuild.LabelMooncakeVersion]; v != images.MooncakeVersion {
		t.Errorf("image label %s=%q, want %s", imagebuild.LabelMooncakeVersion, v, images.MooncakeVersion)
	}
	var sitePackages, installed string
	for n, b := range im.data {
		if strings.HasSuffix(n, "METADATA") {
			sitePackages = path.Dir(path.Dir(n))
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "Version: "); ok {
					installed = strings.TrimSpace(v)
				}
			}
		}
	}
	if installed != images.MooncakeVersion {
		t.Fatalf("the image has mooncake-transfer-engine-non-cuda %q installed, want %s", installed, images.MooncakeVersion)
	}

	// The base: Debian release and Python minor version of python:X.Y-slim-SUITE.
	m := pythonBaseRe.FindStringSubmatch(final.From)
	if m == nil {
		t.Fatalf("images/mooncake/Dockerfile's base %q is not python:X.Y-slim-SUITE; update this test to read the new base", final.From)
	}
	python, suite := m[1], m[2]
	if suite != imagebuild.DebianSuite {
		t.Errorf("the Dockerfile's base is Debian %s, the local image's %s", suite, imagebuild.DebianSuite)
	}
	osRelease, _ := im.resolve("etc/os-release")
	if !strings.Contains(string(im.data[osRelease]), "VERSION_CODENAME="+suite+"\n") {
		t.Errorf("the image's /etc/os-release (/%s) is not Debian %s:\n%s", osRelease, suite, im.data[osRelease])
	}
	if want := "usr/local/lib/python" + python + "/dist-packages"; sitePackages != want {
		t.Errorf("the wheel is installed in /%s, want /%s (python%s's)", sitePackages, want, python)
	}
	if p := im.lookPath(t, "python3"); path.Base(p) != "python"+python {
		t.Errorf("python3 on the image's PATH is /%s, want python%s", p, python)
	}

	// The libraries the Dockerfile installs, at the same upstream version (the Debian revision
	// follows the mirror's point release).
	status := dpkgStatus(im.data["var/lib/dpkg/status"])
	var pinned int
	for _, r := range final.Runs {
		if !strings.Contains(r, "apt-get install") {
			continue
		}
		for _, pm := range aptPinRe.FindAllStringSubmatch(r, -1) {
			pinned++
			pkg, want := pm[1], pm[2]
			got, ok := status[pkg]
			if !ok {
				t.Errorf("the Dockerfile installs %s, the image has no such package installed", pkg)
				continue
			}
			if upstream(got) != upstream(want) {
				t.Errorf("%s: the Dockerfile pins %s, the image has %s (another upstream release)", pkg, want, got)
			} else if got != want {
				t.Logf("%s: the Dockerfile pins %s, the image has %s (same upstream release)", pkg, want, got)
			}
		}
	}
	if pinned == 0 {
		t.Errorf("found no apt-get install pkg=version in images/mooncake/Dockerfile: %q", final.Runs)
	}

	// What the operator runs in this image (controllers: the master Deployment, the store
	// Deployment, the flush Job) resolves in it.
	for _, cmd := range []string{"mooncake_master", "python3", "sh", "cat"} {
		im.lookPath(t, cmd)
	}
	// The non-root user needs a temporary directory (Python's tempfile, the flush script).
	if h := im.files["tmp"]; h == nil {
		t.Error("the image has no /tmp")
	} else if h.Typeflag != tar.TypeDir || h.Mode&0o7777 != 0o1777 {
		t.Errorf("the image's /tmp has type %q and mode %o, want a directory with mode 1777", h.Typeflag, h.Mode&0o7777)
	}
	for _, mod := range []string{"mooncake/mooncake_store_service.py", "mooncake/store.so", "mooncake/mooncake_master"} {
		if _, h := im.resolve(path.Join(sitePackages, mod)); h == nil {
			t.Errorf("the image has no /%s (python3 -m mooncake.mooncake_store_service and the flush client need it)", path.Join(sitePackages, mod))
		}
	}
}

// dpkgStatus maps each installed package to its version.
func dpkgStatus(b []byte) map[string]string {
	out := map[string]string{}
	for _, stanza := range strings.Split(string(b), "\n\n") {
		var pkg, version, status string
		sc := bufio.NewScanner(strings.NewReader(stanza))
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ": ")
			switch k {
			case "Package":
				pkg = v
			case "Version":
				version = v
			case "Status":
				status = v
			}
		}
		if pkg != "" && status == "install ok installed" {
			out[pkg] = version
		}
	}
	return out
}

// upstream is a Debian version without its epoch and Debian revision.
func upstream(v string) string {
	if _, after, ok := strings.Cut(v, ":"); ok {
		v = after
	}
	if i := strings.LastIndex(v, "-"); i > 0 {
		v = v[:i]
	}
	return v
}

var goModPinRe = regexp.MustCompile(`(?m)^\s*go\.etcd\.io/etcd/server/v3 (v\S+)`)

// The etcd image is what images/etcd/Dockerfile ships: the static etcd server of the control
// plane's pin, alone, as the Dockerfile's entrypoint and user; the binary reports that release.
func TestEtcdImageMatchesDockerfile(t *testing.T) {
	final, stages := finalStage(t, "images/etcd/Dockerfile")
	const bin = "usr/local/bin/etcd"
	im := load(t, images.Etcd, func(n string, _ *tar.Header) bool { return n == bin })
	c := im.cfg.Config
	if !slices.Equal(final.Entrypoint, c.Entrypoint) || !slices.Equal(c.Entrypoint, []string{"/" + bin}) {
		t.Errorf("entrypoint: Dockerfile %q, image %q, want [/%s]", final.Entrypoint, c.Entrypoint, bin)
	}
	if d := cmp.Diff(final.Cmd, c.Cmd, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("cmd (-Dockerfile +image):\n%s", d)
	}
	if final.User != c.User {
		t.Errorf("user: Dockerfile %q, image %q", final.User, c.User)
	}
	nonRoot(t, c.User)

	// One release: the Dockerfile's ARG, the tools module's pin (bin/etcd), the image's label.
	mod, err := os.ReadFile(filepath.Join(root, "hack", "tools", "etcd", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	pin := goModPinRe.FindSubmatch(mod)
	if pin == nil || string(pin[1]) != images.EtcdVersion {
		t.Errorf("hack/tools/etcd/go.mod pins etcd %q, internal/images.EtcdVersion is %s", pin, images.EtcdVersion)
	}
	for i, s := range stages {
		if v := s.Args["ETCD_VERSION"]; v != images.EtcdVersion {
			t.Errorf("images/etcd/Dockerfile stage %d has ETCD_VERSION %q, want %s", i, v, images.EtcdVersion)
		}
	}
	if v := c.Labels[imagebuild.LabelEtcdVersion]; v != images.EtcdVersion {
		t.Errorf("image label %s=%q, want %s", imagebuild.LabelEtcdVersion, v, images.EtcdVersion)
	}
	if !slices.ContainsFunc(stages[0].Runs, func(r string) bool {
		return strings.Contains(r, "CGO_ENABLED=0") && strings.Contains(r, "go.etcd.io/etcd/server/v3") &&
			strings.Contains(r, "version.GitSHA=${ETCD_VERSION}")
	}) {
		t.Errorf("the Dockerfile's build stage no longer builds go.etcd.io/etcd/server/v3 statically with its version stamped: %q", stages[0].Runs)
	}

	h := im.files[bin]
	if h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o005 != 0o005 {
		t.Fatalf("the image has no /%s executable by other users (the non-root user): %+v", bin, h)
	}
	static(t, "/"+bin, im.data[bin])
	out, err := run(t, im.data[bin], "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "etcd Version: "+strings.TrimPrefix(images.EtcdVersion, "v")+"\n") ||
		!strings.Contains(string(out), "Git SHA: "+images.EtcdVersion+"\n") {
		t.Errorf("/%s --version (%v) does not report etcd %s:\n%s", bin, err, images.EtcdVersion, out)
	}
	for n := range im.files {
		if h := im.files[n]; h.Typeflag == tar.TypeReg && n != bin {
			t.Errorf("the image holds /%s; want the etcd server alone on an empty base", n)
		}
	}
}
