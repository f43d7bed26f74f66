package cachebackend

import (
	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// After a failover a store pod's objects are readable on the new leader only once its client
// re-mounted its segment there, and the client's heartbeat does that only after its ping to the
// dead leader failed (Client::StorageHeartbeatThreadMain). A deleted pod's address refuses
// nothing: the ping waits out the RPC client's timeouts, 30 s each by default
// (docs/compatibility.md, "invalid_endpoints and the store pods' re-mount"). With HA the store
// pods' clients get the shorter ones every client of HA masters gets (sglang.FailoverRPCEnv,
// which the ranks' environment carries too): a store pod's own requests to the master are small
// (mount, ping, re-mount, task polls).

// storeFailoverEnv bounds the store client's requests to the masters of a managed backend with
// HA (MC_RPC_TIMEOUT_MS, MC_RPC_CONNECT_TIMEOUT_MS, read by the client's master RPC pool);
// nil without HA.
func storeFailoverEnv(cb *hicachev1alpha1.CacheBackend) []corev1.EnvVar {
	if storeuse.ManagedHA(cb) == nil {
		return nil
	}
	var env []corev1.EnvVar
	for _, e := range sglang.FailoverRPCEnv() {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	return env
}
