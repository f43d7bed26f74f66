// Package release reads the SGLang release an image runs from its reference, and knows the
// releases the operator has checked: those it has the argument definitions of (argspec) and the
// classes of releases whose L3 keys and bytes are recorded as equal (docs/compatibility.md).
//
// It is pure: nothing is pulled. A release is read from what the reference says, the way
// SGLang's release workflow names its images (lmsysorg/sglang:v<release>[-<variant>]) or from a
// digest listed in Digests; anything else is not read and the caller decides (deny by default).
package release

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// UpstreamRepository is the repository path SGLang's release workflow publishes its images
// under. A mirror is recognized by keeping it as the end of its own path.
const UpstreamRepository = "lmsysorg/sglang"

// Reference is an image reference taken apart.
type Reference struct {
	// Registry is the registry host (with its port), "index.docker.io" for Docker Hub.
	Registry string
	// Repository is the path inside the registry, e.g. "lmsysorg/sglang".
	Repository string
	// Tag is the tag as written, "" when the reference names none.
	Tag string
	// Digest is the manifest digest ("sha256:..."), "" when the reference names none.
	Digest string
}

// Image is what the operator reads from one image reference.
type Image struct {
	Reference
	// Release is the SGLang release the image runs ("0.5.23", "0.5.23.post1"), "" when it
	// cannot be read from the reference.
	Release string
	// Unread says why Release is empty, in a few words that complete "the release is not read
	// from the image: ...".
	Unread string
}

// Parse takes an image reference apart with go-containerregistry's parser: registry (a host,
// with a port), repository path, tag and digest. A reference with neither tag nor digest keeps
// Tag "" (a runtime pulls "latest", which names no release).
func Parse(ref string) (Reference, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return Reference{}, fmt.Errorf("the image reference is empty")
	}
	if strings.Contains(ref, "://") {
		return Reference{}, fmt.Errorf("%q is not an image reference: write registry/repository:tag, without a URL scheme", ref)
	}
	base, _, hasDigest := strings.Cut(ref, "@")
	var out Reference
	if hasDigest {
		d, err := name.NewDigest(ref)
		if err != nil {
			return Reference{}, fmt.Errorf("%q is not an image reference: %v", ref, err)
		}
		out.Digest = d.DigestStr()
	}
	// A tag is the part after a colon of the last path component (a colon before the last slash
	// is a registry's port). Without one the parser would fill in latest, which names nothing.
	if last := base[strings.LastIndex(base, "/")+1:]; strings.Contains(last, ":") {
		t, err := name.NewTag(base)
		if err != nil {
			return Reference{}, fmt.Errorf("%q is not an image reference: %v", ref, err)
		}
		out.Registry, out.Repository, out.Tag = t.RegistryStr(), t.RepositoryStr(), t.TagStr()
		return out, nil
	}
	r, err := name.NewRepository(base)
	if err != nil {
		return Reference{}, fmt.Errorf("%q is not an image reference: %v", ref, err)
	}
	out.Registry, out.Repository = r.RegistryStr(), r.RepositoryStr()
	return out, nil
}

// IsUpstream reports whether a repository is SGLang's own or a mirror of it: a mirror or
// pull-through cache keeps the upstream path at the end of its own (registry.corp:5000/
// lmsysorg/sglang, harbor.corp/dockerhub/lmsysorg/sglang), so no list of hosts is needed. The
// tag then names the release as on Docker Hub; pin a digest to pin the bytes.
func (r Reference) IsUpstream() bool {
	return r.Repository == UpstreamRepository || strings.HasSuffix(r.Repository, "/"+UpstreamRepository)
}

// releaseTag is SGLang's release tag: v, the release (major.minor.patch and an optional
// .postN or rcN, PEP 440 spellings the wheel also uses), then the variants that build the same
// release for NVIDIA GPUs.
var releaseTag = regexp.MustCompile(`^v([0-9]+\.[0-9]+\.[0-9]+(?:\.post[0-9]+|rc[0-9]+)?)((?:-[a-z0-9]+)*)$`)

// sameBuildVariant is a tag suffix that builds the same SGLang source for NVIDIA GPUs: the
// CUDA toolkit (cu126 ... cu130), the slimmer runtime stage of the same Dockerfile, and the
// CPU architecture. The Python code, which decides keys, page hashing and pool layouts, is the
// release's. Other variants (rocm*, mi30x, npu, xpu, a model's name) are other platforms or
// other builds: fp8 KV is e4m3fnuz on ROCm's MI300, other bytes under the same dtype name.
var sameBuildVariant = regexp.MustCompile(`^(cu[0-9]{3}|runtime|amd64|arm64)$`)

