package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/cachebackend"
	"github.com/hicache-io/hicache-operator/internal/controller/cacheflush"
	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/mooncake/flushjob"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

func TestDerivative(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Storage("mooncake").Obj()
	r := testsupport.MustResolve(t, h)
	sts := mustBuildGroup(t, h, 0)
	svc := hicachedeployment.BuildClientService(h)
	cm, err := hicachedeployment.BuildConfigMap(h, r, mooncakeOf(h, r, testsupport.TestBackend()))
	if err != nil {
		t.Fatal(err)
	}
	cb := testsupport.ManagedBackend("mc")
	dep := cachebackend.BuildMasterDeployment(cb, "mooncake:test")

	cases := map[string]struct {
		desired  client.Object
		existing func() client.Object
		want     bool
	}{
		"a stored Service with server defaults": {desired: svc, existing: func() client.Object { return testsupport.AsStored(svc) }, want: true},
		"a stored StatefulSet":                  {desired: sts, existing: func() client.Object { return testsupport.AsStored(sts) }, want: true},
		"a stored ConfigMap":                    {desired: cm, existing: func() client.Object { return testsupport.AsStored(cm) }, want: true},
		"a stored Deployment with defaults": {desired: dep, existing: func() client.Object {
			s := dep.DeepCopy()
			s.Spec.RevisionHistoryLimit = testsupport.PtrTo(int32(10))
			s.Spec.ProgressDeadlineSeconds = testsupport.PtrTo(int32(600))
			s.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
			s.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
			s.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
			s.Spec.Template.Spec.Containers[0].LivenessProbe.SuccessThreshold = 1
			return testsupport.AsStored(s)
		}, want: true},
		"a label value changed": {desired: svc, existing: func() client.Object {
			s := testsupport.AsStored(svc)
			l := s.GetLabels()
			l[hicachev1alpha1.LabelDeployment] = "other"
			s.SetLabels(l)
			return s
		}},
		"a desired annotation missing": {desired: sts, existing: func() client.Object {
			s := testsupport.AsStored(sts)
			s.SetAnnotations(nil)
			return s
		}},
		"the template hash differs": {desired: sts, existing: func() client.Object {
			s := testsupport.AsStored(sts)
			a := s.GetAnnotations()
			a[hicachev1alpha1.AnnotationTemplateHash] = "0000000000000000"
			s.SetAnnotations(a)
			return s
		}},
		"another owner": {desired: svc, existing: func() client.Object {
			s := testsupport.AsStored(svc)
			s.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "y"}})
			return s
		}},
		"a spec value changed": {desired: svc, existing: func() client.Object {
			s := testsupport.AsStored(svc).(*corev1.Service)
			s.Spec.Ports[0].Port = 8080
			return s
		}},
		"a selector changed": {desired: svc, existing: func() client.Object {
			s := testsupport.AsStored(svc).(*corev1.Service)
			s.Spec.Selector[appsv1.PodIndexLabel] = "1"
			return s
		}},
		"a target port changed": {desired: svc, existing: func() client.Object {
			s := testsupport.AsStored(svc).(*corev1.Service)
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(1)
			return s
		}},
		"a data value changed": {desired: cm, existing: func() client.Object {
			c := testsupport.AsStored(cm).(*corev1.ConfigMap)
			c.Data["layout.txt"] = "namespace: hc-other"
			return c
		}},
		"a container image changed": {desired: dep, existing: func() client.Object {
			d := dep.DeepCopy()
			d.Spec.Template.Spec.Containers[0].Image = "mooncake:old"
			return testsupport.AsStored(d)
		}},
		"a resource quantity changed": {desired: dep, existing: func() client.Object {
			d := dep.DeepCopy()
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
			return testsupport.AsStored(d)
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := reconcile.Derivative(tc.desired, tc.existing()); got != tc.want {
				t.Errorf("derivative = %v, want %v", got, tc.want)
			}
		})
	}
}

