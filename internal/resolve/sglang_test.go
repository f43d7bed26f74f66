package resolve_test

import (
	"strings"
	"testing"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

const testDigest = "sha256:3333333333333333333333333333333333333333333333333333333333333333"

func withSGLang(image, compatible, line string) *hicachev1alpha1.HiCacheDeployment {
	h := makeHCD("a").Profile("Qwen3").TP(2).Image(image).Obj()
	h.Spec.SGLang.CompatibleRelease, h.Spec.SGLang.VersionLine = compatible, line
	return h
}

func TestSGLangReleaseFromTheImage(t *testing.T) {
	cases := map[string]struct {
		hcd     *hicachev1alpha1.HiCacheDeployment
		want    resolve.SGLangRuntime
		wantErr []string
	}{
		"no image: the default's release": {
			hcd:  withSGLang("", "", ""),
			want: resolve.SGLangRuntime{Image: resolve.DefaultSGLangImage, Default: true, Release: "0.5.23", ArgsRelease: "0.5.23", Fact: "0.5"},
		},
		"a mirror's CUDA build of the checked release": {
			hcd:  withSGLang("registry.corp:5000/lmsysorg/sglang:v0.5.23-cu129", "", ""),
			want: resolve.SGLangRuntime{Image: "registry.corp:5000/lmsysorg/sglang:v0.5.23-cu129", Release: "0.5.23", ArgsRelease: "0.5.23", Fact: "0.5"},
		},
		"the checked release named compatible with itself": {
			hcd:  withSGLang("lmsysorg/sglang:v0.5.23", "0.5.23", "0.5"),
			want: resolve.SGLangRuntime{Image: "lmsysorg/sglang:v0.5.23", Release: "0.5.23", ArgsRelease: "0.5.23", Fact: "0.5"},
		},
		"an unchecked release is refused": {
			hcd: withSGLang("lmsysorg/sglang:v0.6.0", "", ""),
			wantErr: []string{"spec.sglang.image: lmsysorg/sglang:v0.6.0 runs SGLang 0.6.0, which the operator has not checked (it has the arguments of 0.5.23)",
				"set spec.sglang.compatibleRelease", "new L3 namespace"},
		},
		"an unchecked release declared compatible": {
			hcd:  withSGLang("lmsysorg/sglang:v0.6.0", "0.5.23", ""),
			want: resolve.SGLangRuntime{Image: "lmsysorg/sglang:v0.6.0", Release: "0.6.0", ArgsRelease: "0.5.23", Fact: "0.6.0"},
		},
		"a post release is not the release": {
			hcd:     withSGLang("lmsysorg/sglang:v0.5.23.post1", "", ""),
			wantErr: []string{"runs SGLang 0.5.23.post1, which the operator has not checked"},
		},
		"latest is refused": {
			hcd:     withSGLang("lmsysorg/sglang:latest", "", ""),
			wantErr: []string{`spec.sglang.image: the SGLang release is not read from lmsysorg/sglang:latest: tag "latest" is not a release tag`, "pin the image by digest"},
		},
		"a private build without compatibleRelease": {
			hcd:     withSGLang("registry.example/team/sglang:abc", "", ""),
			wantErr: []string{"the SGLang release is not read from registry.example/team/sglang:abc: team/sglang is not lmsysorg/sglang", "spec.sglang.compatibleRelease"},
		},
		"a private build without a digest": {
			hcd:     withSGLang("registry.example/team/sglang:abc", "0.5.23", ""),
			wantErr: []string{"spec.sglang.image: registry.example/team/sglang:abc names no digest", "a tag can be pushed again with other bytes", "image@sha256:"},
		},
		"a private build pinned and declared compatible": {
			hcd:  withSGLang("registry.example/team/sglang:abc@"+testDigest, "0.5.23", "0.5"),
			want: resolve.SGLangRuntime{Image: "registry.example/team/sglang:abc@" + testDigest, ArgsRelease: "0.5.23", ImageDigest: testDigest},
		},
		"compatibleRelease unknown (a file the API server has not checked)": {
			hcd:     withSGLang("lmsysorg/sglang:v0.6.0", "0.6.0", ""),
			wantErr: []string{`spec.sglang.compatibleRelease: "0.6.0" is not a release the operator has the argument definitions of (0.5.23)`},
		},
		"compatibleRelease beside a malformed image": {
			hcd:     withSGLang("lmsysorg/sglang:v0.5.23@sha256:zz", "0.5.23", ""),
			wantErr: []string{"spec.sglang.image: ", "is not an image reference"},
		},
		"versionLine that disagrees": {
			hcd:     withSGLang("", "", "0.6"),
			wantErr: []string{"spec.sglang.versionLine: 0.6 disagrees with the image, which runs SGLang 0.5.23: remove versionLine"},
		},
		"versionLine of a prefix that is not the line": {
			hcd:     withSGLang("", "", "0.52"),
			wantErr: []string{"spec.sglang.versionLine: 0.52 disagrees"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := resolve.SGLang(&tc.hcd.Spec)
			_, rerr := resolve.Resolve(tc.hcd)
			if len(tc.wantErr) > 0 {
				for _, e := range []error{err, rerr} {
					if e == nil {
						t.Fatalf("no error; want %q", tc.wantErr)
					}
					for _, w := range tc.wantErr {
						if !strings.Contains(e.Error(), w) {
							t.Errorf("error %q does not say %q", e, w)
						}
					}
				}
				return
			}
			if err != nil || rerr != nil {
				t.Fatalf("SGLang: %v; Resolve: %v", err, rerr)
			}
			if got != tc.want {
				t.Errorf("SGLang = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The release's class and a private build's digest are layout facts; a change of the image
// within a class is neutral.
func TestSGLangImageChangeClassified(t *testing.T) {
	pinned := "registry.example/team/sglang:abc@" + testDigest
	other := "registry.example/team/sglang:abc@sha256:4444444444444444444444444444444444444444444444444444444444444444"
	cases := map[string]struct {
		old, new *hicachev1alpha1.HiCacheDeployment
		kind     cache.ChangeKind
		says     string
	}{
		"default → its mirror": {old: withSGLang("", "", ""), new: withSGLang("mirror.test/lmsysorg/sglang:v0.5.23", "", ""), kind: cache.Neutral},
		"the release → a CUDA build of it": {
			old: withSGLang("lmsysorg/sglang:v0.5.23", "", ""), new: withSGLang("lmsysorg/sglang:v0.5.23-cu130", "", ""), kind: cache.Neutral},
		"a versionLine that agrees, removed": {old: withSGLang("", "", "0.5"), new: withSGLang("", "", ""), kind: cache.Neutral},
		"0.5.23 → 0.6.0 declared compatible": {
			old: withSGLang("", "", ""), new: withSGLang("lmsysorg/sglang:v0.6.0", "0.5.23", ""), kind: cache.Breaking,
			says: "SGLang version line 0.5 → 0.6.0"},
		"0.5.23 → 0.5.23.post1": {
			old: withSGLang("", "", ""), new: withSGLang("lmsysorg/sglang:v0.5.23.post1", "0.5.23", ""), kind: cache.Breaking,
			says: "SGLang version line 0.5 → 0.5.23.post1"},
		"the release → a private build": {
			old: withSGLang("", "", ""), new: withSGLang(pinned, "0.5.23", ""), kind: cache.Breaking, says: "SGLang image none → " + testDigest},
		"a private build → another digest": {
			old: withSGLang(pinned, "0.5.23", ""), new: withSGLang(other, "0.5.23", ""), kind: cache.Breaking, says: testDigest + " → sha256:4444"},
		"a private build's digest moved to another registry": {
			old: withSGLang(pinned, "0.5.23", ""), new: withSGLang("mirror.test/x@"+testDigest, "0.5.23", ""), kind: cache.Neutral},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, n := mustResolve(t, tc.old), mustResolve(t, tc.new)
			c := cache.Classify(o.Config(tc.old), n.Config(tc.new))
			if c.Kind != tc.kind {
				t.Fatalf("Classify = %s, want %s: %+v", c.Kind, tc.kind, c.Changes)
			}
			if (o.Namespace == n.Namespace) != (tc.kind != cache.Breaking) {
				t.Errorf("namespaces %s → %s for a %s change", o.Namespace, n.Namespace, tc.kind)
			}
			if tc.says != "" {
				found := false
				for _, ch := range c.Changes {
					found = found || strings.Contains(ch.Description, tc.says)
				}
				if !found {
					t.Errorf("no change says %q: %+v", tc.says, c.Changes)
				}
			}
		})
	}
}

func TestSGLangDescribe(t *testing.T) {
	for h, want := range map[*hicachev1alpha1.HiCacheDeployment]string{
		withSGLang("", "", ""): "lmsysorg/sglang:v0.5.23 (the default image): SGLang 0.5.23, read from the image; the command line is checked against SGLang 0.5.23's arguments",
		withSGLang("lmsysorg/sglang:v0.6.0", "0.5.23", ""): "lmsysorg/sglang:v0.6.0: SGLang 0.6.0, read from the image; " +
			"the command line is checked against SGLang 0.5.23's arguments (spec.sglang.compatibleRelease)",
		withSGLang("registry.example/team/sglang@"+testDigest, "0.5.23", ""): "registry.example/team/sglang@" + testDigest + ": release not read, the image's digest " +
			testDigest + " is the layout fact; the command line is checked against SGLang 0.5.23's arguments (spec.sglang.compatibleRelease)",
	} {
		rt, err := resolve.SGLang(&h.Spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := rt.Describe(); got != want {
			t.Errorf("Describe() =\n  %s\nwant\n  %s", got, want)
		}
	}
}

// The command line of an image declared compatible is checked against that release's arguments.
func TestSGLangArgsRelease(t *testing.T) {
	h := withSGLang("registry.example/team/sglang:abc@"+testDigest, "0.5.23", "")
	r := mustResolve(t, h)
	cfg, _, err := resolve.ServerConfig(h, r, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Release != "0.5.23" {
		t.Errorf("ServerConfig.Release = %q, want the compatible release", cfg.Release)
	}
	if _, err := sglang.Args(cfg); err != nil {
		t.Errorf("Args: %v", err)
	}
	cfg.Release = "0.6.0"
	if _, err := sglang.Args(cfg); err == nil || !strings.Contains(err.Error(), "no argument definitions of sglang 0.6.0") {
		t.Errorf("Args against 0.6.0: %v, want refused", err)
	}
}

func TestCheckDefaultSGLangImage(t *testing.T) {
	for ref, want := range map[string]string{
		resolve.DefaultSGLangImage:                    "",
		"registry.corp/lmsysorg/sglang:v0.5.23":       "",
		"lmsysorg/sglang:v0.5.23-cu129@" + testDigest: "",
		"lmsysorg/sglang:v0.6.0":                      "is SGLang 0.6.0, but deployments that name no image are resolved as SGLang 0.5.23",
		"sglang:test":                                 "an image whose release is not read",
		"lmsysorg/sglang:latest":                      "an image whose release is not read",
		"":                                            "empty",
	} {
		err := resolve.CheckDefaultSGLangImage(ref)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckDefaultSGLangImage(%q) = %v, want %q", ref, err, want)
		}
	}
}
