package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

func getCB(t *testing.T, ns, name string) *hicachev1alpha1.CacheBackend {
	t.Helper()
	var cb hicachev1alpha1.CacheBackend
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cb); err != nil {
		t.Fatal(err)
	}
	return &cb
}

// An external backend pointed at a real master reports its objects, goes NotReady with a reason
// a person can act on when the master stops, and Ready again when it returns.
func TestExternalBackendHealthAndCapacity(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	cb := getCB(t, ns, "mooncake")
	if ep := cb.Status.Endpoints; ep == nil || ep.RPCAddress != m.RPCAddr || ep.AdminURL != m.AdminURL || ep.MetadataServer != "P2PHANDSHAKE" {
		t.Errorf("endpoints %+v, want the master's addresses and P2PHANDSHAKE", cb.Status.Endpoints)
	}

	keys := []string{}
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("hc-0123456789_qwen3_%064x_%d_k", i, i%4))
	}
	m.putKeys(t, keys, 8192)
	eventually(t, 15*time.Second, "the key count and capacity in status", func() (bool, string) {
		cb := getCB(t, ns, "mooncake")
		return cb.Status.KeyCount == 12 && cb.Status.CapacityBytes > 0 && cb.Status.UsedBytes >= 12*8192 && cb.Status.Usage != "",
			fmt.Sprintf("keys %d capacity %d used %d usage %q", cb.Status.KeyCount, cb.Status.CapacityBytes, cb.Status.UsedBytes, cb.Status.Usage)
	})

	// A deployment writing to it shows up under its namespace.
	create(t, hcd(t, ns, qwen3))
	waitReadyGroups(t, ns, "qwen3", 1)
	want := getHCD(t, ns, "qwen3").Status.Cache.Namespace
	eventually(t, 15*time.Second, "the namespace in use listed on the backend", func() (bool, string) {
		cb := getCB(t, ns, "mooncake")
		for _, u := range cb.Status.Namespaces {
			if u.Namespace == want && slices.Equal(u.Deployments, []string{"qwen3"}) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", cb.Status.Namespaces)
	})

	// The poll interval is 1 s here: the flip must come within a few of them.
	m.stop(t)
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, ns, "mooncake", hicachev1alpha1.ConditionReady, metav1.ConditionFalse, 10*time.Second)
	c := meta.FindStatusCondition(getCB(t, ns, "mooncake").Status.Conditions, hicachev1alpha1.ConditionReady)
	if c.Reason != hicachev1alpha1.ReasonMasterUnreachable || !strings.Contains(c.Message, m.AdminURL) || !strings.Contains(c.Message, "connection refused") {
		t.Errorf("Ready=False %s: %q; want MasterUnreachable naming the admin URL and the error", c.Reason, c.Message)
	}
	// The serving groups keep running while the store is away.
	if h := getHCD(t, ns, "qwen3"); h.Status.ReadyReplicas != 1 {
		t.Errorf("the serving group went down with the store: %d ready", h.Status.ReadyReplicas)
	}
	m.restart(t)
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, ns, "mooncake", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 10*time.Second)
}

// A managed backend gets a master Deployment, a Service and a NetworkPolicy rendered from its
// spec, and store pods when it asks for them.
func TestManagedBackendChildren(t *testing.T) {
	ns := newNamespace(t)
	cb := &hicachev1alpha1.CacheBackend{}
	if err := decodeInto(`
metadata: {name: store}
spec:
  mooncake:
    managed:
      image: example.com/mooncake:0.3.13.post1
      version: 0.3.13.post1
      rpcPort: 50052
      adminPort: 9004
      evictionHighWatermarkRatio: "0.85"
      evictionRatio: "0.1"
      leaseTTLMillis: 5000
      resources: {requests: {cpu: "1", memory: 1Gi}}
      store: {replicas: 2, segmentSize: 8Gi, resources: {requests: {memory: 10Gi}}}
`, cb); err != nil {
		t.Fatal(err)
	}
	cb.Namespace = ns
	create(t, cb)

	var dep appsv1.Deployment
	eventually(t, 20*time.Second, "the master Deployment", func() (bool, string) {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "store-master"}, &dep)
		return err == nil, fmt.Sprint(err)
	})
	c := dep.Spec.Template.Spec.Containers[0]
	wantArgs := []string{"--rpc_port=50052", "--rpc_address=$(POD_IP)", "--metrics_port=9004", "--enable_metric_reporting=true",
		"--eviction_high_watermark_ratio=0.85", "--eviction_ratio=0.1", "--default_kv_lease_ttl=5000"}
	if c.Image != "example.com/mooncake:0.3.13.post1" || !slices.Equal(c.Command, []string{"mooncake_master"}) || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("master container %s %v %v, want the spec's image and %v", c.Image, c.Command, c.Args, wantArgs)
	}
	if *dep.Spec.Replicas != 1 || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/health" || c.LivenessProbe == nil {
		t.Errorf("master: %d replicas, probes %+v / %+v", *dep.Spec.Replicas, c.ReadinessProbe, c.LivenessProbe)
	}
	if sc := dep.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || c.SecurityContext == nil ||
		*c.SecurityContext.AllowPrivilegeEscalation || len(c.SecurityContext.Capabilities.Drop) != 1 {
		t.Errorf("the master does not meet the restricted profile: %+v %+v", sc, c.SecurityContext)
	}
	var svc corev1.Service
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "store-master"}, &svc); err != nil {
		t.Fatal(err)
	}
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["rpc"] != 50052 || ports["admin"] != 9004 {
		t.Errorf("service ports %v", ports)
	}
	var np networkingv1.NetworkPolicy
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "store-master"}, &np); err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["hicache.io/backend"] != "store" {
		t.Errorf("network policy ingress %+v: want RPC from the backend's users and admin from the operator", np.Spec.Ingress)
	}
	var store appsv1.Deployment
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "store-store"}, &store); err != nil {
		t.Fatal(err)
	}
	if *store.Spec.Replicas != 2 {
		t.Errorf("%d store pods, want 2", *store.Spec.Replicas)
	}
	if v, _ := envValue(store.Spec.Template.Spec.Containers[0], "MOONCAKE_GLOBAL_SEGMENT_SIZE"); v != "8589934592" {
		t.Errorf("store segment size %q, want 8Gi in bytes", v)
	}
	// The status names the in-cluster endpoints; the fake nodes run no master, so it is honest
	// about not reaching it.
	eventually(t, 30*time.Second, "endpoints and a Ready condition", func() (bool, string) {
		cb := getCB(t, ns, "store")
		c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
		ok := cb.Status.Endpoints != nil && cb.Status.Endpoints.RPCAddress == "store-master."+ns+".svc:50052" && c != nil && c.Status == metav1.ConditionFalse
		return ok, fmt.Sprintf("%+v %+v", cb.Status.Endpoints, c)
	})
	// Children are owned, so they go with the backend.
	for _, o := range []client.Object{&dep, &svc, &np, &store} {
		if !metav1.IsControlledBy(o, getCB(t, ns, "store")) {
			t.Errorf("%s is not controlled by the CacheBackend", o.GetName())
		}
	}
}