// Who reaches the etcd: the backend's own pods its client port, its members alone their peer
// port, nobody the metrics port; not the operator, not another backend's pods.
func TestEtcdNetworkPolicy(t *testing.T) {
	cb := testsupport.WithStore(testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 3, testsupport.ClaimStorage("1Gi", "")))
	other := testsupport.WithManagedEtcd(testsupport.ManagedBackend("other"), 3, 1, testsupport.EmptyDirStorage())
	q := testsupport.MakeHCD("q").TP(4).Storage("mc").Obj()
	o := testsupport.MakeHCD("o").TP(4).Storage("other").Obj()
	flush := cacheflush.BuildFlushJob(storeuse.NamespaceFlushRequest{Flush: testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb, Prefix: "hc-1_", Image: "img", Attempt: 1})
	cast := map[string]testutil.PolicyPod{
		"mc etcd":                            testsupport.PodIn("default", cachebackend.BuildEtcdStatefulSet(cb, "img", "ca1").Spec.Template.Labels),
		"mc master":                          testsupport.PodIn("default", cachebackend.BuildMasterDeployment(cb, "img").Spec.Template.Labels),
		"mc store":                           testsupport.PodIn("default", cachebackend.BuildStoreStatefulSet(cb, "img", 1).Spec.Template.Labels),
		"q on mc":                            testsupport.PodIn("default", mustBuildGroup(t, q, 0).Spec.Template.Labels),
		"mc flush job":                       testsupport.PodIn("default", flush.Spec.Template.Labels),
		"other etcd":                         testsupport.PodIn("default", cachebackend.BuildEtcdStatefulSet(other, "img", "ca1").Spec.Template.Labels),
		"other master":                       testsupport.PodIn("default", cachebackend.BuildMasterDeployment(other, "img").Spec.Template.Labels),
		"o on other":                         testsupport.PodIn("default", mustBuildGroup(t, o, 0).Spec.Template.Labels),
		"operator":                           testsupport.PodIn(testsupport.TestOperatorNS, storeuse.OperatorPodLabels),
		"any pod":                            testsupport.PodIn("default", map[string]string{"app": "client"}),
		"mc look-alike in another namespace": testsupport.PodIn("elsewhere", map[string]string{hicachev1alpha1.LabelBackend: "mc"}),
	}
	np := cachebackend.BuildEtcdNetworkPolicy(cb)
	var selects []string
	got := map[string]bool{}
	for name, p := range cast {
		if testutil.PolicySelects(np, p) {
			selects = append(selects, name)
		}
		for port, n := range map[string]int32{"client": 2379, "peer": 2380, "metrics": 2381} {
			if testutil.PolicyAdmits(np, p, n, corev1.ProtocolTCP) {
				got[port+" ← "+name] = true
			}
		}
	}
	if !slices.Equal(selects, []string{"mc etcd"}) {
		t.Errorf("the policy selects %q, want the members of mc's etcd alone", selects)
	}
	want := map[string]bool{
		// The masters elect and log there; the clients read the leader from it (etcd://).
		"client ← mc master": true, "client ← mc store": true, "client ← q on mc": true, "client ← mc flush job": true,
		"client ← mc etcd": true,
		"peer ← mc etcd":   true,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("admitted traffic (-want +got):\n%s", d)
	}
}

