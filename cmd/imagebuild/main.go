// Command imagebuild builds the local images named in internal/images into bin/images/<name>.tar
// (`make images`): docker-archive tarballs, each tagged with its reference, that
// `ctr -n k8s.io images import` loads into a node's containerd with no registry and no Docker.
//
//	go run ./cmd/imagebuild [-force] [-mirror URL] [NAME...]   build (all by default)
//	go run ./cmd/imagebuild -values                            print the chart values for them
//
// Each image is cached on its content: a key over everything it is built from (the Go sources
// of the binary and go.sum, or the Mooncake pin and the rootfs script, and the image config) is
// kept beside the tarball, and an image whose key is unchanged is not rebuilt.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/internal/imagebuild"
	"github.com/hicache-io/hicache-operator/internal/images"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[images %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	force := flag.Bool("force", false, "rebuild even when an image's content key is unchanged")
	mirror := flag.String("mirror", "", "Debian mirror for the Mooncake root file system (default: the bookworm main source of this machine's apt sources)")
	values := flag.Bool("values", false, "print the Helm values that make the chart run the local images, and exit")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: imagebuild [flags] [%s]\n", strings.Join(names(), "|"))
		flag.PrintDefaults()
	}
	flag.Parse()
	if *values {
		out, err := yaml.Marshal(images.LocalChartValues())
		if err != nil {
			fail(err)
		}
		if _, err := os.Stdout.Write(out); err != nil {
			fail(err)
		}
		return
	}
	b, err := newBuilder(*force, *mirror)
	if err != nil {
		fail(err)
	}
	if err := b.lock(); err != nil {
		fail(err)
	}
	want := flag.Args()
	for _, n := range want {
		if !slices.Contains(names(), n) {
			fail(fmt.Errorf("no image %q; the images are %s", n, strings.Join(names(), ", ")))
		}
	}
	start := time.Now()
	for _, img := range images.All {
		if len(want) > 0 && !slices.Contains(want, img.Name) || len(want) == 0 && img.OnDemand {
			continue
		}
		if err := b.image(img); err != nil {
			fail(fmt.Errorf("%s: %w", img.Ref, err))
		}
	}
	logf("done in %s", time.Since(start).Round(100*time.Millisecond))
}

func names() []string {
	var n []string
	for _, img := range images.All {
		n = append(n, img.Name)
	}
	return n
}

func fail(err error) {
	logf("error: %v", err)
	os.Exit(1)
}

type builder struct {
	root, out string
	force     bool
	mirror    string
	goVersion string
}

func newBuilder(force bool, mirror string) (*builder, error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return nil, errors.New("run imagebuild from the repository root (make images does)")
	}
	gv, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOVERSION: %w", err)
	}
	out := filepath.Join(root, images.Dir)
	if err := os.MkdirAll(out, 0o750); err != nil {
		return nil, err
	}
	// /proc/mounts names mount points by their real path: a bin/ reached through a symlink
	// must be resolved, or a stage with proc still mounted would look unmounted.
	if out, err = filepath.EvalSymlinks(out); err != nil {
		return nil, err
	}
	return &builder{root: root, out: out, force: force, mirror: mirror, goVersion: strings.TrimSpace(string(gv))}, nil
}

// lock waits for any other build into the same directory (parallel test runs), then removes the
// stage directories an interrupted build left.
func (b *builder) lock() error {
	f, err := os.OpenFile(filepath.Join(b.out, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		logf("waiting for another build into %s", images.Dir)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			return err
		}
	}
	// f stays open, and locked, until the process exits.
	stale, _ := filepath.Glob(filepath.Join(b.out, ".stage-*"))
	mounts, _ := os.ReadFile("/proc/mounts")
	for _, dir := range stale {
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				return fmt.Errorf("%s, left by an interrupted build, still has %s mounted: umount it, then run again", filepath.Join(images.Dir, filepath.Base(dir)), f[1])
			}
		}
		logf("removing %s, left by an interrupted build", filepath.Join(images.Dir, filepath.Base(dir)))
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}

// recipe is how one image is made: what its content key covers, and the build into a stage
// directory that returns the image's spec.
type recipe struct {
	inputs []imagebuild.Input
	build  func(stage string) (imagebuild.Spec, error)
}

