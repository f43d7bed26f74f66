package release

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

const dig = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

func TestParse(t *testing.T) {
	cases := map[string]struct {
		ref     string
		want    Reference
		wantErr string
	}{
		"Docker Hub short":         {ref: "lmsysorg/sglang:v0.5.23", want: Reference{Registry: "index.docker.io", Repository: "lmsysorg/sglang", Tag: "v0.5.23"}},
		"Docker Hub spelled out":   {ref: "docker.io/lmsysorg/sglang:v0.5.23", want: Reference{Registry: "index.docker.io", Repository: "lmsysorg/sglang", Tag: "v0.5.23"}},
		"registry with a port":     {ref: "registry.corp:5000/lmsysorg/sglang:v0.5.23", want: Reference{Registry: "registry.corp:5000", Repository: "lmsysorg/sglang", Tag: "v0.5.23"}},
		"port and no tag":          {ref: "localhost:5000/team/sglang", want: Reference{Registry: "localhost:5000", Repository: "team/sglang"}},
		"no tag":                   {ref: "lmsysorg/sglang", want: Reference{Registry: "index.docker.io", Repository: "lmsysorg/sglang"}},
		"digest only":              {ref: "lmsysorg/sglang@" + dig, want: Reference{Registry: "index.docker.io", Repository: "lmsysorg/sglang", Digest: dig}},
		"tag and digest":           {ref: "ghcr.io/a/b/lmsysorg/sglang:v0.5.23@" + dig, want: Reference{Registry: "ghcr.io", Repository: "a/b/lmsysorg/sglang", Tag: "v0.5.23", Digest: dig}},
		"official library image":   {ref: "sglang:v0.5.23", want: Reference{Registry: "index.docker.io", Repository: "library/sglang", Tag: "v0.5.23"}},
		"spaces around":            {ref: "  lmsysorg/sglang:v0.5.23 ", want: Reference{Registry: "index.docker.io", Repository: "lmsysorg/sglang", Tag: "v0.5.23"}},
		"empty":                    {ref: " ", wantErr: "empty"},
		"upper case repository":    {ref: "LMSYSORG/sglang:v0.5.23", wantErr: "not an image reference"},
		"two digests":              {ref: "a@" + dig + "@" + dig, wantErr: "not an image reference"},
		"short digest":             {ref: "lmsysorg/sglang@sha256:abc", wantErr: "not an image reference"},
		"a URL":                    {ref: "https://lmsysorg/sglang:v0.5.23", wantErr: "without a URL scheme"},
		"a tag with a bad letter":  {ref: "lmsysorg/sglang:v0.5.23!", wantErr: "not an image reference"},
		"an empty tag after colon": {ref: "lmsysorg/sglang:", wantErr: "not an image reference"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(tc.ref)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %+v, %v; want an error containing %q", tc.ref, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.ref, got, err, tc.want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	other := "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	Digests[other] = "0.5.22"
	defer delete(Digests, other)
	cases := map[string]struct {
		ref, release, unread, wantErr string
	}{
		"the release tag":                 {ref: "lmsysorg/sglang:v0.5.23", release: "0.5.23"},
		"a CUDA build of it":              {ref: "lmsysorg/sglang:v0.5.23-cu129", release: "0.5.23"},
		"CUDA 13, runtime, arm64":         {ref: "lmsysorg/sglang:v0.5.23-cu130-runtime-arm64", release: "0.5.23"},
		"a mirror keeps the path":         {ref: "registry.corp:5000/lmsysorg/sglang:v0.5.23", release: "0.5.23"},
		"a pull-through cache project":    {ref: "harbor.corp/dockerhub/lmsysorg/sglang:v0.5.23-cu129", release: "0.5.23"},
		"a post release is another":       {ref: "lmsysorg/sglang:v0.5.23.post1", release: "0.5.23.post1"},
		"a release candidate is another":  {ref: "lmsysorg/sglang:v0.5.24rc0", release: "0.5.24rc0"},
		"a newer release":                 {ref: "lmsysorg/sglang:v0.6.0", release: "0.6.0"},
		"tag with an unchecked digest":    {ref: "lmsysorg/sglang:v0.5.23@" + dig, release: "0.5.23"},
		"a listed digest names it":        {ref: "mirror.test/any/name@" + other, release: "0.5.22"},
		"listed digest and its own tag":   {ref: "lmsysorg/sglang:v0.5.22@" + other, release: "0.5.22"},
		"listed digest, another tag":      {ref: "lmsysorg/sglang:v0.5.23@" + other, wantErr: "its digest is the image of SGLang 0.5.22, but its tag says 0.5.23"},
		"latest moves":                    {ref: "lmsysorg/sglang:latest", unread: `tag "latest" is not a release tag`},
		"no tag is latest":                {ref: "lmsysorg/sglang", unread: "names no tag"},
		"a dev tag":                       {ref: "lmsysorg/sglang:dev", unread: "not a release tag"},
		"no v":                            {ref: "lmsysorg/sglang:0.5.23", unread: "not a release tag"},
		"capital V":                       {ref: "lmsysorg/sglang:V0.5.23", unread: "not a release tag"},
		"two parts":                       {ref: "lmsysorg/sglang:v0.5", unread: "not a release tag"},
		"a ROCm build":                    {ref: "lmsysorg/sglang:v0.5.23-rocm700-mi30x", unread: `a "rocm700" build of SGLang 0.5.23`},
		"a model's build":                 {ref: "lmsysorg/sglang:v0.5.23-glm5", unread: `a "glm5" build`},
		"a retagged build":                {ref: "lmsysorg/sglang:v0.5.23-rolled", unread: `a "rolled" build`},
		"a private build":                 {ref: "registry.example/team/sglang:abc", unread: "team/sglang is not lmsysorg/sglang or a mirror of it"},
		"a private build with a v tag":    {ref: "registry.example/team/sglang:v0.5.23", unread: "not lmsysorg/sglang"},
		"a look-alike path":               {ref: "registry.example/notlmsysorg/sglang:v0.5.23", unread: "not lmsysorg/sglang"},
		"an unlisted digest with no tag":  {ref: "lmsysorg/sglang@" + dig, unread: "not one of the checked images"},
		"a private build pinned":          {ref: "registry.example/team/sglang:abc@" + dig, unread: "not lmsysorg/sglang"},
		"a malformed reference":           {ref: "lmsysorg/sglang:v0.5.23@sha256:zz", wantErr: "not an image reference"},
		"the official library's sglang":   {ref: "sglang:v0.5.23", unread: "library/sglang is not lmsysorg/sglang"},
		"the chart's default is readable": {ref: "lmsysorg/sglang:v" + Pinned, release: Pinned},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Read(tc.ref)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Read(%q) = %+v, %v; want an error containing %q", tc.ref, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read(%q): %v", tc.ref, err)
			}
			if got.Release != tc.release {
				t.Errorf("Read(%q).Release = %q, want %q", tc.ref, got.Release, tc.release)
			}
			if tc.unread == "" && got.Unread != "" || !strings.Contains(got.Unread, tc.unread) {
				t.Errorf("Read(%q).Unread = %q, want it to contain %q", tc.ref, got.Unread, tc.unread)
			}
		})
	}
}

