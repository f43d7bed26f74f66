package controllers

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/router"
)

func withRouter(h *hicachev1alpha1.HiCacheDeployment, policy string) *hicachev1alpha1.HiCacheDeployment {
	h.Spec.Router = &hicachev1alpha1.RouterSpec{Replicas: 2, Policy: hicachev1alpha1.RoutingPolicy(policy)}
	return h
}

// The router discovers exactly the groups' leaders of its deployment, in its namespace, and the
// client Service fronts the router instead of the leaders.
func TestRouterFrontsTheLeaders(t *testing.T) {
	h := withRouter(makeHCD("q").TP(4).Obj(), "power_of_two")
	objs, err := buildRouter(h, DefaultRouterImage)
	if err != nil {
		t.Fatal(err)
	}
	c := objs.Deployment.Spec.Template.Spec.Containers[0]
	if c.Image != DefaultRouterImage || *objs.Deployment.Spec.Replicas != 2 {
		t.Errorf("router image %s, %d replicas", c.Image, *objs.Deployment.Spec.Replicas)
	}
	want := []string{"--service-discovery-namespace", h.Namespace, "--service-discovery-port", "30000",
		"--selector", appsv1.PodIndexLabel + "=0", hicachev1alpha1.LabelDeployment + "=q", "--policy", "power_of_two"}
	for i := 0; i+1 < len(want); i += 2 {
		j := slices.Index(c.Args, want[i])
		if j < 0 || j+1 >= len(c.Args) || c.Args[j+1] != want[i+1] {
			t.Errorf("router args %q lack %s %s", c.Args, want[i], want[i+1])
		}
	}
	if !metav1.IsControlledBy(objs.Deployment, h) || !metav1.IsControlledBy(objs.Role, h) {
		t.Errorf("the router's objects are not owned by the deployment")
	}
	// Its pods are not serving pods: the deployment's NetworkPolicy and pod watch do not see them.
	podLabels := objs.Deployment.Spec.Template.Labels
	if _, ok := podLabels[hicachev1alpha1.LabelDeployment]; ok {
		t.Errorf("router pods carry %s: %v", hicachev1alpha1.LabelDeployment, podLabels)
	}
	svc := buildClientService(h)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
		t.Errorf("the client Service selects %v, not the router pods %v", svc.Spec.Selector, podLabels)
	}
	if port := c.Ports[slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == router.PortHTTP })]; port.ContainerPort != SGLangPort || svc.Spec.Ports[0].TargetPort.StrVal != router.PortHTTP {
		t.Errorf("client Service targets %v, the router listens on %v", svc.Spec.Ports[0].TargetPort, port)
	}
	// Without a router the client Service fronts the leaders, as before.
	plain := buildClientService(makeHCD("q").TP(4).Obj())
	if plain.Spec.Selector[appsv1.PodIndexLabel] != "0" || plain.Spec.Selector[hicachev1alpha1.LabelDeployment] != "q" {
		t.Errorf("client Service without a router selects %v", plain.Spec.Selector)
	}
}

func TestRouterImageFromTheSpec(t *testing.T) {
	h := withRouter(makeHCD("q").Obj(), "")
	h.Spec.Router.Image = "registry.example/smg:1.13.0"
	objs, err := buildRouter(h, DefaultRouterImage)
	if err != nil {
		t.Fatal(err)
	}
	c := objs.Deployment.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example/smg:1.13.0" || !slices.Contains(c.Args, router.DefaultPolicy) {
		t.Errorf("image %s, args %q; want the spec's image and the default policy", c.Image, c.Args)
	}
}

// With spec.security.clients, the router is admitted to the leaders' HTTP port beside them.
func TestRouterIsTheLeadersClient(t *testing.T) {
	h := withRouter(makeHCD("q").TP(4).Obj(), "")
	h.Spec.Security = &hicachev1alpha1.ServingSecurity{Clients: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gateway"}}}}}
	r := mustResolve(t, h)
	np := buildDeploymentNetworkPolicy(h, r)
	var found bool
	for _, p := range np.Spec.Ingress[0].From {
		if p.PodSelector != nil && p.PodSelector.MatchLabels[hicachev1alpha1.LabelRouter] == "q" {
			found = true
		}
	}
	if !found || len(np.Spec.Ingress[0].From) != 2 {
		t.Errorf("HTTP ingress from %+v, want the user's clients and the router", np.Spec.Ingress[0].From)
	}
	if len(h.Spec.Security.Clients) != 1 {
		t.Errorf("building the policy changed spec.security.clients")
	}
}