func (b *builder) image(img images.Image) error {
	r, err := b.recipe(img)
	if err != nil {
		return err
	}
	key := imagebuild.Key(r.inputs)
	tarPath := filepath.Join(b.out, img.File)
	stamp := tarPath + ".key"
	if !b.force {
		if old, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(old)) == key {
			if st, err := os.Stat(tarPath); err == nil {
				logf("%s: up to date (%s, %s), nothing to do", img.Ref, filepath.Join(images.Dir, img.File), mb(st.Size()))
				return nil
			}
		}
	}
	start := time.Now()
	if err := os.MkdirAll(filepath.Dir(tarPath), 0o750); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(b.out, ".stage-"+img.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	spec, err := r.build(stage)
	if err != nil {
		return err
	}
	// A failed write must not leave an old key that vouches for a missing tarball.
	_ = os.Remove(stamp)
	size, err := imagebuild.Write(spec, tarPath)
	if err != nil {
		return err
	}
	if err := os.WriteFile(stamp, []byte(key+"\n"), 0o644); err != nil {
		return err
	}
	logf("%s: built in %s, %s (%s)", img.Ref, time.Since(start).Round(100*time.Millisecond), filepath.Join(images.Dir, img.File), mb(size))
	return nil
}

func (b *builder) recipe(img images.Image) (recipe, error) {
	switch img.Name {
	case "pause":
		return b.goRecipe(img, "./cmd/pause", "pause", v1.Config{
			Entrypoint: []string{"/pause"},
			// The user of the upstream pause image.
			User: "65535:65535",
		})
	case "sglang-standin":
		// The rendered rank command starts with python3, found on PATH.
		return b.goRecipe(img, "./cmd/sglang-standin", "python3", v1.Config{
			User: "65532:65532",
			Env:  []string{"PATH=/"},
		})
	case "operator":
		// What the Dockerfile at the repository root ships: the static manager, non-root.
		return b.goRecipe(img, "./cmd/manager", "manager", v1.Config{
			Entrypoint: []string{"/manager"},
			User:       "65532:65532",
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		})
	case "etcd":
		return b.etcdRecipe(img)
	case "mooncake":
		return b.mooncakeRecipe(img)
	case "router":
		return b.routerRecipe(img)
	case "sglang-cpu":
		return b.sglangCPURecipe(img)
	}
	return recipe{}, fmt.Errorf("no recipe for image %s", img.Name)
}

// buildFormat changes when the way images are assembled changes, so every image is rebuilt.
const buildFormat = "1"

var goBuildFlags = []string{"-trimpath", "-ldflags", "-s -w"}

