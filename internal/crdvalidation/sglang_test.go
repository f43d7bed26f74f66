package crdvalidation

import (
	"fmt"
	"strings"
	"testing"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// spec.sglang at kubectl apply: compatibleRelease names a release the operator has the argument
// definitions of; the deprecated versionLine keeps its schema, so specs that set it stay valid.
func TestSGLangReleaseRefusals(t *testing.T) {
	base := `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: q}
spec:
  model: {path: Qwen/Qwen3-8B, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
`
	cases := map[string]struct {
		doc, want string
	}{
		"no sglang":              {doc: base},
		"a mirror's image":       {doc: base + "  sglang: {image: registry.corp:5000/lmsysorg/sglang:v0.5.23-cu129}\n"},
		"the checked release":    {doc: base + "  sglang: {image: registry.example/team/sglang@sha256:" + strings.Repeat("3", 64) + ", compatibleRelease: \"0.5.23\"}\n"},
		"the old version line":   {doc: base + "  sglang: {versionLine: \"0.5\"}\n"},
		"a release not checked":  {doc: base + "  sglang: {compatibleRelease: \"0.5.24\"}\n", want: "spec.sglang.compatibleRelease must be a release the operator has the argument definitions of: 0.5.23"},
		"a line, not a release":  {doc: base + "  sglang: {compatibleRelease: \"0.5\"}\n", want: "spec.sglang.compatibleRelease must be a release the operator has the argument definitions of"},
		"a v spelling":           {doc: base + "  sglang: {compatibleRelease: v0.5.23}\n", want: "spec.sglang.compatibleRelease must be a release"},
		"an empty release":       {doc: base + "  sglang: {compatibleRelease: \"\"}\n", want: "spec.sglang.compatibleRelease must be a release"},
		"too long":               {doc: base + "  sglang: {compatibleRelease: \"" + strings.Repeat("1", 33) + "\"}\n", want: "spec.sglang.compatibleRelease: Too long"},
		"a version line pattern": {doc: base + "  sglang: {versionLine: \"0.5.23\"}\n", want: "spec.sglang.versionLine: Invalid value"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, errs := admit(t, tc.doc)
			got := Message(errs)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The CRD's rules on spec.sglang and the operator's reading of the image (resolve.SGLang) agree:
// kubectl apply refuses what the operator would report as InvalidSpec, and admits what it runs.
// Only references the parser refuses (malformed ones) are left to the operator.
func TestSGLangRulesAgreeWithTheResolver(t *testing.T) {
	d := "@sha256:" + strings.Repeat("ab", 32)
	images := []string{
		"", "lmsysorg/sglang:v0.5.23", "docker.io/lmsysorg/sglang:v0.5.23", "lmsysorg/sglang:v0.5.23-cu129",
		"lmsysorg/sglang:v0.5.23-cu130-runtime-arm64", "registry.corp:5000/lmsysorg/sglang:v0.5.23",
		"harbor.corp/dockerhub/lmsysorg/sglang:v0.5.23-amd64", "lmsysorg/sglang:v0.5.23" + d,
		"lmsysorg/sglang:v0.5.23.post1", "lmsysorg/sglang:v0.5.24rc0", "lmsysorg/sglang:v0.6.0", "lmsysorg/sglang:v0.6.0" + d,
		"lmsysorg/sglang:v0.5.23-rocm700-mi30x", "lmsysorg/sglang:v0.5.23-rocm700-mi30x" + d, "lmsysorg/sglang:v0.5.23-rolled",
		"lmsysorg/sglang", "lmsysorg/sglang:latest", "lmsysorg/sglang:latest" + d, "lmsysorg/sglang" + d,
		"lmsysorg/sglang:0.5.23", "lmsysorg/sglang:v0.5", "notlmsysorg/sglang:v0.5.23", "sglang:v0.5.23",
		"registry.example/team/sglang:abc", "registry.example/team/sglang:abc" + d, "registry.example/team/sglang" + d,
		"localhost:5000/sglang:v0.5.23",
	}
	for _, image := range images {
		for _, compat := range []string{"", "0.5.23"} {
			h := hicachev1alpha1.HiCacheDeployment{Spec: hicachev1alpha1.HiCacheDeploymentSpec{
				SGLang: hicachev1alpha1.SGLangSpec{Image: image, CompatibleRelease: compat}}}
			_, rerr := resolve.SGLang(&h.Spec)
			sg := "{}"
			switch {
			case image != "" && compat != "":
				sg = fmt.Sprintf("{image: %q, compatibleRelease: %q}", image, compat)
			case image != "":
				sg = fmt.Sprintf("{image: %q}", image)
			case compat != "":
				sg = fmt.Sprintf("{compatibleRelease: %q}", compat)
			}
			doc := "apiVersion: hicache.io/v1alpha1\nkind: HiCacheDeployment\nmetadata: {name: q}\nspec:\n  model: {path: m, revision: 0123456789abcdef0123456789abcdef01234567}\n  profile: Qwen3\n  sglang: " + sg + "\n"
			_, errs := admit(t, doc)
			if admitted := len(errs) == 0; admitted != (rerr == nil) {
				t.Errorf("sglang %s: the CRD says %q, the operator %v", sg, Message(errs), rerr)
			}
		}
	}
}
