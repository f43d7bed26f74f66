package controllers

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const testOperatorNS = "hicache-system"

func podIn(ns string, l map[string]string) testutil.PolicyPod {
	return testutil.PolicyPod{Namespace: ns, NamespaceLabels: map[string]string{namespaceNameLabel: ns}, Labels: l}
}

// policyCast is one pod of every kind that meets the policies of backend mc and deployment q
// (two groups, on mc, mounting a segment), labelled by the builders themselves.
func policyCast(t *testing.T) map[string]testutil.PolicyPod {
	t.Helper()
	cb := withStore(managedBackend("mc"))
	q := makeHCD("q").TP(4).Storage("mc").Segment("4Gi").Replicas(2).Obj()
	p := makeHCD("p").TP(4).Storage("mc").Obj()
	other := makeHCD("o").TP(4).Storage("other").Obj()
	flush := buildFlushJob(NamespaceFlushRequest{Flush: testFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb, Prefix: "hc-1_", Image: "img", Attempt: 1})
	return map[string]testutil.PolicyPod{
		"q group 0":           podIn("default", mustBuildGroup(t, q, 0).Spec.Template.Labels),
		"q group 1":           podIn("default", mustBuildGroup(t, q, 1).Spec.Template.Labels),
		"p on mc":             podIn("default", mustBuildGroup(t, p, 0).Spec.Template.Labels),
		"o on other":          podIn("default", mustBuildGroup(t, other, 0).Spec.Template.Labels),
		"mc store":            podIn("default", buildStoreStatefulSet(cb, "img", 3).Spec.Template.Labels),
		"mc master":           podIn("default", buildMasterDeployment(cb, "img").Spec.Template.Labels),
		"mc etcd":             podIn("default", buildEtcdStatefulSet(withManagedEtcd(cb, 3, 1, emptyDirStorage()), "img", "ca1").Spec.Template.Labels),
		"mc flush job":        podIn("default", flush.Spec.Template.Labels),
		"operator":            podIn(testOperatorNS, OperatorPodLabels),
		"operator look-alike": podIn("default", OperatorPodLabels),
		"any pod":             podIn("default", map[string]string{"app": "client"}),
		"pod of another ns":   podIn("elsewhere", map[string]string{"app": "client"}),
	}
}

// Who reaches what: every policy against every pod, on the ports that matter. A pod a policy
// does not select is not listed for it.
func TestNetworkPolicies(t *testing.T) {
	cast := policyCast(t)
	cb := withStore(managedBackend("mc"))
	q := makeHCD("q").TP(4).Storage("mc").Segment("4Gi").Replicas(2).Obj()
	policies := map[string]*networkingv1.NetworkPolicy{
		"master": buildMasterNetworkPolicy(cb, testOperatorNS),
		"store":  buildStoreNetworkPolicy(cb),
		"q":      buildDeploymentNetworkPolicy(q, mustResolve(t, q)),
		"q-0":    buildGroupNetworkPolicy(q, groupKey{}),
	}
	const ephemeral = 41234 // a port chosen at run time (NCCL, the transfer engine)
	ports := map[string]map[string]int32{
		"master": {"rpc": 50051, "admin": 9003},
		"store":  {"http": StoreHTTPPort, "transfer": ephemeral},
		"q":      {"http": SGLangPort, "dist": DistInitPort, "transfer": ephemeral},
		"q-0":    {"http": SGLangPort, "dist": DistInitPort, "nccl": ephemeral},
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

// spec.security.clients replaces the namespace as who may reach SGLang's port.
func TestDeploymentPolicyClients(t *testing.T) {
	q := makeHCD("q").TP(4).Obj()
	q.Spec.Security = &hicachev1alpha1.ServingSecurity{Clients: []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: "gateway"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "router"}},
	}}}
	np := buildDeploymentNetworkPolicy(q, mustResolve(t, q))
	got := map[string]bool{}
	for name, from := range map[string]testutil.PolicyPod{
		"router in gateway":    podIn("gateway", map[string]string{"app": "router"}),
		"other pod in gateway": podIn("gateway", map[string]string{"app": "x"}),
		"router in own ns":     podIn("default", map[string]string{"app": "router"}),
		"any pod of own ns":    podIn("default", map[string]string{"app": "client"}),
	} {
		got[name] = testutil.PolicyAdmits(np, from, SGLangPort, corev1.ProtocolTCP)
	}
	want := map[string]bool{"router in gateway": true, "other pod in gateway": false, "router in own ns": false, "any pod of own ns": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("clients admitted to SGLang's port (-want +got):\n%s", diff)
	}
	if len(np.Spec.Ingress) != 1 {
		t.Errorf("a deployment with no storage has %d ingress rules, want only SGLang's port", len(np.Spec.Ingress))
	}
}