// Every pod of a backend on a managed etcd that the operator gives the etcd (masters, store pods,
// flush Jobs, serving ranks) runs the proxy as a sidecar: started first and kept running, on
// loopback, with the client certificate and the CA, never the CA's key or the server's
// certificate; the pod's own etcd address is the proxy. A backend on an existing etcd, or
// without HA, has no proxy and keeps the address its spec gives.
func TestEtcdProxySidecar(t *testing.T) {
	cb := testsupport.WithStore(testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 1, testsupport.EmptyDirStorage()))
	wantKeys := []string{"mc-etcd-tls/ca.crt", "mc-etcd-tls/client.crt", "mc-etcd-tls/client.key"}
	wantArgs := []string{"grpc-proxy", "start", "--endpoints=https://mc-etcd.default.svc:2379",
		"--cert=/etc/etcd/client/client.crt", "--key=/etc/etcd/client/client.key", "--cacert=/etc/etcd/client/ca.crt",
		"--listen-addr=127.0.0.1:23790", "--advertise-client-url=127.0.0.1:23790"}

	master := cachebackend.BuildMasterDeployment(cb, "img")
	storeuse.AddEtcdProxyWithCA(&master.Spec.Template, cb, "etcd:test", "ca1")
	stores := cachebackend.BuildStoreStatefulSet(cb, "img", 1)
	storeuse.AddEtcdProxyWithCA(&stores.Spec.Template, cb, "etcd:test", "ca1")
	job := cacheflush.BuildFlushJob(storeuse.NamespaceFlushRequest{Flush: testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb,
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: storeuse.ManagedRPCAddress(cb)}, Prefix: "p_", Image: "img", EtcdImage: "etcd:test",
		Attempt: 1, Deadline: time.Minute})
	be := hicachedeployment.BackendOf(cb, &hicachev1alpha1.BackendEndpoints{RPCAddress: storeuse.ManagedRPCAddress(cb), MetadataServer: "P2PHANDSHAKE"}, "etcd:test")
	if be.RPCAddress != "etcd://127.0.0.1:23790" || be.EtcdProxy == nil {
		t.Fatalf("ranks are told %q (proxy %v), want the proxy etcd://127.0.0.1:23790", be.RPCAddress, be.EtcdProxy != nil)
	}
	h := testsupport.LoadSample(t, "hicachedeployment_deepseek_v4.yaml")
	h.Namespace, h.UID = "default", "hcd-uid"
	group, err := hicachedeployment.BuildGroup(h, testsupport.MustResolve(t, h), be, 0, hicachedeployment.PodImages{SGLang: "sglang:test", Guard: storeuse.DefaultGuardImage})
	if err != nil {
		t.Fatal(err)
	}
	for name, tmpl := range map[string]corev1.PodTemplateSpec{
		"master": master.Spec.Template, "store": stores.Spec.Template, "flush": job.Spec.Template, "rank": group.Spec.Template,
	} {
		c, keys := testsupport.ProxyOf(t, tmpl)
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
		if tmpl.Annotations[storeuse.AnnotationEtcdCA] != "ca1" {
			t.Errorf("%s pods name the CA %q, want ca1 (a new CA restarts their proxy)", name, tmpl.Annotations[storeuse.AnnotationEtcdCA])
		}
	}
	if e, _ := testsupport.EnvValue(job.Spec.Template.Spec.Containers[0].Env, "MOONCAKE_MASTER"); e.Value != "etcd://127.0.0.1:23790" {
		t.Errorf("flush Job's MOONCAKE_MASTER %q, want the proxy", e.Value)
	}

	// An existing etcd: no proxy, the spec's endpoints.
	ext := testsupport.WithStore(testsupport.ManagedBackend("ext"))
	ext.Spec.Mooncake.Managed.Replicas = ptr.To(int32(2))
	ext.Spec.Mooncake.Managed.HA = &hicachev1alpha1.MasterHA{Etcd: hicachev1alpha1.EtcdEndpoints{Endpoints: []string{"e1:2379"}}}
	dep := cachebackend.BuildMasterDeployment(ext, "img")
	storeuse.AddEtcdProxyWithCA(&dep.Spec.Template, ext, "etcd:test", "")
	if c, _ := testsupport.ProxyOf(t, dep.Spec.Template); c != nil || !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--ha_backend_connstring=e1:2379") {
		t.Errorf("masters on an existing etcd: proxy %v, args %q; want no proxy and the spec's endpoints", c != nil, dep.Spec.Template.Spec.Containers[0].Args)
	}
	if be := hicachedeployment.BackendOf(ext, &hicachev1alpha1.BackendEndpoints{RPCAddress: storeuse.ManagedRPCAddress(ext)}, "etcd:test"); be.EtcdProxy != nil || be.RPCAddress != "etcd://e1:2379" {
		t.Errorf("ranks of a backend on an existing etcd are told %q (proxy %v)", be.RPCAddress, be.EtcdProxy != nil)
	}
	external := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"},
		Spec: hicachev1alpha1.CacheBackendSpec{Mooncake: &hicachev1alpha1.MooncakeSpec{External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "etcd://e:2379"}}}}
	if be := hicachedeployment.BackendOf(external, &hicachev1alpha1.BackendEndpoints{RPCAddress: "etcd://e:2379"}, "etcd:test"); be.EtcdProxy != nil || be.RPCAddress != "etcd://e:2379" {
		t.Errorf("ranks of an external etcd:// backend are told %q (proxy %v)", be.RPCAddress, be.EtcdProxy != nil)
	}
}