// Read reads the SGLang release of an image reference: from the digest when Digests lists it,
// else from an SGLang release tag of lmsysorg/sglang or a mirror of it. The error is for a
// reference that cannot be parsed, or whose tag and listed digest name different releases.
func Read(ref string) (Image, error) {
	r, err := Parse(ref)
	if err != nil {
		return Image{}, err
	}
	img := Image{Reference: r}
	fromDigest := ""
	if r.Digest != "" {
		fromDigest = Digests[r.Digest]
	}
	fromTag, why := tagRelease(r)
	switch {
	case fromDigest != "" && fromTag != "" && fromDigest != fromTag:
		return Image{}, fmt.Errorf("%q: its digest is the image of SGLang %s, but its tag says %s", ref, fromDigest, fromTag)
	case fromDigest != "":
		img.Release = fromDigest
	case fromTag != "":
		img.Release = fromTag
	default:
		img.Unread = why
	}
	return img, nil
}

// tagRelease is the release an upstream tag names, or why there is none.
func tagRelease(r Reference) (string, string) {
	if !r.IsUpstream() {
		return "", fmt.Sprintf("%s is not %s or a mirror of it (a path ending in /%s)", r.Repository, UpstreamRepository, UpstreamRepository)
	}
	if r.Tag == "" {
		if r.Digest != "" {
			return "", "its digest is not one of the checked images and it names no release tag"
		}
		return "", "it names no tag, so it runs whatever latest is when pulled"
	}
	m := releaseTag.FindStringSubmatch(r.Tag)
	if m == nil {
		return "", fmt.Sprintf("tag %q is not a release tag (v<major>.<minor>.<patch>, e.g. v%s); latest, dev and nightly tags move", r.Tag, Pinned)
	}
	for _, v := range strings.Split(strings.TrimPrefix(m[2], "-"), "-") {
		if v != "" && !sameBuildVariant.MatchString(v) {
			return "", fmt.Sprintf("tag %q is a %q build of SGLang %s, a variant the operator has not checked (only cuNNN, runtime, amd64 and arm64 build the same release for NVIDIA GPUs)", r.Tag, v, m[1])
		}
	}
	return m[1], ""
}

// Pinned is the release whose argument definitions are embedded (hack/sglang/requirements.txt
// pins it; argspec checks it).
const Pinned = "0.5.23"

// Checked are the releases the operator has the argument definitions of, i.e. an argspec
// table generated from the release's wheel. Adding one: docs/compatibility.md.
var Checked = []string{Pinned}

// IsChecked reports whether the operator has the argument definitions of a release.
func IsChecked(release string) bool { return slices.Contains(Checked, release) }

// Digests are the manifest digests of checked images and the release each runs. A digest is
// only listed once read from the registry (crane digest lmsysorg/sglang:v<release>): none is
// written down from memory.
var Digests = map[string]string{}

// Class is a set of releases whose L3 keys and the bytes behind them are recorded as equal in
// docs/compatibility.md: a change between them keeps a deployment's namespace.
type Class struct {
	// Fact is the value of the sglang_version_line layout fact of every release of the class.
	Fact string
	// Releases are its releases.
	Releases []string
	// Proof names the check that showed their keys and bytes equal.
	Proof string
}

// Classes are the equivalence classes. The fact value of 0.5.23's class is "0.5", the value the
// fact had when it was a declared version line defaulting to 0.5, so that no deployment of the
// default image changes its namespace. A release in no class is a class of its own whose fact
// value is the release itself: a change to it or from it is a change of layout.
var Classes = []Class{
	{Fact: "0.5", Releases: []string{"0.5.23"}, Proof: "test/conformance: SGLang 0.5.23's own HiCache storage code against a real Mooncake master: its keys equal the model's key for key, its page hashes the model's, what it wrote reads back byte for byte"},
}

// Fact is the value of the sglang_version_line layout fact of a release: its class's value.
func Fact(release string) string {
	for _, c := range Classes {
		if slices.Contains(c.Releases, release) {
			return c.Fact
		}
	}
	return release
}