func TestFact(t *testing.T) {
	cases := map[string]string{
		// The checked release keeps the value the fact had as a declared version line.
		"0.5.23": "0.5",
		// Any other release is a class of its own.
		"0.5.23.post1": "0.5.23.post1", "0.5.24": "0.5.24", "0.6.0": "0.6.0", "0.5.22": "0.5.22",
	}
	for rel, want := range cases {
		if got := Fact(rel); got != want {
			t.Errorf("Fact(%q) = %q, want %q", rel, got, want)
		}
	}
}

// The classes are sound: a release is in at most one, a class's fact value is no release's own
// (which a release outside the classes takes), and every class has a proof.
func TestClassesAreDisjoint(t *testing.T) {
	seen := map[string]string{}
	facts := map[string]bool{}
	for _, c := range Classes {
		if c.Proof == "" || len(c.Releases) == 0 {
			t.Errorf("class %q has no proof or no releases", c.Fact)
		}
		if facts[c.Fact] {
			t.Errorf("two classes have the fact %q", c.Fact)
		}
		facts[c.Fact] = true
		if releaseTag.MatchString("v" + c.Fact) {
			t.Errorf("class fact %q is spelled like a release: a release outside the classes would share it", c.Fact)
		}
		for _, r := range c.Releases {
			if prev, ok := seen[r]; ok {
				t.Errorf("release %s is in the classes %q and %q", r, prev, c.Fact)
			}
			seen[r] = c.Fact
		}
	}
}

