package hicachedeployment

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// spec.security.clients replaces the namespace as who may reach SGLang's port.
func TestDeploymentPolicyClients(t *testing.T) {
	q := testsupport.MakeHCD("q").TP(4).Obj()
	q.Spec.Security = &hicachev1alpha1.ServingSecurity{Clients: []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{storeuse.NamespaceNameLabel: "gateway"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "router"}},
	}}}
	np := BuildDeploymentNetworkPolicy(q, testsupport.MustResolve(t, q))
	got := map[string]bool{}
	for name, from := range map[string]testutil.PolicyPod{
		"router in gateway":    testsupport.PodIn("gateway", map[string]string{"app": "router"}),
		"other pod in gateway": testsupport.PodIn("gateway", map[string]string{"app": "x"}),
		"router in own ns":     testsupport.PodIn("default", map[string]string{"app": "router"}),
		"any pod of own ns":    testsupport.PodIn("default", map[string]string{"app": "client"}),
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
	q := testsupport.MakeHCD("q").TP(4).Storage("mc").Segment("0").Obj()
	r := testsupport.MustResolve(t, q)
	if r.SegmentPerPod() != 0 {
		t.Fatalf("segment per pod %d, want 0", r.SegmentPerPod())
	}
	np := BuildDeploymentNetworkPolicy(q, r)
	from := testsupport.PodIn("default", map[string]string{hicachev1alpha1.LabelBackend: "mc"})
	if testutil.PolicyAdmits(np, from, 41234, corev1.ProtocolTCP) {
		t.Error("ranks that mount no segment admit the backend's pods to the transfer engine")
	}
}

func TestPortsExcept(t *testing.T) {
	got := map[int32]bool{}
	np := &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: storeuse.PortsExcept(30000, 20102, 1, 65535)}}}}
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
	for _, p := range storeuse.PortsExcept(30000) {
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
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{storeuse.NamespaceNameLabel: "gateway"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gw"}},
	}}
	peers := map[string]testutil.PolicyPod{
		"any pod of own ns":  testsupport.PodIn("default", map[string]string{"app": "client"}),
		"pod of another ns":  testsupport.PodIn("elsewhere", map[string]string{"app": "client"}),
		"gateway pod":        testsupport.PodIn("gateway", map[string]string{"app": "gw"}),
		"other gateway pod":  testsupport.PodIn("gateway", map[string]string{"app": "x"}),
		"a rank of q itself": testsupport.PodIn("default", map[string]string{hicachev1alpha1.LabelDeployment: "q"}),
	}
	for name, tc := range map[string]struct {
		clients []networkingv1.NetworkPolicyPeer
		want    []string
	}{
		"no clients: the namespace": {want: []string{"any pod of own ns", "a rank of q itself"}},
		"clients":                   {clients: gateway, want: []string{"gateway pod"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := withRouter(testsupport.MakeHCD("q").TP(4).Obj(), "")
			if tc.clients != nil {
				h.Spec.Security = &hicachev1alpha1.ServingSecurity{Clients: tc.clients}
			}
			np, err := buildRouterNetworkPolicy(h)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := BuildRouter(h, storeuse.DefaultRouterImage)
			if err != nil {
				t.Fatal(err)
			}
			router := testsupport.PodIn("default", objs.Deployment.Spec.Template.Labels)
			if !testutil.PolicySelects(np, router) {
				t.Fatalf("the router's policy does not select its pods (labels %v)", objs.Deployment.Spec.Template.Labels)
			}
			for _, other := range []map[string]string{mustBuildGroup(t, h, 0).Spec.Template.Labels, {"app": "client"}} {
				if testutil.PolicySelects(np, testsupport.PodIn("default", other)) {
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
