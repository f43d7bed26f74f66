package crdvalidation

import (
	"strings"
	"testing"
)

// spec.sglang at kubectl apply: compatibleRelease names a release the operator has the argument
// definitions of; the deprecated versionLine keeps its schema, so specs that set it stay valid.
func TestSGLangReleaseRefusals(t *testing.T) {
	base := `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: q}
spec:
  model: {path: Qwen/Qwen3-8B}
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
