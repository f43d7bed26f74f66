package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hicache-io/hicache-operator/internal/imagebuild"
	"github.com/hicache-io/hicache-operator/internal/images"
)

func inputNames(in []imagebuild.Input) []string {
	var n []string
	for _, i := range in {
		n = append(n, i.Name)
	}
	return n
}

// atRoot makes the repository root the working directory, as make images runs the builder.
func atRoot(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("go.mod"); err == nil {
		return
	}
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
}

// The operator's key covers the manager's own sources and what it links from this module, and
// nothing else: a change to the kubectl plugin or to a test does not rebuild the image.
func TestOperatorKeyCoversWhatTheManagerLinks(t *testing.T) {
	atRoot(t)
	b, err := newBuilder(false, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.recipe(images.Image{Name: "operator", Ref: images.Operator})
	if err != nil {
		t.Fatal(err)
	}
	names := inputNames(r.inputs)
	for _, want := range []string{"cmd/manager/main.go", "internal/controller/setup.go", "api/v1alpha1/zz_generated.deepcopy.go",
		"internal/images/images.go", "go.mod", "go.sum", "go", "go build", "config"} {
		if !slices.Contains(names, want) {
			t.Errorf("the operator's key does not cover %s", want)
		}
	}
	for _, n := range names {
		if n == "cmd/kubectl-hicache/main.go" || n == "cmd/imagebuild/main.go" || n == "internal/imagebuild/build.go" ||
			strings.HasSuffix(n, "_test.go") {
			t.Errorf("the operator's key covers %s, which the manager does not link", n)
		}
	}

	// Another image config is another key.
	other, err := b.goRecipe(images.Image{Name: "operator", Ref: images.Operator}, "./cmd/manager", "manager", v1.Config{Entrypoint: []string{"/manager"}})
	if err != nil {
		t.Fatal(err)
	}
	if imagebuild.Key(other.inputs) == imagebuild.Key(r.inputs) {
		t.Error("a different image config (no user) gives the same key")
	}
}

// The etcd image is built from the module that pins the control plane's etcd, with the flags
// hack/tools.sh builds bin/etcd with: its key covers that module's go.mod and go.sum (which pin
// every source) and no file of this module, so an operator change does not rebuild it.
func TestEtcdKeyCoversThePinnedModule(t *testing.T) {
	atRoot(t)
	b, err := newBuilder(false, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.recipe(images.Image{Name: "etcd", Ref: images.Etcd})
	if err != nil {
		t.Fatal(err)
	}
	names := inputNames(r.inputs)
	want := []string{"hack/tools/etcd/go.mod", "hack/tools/etcd/go.sum", "format", "go", "go build", "config"}
	if !slices.Equal(names, want) {
		t.Errorf("the etcd image's key covers %q, want %q", names, want)
	}
	tools, err := os.ReadFile("hack/tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	// hack/tools.sh stamps the pinned version as etcd's git revision; so does the image.
	stamp := "-X go.etcd.io/etcd/api/v3/version.GitSHA=${v}"
	if !strings.Contains(string(tools), stamp) {
		t.Fatalf("hack/tools.sh no longer builds etcd with %q: build the image with its flags", stamp)
	}
	flags := strings.Join(etcdBuildFlags(images.EtcdVersion), " ")
	if !strings.Contains(flags, strings.ReplaceAll(stamp, "${v}", images.EtcdVersion)) || !strings.Contains(flags, "-trimpath") {
		t.Errorf("the etcd image is built with %q, not hack/tools.sh's flags", flags)
	}
	if c := etcdConfig(); c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/etcd"}) {
		t.Errorf("etcd image config %+v: want /usr/local/bin/etcd run as 65532:65532", c)
	}
}
