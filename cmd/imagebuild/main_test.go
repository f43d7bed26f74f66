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

// The operator's key covers the manager's own sources and what it links from this module, and
// nothing else: a change to the kubectl plugin or to a test does not rebuild the image.
func TestOperatorKeyCoversWhatTheManagerLinks(t *testing.T) {
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	b, err := newBuilder(false, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.recipe(images.Image{Name: "operator", Ref: images.Operator})
	if err != nil {
		t.Fatal(err)
	}
	names := inputNames(r.inputs)
	for _, want := range []string{"cmd/manager/main.go", "controllers/setup.go", "api/v1alpha1/zz_generated.deepcopy.go",
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
