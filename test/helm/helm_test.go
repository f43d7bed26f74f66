// Package helm tests the Helm chart in charts/hicache-operator with the real helm binary (bin/helm,
// built by hack/tools.sh helm): what it renders for each set of values, what values.schema.json
// refuses, helm lint, and an install into a local control plane whose RBAC runs the operator.
package helm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// release and namespace are what the tests install the chart as.
	release   = "hicache-operator"
	namespace = "hicache-system"
)

// repoRoot is the repository's top directory.
func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func chartDir() string { return filepath.Join(repoRoot(), "charts", "hicache-operator") }

// helmBinary is bin/helm; the test fails, naming the command that builds it, when it is missing.
func helmBinary(t testing.TB) string {
	t.Helper()
	p := filepath.Join(repoRoot(), "bin", "helm")
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("bin/helm is missing: run hack/tools.sh helm (looked for %s)", p)
	}
	return p
}

// runHelm runs bin/helm with args and returns its standard output and error output. Helm's
// cache, configuration and data live in a temporary directory, so the user's repositories and
// plugins play no part.
func runHelm(t testing.TB, args ...string) (string, string, error) {
	t.Helper()
	bin := helmBinary(t)
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("helm %s did not finish within 2 minutes: %w", strings.Join(args, " "), ctx.Err())
	}
	return stdout.String(), stderr.String(), err
}

// setArgs turns "key=value" pairs into --set flags.
func setArgs(sets []string) []string {
	var args []string
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// manifest is a rendered chart: one object per YAML document.
type manifest []*unstructured.Unstructured

// render runs helm template on the chart as release in namespace, with the given --set values,
// and decodes the output.
func render(t *testing.T, sets ...string) manifest {
	t.Helper()
	return renderArgs(t, append([]string{"template", release, chartDir(), "--namespace", namespace}, setArgs(sets)...)...)
}

func renderArgs(t *testing.T, args ...string) manifest {
	t.Helper()
	out, stderr, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatalf("decoding the output of helm %s: %v", strings.Join(args, " "), err)
	}
	return m
}

// decodeManifest splits a YAML stream into objects; empty documents are skipped.
func decodeManifest(stream string) (manifest, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	var m manifest
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return m, nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("a document has no kind or name: %v", obj)
		}
		m = append(m, u)
	}
}

// ofKind lists the objects of a kind.
func (m manifest) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range m {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

// find is the object of kind and name, or nil.
func (m manifest) find(kind, name string) *unstructured.Unstructured {
	for _, u := range m {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// names lists "Kind/name" of every object.
func (m manifest) names() []string {
	var out []string
	for _, u := range m {
		out = append(out, u.GetKind()+"/"+u.GetName())
	}
	return out
}

// typed converts the object kind/name of m into out, refusing fields the Go type does not have
// (a misspelt field in a template would otherwise be dropped by the API server unnoticed).
func typed(t *testing.T, m manifest, kind, name string, out any) {
	t.Helper()
	u := m.find(kind, name)
	if u == nil {
		t.Fatalf("the chart renders no %s %s; it renders %v", kind, name, m.names())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s does not decode strictly: %v", kind, name, err)
	}
}

// readYAML decodes a file of the repository into out.
func readYAML(t *testing.T, rel string, out any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		t.Fatalf("decoding %s: %v", rel, err)
	}
}