// goRecipe is a static Go binary (CGO_ENABLED=0, as in the Dockerfile) at /<binary> on an empty
// base. Its key covers the main module's source files of every package the binary links, go.mod,
// go.sum (which pins every other module), the Go release and the build flags.
func (b *builder) goRecipe(img images.Image, pkg, binary string, cfg v1.Config) (recipe, error) {
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if and .Module .Module.Main}}{{range .GoFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{end}}`, pkg)
	cmd.Env, cmd.Stderr = env, os.Stderr
	list, err := cmd.Output()
	if err != nil {
		return recipe{}, fmt.Errorf("go list %s: %w", pkg, err)
	}
	files := append(strings.Fields(string(list)), filepath.Join(b.root, "go.mod"), filepath.Join(b.root, "go.sum"))
	inputs, err := fileInputs(b.root, files)
	if err != nil {
		return recipe{}, err
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return recipe{}, err
	}
	inputs = append(inputs,
		imagebuild.Input{Name: "format", Data: []byte(buildFormat)},
		imagebuild.Input{Name: "go", Data: []byte(b.goVersion + " linux/" + runtime.GOARCH)},
		imagebuild.Input{Name: "go build", Data: []byte(strings.Join(goBuildFlags, "\x00"))},
		imagebuild.Input{Name: "config", Data: cfgJSON},
	)
	return recipe{inputs: inputs, build: func(stage string) (imagebuild.Spec, error) {
		logf("%s: go build %s (CGO_ENABLED=0)", img.Ref, pkg)
		out := filepath.Join(stage, binary)
		args := append(append([]string{"build"}, goBuildFlags...), "-o", out, pkg)
		cmd := exec.Command("go", args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return imagebuild.Spec{}, fmt.Errorf("go build %s: %w", pkg, err)
		}
		// A fixed time makes the layer's digest depend on the binary only.
		if err := os.Chtimes(out, time.Unix(0, 0), time.Unix(0, 0)); err != nil {
			return imagebuild.Spec{}, err
		}
		return imagebuild.Spec{Ref: img.Ref, RootFS: stage, Config: cfg}, nil
	}}, nil
}

// etcdModule is the tools module that pins the control plane's etcd (hack/tools.sh builds
// bin/etcd from it); the etcd image is built from the same module with the same flags.
const etcdModule = "hack/tools/etcd"

// etcdBinary is where the etcd image holds the server, as the upstream etcd images do.
const etcdBinary = "usr/local/bin/etcd"

// etcdRecipe is images/etcd/Dockerfile's content: the static etcd server of the pinned module
// (CGO_ENABLED=0) alone on an empty base, non-root. Its key covers the module's go.mod and
// go.sum (which pin every source it builds), the Go release, the build flags and the config.
func (b *builder) etcdRecipe(img images.Image) (recipe, error) {
	dir := filepath.Join(b.root, etcdModule)
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/server/v3")
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return recipe{}, fmt.Errorf("reading the etcd pin of %s: %w", etcdModule, err)
	}
	version := strings.TrimSpace(string(out))
	if version != images.EtcdVersion {
		return recipe{}, fmt.Errorf("%s pins go.etcd.io/etcd/server/v3 %s but internal/images.EtcdVersion is %s: change both together", etcdModule, version, images.EtcdVersion)
	}
	cfg := etcdConfig()
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return recipe{}, err
	}
	inputs, err := fileInputs(b.root, []string{filepath.Join(dir, "go.mod"), filepath.Join(dir, "go.sum")})
	if err != nil {
		return recipe{}, err
	}
	flags := etcdBuildFlags(version)
	inputs = append(inputs,
		imagebuild.Input{Name: "format", Data: []byte(buildFormat)},
		imagebuild.Input{Name: "go", Data: []byte(b.goVersion + " linux/" + runtime.GOARCH)},
		imagebuild.Input{Name: "go build", Data: []byte(strings.Join(flags, "\x00"))},
		imagebuild.Input{Name: "config", Data: cfgJSON},
	)
	return recipe{inputs: inputs, build: func(stage string) (imagebuild.Spec, error) {
		logf("%s: go build go.etcd.io/etcd/server/v3 %s (CGO_ENABLED=0)", img.Ref, version)
		bin := filepath.Join(stage, etcdBinary)
		//nolint:gosec // G301: the image's /usr/local/bin must be traversable by its non-root user
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			return imagebuild.Spec{}, err
		}
		args := append(append([]string{"build"}, flags...), "-o", bin, "go.etcd.io/etcd/server/v3")
		cmd := exec.Command("go", args...)
		// As hack/tools.sh builds bin/etcd: the tools module resolves what its go.sum pins.
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-mod=mod")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return imagebuild.Spec{}, fmt.Errorf("go build go.etcd.io/etcd/server/v3: %w", err)
		}
		// Fixed times and modes (whatever the umask) make the layer's digest depend on the binary
		// only, and every directory traversable by the image's user.
		for p := bin; p != stage; p = filepath.Dir(p) {
			//nolint:gosec // G302: the image's directories and its server are read and run by its non-root user
			if err := os.Chmod(p, 0o755); err != nil {
				return imagebuild.Spec{}, err
			}
			if err := os.Chtimes(p, time.Unix(0, 0), time.Unix(0, 0)); err != nil {
				return imagebuild.Spec{}, err
			}
		}
		return imagebuild.Spec{Ref: img.Ref, RootFS: stage, Config: cfg}, nil
	}}, nil
}

// etcdBuildFlags are hack/tools.sh's flags for etcd: the version stamped where etcd reads its
// git revision.
func etcdBuildFlags(version string) []string {
	return []string{"-trimpath", "-ldflags", "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=" + version}
}

// etcdConfig is what images/etcd/Dockerfile's final stage sets: the server as the entrypoint,
// run as the distroless nonroot user.
func etcdConfig() v1.Config {
	return v1.Config{
		Entrypoint: []string{"/" + etcdBinary},
		User:       "65532:65532",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     map[string]string{imagebuild.LabelEtcdVersion: images.EtcdVersion},
	}
}

const rootfsScript = "hack/mooncake-rootfs.sh"

// mooncakeRecipe is images/mooncake/Dockerfile's content on Debian minbase: python3, the
// libraries the wheel links and the pinned wheel. Its key covers the pin in hack/mooncake.sh,
// the rootfs script, the suite and the image config; the mirror is not content.
func (b *builder) mooncakeRecipe(img images.Image) (recipe, error) {
	script, err := os.ReadFile(filepath.Join(b.root, "hack/mooncake.sh"))
	if err != nil {
		return recipe{}, err
	}
	requirements, err := os.ReadFile(filepath.Join(b.root, "hack/sglang/requirements.txt"))
	if err != nil {
		return recipe{}, err
	}
	pin, err := imagebuild.ParseMooncakePin(script, requirements)
	if err != nil {
		return recipe{}, err
	}
	if pin.Version != images.MooncakeVersion {
		return recipe{}, fmt.Errorf("hack/mooncake.sh pins %s %s but internal/images.MooncakeVersion is %s: change both together", pin.Package, pin.Version, images.MooncakeVersion)
	}
	cfg := v1.Config{
		Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"},
		User: "65532:65532",
		Cmd:  []string{"mooncake_master", "--help"},
		Labels: map[string]string{
			imagebuild.LabelMooncakeVersion: pin.Version,
			imagebuild.LabelBase:            "debian:" + imagebuild.DebianSuite + " (debootstrap --variant=minbase)",
		},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return recipe{}, err
	}
	inputs, err := fileInputs(b.root, []string{filepath.Join(b.root, rootfsScript)})
	if err != nil {
		return recipe{}, err
	}
	wheel := pin.Package + "==" + pin.Version
	inputs = append(inputs,
		imagebuild.Input{Name: "format", Data: []byte(buildFormat)},
		imagebuild.Input{Name: "wheel", Data: []byte(wheel)},
		imagebuild.Input{Name: "debs", Data: []byte(strings.Join(pin.DebPackages, " "))},
		imagebuild.Input{Name: "suite", Data: []byte(imagebuild.DebianSuite)},
		imagebuild.Input{Name: "config", Data: cfgJSON},
	)
	return recipe{inputs: inputs, build: func(stage string) (imagebuild.Spec, error) {
		mirror := b.mirror
		if mirror == "" {
			if mirror, err = machineMirror(); err != nil {
				return imagebuild.Spec{}, err
			}
		}
		rootfs := filepath.Join(stage, "rootfs")
		args := append([]string{rootfs, mirror, imagebuild.DebianSuite, wheel}, pin.DebPackages...)
		cmd := exec.Command(filepath.Join(b.root, rootfsScript), args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return imagebuild.Spec{}, fmt.Errorf("%s: %w", rootfsScript, err)
		}
		logf("%s: writing the layer and the tarball", img.Ref)
		return imagebuild.Spec{Ref: img.Ref, RootFS: rootfs, Config: cfg}, nil
	}}, nil
}

const routerRequirements = "hack/router/requirements.txt"

// routerRecipe is the router: the pinned wheels of hack/router/requirements.txt unpacked into
// the site-packages of the Mooncake image's python3, as one layer over that image. Its key
// covers the requirements (versions and hashes), the installer, the Mooncake image's key and
// the config.
func (b *builder) routerRecipe(img images.Image) (recipe, error) {
	data, err := os.ReadFile(filepath.Join(b.root, routerRequirements))
	if err != nil {
		return recipe{}, err
	}
	reqs, err := imagebuild.ParseRequirements(data)
	if err != nil {
		return recipe{}, fmt.Errorf("%s: %w", routerRequirements, err)
	}
	if i := slices.IndexFunc(reqs, func(r imagebuild.Requirement) bool { return r.Name == "smg" }); i < 0 || reqs[i].Version != images.RouterVersion {
		return recipe{}, fmt.Errorf("%s does not pin smg==%s, internal/images.RouterVersion: change both together", routerRequirements, images.RouterVersion)
	}
	base := filepath.Join(b.out, "mooncake.tar")
	baseKey, err := os.ReadFile(base + ".key")
	if err != nil {
		return recipe{}, fmt.Errorf("the router image is built over the Mooncake image, which is not built yet (%s): run make images", filepath.Join(images.Dir, "mooncake.tar"))
	}
	cfg := v1.Config{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"},
		User:       "65532:65532",
		Entrypoint: []string{"python3", "-m", "smg.launch_router"},
		Cmd:        []string{"--help"},
		Labels:     map[string]string{"io.hicache.smg-version": images.RouterVersion},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return recipe{}, err
	}
	// The installer is part of the recipe: a change to how wheels are unpacked rebuilds.
	inputs, err := fileInputs(b.root, []string{filepath.Join(b.root, "internal/imagebuild/wheel.go")})
	if err != nil {
		return recipe{}, err
	}
	inputs = append(inputs,
		imagebuild.Input{Name: "format", Data: []byte(buildFormat)},
		imagebuild.Input{Name: routerRequirements, Data: data},
		imagebuild.Input{Name: "base", Data: baseKey},
		imagebuild.Input{Name: "config", Data: cfgJSON},
	)
	return recipe{inputs: inputs, build: func(stage string) (imagebuild.Spec, error) {
		wheels := filepath.Join(filepath.Dir(b.out), "router")
		site := filepath.Join(stage, "rootfs", "usr", "local", "lib", "python3.11", "dist-packages")
		for _, r := range reqs {
			wheel, err := pinnedWheel(wheels, r)
			if err != nil {
				return imagebuild.Spec{}, err
			}
			logf("%s: installing %s", img.Ref, filepath.Base(wheel))
			if err := imagebuild.InstallWheel(wheel, site); err != nil {
				return imagebuild.Spec{}, err
			}
		}
		return imagebuild.Spec{Ref: img.Ref, RootFS: filepath.Join(stage, "rootfs"), Config: cfg, Base: base}, nil
	}}, nil
}

// The inputs of the SGLang CPU server's venv (hack/sglang-server-venv.sh reads the same ones).
var sglangCPUSources = []string{
	"hack/sglang-server-venv.sh",
	"hack/sglang/requirements.txt",
	"hack/sglang/server-requirements.txt",
	"hack/sglang/make_tiny_model.py",
}

// sglangCPUSkip are the venv's own tools: the image's python3 has Debian's.
var sglangCPUSkip = []string{"pip", "setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth"}

// modelScript is where the SGLang CPU image holds hack/sglang/make_tiny_model.py, which writes a
// tiny random-weight checkpoint (no download).
const modelScript = "usr/local/share/hicache/make_tiny_model.py"

// sglangCPURecipe is the pinned SGLang server for CPU: the site-packages of
// bin/sglang-server-venv (hack/sglang-server-venv.sh: the pinned wheels installed --no-deps and
// hack/sglang/cpu) copied into the site-packages of the Mooncake image's python3, as one layer over
// that image. Its key covers the pins, the installer, the CPU stand-ins, the Mooncake image's key
// and the config.
func (b *builder) sglangCPURecipe(img images.Image) (recipe, error) {
	base := filepath.Join(b.out, "mooncake.tar")
	baseKey, err := os.ReadFile(base + ".key")
	if err != nil {
		return recipe{}, fmt.Errorf("the SGLang CPU image is built over the Mooncake image, which is not built yet (%s): run make images", filepath.Join(images.Dir, "mooncake.tar"))
	}
	files := []string{}
	for _, f := range sglangCPUSources {
		files = append(files, filepath.Join(b.root, f))
	}
	cpu, err := filepath.Glob(filepath.Join(b.root, "hack/sglang/cpu/*/*.py"))
	if err != nil {
		return recipe{}, err
	}
	files = append(append(files, filepath.Join(b.root, "hack/sglang/cpu/pyproject.toml")), cpu...)
	inputs, err := fileInputs(b.root, files)
	if err != nil {
		return recipe{}, err
	}
	cfg := sglangCPUConfig()
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return recipe{}, err
	}
	inputs = append(inputs,
		imagebuild.Input{Name: "format", Data: []byte(buildFormat)},
		imagebuild.Input{Name: "base", Data: baseKey},
		imagebuild.Input{Name: "config", Data: cfgJSON},
	)
	return recipe{inputs: inputs, build: func(stage string) (imagebuild.Spec, error) {
		logf("%s: hack/sglang-server-venv.sh (cached on its own inputs)", img.Ref)
		cmd := exec.Command(filepath.Join(b.root, "hack/sglang-server-venv.sh"))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return imagebuild.Spec{}, fmt.Errorf("hack/sglang-server-venv.sh: %w", err)
		}
		site, err := filepath.Glob(filepath.Join(b.root, "bin/sglang-server-venv/lib/python3.11/site-packages"))
		if err != nil || len(site) != 1 {
			return imagebuild.Spec{}, fmt.Errorf("bin/sglang-server-venv has no lib/python3.11/site-packages: the image's python3 is Debian %s's 3.11, so the venv must be made with a CPython 3.11 (PYTHON=python3.11 hack/sglang-server-venv.sh)", imagebuild.DebianSuite)
		}
		rootfs := filepath.Join(stage, "rootfs")
		dst := filepath.Join(rootfs, "usr/local/lib/python3.11/dist-packages")
		//nolint:gosec // G301: the image's directories are read by whoever runs it
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return imagebuild.Spec{}, err
		}
		entries, err := os.ReadDir(site[0])
		if err != nil {
			return imagebuild.Spec{}, err
		}
		args := []string{"-a", "--reflink=auto"}
		for _, e := range entries {
			if slices.ContainsFunc(sglangCPUSkip, func(s string) bool { return e.Name() == s || strings.HasPrefix(e.Name(), s+"-") }) {
				continue
			}
			args = append(args, filepath.Join(site[0], e.Name()))
		}
		logf("%s: copying %d entries of bin/sglang-server-venv's site-packages", img.Ref, len(args)-2)
		cmd = exec.Command("cp", append(args, dst+"/")...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return imagebuild.Spec{}, fmt.Errorf("copying the venv's site-packages: %w", err)
		}
		if err := buildPageHash(img, b.root, stage, dst); err != nil {
			return imagebuild.Spec{}, err
		}
		script := filepath.Join(rootfs, modelScript)
		//nolint:gosec // G301: as above
		if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
			return imagebuild.Spec{}, err
		}
		data, err := os.ReadFile(filepath.Join(b.root, "hack/sglang/make_tiny_model.py"))
		if err != nil {
			return imagebuild.Spec{}, err
		}
		//nolint:gosec // G306: a script the image's user reads
		if err := os.WriteFile(script, data, 0o644); err != nil {
			return imagebuild.Spec{}, err
		}
		logf("%s: writing the layer (%s) and the tarball", img.Ref, duSize(rootfs))
		return imagebuild.Spec{Ref: img.Ref, RootFS: rootfs, Config: cfg, Base: base, FastCompression: true}, nil
	}}, nil
}

// pageHashProbe builds SGLang's page-hash extension with SGLang's own loader (its source, flags
// and -lcrypto) into TORCH_EXTENSIONS_DIR and prints the built module's path.
const pageHashProbe = `from sglang.srt.mem_cache.cpp_utils.native_hash import _load_native_hash_module as load; print(load().__file__)`

// buildPageHash compiles the C++ page hash SGLang JIT-builds on first use (the image has no
// compiler) with the server venv on this machine, and installs it into site as the module the
// CPU plugin binds SGLang's loader to (hack/sglang/cpu/hicache_sglang_cpu/plugin.py).
func buildPageHash(img images.Image, root, stage, site string) error {
	for _, tool := range []string{"g++", "ninja"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("building SGLang's page hash for the image needs %s (apt-get install g++ ninja-build libssl-dev)", tool)
		}
	}
	logf("%s: compiling SGLang's page hash extension (the image has no compiler)", img.Ref)
	dir := filepath.Join(stage, "torch-extensions")
	cmd := exec.Command(filepath.Join(root, "bin/sglang-server-venv/bin/python"), "-c", pageHashProbe)
	cmd.Env = append(os.Environ(), "TORCH_EXTENSIONS_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("compiling SGLang's page hash (needs g++, ninja-build and libssl-dev): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	built := lines[len(lines)-1]
	if !strings.HasPrefix(built, dir+"/") || filepath.Base(built) != pageHashModule+".so" {
		return fmt.Errorf("SGLang's page hash loaded from %q, not from a build in %s", built, dir)
	}
	data, err := os.ReadFile(built)
	if err != nil {
		return err
	}
	//nolint:gosec // G306: a library the image's user loads
	return os.WriteFile(filepath.Join(site, pageHashModule+".so"), data, 0o755)
}

// pageHashModule is the module name SGLang gives the extension (the plugin's PREBUILT_HASH_MODULE).
const pageHashModule = "hicache_hash_cpp"

// sglangCPUConfig runs as root, as the upstream SGLang image does, with the CPU engine on.
func sglangCPUConfig() v1.Config {
	return v1.Config{
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/root",
			// SGLang selects its CPU engine by this variable only; --device cpu alone does not.
			"SGLANG_USE_CPU_ENGINE=1"},
		Entrypoint: []string{"python3", "-m", "sglang.launch_server"},
		Cmd:        []string{"--help"},
		Labels: map[string]string{
			"io.hicache.sglang-version":     images.SGLangVersion,
			imagebuild.LabelMooncakeVersion: images.MooncakeVersion,
		},
	}
}

func duSize(dir string) string {
	out, err := exec.Command("du", "-sh", dir).Output()
	if err != nil {
		return "size unknown"
	}
	return strings.Fields(string(out))[0]
}

// pinnedWheel finds r's wheel for CPython 3.11 on x86_64 Linux in dir, downloading it with pip
// when missing, and checks it against r's hashes.
func pinnedWheel(dir string, r imagebuild.Requirement) (string, error) {
	find := func() string {
		norm := strings.ReplaceAll(r.Name, "-", "_")
		m, _ := filepath.Glob(filepath.Join(dir, norm+"-"+r.Version+"-*.whl"))
		if len(m) == 0 {
			return ""
		}
		return m[0]
	}
	wheel := find()
	if wheel == "" {
		logf("downloading %s==%s into %s", r.Name, r.Version, rel(filepath.Dir(filepath.Dir(dir)), dir))
		cmd := exec.Command("python3", "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
			"--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64",
			"--platform", "manylinux_2_5_x86_64", "--platform", "manylinux1_x86_64",
			"--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "-d", dir, r.Name+"=="+r.Version)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("pip download %s==%s: %w", r.Name, r.Version, err)
		}
		if wheel = find(); wheel == "" {
			return "", fmt.Errorf("pip downloaded no wheel of %s==%s into %s", r.Name, r.Version, dir)
		}
	}
	data, err := os.ReadFile(wheel)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); !slices.Contains(r.SHA256, got) {
		return "", fmt.Errorf("%s has SHA-256 %s, which %s does not pin for %s==%s: delete it and run again; if the release was re-uploaded, review it and update the pin", wheel, got, routerRequirements, r.Name, r.Version)
	}
	return wheel, nil
}

// machineMirror reads the Debian mirror from this machine's apt sources, in apt's order.
func machineMirror() (string, error) {
	var files []imagebuild.SourceFile
	paths := []string{"/etc/apt/sources.list"}
	for _, pattern := range []string{"/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"} {
		m, _ := filepath.Glob(pattern)
		paths = append(paths, m...)
	}
	slices.Sort(paths[1:])
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		files = append(files, imagebuild.SourceFile{Name: p, Data: data})
	}
	return imagebuild.DebianMirror(files, imagebuild.DebianSuite)
}

// fileInputs reads files as key inputs named by their path relative to the repository root.
func fileInputs(root string, paths []string) ([]imagebuild.Input, error) {
	var in []imagebuild.Input
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		in = append(in, imagebuild.Input{Name: rel(root, p), Data: data})
	}
	return in, nil
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
