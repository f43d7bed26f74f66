package controllers

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// proxyOf is the etcd proxy of a pod template and the keys its certificate volume mounts, nil
// when it has none.
func proxyOf(t *testing.T, tmpl corev1.PodTemplateSpec) (*corev1.Container, []string) {
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

// Every pod of a backend on a managed etcd that the operator gives the etcd (masters, store pods,
// flush Jobs, serving ranks) runs the proxy as a sidecar: started first and kept running, on
// loopback, with the client certificate and the CA, never the CA's key or the server's
// certificate; the pod's own etcd address is the proxy. A backend on an existing etcd, or
// without HA, has no proxy and keeps the address its spec gives.
func TestEtcdProxySidecar(t *testing.T) {
	cb := withStore(withManagedEtcd(managedBackend("mc"), 3, 1, emptyDirStorage()))
	wantKeys := []string{"mc-etcd-tls/ca.crt", "mc-etcd-tls/client.crt", "mc-etcd-tls/client.key"}
	wantArgs := []string{"grpc-proxy", "start", "--endpoints=https://mc-etcd.default.svc:2379",
		"--cert=/etc/etcd/client/client.crt", "--key=/etc/etcd/client/client.key", "--cacert=/etc/etcd/client/ca.crt",
		"--listen-addr=127.0.0.1:23790", "--advertise-client-url=127.0.0.1:23790"}

	master := buildMasterDeployment(cb, "img")
	addEtcdProxy(&master.Spec.Template, cb, "etcd:test", "ca1")
	stores := buildStoreStatefulSet(cb, "img", 1)
	addEtcdProxy(&stores.Spec.Template, cb, "etcd:test", "ca1")
	job := buildFlushJob(NamespaceFlushRequest{Flush: testFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb,
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: managedRPCAddress(cb)}, Prefix: "p_", Image: "img", EtcdImage: "etcd:test",
		Attempt: 1, Deadline: time.Minute})
	be := backendOf(cb, &hicachev1alpha1.BackendEndpoints{RPCAddress: managedRPCAddress(cb), MetadataServer: "P2PHANDSHAKE"}, "etcd:test")
	if be.RPCAddress != "etcd://127.0.0.1:23790" || be.EtcdProxy == nil {
		t.Fatalf("ranks are told %q (proxy %v), want the proxy etcd://127.0.0.1:23790", be.RPCAddress, be.EtcdProxy != nil)
	}
	h := loadSample(t, "hicachedeployment_deepseek_v4.yaml")
	h.Namespace, h.UID = "default", "hcd-uid"
	group, err := buildGroup(h, mustResolve(t, h), be, 0, podImages{SGLang: "sglang:test", Guard: DefaultGuardImage})
	if err != nil {
		t.Fatal(err)
	}
	for name, tmpl := range map[string]corev1.PodTemplateSpec{
		"master": master.Spec.Template, "store": stores.Spec.Template, "flush": job.Spec.Template, "rank": group.Spec.Template,
	} {
		c, keys := proxyOf(t, tmpl)
		if c == nil {
			t.Errorf("%s pods run no etcd proxy", name)
			continue
		}
		if c.Image != "etcd:test" || !slices.Equal(c.Command, []string{"/usr/local/bin/etcd"}) || !slices.Equal(c.Args, wantArgs) {
			t.Errorf("%s proxy %s %q %q, want the etcd image's grpc-proxy %q", name, c.Image, c.Command, c.Args, wantArgs)
		}
		if ptr.Deref(c.RestartPolicy, "") != corev1.ContainerRestartPolicyAlways || tmpl.Spec.InitContainers[0].Name != "etcd-proxy" {
			t.Errorf("%s proxy is not a sidecar started before the pod's other containers", name)
		}
		if !slices.Equal(keys, wantKeys) {
			t.Errorf("%s proxy mounts %q, want %q", name, keys, wantKeys)
		}
		if s := c.SecurityContext; s == nil || !ptr.Deref(s.ReadOnlyRootFilesystem, false) || ptr.Deref(s.AllowPrivilegeEscalation, true) {
			t.Errorf("%s proxy security %+v", name, s)
		}
	}
	for name, tmpl := range map[string]corev1.PodTemplateSpec{"master": master.Spec.Template, "store": stores.Spec.Template} {
		if tmpl.Annotations[annotationEtcdCA] != "ca1" {
			t.Errorf("%s pods name the CA %q, want ca1 (a new CA restarts their proxy)", name, tmpl.Annotations[annotationEtcdCA])
		}
	}
	if e, _ := envValue(job.Spec.Template.Spec.Containers[0].Env, "MOONCAKE_MASTER"); e.Value != "etcd://127.0.0.1:23790" {
		t.Errorf("flush Job's MOONCAKE_MASTER %q, want the proxy", e.Value)
	}

	// An existing etcd: no proxy, the spec's endpoints.
	ext := withStore(managedBackend("ext"))
	ext.Spec.Mooncake.Managed.Replicas = ptr.To(int32(2))
	ext.Spec.Mooncake.Managed.HA = &hicachev1alpha1.MasterHA{Etcd: hicachev1alpha1.EtcdEndpoints{Endpoints: []string{"e1:2379"}}}
	dep := buildMasterDeployment(ext, "img")
	addEtcdProxy(&dep.Spec.Template, ext, "etcd:test", "")
	if c, _ := proxyOf(t, dep.Spec.Template); c != nil || !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--ha_backend_connstring=e1:2379") {
		t.Errorf("masters on an existing etcd: proxy %v, args %q; want no proxy and the spec's endpoints", c != nil, dep.Spec.Template.Spec.Containers[0].Args)
	}
	if be := backendOf(ext, &hicachev1alpha1.BackendEndpoints{RPCAddress: managedRPCAddress(ext)}, "etcd:test"); be.EtcdProxy != nil || be.RPCAddress != "etcd://e1:2379" {
		t.Errorf("ranks of a backend on an existing etcd are told %q (proxy %v)", be.RPCAddress, be.EtcdProxy != nil)
	}
	external := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"},
		Spec: hicachev1alpha1.CacheBackendSpec{Mooncake: &hicachev1alpha1.MooncakeSpec{External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "etcd://e:2379"}}}}
	if be := backendOf(external, &hicachev1alpha1.BackendEndpoints{RPCAddress: "etcd://e:2379"}, "etcd:test"); be.EtcdProxy != nil || be.RPCAddress != "etcd://e:2379" {
		t.Errorf("ranks of an external etcd:// backend are told %q (proxy %v)", be.RPCAddress, be.EtcdProxy != nil)
	}
}