func TestHAClientsGetTheEtcdAddress(t *testing.T) {
	cb := testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "e1:2379", "e2:2379")
	if got := storeuse.ManagedRPCAddress(cb); got != "etcd://e1:2379;e2:2379" {
		t.Errorf("managedRPCAddress = %q", got)
	}
	env := map[string]string{}
	for _, e := range cachebackend.BuildStoreStatefulSet(testsupport.WithStore(cb), "img", 1).Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["MOONCAKE_MASTER"] != "etcd://e1:2379;e2:2379" || env["MC_STORE_CLUSTER_ID"] != "default.mc" {
		t.Errorf("store pods' env %v: they must find the leader through etcd", env)
	}
	req := storeuse.NamespaceFlushRequest{Flush: &hicachev1alpha1.CacheFlush{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: "default"}}, Backend: cb,
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: storeuse.ManagedRPCAddress(cb), ClusterID: storeuse.HaClusterID(cb)}, Prefix: "hc-1", Image: "img"}
	env = map[string]string{}
	for _, e := range cacheflush.BuildFlushJob(req).Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["MOONCAKE_MASTER"] != "etcd://e1:2379;e2:2379" || env["MC_STORE_CLUSTER_ID"] != "default.mc" {
		t.Errorf("flush job env %v: it must find the leader through etcd", env)
	}
	if a, b := storeuse.StoreIDOf(cb), storeuse.StoreIDOf(testsupport.WithHA(testsupport.ManagedBackend("other"), 3, "e2:2379", "e1:2379")); a == b {
		t.Errorf("two backends on one etcd with their own cluster ids are one store %q", a)
	}
	ext := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"},
		Spec: hicachev1alpha1.CacheBackendSpec{Mooncake: &hicachev1alpha1.MooncakeSpec{External: &hicachev1alpha1.ExternalMooncake{
			RPCAddress: "etcd://e2:2379,e1:2379", AdminURL: "http://m:9003", ClusterID: "default.mc"}}}}
	if a, b := storeuse.StoreIDOf(cb), storeuse.StoreIDOf(ext); a != b {
		t.Errorf("an external backend naming the same etcd and cluster is another store: %q and %q", a, b)
	}
}

// Every pod the operator runs for a backend goes where spec.placement says: the master, the
// store pods and the flush Jobs (for an external master too); without it, nothing is pinned.
func TestBackendPlacement(t *testing.T) {
	placement := &hicachev1alpha1.BackendPlacement{
		NodeSelector: map[string]string{"node-role": "system"},
		Tolerations:  []corev1.Toleration{{Key: "system-only", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
	external := &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "default"},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "m:50051", AdminURL: "http://m:9003"}}},
	}
	pods := map[string]func(cb *hicachev1alpha1.CacheBackend) corev1.PodSpec{
		"master": func(cb *hicachev1alpha1.CacheBackend) corev1.PodSpec {
			return cachebackend.BuildMasterDeployment(cb, "img").Spec.Template.Spec
		},
		"store": func(cb *hicachev1alpha1.CacheBackend) corev1.PodSpec {
			return cachebackend.BuildStoreStatefulSet(cb, "img", 3).Spec.Template.Spec
		},
		"flush job": func(cb *hicachev1alpha1.CacheBackend) corev1.PodSpec {
			return cacheflush.BuildFlushJob(storeuse.NamespaceFlushRequest{Flush: testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb, Prefix: "hc-1_", Image: "img", Attempt: 1}).Spec.Template.Spec
		},
		"flush job of an external master": func(*hicachev1alpha1.CacheBackend) corev1.PodSpec {
			cb := external.DeepCopy()
			cb.Spec.Placement = placement.DeepCopy()
			return cacheflush.BuildFlushJob(storeuse.NamespaceFlushRequest{Flush: testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb, Prefix: "hc-1_", Image: "img", Attempt: 1}).Spec.Template.Spec
		},
	}
	for name, build := range pods {
		t.Run(name, func(t *testing.T) {
			cb := testsupport.WithStore(testsupport.ManagedBackend("mc"))
			if unpinned := build(cb); name != "flush job of an external master" && (unpinned.NodeSelector != nil || unpinned.Tolerations != nil) {
				t.Errorf("without spec.placement: nodeSelector %v, tolerations %v; want neither", unpinned.NodeSelector, unpinned.Tolerations)
			}
			cb.Spec.Placement = placement.DeepCopy()
			got := build(cb)
			if diff := cmp.Diff(placement.NodeSelector, got.NodeSelector); diff != "" {
				t.Errorf("nodeSelector (-spec.placement +pod):\n%s", diff)
			}
			if diff := cmp.Diff(placement.Tolerations, got.Tolerations); diff != "" {
				t.Errorf("tolerations (-spec.placement +pod):\n%s", diff)
			}
		})
	}
}

