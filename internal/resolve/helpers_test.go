package resolve_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// makeHCD builds a test HiCacheDeployment (see testutil.HCD).
var makeHCD = testutil.HCD

// samplesDir holds the shipped example resources.
const samplesDir = "../../config/samples"

// loadSample decodes a sample strictly (see testutil.LoadSample).
var loadSample = testutil.LoadSample

// hcdSamples lists the HiCacheDeployment samples on disk: every file of config/samples whose
// object is a HiCacheDeployment, whatever its name (the PD sample is pd_deepseek_v4.yaml).
func hcdSamples(t *testing.T) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(samplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range matches {
		if filepath.Base(m) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			if tm.Kind == "HiCacheDeployment" {
				out = append(out, filepath.Base(m))
				break
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no HiCacheDeployment sample under %s", samplesDir)
	}
	return out
}
