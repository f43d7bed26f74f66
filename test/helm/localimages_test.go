package helm

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/images"
)

// Every image the chart, the kustomize install and the operator's defaults name is one that
// `make images` builds, or the upstream SGLang image of the release hack/sglang/requirements.txt
// pins: nothing names an image no command produces.
func TestEveryNamedImageHasABuild(t *testing.T) {
	built := map[string]bool{}
	for _, im := range images.All {
		built[im.Ref] = true
	}
	reqs, err := os.ReadFile(filepath.Join(repoRoot(), "hack", "sglang", "requirements.txt"))
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^sglang==(\S+)`).FindSubmatch(reqs)
	if pin == nil {
		t.Fatal("hack/sglang/requirements.txt pins no sglang==VERSION")
	}
	upstreamSGLang := "lmsysorg/sglang:v" + string(pin[1])

	named := map[string]string{} // image -> where it is named
	name := func(ref, where string) {
		if ref == "" {
			t.Errorf("%s names an empty image", where)
			return
		}
		if _, seen := named[ref]; !seen {
			named[ref] = where
		}
	}

	// The chart as installed with its default values: every container of every object, and the
	// default images it passes the manager.
	m := render(t)
	for _, u := range m {
		walkImages(u.Object, func(ref string) { name(ref, "the chart's "+u.GetKind()+" "+u.GetName()) })
	}
	for flag, v := range args(t, manager(deployment(t, m, fullname))) {
		if strings.HasSuffix(flag, "-image") {
			name(v, "the chart's --"+flag)
		}
	}
	// The defaults of the manager's flags are the controllers' defaults.
	for flag, def := range managerImageFlagDefaults(t) {
		switch def {
		case "storeuse.DefaultSGLangImage":
			name(storeuse.DefaultSGLangImage, "--"+flag+" (storeuse.DefaultSGLangImage)")
		case "storeuse.DefaultMooncakeImage":
			name(storeuse.DefaultMooncakeImage, "--"+flag+" (storeuse.DefaultMooncakeImage)")
		case "storeuse.DefaultRouterImage":
			name(storeuse.DefaultRouterImage, "--"+flag+" (storeuse.DefaultRouterImage)")
		case "storeuse.DefaultEtcdImage":
			name(storeuse.DefaultEtcdImage, "--"+flag+" (storeuse.DefaultEtcdImage)")
		case "storeuse.DefaultGuardImage":
			name(storeuse.DefaultGuardImage, "--"+flag+" (storeuse.DefaultGuardImage)")
		default:
			t.Errorf("cmd/manager's --%s defaults to %s; this test knows storeuse.DefaultSGLangImage, storeuse.DefaultMooncakeImage, storeuse.DefaultRouterImage, storeuse.DefaultEtcdImage and storeuse.DefaultGuardImage", flag, def)
		}
	}
	if len(managerImageFlagDefaults(t)) < 2 {
		t.Errorf("cmd/manager defines image flags %v, want --default-sglang-image and --default-mooncake-image", managerImageFlagDefaults(t))
	}
	// config/default (kustomize) replaces the manager's placeholder image.
	var kust struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	readYAML(t, "config/manager/kustomization.yaml", &kust)
	if len(kust.Images) == 0 {
		t.Error("config/manager/kustomization.yaml sets no image")
	}
	for _, im := range kust.Images {
		name(im.NewName+":"+im.NewTag, "config/manager/kustomization.yaml")
	}

	if len(named) < 3 {
		t.Fatalf("found only %v: the walk over the chart and defaults misses images", named)
	}
	refs := make([]string, 0, len(named))
	for ref := range named {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	for _, ref := range refs {
		if !built[ref] && ref != upstreamSGLang {
			t.Errorf("%s names %s, which make images does not build (it builds %s) and which is not %s", named[ref], ref, strings.Join(slices.Sorted(maps.Keys(built)), ", "), upstreamSGLang)
		}
	}
	for _, want := range []string{images.Operator, images.Mooncake, images.Etcd, upstreamSGLang} {
		if _, ok := named[want]; !ok {
			t.Errorf("no default names %s (found %v)", want, refs)
		}
	}
}

// walkImages calls f with the image of every container (containers, initContainers and
// ephemeralContainers at any depth) in obj.
func walkImages(obj any, f func(string)) {
	switch v := obj.(type) {
	case map[string]any:
		for k, val := range v {
			if k == "containers" || k == "initContainers" || k == "ephemeralContainers" {
				if list, ok := val.([]any); ok {
					for _, c := range list {
						if cm, ok := c.(map[string]any); ok {
							ref, _ := cm["image"].(string)
							f(ref)
						}
					}
				}
			}
			walkImages(val, f)
		}
	case []any:
		for _, val := range v {
			walkImages(val, f)
		}
	}
}

// managerImageFlagDefaults maps each string flag of cmd/manager whose name ends in -image to
// the source text of its default.
func managerImageFlagDefaults(t *testing.T) map[string]string {
	t.Helper()
	defs, _, _ := managerFlagDefs(t)
	out := map[string]string{}
	for _, d := range defs {
		if d.fn == "StringVar" && strings.HasSuffix(d.name, "-image") {
			out[d.name] = d.def
		}
	}
	return out
}

// The chart's defaults are the images make images builds; images.LocalChartValues names them
// explicitly and stops the operator's pulls, as local clusters with no registry install it.
func TestLocalImageValues(t *testing.T) {
	def := manager(deployment(t, render(t), fullname))
	if def.Image != images.Operator || def.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("by default the manager runs %s (pull policy %s), want %s (IfNotPresent)", def.Image, def.ImagePullPolicy, images.Operator)
	}
	if a := args(t, def); a["default-mooncake-image"] != "" {
		t.Errorf("by default the chart passes --default-mooncake-image=%s; the manager's own default (%s) should apply", a["default-mooncake-image"], storeuse.DefaultMooncakeImage)
	}

	values, err := yaml.Marshal(images.LocalChartValues())
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "local.yaml")
	if err := os.WriteFile(f, values, 0o600); err != nil {
		t.Fatal(err)
	}
	m := renderArgs(t, "template", release, chartDir(), "--namespace", namespace, "-f", f)
	c := manager(deployment(t, m, fullname))
	if c.Image != images.Operator || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("with the local values the manager runs %s (pull policy %s), want %s (Never)", c.Image, c.ImagePullPolicy, images.Operator)
	}
	if got := args(t, c)["default-mooncake-image"]; got != images.Mooncake {
		t.Errorf("with the local values --default-mooncake-image=%q, want %s", got, images.Mooncake)
	}
	if got := args(t, c)["default-etcd-image"]; got != images.Etcd {
		t.Errorf("with the local values --default-etcd-image=%q, want %s", got, images.Etcd)
	}
}