func TestFlushName(t *testing.T) {
	const id = "mooncake-master.default.svc.cluster.local:50051"
	cases := map[string]struct {
		namespace, layout string
		seq               int
		want              string
	}{
		"a stale namespace":              {namespace: "hc-0123456789", layout: "0123456789", seq: 1, want: "hc-0123456789-0123456789-" + storeuse.StoreHash(id)[:8] + "-1"},
		"a fixed namespace, a later one": {namespace: "team", layout: "abcdef0123", seq: 7, want: "team-abcdef0123-" + storeuse.StoreHash(id)[:8] + "-7"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := hicachedeployment.FlushName(tc.namespace, tc.layout, id, tc.seq)
			if got != tc.want {
				t.Errorf("flushName = %q, want %q", got, tc.want)
			}
			if again := hicachedeployment.FlushName(tc.namespace, tc.layout, id, tc.seq); again != got {
				t.Errorf("flushName is not deterministic: %q then %q", got, again)
			}
		})
	}
	// Distinct inputs give distinct names: another namespace, layout, store, or a later
	// generation (a namespace that goes stale again is flushed again).
	base := hicachedeployment.FlushName("ns", "a", id, 1)
	for _, other := range []string{hicachedeployment.FlushName("ns2", "a", id, 1), hicachedeployment.FlushName("ns", "b", id, 1), hicachedeployment.FlushName("ns", "a", "10.0.0.1:50051", 1), hicachedeployment.FlushName("ns", "a", id, 2)} {
		if other == base {
			t.Errorf("two different flushes are both named %s", base)
		}
	}
	// The name stays a valid object name whatever the length of the namespace.
	long := strings.Repeat("d", 63)
	got := hicachedeployment.FlushName(long, "0123456789", id, 3)
	if len(got) > 253 {
		t.Errorf("flushName has %d characters, over 253", len(got))
	}
	if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
		t.Errorf("flushName %q is not a valid name: %v", got, errs)
	}
	// A flush's Job name is a label value (63 characters at most) whatever the flush's name.
	for _, cf := range []string{hicachedeployment.FlushName("hc-0123456789", "0123456789", id, 12), got} {
		if errs := validation.IsDNS1123Label(cacheflush.JobName(cf, 1)); len(errs) > 0 {
			t.Errorf("Job %q of CacheFlush %q: %v", cacheflush.JobName(cf, 1), cf, errs)
		}
	}
	if cacheflush.JobName(got, 1) == cacheflush.JobName(got, 2) {
		t.Error("two attempts of a flush share a Job name")
	}
}

