package testsupport

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// AsStored is obj as the API server returns it: the fields it sets and defaults filled in.
func AsStored(obj client.Object) client.Object {
	out := obj.DeepCopyObject().(client.Object)
	out.SetUID("stored-uid")
	out.SetResourceVersion("42")
	out.SetGeneration(3)
	out.SetCreationTimestamp(T0)
	out.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: storeuse.FieldOwner, Operation: metav1.ManagedFieldsOperationApply}})
	l := out.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l["added-by-someone-else"] = "x"
	out.SetLabels(l)
	switch o := out.(type) {
	case *corev1.Service:
		o.Spec.ClusterIP, o.Spec.ClusterIPs = "10.0.0.7", []string{"10.0.0.7"}
		o.Spec.Type, o.Spec.SessionAffinity = corev1.ServiceTypeClusterIP, corev1.ServiceAffinityNone
		o.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		o.Spec.InternalTrafficPolicy = PtrTo(corev1.ServiceInternalTrafficPolicyCluster)
	}
	return out
}

func PtrTo[T any](v T) *T { return &v }

// ManagedBackend is a managed CacheBackend with the API server's defaults.
func ManagedBackend(name string) *hicachev1alpha1.CacheBackend {
	return &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "cb-uid"},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			MetadataServer: "P2PHANDSHAKE",
			Managed: &hicachev1alpha1.ManagedMooncake{
				RPCPort: 50051, AdminPort: 9003, EvictionHighWatermarkRatio: "0.9", EvictionRatio: "0.05",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}},
			},
		}},
	}
}

// WithManagedEtcd gives a managed backend n masters on an etcd of members members that the
// operator runs, with storage s.
func WithManagedEtcd(cb *hicachev1alpha1.CacheBackend, n, members int32, s hicachev1alpha1.EtcdStorage) *hicachev1alpha1.CacheBackend {
	cb = cb.DeepCopy()
	cb.Spec.Mooncake.Managed.Replicas = ptr.To(n)
	cb.Spec.Mooncake.Managed.HA = &hicachev1alpha1.MasterHA{Etcd: hicachev1alpha1.EtcdEndpoints{
		Managed: &hicachev1alpha1.ManagedEtcd{Replicas: ptr.To(members), Storage: s}}}
	return cb
}

func EmptyDirStorage() hicachev1alpha1.EtcdStorage {
	return hicachev1alpha1.EtcdStorage{EmptyDir: &corev1.EmptyDirVolumeSource{}}
}

func ClaimStorage(size, class string) hicachev1alpha1.EtcdStorage {
	return hicachev1alpha1.EtcdStorage{Size: ptr.To(resource.MustParse(size)), StorageClassName: class}
}

// ProxyOf is the etcd proxy of a pod template and the keys its certificate volume mounts, nil
// when it has none.
func ProxyOf(t *testing.T, tmpl corev1.PodTemplateSpec) (*corev1.Container, []string) {
	t.Helper()
	var c *corev1.Container
	for i := range tmpl.Spec.InitContainers {
		if tmpl.Spec.InitContainers[i].Name == "etcd-proxy" {
			c = &tmpl.Spec.InitContainers[i]
		}
	}
	var keys []string
	for _, v := range tmpl.Spec.Volumes {
		if v.Name == "etcd-client-tls" {
			for _, it := range v.Secret.Items {
				keys = append(keys, v.Secret.SecretName+"/"+it.Key)
			}
		}
	}
	if (c == nil) != (keys == nil) {
		t.Fatalf("proxy %+v without its certificate volume, or the volume %q without the proxy", c, keys)
	}
	return c, keys
}

// WithHA gives a managed backend n masters on an existing etcd.
func WithHA(cb *hicachev1alpha1.CacheBackend, n int32, endpoints ...string) *hicachev1alpha1.CacheBackend {
	cb = cb.DeepCopy()
	cb.Spec.Mooncake.Managed.Replicas = ptr.To(n)
	cb.Spec.Mooncake.Managed.HA = &hicachev1alpha1.MasterHA{Etcd: hicachev1alpha1.EtcdEndpoints{Endpoints: endpoints}}
	return cb
}

func WithStore(cb *hicachev1alpha1.CacheBackend) *hicachev1alpha1.CacheBackend {
	cb = cb.DeepCopy()
	cb.Spec.Mooncake.Managed.Store = &hicachev1alpha1.StorePods{Replicas: ptr.To(int32(3)), SegmentSize: resource.MustParse("64Gi")}
	return cb
}

func TestFlush(name string, scope hicachev1alpha1.FlushScope) *hicachev1alpha1.CacheFlush {
	cf := &hicachev1alpha1.CacheFlush{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid")},
		Spec:       hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: "mooncake"}, Scope: scope},
	}
	switch scope {
	case hicachev1alpha1.FlushScopeNamespace:
		cf.Spec.Namespace = "hc-0123456789"
	case hicachev1alpha1.FlushScopeTenant:
		cf.Spec.Tenant = "team-a"
	}
	return cf
}

// HaTestBackend is a ready CacheBackend's endpoints for masters with HA on etcd.
func HaTestBackend() *resolve.Backend {
	return &resolve.Backend{Name: "mooncake", RPCAddress: "etcd://mooncake-etcd.default.svc:2379", MetadataServer: "P2PHANDSHAKE",
		MetricsPort: 9003, ClusterID: "default.mooncake"}
}

// T0 is the fixed time of the tests' observations.
var T0 = metav1.NewTime(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))

// MakeHCD builds a test HiCacheDeployment (see testutil.HCD).
var MakeHCD = testutil.HCD

func MustResolve(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *resolve.Resolved {
	t.Helper()
	r, err := resolve.Resolve(h)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return r
}

func TestBackend() *resolve.Backend {
	return &resolve.Backend{Name: "mooncake", RPCAddress: "mooncake-master.default.svc:50051", MetadataServer: "P2PHANDSHAKE", MetricsPort: 9003}
}

// LoadSample decodes a sample strictly (see testutil.LoadSample).
var LoadSample = testutil.LoadSample

func EnvValue(env []corev1.EnvVar, name string) (corev1.EnvVar, bool) {
	for _, e := range env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

const TestOperatorNS = "hicache-system"

func PodIn(ns string, l map[string]string) testutil.PolicyPod {
	return testutil.PolicyPod{Namespace: ns, NamespaceLabels: map[string]string{storeuse.NamespaceNameLabel: ns}, Labels: l}
}
