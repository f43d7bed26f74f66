package resolve_test

import (
	"path/filepath"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// makeHCD builds a test HiCacheDeployment (see testutil.HCD).
var makeHCD = testutil.HCD

// samplesDir holds the shipped example resources.
const samplesDir = "../../config/samples"

// loadSample decodes a sample strictly (see testutil.LoadSample).
var loadSample = testutil.LoadSample

// hcdSamples lists the HiCacheDeployment samples on disk.
func hcdSamples(t *testing.T) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(samplesDir, "hicachedeployment_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(matches) == 0 {
		t.Fatalf("no HiCacheDeployment sample under %s", samplesDir)
	}
	out := make([]string, len(matches))
	for i, m := range matches {
		out[i] = filepath.Base(m)
	}
	return out
}