// Ranks of HA masters get the client's short RPC deadlines, as store pods do: after a failover
// a rank's heartbeat pings the dead leader, and re-mounts its segment on the new one only once
// that ping failed. A lone master keeps the release's defaults, and a user's own value wins.
func TestBuildGroupRPCDeadlinesOfHAMasters(t *testing.T) {
	want := map[string]string{}
	for _, e := range sglang.FailoverRPCEnv() {
		want[e.Name] = e.Value
	}
	if len(want) != 2 || want["MC_RPC_TIMEOUT_MS"] == "" || want["MC_RPC_CONNECT_TIMEOUT_MS"] == "" {
		t.Fatalf("FailoverRPCEnv = %v, want both deadlines", want)
	}
	h := testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Storage("mooncake").Obj()
	c := mustBuildGroup(t, h, 0).Spec.Template.Spec.Containers[0]
	for name := range want {
		if e, ok := testsupport.EnvValue(c.Env, name); ok {
			t.Errorf("a rank of a lone master got %s = %q: the release's defaults stand", name, e.Value)
		}
	}
	build := func(h *hicachev1alpha1.HiCacheDeployment) corev1.Container {
		t.Helper()
		sts, err := hicachedeployment.BuildGroup(h, testsupport.MustResolve(t, h), testsupport.HaTestBackend(), 0, testImages)
		if err != nil {
			t.Fatalf("buildGroup: %v", err)
		}
		return sts.Spec.Template.Spec.Containers[0]
	}
	c = build(h)
	for name, v := range want {
		if e, ok := testsupport.EnvValue(c.Env, name); !ok || e.Value != v {
			t.Errorf("a rank of HA masters has %s = %q, want %q", name, e.Value, v)
		}
	}
	// The store pods of a managed backend with HA get the same values.
	cb := testsupport.WithStore(testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "e1:2379"))
	store := cachebackend.BuildStoreStatefulSet(cb, "img", 1).Spec.Template.Spec.Containers[0]
	for name, v := range want {
		if e, ok := testsupport.EnvValue(store.Env, name); !ok || e.Value != v {
			t.Errorf("a store pod of HA masters has %s = %q, want the ranks' %q", name, e.Value, v)
		}
	}

	c = build(testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Storage("mooncake").Env("MC_RPC_TIMEOUT_MS", "60000").Obj())
	var seen []string
	for _, e := range c.Env {
		if e.Name == "MC_RPC_TIMEOUT_MS" {
			seen = append(seen, e.Value)
		}
	}
	if !slices.Equal(seen, []string{"60000"}) {
		t.Errorf("with spec.template.env setting MC_RPC_TIMEOUT_MS=60000 the rank lists it as %q, want the user's value once", seen)
	}
	if e, ok := testsupport.EnvValue(c.Env, "MC_RPC_CONNECT_TIMEOUT_MS"); !ok || e.Value != want["MC_RPC_CONNECT_TIMEOUT_MS"] {
		t.Errorf("MC_RPC_CONNECT_TIMEOUT_MS = %q, want the operator's %q beside the user's request deadline", e.Value, want["MC_RPC_CONNECT_TIMEOUT_MS"])
	}
}

// policyCast is one pod of every kind that meets the policies of backend mc and deployment q
// (two groups, on mc, mounting a segment), labelled by the builders themselves.
func policyCast(t *testing.T) map[string]testutil.PolicyPod {
	t.Helper()
	cb := testsupport.WithStore(testsupport.ManagedBackend("mc"))
	q := testsupport.MakeHCD("q").TP(4).Storage("mc").Segment("4Gi").Replicas(2).Obj()
	p := testsupport.MakeHCD("p").TP(4).Storage("mc").Obj()
	other := testsupport.MakeHCD("o").TP(4).Storage("other").Obj()
	flush := cacheflush.BuildFlushJob(storeuse.NamespaceFlushRequest{Flush: testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb, Prefix: "hc-1_", Image: "img", Attempt: 1})
	return map[string]testutil.PolicyPod{
		"q group 0":           testsupport.PodIn("default", mustBuildGroup(t, q, 0).Spec.Template.Labels),
		"q group 1":           testsupport.PodIn("default", mustBuildGroup(t, q, 1).Spec.Template.Labels),
		"p on mc":             testsupport.PodIn("default", mustBuildGroup(t, p, 0).Spec.Template.Labels),
		"o on other":          testsupport.PodIn("default", mustBuildGroup(t, other, 0).Spec.Template.Labels),
		"mc store":            testsupport.PodIn("default", cachebackend.BuildStoreStatefulSet(cb, "img", 3).Spec.Template.Labels),
		"mc master":           testsupport.PodIn("default", cachebackend.BuildMasterDeployment(cb, "img").Spec.Template.Labels),
		"mc etcd":             testsupport.PodIn("default", cachebackend.BuildEtcdStatefulSet(testsupport.WithManagedEtcd(cb, 3, 1, testsupport.EmptyDirStorage()), "img", "ca1").Spec.Template.Labels),
		"mc flush job":        testsupport.PodIn("default", flush.Spec.Template.Labels),
		"operator":            testsupport.PodIn(testsupport.TestOperatorNS, storeuse.OperatorPodLabels),
		"operator look-alike": testsupport.PodIn("default", storeuse.OperatorPodLabels),
		"any pod":             testsupport.PodIn("default", map[string]string{"app": "client"}),
		"pod of another ns":   testsupport.PodIn("elsewhere", map[string]string{"app": "client"}),
	}
}

