package conformance

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

// TestProbePathsInThePinnedSGLang: the paths the rank pods' HTTP probes ask are routed by the
// leader's server and by the stand-in server a follower starts, SGLang lets them through without
// a key when --api-key and --admin-api-key are set, and the variable the operator sets turns the
// generation off on /health. /ready and /model_info, which the probes do not use, show why.
func TestProbePathsInThePinnedSGLang(t *testing.T) {
	python := sglangPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	paths := []string{hicachedeployment.HealthPath, hicachedeployment.HealthGeneratePath, "/ready", "/model_info"}
	cmd := exec.CommandContext(ctx, python, append([]string{filepath.Join(mooncaketest.Root(t), "hack", "conformance", "probes.py")}, paths...)...)
	cmd.Env = append(cmd.Environ(), hicachedeployment.HealthGenerationEnv+"=false")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/conformance/probes.py: %v", err)
	}
	var got struct {
		Auth, Follower, Leader map[string]bool
		GenerationOnHealth     bool
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, p := range []string{hicachedeployment.HealthPath, hicachedeployment.HealthGeneratePath} {
		if !got.Leader[p] || !got.Follower[p] {
			t.Errorf("%s: routed by the leader %v, by a follower's stand-in %v; the probes need both", p, got.Leader[p], got.Follower[p])
		}
		if !got.Auth[p] {
			t.Errorf("%s needs a key in the pinned SGLang: the probes carry none", p)
		}
	}
	if got.GenerationOnHealth {
		t.Errorf("%s=false does not turn /health's generation off in the pinned SGLang", hicachedeployment.HealthGenerationEnv)
	}
	// Why not the others: /ready exists on the leader only, /model_info needs the key.
	if got.Follower["/ready"] || got.Auth["/model_info"] {
		t.Errorf("the pinned SGLang changed: a follower serves /ready %v, /model_info passes without a key %v; revisit rankProbes",
			got.Follower["/ready"], got.Auth["/model_info"])
	}
}
