package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/cache"
)

const privateDigest = "sha256:5555555555555555555555555555555555555555555555555555555555555555"

// SGLang sets the sample's image and the release it is declared compatible with.
func (e *hcdEdit) SGLang(image, compatible string) *hcdEdit {
	e.hcd.Spec.SGLang.Image, e.hcd.Spec.SGLang.CompatibleRelease = image, compatible
	return e
}

// The release is read from the image: another build of the checked release is neutral, another
// release (declared compatible) or a private build is a change of layout.
func TestDiffSGLangImage(t *testing.T) {
	cases := map[string]struct {
		image, compatible string
		kind              cache.ChangeKind
		says              []string
	}{
		"a mirror's CUDA build of the same release": {image: "registry.corp:5000/lmsysorg/sglang:v0.5.23-cu129", kind: cache.Neutral,
			says: []string{"image none → registry.corp:5000/lmsysorg/sglang:v0.5.23-cu129", "nothing to flush"}},
		"a new release declared compatible": {image: "lmsysorg/sglang:v0.6.0", compatible: "0.5.23", kind: cache.Breaking,
			says: []string{"SGLang version line 0.5 → 0.6.0", "moves writers to namespace"}},
		"a post release": {image: "lmsysorg/sglang:v0.5.23.post1", compatible: "0.5.23", kind: cache.Breaking,
			says: []string{"SGLang version line 0.5 → 0.5.23.post1"}},
		"a private build pinned by digest": {image: "registry.example/team/sglang:abc@" + privateDigest, compatible: "0.5.23", kind: cache.Breaking,
			says: []string{"SGLang image none → " + privateDigest, "SGLang version line 0.5 → none"}},
	}
	old := writeHCD(t, "old.yaml", edit(t, "qwen3").Obj())
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := writeHCD(t, "new.yaml", edit(t, "qwen3").SGLang(tc.image, tc.compatible).Obj())
			table := runPlugin(t, "", "diff", old, n).mustSucceed(t).stdout
			if !strings.HasPrefix(table, string(tc.kind)+":") {
				t.Errorf("verdict is not %s:\n%s", tc.kind, table)
			}
			for _, s := range tc.says {
				if !strings.Contains(table, s) {
					t.Errorf("output lacks %q:\n%s", s, table)
				}
			}
			var rep diffReport
			if err := json.Unmarshal([]byte(runPlugin(t, "", "diff", old, n, "-o", "json").mustSucceed(t).stdout), &rep); err != nil {
				t.Fatal(err)
			}
			if (rep.OldNamespace == rep.NewNamespace) != (tc.kind != cache.Breaking) {
				t.Errorf("namespaces %s → %s for a %s change", rep.OldNamespace, rep.NewNamespace, tc.kind)
			}
		})
	}
}

// An image whose release the operator cannot check is refused by plan and diff, with what to do:
// by the CRD's rules, as kubectl apply refuses it, or by resolve.
func TestPlanAndDiffRefuseAnUncheckedImage(t *testing.T) {
	old := writeHCD(t, "old.yaml", edit(t, "qwen3").Obj())
	for name, tc := range map[string]struct {
		image, compatible string
		want              []string
	}{
		"a release without arguments": {image: "lmsysorg/sglang:v0.6.0",
			want: []string{"spec.sglang.image: the operator has the arguments of SGLang 0.5.23 only", "set spec.sglang.compatibleRelease"}},
		"latest":                     {image: "lmsysorg/sglang:latest", want: []string{"spec.sglang.image: the operator has the arguments of SGLang 0.5.23 only"}},
		"latest declared compatible": {image: "lmsysorg/sglang:latest", compatible: "0.5.23", want: []string{"spec.sglang.image: its SGLang release is not read from its tag", "pin it by digest"}},
		"a private build by tag": {image: "registry.example/team/sglang:abc", compatible: "0.5.23",
			want: []string{"spec.sglang.image: its SGLang release is not read from its tag", "pin it by digest (image@sha256:...)"}},
		// A reference the CRD's pattern lets through is still parsed: resolve refuses it.
		"a malformed reference": {image: "Team/lmsysorg/sglang:v0.5.23",
			want: []string{"spec.sglang.image: ", "is not an image reference"}},
	} {
		t.Run(name, func(t *testing.T) {
			bad := writeHCD(t, "new.yaml", edit(t, "qwen3").SGLang(tc.image, tc.compatible).Obj())
			for _, args := range [][]string{{"diff", old, bad}, {"plan", "-f", bad}} {
				res := runPlugin(t, "", args...)
				if res.code != 1 {
					t.Errorf("%s: exit %d, want 1; stdout %q", args[0], res.code, res.stdout)
				}
				for _, w := range tc.want {
					if !strings.Contains(res.stderr, w) {
						t.Errorf("%s: stderr %q lacks %q", args[0], res.stderr, w)
					}
				}
			}
		})
	}
}