// Who reaches what: every policy against every pod, on the ports that matter. A pod a policy
// does not select is not listed for it.
func TestNetworkPolicies(t *testing.T) {
	cast := policyCast(t)
	cb := testsupport.WithStore(testsupport.ManagedBackend("mc"))
	q := testsupport.MakeHCD("q").TP(4).Storage("mc").Segment("4Gi").Replicas(2).Obj()
	policies := map[string]*networkingv1.NetworkPolicy{
		"master": cachebackend.BuildMasterNetworkPolicy(cb, testsupport.TestOperatorNS),
		"store":  cachebackend.BuildStoreNetworkPolicy(cb),
		"q":      hicachedeployment.BuildDeploymentNetworkPolicy(q, testsupport.MustResolve(t, q)),
		"q-0":    hicachedeployment.BuildGroupNetworkPolicy(q, hicachedeployment.GroupKey{}),
	}
	const ephemeral = 41234 // a port chosen at run time (NCCL, the transfer engine)
	ports := map[string]map[string]int32{
		"master": {"rpc": 50051, "admin": 9003},
		"store":  {"http": storeuse.StoreHTTPPort, "transfer": ephemeral},
		"q":      {"http": hicachedeployment.SGLangPort, "dist": hicachedeployment.DistInitPort, "transfer": ephemeral},
		"q-0":    {"http": hicachedeployment.SGLangPort, "dist": hicachedeployment.DistInitPort, "nccl": ephemeral},
	}
	selects := map[string][]string{}
	got := map[string]bool{}
	for pn, np := range policies {
		for name, target := range cast {
			if testutil.PolicySelects(np, target) {
				selects[pn] = append(selects[pn], name)
			}
		}
		for name, from := range cast {
			for port, n := range ports[pn] {
				if testutil.PolicyAdmits(np, from, n, corev1.ProtocolTCP) {
					got[pn+" "+port+" ← "+name] = true
				}
			}
		}
	}
	wantSelects := map[string][]string{
		"master": {"mc master"},
		"store":  {"mc store"},
		"q":      {"q group 0", "q group 1"},
		"q-0":    {"q group 0"},
	}
	for _, s := range selects {
		slices.Sort(s)
	}
	if diff := cmp.Diff(wantSelects, selects); diff != "" {
		t.Errorf("pods each policy selects (-want +got):\n%s", diff)
	}
	want := map[string]bool{}
	for _, k := range []string{
		// The master's RPC: the users of mc only; its admin port: the operator in its namespace.
		"master rpc ← q group 0", "master rpc ← q group 1", "master rpc ← p on mc", "master rpc ← mc store",
		"master rpc ← mc flush job", "master admin ← operator",
		// The store pods' segments: the users of mc; their HTTP API: nobody.
		"store transfer ← q group 0", "store transfer ← q group 1", "store transfer ← p on mc",
		"store transfer ← mc store", "store transfer ← mc flush job",
		// SGLang's port: every pod of the namespace (no spec.security.clients); the segments q's
		// ranks mount: the users of mc; the dist-init port: nobody through this policy.
		"q http ← q group 0", "q http ← q group 1", "q http ← p on mc", "q http ← o on other", "q http ← mc store",
		"q http ← mc master", "q http ← mc etcd", "q http ← mc flush job", "q http ← operator look-alike", "q http ← any pod",
		"q transfer ← q group 0", "q transfer ← q group 1", "q transfer ← p on mc", "q transfer ← mc store",
		"q transfer ← mc flush job",
		// A group's rendezvous and collectives: its own ranks only.
		"q-0 dist ← q group 0", "q-0 nccl ← q group 0",
	} {
		want[k] = true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admitted traffic (-want +got):\n%s", diff)
	}
}