// Every checked release has its argument definitions, and the pinned one is what argspec embeds.
func TestCheckedReleasesHaveArguments(t *testing.T) {
	def, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	if def.Version() != Pinned {
		t.Errorf("argspec embeds sglang %s, Pinned is %s", def.Version(), Pinned)
	}
	for _, r := range Checked {
		if _, err := argspec.ForRelease(r); err != nil {
			t.Errorf("checked release %s: %v", r, err)
		}
	}
	if _, err := argspec.ForRelease("0.6.0"); err == nil {
		t.Error("argspec.ForRelease(0.6.0) has arguments; no table for it is embedded")
	}
	for d, r := range Digests {
		if !IsChecked(r) {
			t.Errorf("digest %s is listed for %s, which is not checked", d, r)
		}
	}
}

// docs/compatibility.md lists each equivalence class with its releases, fact value and proof,
// and every checked release; the CRD's rule on compatibleRelease lists the checked releases.
func TestDocsAndSchemaListTheReleases(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Classes {
		row := regexp.MustCompile(`(?m)^\| *` + regexp.QuoteMeta("`"+c.Fact+"`") + ` *\| *([^|]*)\|`).FindSubmatch(doc)
		if row == nil {
			t.Errorf("docs/compatibility.md has no row | `%s` | ... | for the class of %v", c.Fact, c.Releases)
			continue
		}
		for _, r := range c.Releases {
			if !strings.Contains(string(row[1]), r) {
				t.Errorf("docs/compatibility.md's row of class %q does not list %s", c.Fact, r)
			}
		}
	}
	for _, r := range Checked {
		if !strings.Contains(string(doc), "| "+r+" |") {
			t.Errorf("docs/compatibility.md's release table has no row | %s |", r)
		}
	}
	types, err := os.ReadFile("../../../api/v1alpha1/hicachedeployment_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`rule="self in \[([^\]]*)\]",message="spec.sglang.compatibleRelease`).FindSubmatch(types)
	if m == nil {
		t.Fatal("api/v1alpha1: no CEL rule on compatibleRelease")
	}
	var listed []string
	for _, q := range strings.Split(string(m[1]), ",") {
		listed = append(listed, strings.Trim(strings.TrimSpace(q), "'"))
	}
	if !slices.Equal(listed, Checked) {
		t.Errorf("the CRD admits compatibleRelease %v, the checked releases are %v", listed, Checked)
	}
	// The rule that admits an image without compatibleRelease spells the checked releases' tags.
	img := regexp.MustCompile(`has\(self.compatibleRelease\) \|\| self.image.matches\('([^']*)'\)`).FindSubmatch(types)
	if img == nil {
		t.Fatal("api/v1alpha1: no CEL rule admitting an image of a checked release")
	}
	var tags []string
	for _, r := range Checked {
		tags = append(tags, "v"+strings.ReplaceAll(r, ".", "[.]"))
	}
	if want := "sglang:" + strings.Join(tags, "|"); !strings.Contains(string(img[1]), want) && !strings.Contains(string(img[1]), "sglang:("+strings.Join(tags, "|")+")") {
		t.Errorf("the CRD's image rule %s does not name the checked releases %v", img[1], Checked)
	}
}
