package resolve

import (
	"fmt"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// The startup budget rule (spec.probes.startupSeconds documents it).
const (
	// StartupBaseSeconds covers what every start does besides reading weights: CUDA graph
	// capture, the memory pools, warm-up.
	StartupBaseSeconds = 600
	// StartupSecondsPerGiB is the reading time of one GiB of weights: 1 minute per 8 GiB, about
	// 136 MiB/s, what a network volume or a busy node disk gives.
	StartupSecondsPerGiB = 7.5
	// AssumedGiBPerGPU is what the weights are taken to occupy on each GPU of a group when
	// spec.model.weightsSize is not set: half of an 80 GiB GPU, the rest being KV cache.
	AssumedGiBPerGPU = 40
	// StartupProbePeriod is how often the startup probe asks.
	StartupProbePeriod = 10
)

// StartupBudget is how long, in seconds, a rank may take from its container's start to serving
// before the kubelet restarts it, and in words where the figure comes from.
func StartupBudget(spec *hicachev1alpha1.HiCacheDeploymentSpec, r *Resolved) (int32, string) {
	if s := spec.Probes.StartupSeconds; s > 0 {
		return s, "spec.probes.startupSeconds"
	}
	gib := float64(AssumedGiBPerGPU * max(r.GPUs, 1))
	from := fmt.Sprintf("%d GPUs x %dGi assumed for the weights", max(r.GPUs, 1), AssumedGiBPerGPU)
	if w := spec.Model.WeightsSize; w != nil && w.Value() > 0 {
		gib = float64(w.Value()) / (1 << 30)
		from = "spec.model.weightsSize " + w.String()
	}
	secs := StartupBaseSeconds + int64(gib*StartupSecondsPerGiB+0.5)
	// Whole probe periods, within the API's bound.
	secs = (secs + StartupProbePeriod - 1) / StartupProbePeriod * StartupProbePeriod
	secs = min(secs, 86400)
	return int32(secs), fmt.Sprintf("%ds base + %.4gGi at %gs/Gi (%s)", StartupBaseSeconds, gib, StartupSecondsPerGiB, from)
}
