package testutil

import (
	"path/filepath"
	"runtime"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
)

// DeepSeekV4Nodes is the rank pods, one per 8-GPU node, of a serving group of DeepSeekV4.
const DeepSeekV4Nodes = 2

// DeepSeekV4 is the two-node deployment the cluster tests and the benchmarks run: DeepSeek-V4 at
// TP 16, one serving group of two 8-GPU rank pods, a host pool of twice the device pool in pages
// of 64 tokens, writing to CacheBackend "mooncake" with 4 GiB lent by each rank. It is written
// as a user writes it: what the spec leaves out, the API server defaults.
func DeepSeekV4(ns, name string) *hicachev1alpha1.HiCacheDeployment {
	segment := resource.MustParse("4Gi")
	return &hicachev1alpha1.HiCacheDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: hicachev1alpha1.HiCacheDeploymentSpec{
			Model:    hicachev1alpha1.ModelSpec{Path: "deepseek-ai/DeepSeek-V4", Revision: ModelCommit, ServedName: "deepseek-v4"},
			Profile:  "DeepSeekV4",
			Topology: hicachev1alpha1.TopologySpec{TensorParallel: 16, GPUsPerNode: 8},
			HiCache:  hicachev1alpha1.HiCacheSpec{Ratio: "2", PageSize: 64},
			Storage: &hicachev1alpha1.StorageSpec{
				BackendRef:        hicachev1alpha1.LocalObjectReference{Name: "mooncake"},
				GlobalSegmentSize: &segment,
			},
		},
	}
}

// ExternalBackend is CacheBackend name in ns on a Mooncake master that runs outside the cluster,
// at rpcAddr (host:port, or etcd://... for masters with HA) with its admin API at adminURL, with
// what opts add (ClusterID, MultiTenant).
func ExternalBackend(ns, name, rpcAddr, adminURL string, opts ...BackendOption) *hicachev1alpha1.CacheBackend {
	cb := &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: rpcAddr, AdminURL: adminURL},
		}},
	}
	for _, o := range opts {
		o(cb)
	}
	return cb
}

// BackendOption sets a field of the CacheBackend ExternalBackend makes.
type BackendOption func(*hicachev1alpha1.CacheBackend)

// ClusterID names the cluster of masters with HA the backend's etcd:// address finds
// (spec.mooncake.external.clusterID).
func ClusterID(id string) BackendOption {
	return func(cb *hicachev1alpha1.CacheBackend) { cb.Spec.Mooncake.External.ClusterID = id }
}

// MultiTenant says the backend's master is multi-tenant (spec.mooncake.multiTenant).
func MultiTenant() BackendOption {
	return func(cb *hicachev1alpha1.CacheBackend) { cb.Spec.Mooncake.MultiTenant = true }
}

// CRDDir is config/crd/bases of the repository: the CRDs a test's API server is given.
func CRDDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "config", "crd", "bases")
}

// GPUCluster is the options of a local cluster with the operator's CRDs and nodes 8-GPU kwok
// nodes: nodes/DeepSeekV4Nodes DeepSeekV4 deployments fit.
func GPUCluster(nodes int) localcluster.Options {
	return localcluster.Options{
		CRDDirectoryPaths: []string{CRDDir()},
		Nodes:             localcluster.GPUNodes(nodes, 8),
	}
}
