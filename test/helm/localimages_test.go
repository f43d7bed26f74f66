package helm

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/internal/images"
)

// The chart's defaults stay the release images; images.LocalChartValues switches it to the
// images `make images` builds, as local clusters install it.
func TestLocalImageValues(t *testing.T) {
	if got := defaultRepository(t); got != images.ReleaseOperatorRepository {
		t.Errorf("values.yaml image.repository %q, internal/images.ReleaseOperatorRepository %q", got, images.ReleaseOperatorRepository)
	}
	def := manager(deployment(t, render(t), fullname))
	if a := args(t, def); a["default-mooncake-image"] != "" {
		t.Errorf("by default the chart passes --default-mooncake-image=%s; the manager's own default (%s) should apply", a["default-mooncake-image"], images.ReleaseMooncake)
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
}
