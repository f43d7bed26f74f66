package storeuse

import (
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// MasterName is the Deployment and Service of a managed master.
func MasterName(cb string) string { return cb + "-master" }

// SpecEndpoints are the endpoints a backend's spec alone says: all of them for an external master,
// all but the RPC and admin addresses for a managed one.
func SpecEndpoints(cb *hicachev1alpha1.CacheBackend) *hicachev1alpha1.BackendEndpoints {
	m := cb.Spec.Mooncake
	ep := &hicachev1alpha1.BackendEndpoints{MetadataServer: m.MetadataServer}
	if ep.MetadataServer == "" {
		ep.MetadataServer = hicachev1alpha1.DefaultMetadataServer
	}
	ep.ClusterID = HaClusterID(cb)
	if m.External != nil {
		ep.RPCAddress, ep.AdminURL = m.External.RPCAddress, m.External.AdminURL
		ep.MetricsPort = ExplicitPort(m.External.AdminURL)
	}
	return ep
}

// ExplicitPort is the port an admin URL names, 0 when it names none.
func ExplicitPort(adminURL string) int32 {
	u, err := url.Parse(adminURL)
	if err != nil {
		return 0
	}
	p, err := strconv.ParseInt(u.Port(), 10, 32)
	if err != nil || p < 1 || p > 65535 {
		return 0
	}
	return int32(p)
}

func BackendLabels(cb *hicachev1alpha1.CacheBackend, component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "mooncake",
		"app.kubernetes.io/instance":   cb.Name,
		"app.kubernetes.io/component":  component,
		"app.kubernetes.io/managed-by": FieldOwner,
		hicachev1alpha1.LabelBackend:   cb.Name,
	}
}

func BackendOwner(cb *hicachev1alpha1.CacheBackend) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(cb, hicachev1alpha1.GroupVersion.WithKind("CacheBackend"))}
}

func RestrictedSecurity() (*corev1.PodSecurityContext, *corev1.SecurityContext) {
	return &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), RunAsGroup: ptr.To(int64(65532)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}, &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
}

// BackendPlacement is the nodeSelector and tolerations of every pod the operator runs for a
// backend (spec.placement): its master, its store pods and its flush Jobs.
func BackendPlacement(cb *hicachev1alpha1.CacheBackend) (map[string]string, []corev1.Toleration) {
	p := cb.Spec.Placement
	if p == nil {
		return nil, nil
	}
	return p.NodeSelector, p.Tolerations
}

// ManagedHA is the HA settings of a managed backend, nil without HA.
func ManagedHA(cb *hicachev1alpha1.CacheBackend) *hicachev1alpha1.MasterHA {
	if cb.Spec.Mooncake == nil || cb.Spec.Mooncake.Managed == nil {
		return nil
	}
	return cb.Spec.Mooncake.Managed.HA
}

// HaClusterID is the masters' --cluster_id: the one the spec names, else the backend's
// namespace and name, so that two backends on one etcd never elect one leader between them. An
// external backend's is its spec's (empty: Mooncake's default).
func HaClusterID(cb *hicachev1alpha1.CacheBackend) string {
	m := cb.Spec.Mooncake
	if m == nil {
		return ""
	}
	if m.External != nil {
		if store.IsEtcd(m.External.RPCAddress) {
			return m.External.ClusterID
		}
		return ""
	}
	ha := ManagedHA(cb)
	if ha == nil {
		return ""
	}
	if ha.Etcd.ClusterID != "" {
		return ha.Etcd.ClusterID
	}
	return cb.Namespace + "." + cb.Name
}

// HaEtcdEndpoints are the etcd client endpoints the masters and clients use.
func HaEtcdEndpoints(cb *hicachev1alpha1.CacheBackend) []string {
	ha := ManagedHA(cb)
	if ha == nil {
		return nil
	}
	if ha.Etcd.Managed != nil {
		return ManagedEtcdEndpoints(cb)
	}
	return ha.Etcd.Endpoints
}

// etcdAddress is the client address of masters that elect their leader in these endpoints.
func etcdAddress(endpoints []string) string {
	return store.EtcdScheme + strings.Join(endpoints, ";")
}

// ClientClusterEnv is MC_STORE_CLUSTER_ID for a client of the backend's masters, nil when the
// backend names no cluster.
func ClientClusterEnv(clusterID string) []corev1.EnvVar {
	if clusterID == "" {
		return nil
	}
	return []corev1.EnvVar{{Name: EnvClusterID, Value: clusterID}}
}

// EnvClusterID is where the native Mooncake client reads the HA masters' cluster id.
const EnvClusterID = "MC_STORE_CLUSTER_ID"

// AddSegmentMemory adds the memory the pod's ranks mount for the store (each rank its
// spec.storage.globalSegmentSize) to the container's memory request, and to its memory limit
// when one is set: spec.resources is what the server needs besides.
func AddSegmentMemory(res *corev1.ResourceRequirements, bytes int64) {
	if bytes <= 0 {
		return
	}
	add := func(list corev1.ResourceList) {
		q := list[corev1.ResourceMemory].DeepCopy()
		q.Add(*resource.NewQuantity(bytes, resource.BinarySI))
		list[corev1.ResourceMemory] = q
	}
	add(res.Requests)
	if _, ok := res.Limits[corev1.ResourceMemory]; ok {
		add(res.Limits)
	}
}