// derivative skips the apply when desired is a prefix of what exists: a flag removed from the end
// of the master's args, or a ConfigMap key no longer rendered, stays forever.
func TestDerivativeSeesRemovedValues(t *testing.T) {
	cb := testsupport.ManagedBackend("mc")
	before := cachebackend.BuildMasterDeployment(cb, "img")
	cb.Spec.Mooncake.Managed.EvictionRatio = ""
	after := cachebackend.BuildMasterDeployment(cb, "img")
	for _, o := range []client.Object{before, after} {
		if err := reconcile.StampAppliedHash(o); err != nil {
			t.Fatal(err)
		}
	}
	if reconcile.Derivative(after, testsupport.AsStored(before)) {
		t.Errorf("unsetting evictionRatio keeps the running master's args %q (want %q)",
			before.Spec.Template.Spec.Containers[0].Args, after.Spec.Template.Spec.Containers[0].Args)
	}

	withStore := testsupport.MakeHCD("q").TP(4).Storage("mooncake").Obj()
	r := testsupport.MustResolve(t, withStore)
	oldCM, err := hicachedeployment.BuildConfigMap(withStore, r, mooncakeOf(withStore, r, testsupport.TestBackend()))
	if err != nil {
		t.Fatal(err)
	}
	noStore := testsupport.MakeHCD("q").TP(4).Obj()
	newCM, err := hicachedeployment.BuildConfigMap(noStore, testsupport.MustResolve(t, noStore), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{oldCM, newCM} {
		if err := reconcile.StampAppliedHash(o); err != nil {
			t.Fatal(err)
		}
	}
	if reconcile.Derivative(newCM, testsupport.AsStored(oldCM)) {
		t.Error("removing spec.storage keeps extra-config.json, naming the old backend, in the ConfigMap")
	}
}

// The flush Job is given the master's admin URL and its script fails when it cannot list the
// keys left; the backend's NetworkPolicy admits the admin port only from the operator.
func TestFlushJobMayReachWhatItIsGiven(t *testing.T) {
	cb := testsupport.ManagedBackend("mc")
	np := cachebackend.BuildMasterNetworkPolicy(cb, "hicache-system")
	job := cacheflush.BuildFlushJob(storeuse.NamespaceFlushRequest{
		Flush: testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb, Prefix: "hc-1_", Image: "img", Attempt: 1,
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: "mc-master.default.svc:50051", AdminURL: "http://mc-master.default.svc:9003"},
	})
	if e, _ := testsupport.EnvValue(job.Spec.Template.Spec.Containers[0].Env, flushjob.EnvAdminURL); e.Value == "" {
		return // the Job no longer needs the admin port
	}
	pod := labels.Set(job.Spec.Template.Labels)
	for _, rule := range np.Spec.Ingress {
		if rule.Ports[0].Port.IntVal != cb.Spec.Mooncake.Managed.AdminPort {
			continue
		}
		for _, peer := range rule.From {
			if sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector); err == nil && sel.Matches(pod) {
				return
			}
		}
	}
	t.Errorf("the flush Job's pod %v is given %s but the NetworkPolicy %s keeps it from the admin port %d",
		job.Spec.Template.Labels, flushjob.EnvAdminURL, np.Name, cb.Spec.Mooncake.Managed.AdminPort)
}

// testImages, mustBuildGroup and mooncakeOf are the HiCacheDeployment package's test helpers of
// the same names, over its exported builders.
var testImages = hicachedeployment.PodImages{SGLang: "sglang:test", Guard: "guard:test"}

func mustBuildGroup(t *testing.T, h *hicachev1alpha1.HiCacheDeployment, g int) *appsv1.StatefulSet {
	t.Helper()
	sts, err := hicachedeployment.BuildGroup(h, testsupport.MustResolve(t, h), testsupport.TestBackend(), g, testImages)
	if err != nil {
		t.Fatalf("buildGroup: %v", err)
	}
	return sts
}

func mooncakeOf(hcd *hicachev1alpha1.HiCacheDeployment, res *resolve.Resolved, be *resolve.Backend) *sglang.MooncakeConfig {
	_, mc, err := hicachedeployment.ServerConfig(hcd, res, be, 0)
	if err != nil {
		return nil
	}
	return mc
}
