package resolve

import (
	"fmt"
	"strings"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/sglang/release"
)

// DefaultSGLangImage is the image of a deployment that names none. The manager's
// --default-sglang-image may name another reference of the same release (a mirror), which it
// checks at start (CheckDefaultSGLangImage), so the release read here is the one that runs.
const DefaultSGLangImage = images.SGLang

// SGLangRuntime is what the operator reads from a deployment's SGLang image.
type SGLangRuntime struct {
	// Image is the image reference, the default one when the spec names none (Default).
	Image   string
	Default bool
	// Release is the SGLang release read from the image, "" when none is read.
	Release string
	// ArgsRelease is the checked release whose arguments the command line is checked against:
	// the image's own, or spec.sglang.compatibleRelease.
	ArgsRelease string
	// Fact is the value of the sglang_version_line layout fact ("" for an image whose release is
	// not read); ImageDigest the sglang.image fact of such an image.
	Fact, ImageDigest string
}

// SGLang reads the release of a deployment's image and decides the argument definitions and
// layout facts it gets (deny by default):
//
//   - an image of a checked release: its release, its class's fact;
//   - an image of a release the operator has no arguments of: refused unless
//     spec.sglang.compatibleRelease names the checked release it is compatible with, whose
//     arguments then check the command line; the fact is the image's release's class, so the
//     change is a change of layout unless docs/compatibility.md records the two as equal;
//   - an image whose release is not read at all (a private build, a moving tag): refused unless
//     it is pinned by digest (a tag can be pushed again with other bytes, and the reference
//     would not change) and names spec.sglang.compatibleRelease; its digest is the fact.
func SGLang(spec *hicachev1alpha1.HiCacheDeploymentSpec) (SGLangRuntime, error) {
	s := spec.SGLang
	rt := SGLangRuntime{Image: strings.TrimSpace(s.Image)}
	if rt.Image == "" {
		rt.Image, rt.Default = DefaultSGLangImage, true
	}
	img, err := release.Read(rt.Image)
	if err != nil {
		return rt, &FieldError{Field: "spec.sglang.image", Message: err.Error()}
	}
	checked := strings.Join(release.Checked, ", ")
	compat := s.CompatibleRelease
	if compat != "" && !release.IsChecked(compat) {
		return rt, &FieldError{Field: "spec.sglang.compatibleRelease", Message: fmt.Sprintf(
			"%q is not a release the operator has the argument definitions of (%s)", compat, checked)}
	}
	rt.Release = img.Release
	switch {
	case img.Release != "" && release.IsChecked(img.Release):
		if compat != "" && compat != img.Release {
			return rt, &FieldError{Field: "spec.sglang.compatibleRelease", Message: fmt.Sprintf(
				"is %s, but %s runs SGLang %s, whose arguments the operator has: remove compatibleRelease", compat, rt.Image, img.Release)}
		}
		rt.ArgsRelease, rt.Fact = img.Release, release.Fact(img.Release)
	case img.Release != "":
		if compat == "" {
			return rt, &FieldError{Field: "spec.sglang.image", Message: fmt.Sprintf(
				"%s runs SGLang %s, which the operator has not checked (it has the arguments of %s): use an image of a checked release, "+
					"or set spec.sglang.compatibleRelease to the checked release whose command-line arguments it accepts; the change of release "+
					"moves the deployment to a new L3 namespace unless docs/compatibility.md records the two releases' keys and bytes as equal",
				rt.Image, img.Release, checked)}
		}
		rt.ArgsRelease, rt.Fact = compat, release.Fact(img.Release)
	default:
		if compat == "" {
			return rt, &FieldError{Field: "spec.sglang.image", Message: fmt.Sprintf(
				"the SGLang release is not read from %s: %s. Use a release tag of lmsysorg/sglang (e.g. %s, or a mirror that keeps the path lmsysorg/sglang), "+
					"or pin the image by digest (image@sha256:...) and set spec.sglang.compatibleRelease to the checked release (%s) whose command-line arguments it accepts",
				rt.Image, img.Unread, DefaultSGLangImage, checked)}
		}
		if img.Digest == "" {
			return rt, &FieldError{Field: "spec.sglang.image", Message: fmt.Sprintf(
				"%s names no digest: its release is not read (%s), so the image itself is the layout fact, and a tag can be pushed again with other bytes "+
					"under the same reference; pin it by digest (image@sha256:..., e.g. from crane digest or docker buildx imagetools inspect)",
				rt.Image, img.Unread)}
		}
		rt.ArgsRelease, rt.ImageDigest = compat, img.Digest
	}
	if vl := s.VersionLine; vl != "" {
		rel := img.Release
		if rel == "" {
			rel = compat
		}
		if !strings.HasPrefix(rel+".", vl+".") {
			return rt, &FieldError{Field: "spec.sglang.versionLine", Message: fmt.Sprintf(
				"%s disagrees with the image, which runs SGLang %s: remove versionLine (deprecated: the release is read from spec.sglang.image)", vl, releaseWords(img, compat))}
		}
	}
	return rt, nil
}

// Describe says in one line which image runs, the release read from it and the arguments its
// command line is checked against.
func (rt SGLangRuntime) Describe() string {
	img := rt.Image
	if rt.Default {
		img += " (the default image)"
	}
	args := fmt.Sprintf("the command line is checked against SGLang %s's arguments", rt.ArgsRelease)
	if rt.ArgsRelease != rt.Release {
		args += " (spec.sglang.compatibleRelease)"
	}
	if rt.Release == "" {
		return fmt.Sprintf("%s: release not read, the image's digest %s is the layout fact; %s", img, rt.ImageDigest, args)
	}
	return fmt.Sprintf("%s: SGLang %s, read from the image; %s", img, rt.Release, args)
}

func releaseWords(img release.Image, compat string) string {
	if img.Release != "" {
		return img.Release
	}
	return "a release that is not read, declared compatible with " + compat
}

// CheckDefaultSGLangImage refuses an operator default image (--default-sglang-image) that is
// not an image of the release of DefaultSGLangImage: deployments that name no image are
// resolved against that release, so another would run under another release's layout facts
// and arguments. A mirror of it (registry.corp/lmsysorg/sglang:v0.5.23) is accepted.
func CheckDefaultSGLangImage(ref string) error {
	want, err := release.Read(DefaultSGLangImage)
	if err != nil {
		return err
	}
	got, err := release.Read(ref)
	if err != nil {
		return err
	}
	if got.Release != want.Release {
		what := "SGLang " + got.Release
		if got.Release == "" {
			what = "an image whose release is not read (" + got.Unread + ")"
		}
		return fmt.Errorf("the default SGLang image %s is %s, but deployments that name no image are resolved as SGLang %s: name an image of %s (%s or a mirror of it), "+
			"or set spec.sglang.image (and compatibleRelease) on each deployment instead", ref, what, want.Release, want.Release, DefaultSGLangImage)
	}
	return nil
}
