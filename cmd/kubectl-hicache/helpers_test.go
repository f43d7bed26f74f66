package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// samplesDir holds the HiCacheDeployment samples every command is run on.
const samplesDir = "../../config/samples"

func sample(name string) string {
	return filepath.Join(samplesDir, "hicachedeployment_"+name+".yaml")
}

// result is what one run of the plugin printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// runPlugin runs the plugin in-process, through newRootCmd, with stdin as standard input.
func runPlugin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// mustSucceed fails the test unless the run exited 0 with nothing on stderr.
func (r result) mustSucceed(t *testing.T) result {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit code %d, stderr:\n%s", r.code, r.stderr)
	}
	return r
}

// readHCD decodes a HiCacheDeployment file with a plain (non-strict) decoder, independent of the
// plugin's loader.
func readHCD(t *testing.T, path string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hcd := &hicachev1alpha1.HiCacheDeployment{}
	if err := yaml.Unmarshal(b, hcd); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return hcd
}

// resolveHCD resolves hcd directly, for comparison with what the plugin prints.
func resolveHCD(t *testing.T, hcd *hicachev1alpha1.HiCacheDeployment) *resolve.Resolved {
	t.Helper()
	r, err := resolve.Resolve(hcd)
	if err != nil {
		t.Fatalf("resolve %s: %v", hcd.Name, err)
	}
	return r
}

// writeHCD writes hcd as YAML into the test's temporary directory and returns the path.
func writeHCD(t *testing.T, name string, hcd *hicachev1alpha1.HiCacheDeployment) string {
	t.Helper()
	b, err := yaml.Marshal(hcd)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, name, string(b))
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// hcdEdit is a fluent wrapper that edits a copy of a sample.
type hcdEdit struct {
	hcd *hicachev1alpha1.HiCacheDeployment
}

func edit(t *testing.T, sampleName string) *hcdEdit {
	t.Helper()
	return &hcdEdit{hcd: readHCD(t, sample(sampleName))}
}

func (e *hcdEdit) NoDraft() *hcdEdit { e.hcd.Spec.Topology.Draft = nil; return e }

// Mount mounts claim read-only at path, as the volume "weights".
func (e *hcdEdit) Mount(path, claim string) *hcdEdit {
	e.hcd.Spec.Template.Volumes = append(e.hcd.Spec.Template.Volumes, corev1.Volume{Name: "weights",
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true}}})
	e.hcd.Spec.Template.VolumeMounts = append(e.hcd.Spec.Template.VolumeMounts, corev1.VolumeMount{Name: "weights", MountPath: path, ReadOnly: true})
	return e
}

// Scratch mounts an emptyDir at path, as the volume "scratch".
func (e *hcdEdit) Scratch(path string) *hcdEdit {
	e.hcd.Spec.Template.Volumes = append(e.hcd.Spec.Template.Volumes, corev1.Volume{Name: "scratch",
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	e.hcd.Spec.Template.VolumeMounts = append(e.hcd.Spec.Template.VolumeMounts, corev1.VolumeMount{Name: "scratch", MountPath: path})
	return e
}

func (e *hcdEdit) Replicas(n int32) *hcdEdit { e.hcd.Spec.Replicas = &n; return e }

func (e *hcdEdit) PageSize(n int32) *hcdEdit { e.hcd.Spec.HiCache.PageSize = n; return e }

func (e *hcdEdit) KVCacheDType(d hicachev1alpha1.KVCacheDType) *hcdEdit {
	e.hcd.Spec.HiCache.KVCacheDType = d
	return e
}

func (e *hcdEdit) WritePolicy(p hicachev1alpha1.WritePolicy) *hcdEdit {
	e.hcd.Spec.HiCache.WritePolicy = p
	return e
}

func (e *hcdEdit) IOBackend(b hicachev1alpha1.IOBackend) *hcdEdit {
	e.hcd.Spec.HiCache.IOBackend = b
	return e
}

func (e *hcdEdit) MemLayout(l hicachev1alpha1.MemLayout) *hcdEdit {
	e.hcd.Spec.HiCache.MemLayout = l
	return e
}

func (e *hcdEdit) MambaSSMDType(d string) *hcdEdit { e.hcd.Spec.HiCache.MambaSSMDType = d; return e }

func (e *hcdEdit) FlushPolicy(p hicachev1alpha1.FlushPolicy) *hcdEdit {
	e.hcd.Spec.Storage.FlushPolicy = p
	return e
}

func (e *hcdEdit) ExtraArgs(args ...string) *hcdEdit { e.hcd.Spec.Template.ExtraArgs = args; return e }

func (e *hcdEdit) Obj() *hicachev1alpha1.HiCacheDeployment { return e.hcd }