// Ranks that mount no segment (store pods hold the memory) take no transfer-engine traffic.
func TestDeploymentPolicyWithoutSegment(t *testing.T) {
	q := makeHCD("q").TP(4).Storage("mc").Segment("0").Obj()
	r := mustResolve(t, q)
	if r.SegmentPerPod() != 0 {
		t.Fatalf("segment per pod %d, want 0", r.SegmentPerPod())
	}
	np := buildDeploymentNetworkPolicy(q, r)
	from := podIn("default", map[string]string{hicachev1alpha1.LabelBackend: "mc"})
	if testutil.PolicyAdmits(np, from, 41234, corev1.ProtocolTCP) {
		t.Error("ranks that mount no segment admit the backend's pods to the transfer engine")
	}
}

// The operator is admitted to the admin port from any namespace only when its own is unknown.
func TestMasterPolicyOperatorNamespace(t *testing.T) {
	np := buildMasterNetworkPolicy(managedBackend("mc"), "")
	if !testutil.PolicyAdmits(np, podIn("anywhere", OperatorPodLabels), 9003, corev1.ProtocolTCP) {
		t.Error("with no operator namespace, the operator's pods are not admitted to the admin port")
	}
	if testutil.PolicyAdmits(np, podIn("anywhere", map[string]string{"app.kubernetes.io/name": "hicache-operator"}), 9003, corev1.ProtocolTCP) {
		t.Error("a pod with only the operator's name label is admitted to the admin port")
	}
}

func TestPortsExcept(t *testing.T) {
	got := map[int32]bool{}
	np := &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: portsExcept(30000, 20102, 1, 65535)}}}}
	for _, p := range []int32{1, 2, 20101, 20102, 20103, 29999, 30000, 30001, 65534, 65535} {
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
			if testutil.PolicyAdmits(np, testutil.PolicyPod{}, p, proto) {
				got[p] = true
			} else if got[p] {
				t.Errorf("port %d is open over TCP but not %s", p, proto)
			}
		}
	}
	want := map[int32]bool{2: true, 20101: true, 20103: true, 29999: true, 30001: true, 65534: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("open ports (-want +got):\n%s", diff)
	}
	for _, p := range portsExcept(30000) {
		if p.EndPort != nil && *p.EndPort <= p.Port.IntVal {
			t.Errorf("range %d-%d: endPort must exceed port", p.Port.IntVal, *p.EndPort)
		}
	}
}

// The router reaches every leader, so it admits exactly the servers' clients: every pod of the
// namespace by default, spec.security.clients when set; never another namespace's pods, and its
// health port to no pod.
func TestRouterPolicyAdmitsTheServersClients(t *testing.T) {
	gateway := []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: "gateway"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gw"}},
	}}
	peers := map[string]testutil.PolicyPod{
		"any pod of own ns":  podIn("default", map[string]string{"app": "client"}),
		"pod of another ns":  podIn("elsewhere", map[string]string{"app": "client"}),
		"gateway pod":        podIn("gateway", map[string]string{"app": "gw"}),
		"other gateway pod":  podIn("gateway", map[string]string{"app": "x"}),
		"a rank of q itself": podIn("default", map[string]string{hicachev1alpha1.LabelDeployment: "q"}),
	}
	for name, tc := range map[string]struct {
		clients []networkingv1.NetworkPolicyPeer
		want    []string
	}{
		"no clients: the namespace": {want: []string{"any pod of own ns", "a rank of q itself"}},
		"clients":                   {clients: gateway, want: []string{"gateway pod"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := withRouter(makeHCD("q").TP(4).Obj(), "")
			if tc.clients != nil {
				h.Spec.Security = &hicachev1alpha1.ServingSecurity{Clients: tc.clients}
			}
			np, err := buildRouterNetworkPolicy(h)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := BuildRouter(h, DefaultRouterImage)
			if err != nil {
				t.Fatal(err)
			}
			router := podIn("default", objs.Deployment.Spec.Template.Labels)
			if !testutil.PolicySelects(np, router) {
				t.Fatalf("the router's policy does not select its pods (labels %v)", objs.Deployment.Spec.Template.Labels)
			}
			for _, other := range []map[string]string{mustBuildGroup(t, h, 0).Spec.Template.Labels, {"app": "client"}} {
				if testutil.PolicySelects(np, podIn("default", other)) {
					t.Errorf("the router's policy selects a pod that is not a router: %v", other)
				}
			}
			ports := map[string]int32{}
			for _, p := range objs.Deployment.Spec.Template.Spec.Containers[0].Ports {
				ports[p.Name] = p.ContainerPort
			}
			var got []string
			for pn, from := range peers {
				http := testutil.PolicyAdmits(np, from, ports["http"], corev1.ProtocolTCP)
				if metrics := testutil.PolicyAdmits(np, from, ports["metrics"], corev1.ProtocolTCP); metrics != http {
					t.Errorf("%s: metrics port admitted %v, HTTP port %v: want the same clients", pn, metrics, http)
				}
				if testutil.PolicyAdmits(np, from, ports["health"], corev1.ProtocolTCP) {
					t.Errorf("%s is admitted to the router's health port", pn)
				}
				if http {
					got = append(got, pn)
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("peers admitted to the router (-want +got):\n%s", diff)
			}
		})
	}
}
