package storeuse

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestServiceProof(t *testing.T) {
	selected := func(mut func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "a"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "m"}}}
		if mut != nil {
			mut(s)
		}
		return s
	}
	slice := func(name, by string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "a",
			Labels: map[string]string{discoveryv1.LabelServiceName: "m", discoveryv1.LabelManagedBy: by}}, Endpoints: eps}
	}
	ep := func(ip, ns, pod string) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{ip}}
		if pod != "" {
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod}
		}
		return e
	}
	// The namespace's pods: m-0 at 10.0.0.1.
	podIPs := func(name string) ([]string, error) {
		if name == "m-0" {
			return []string{"10.0.0.1"}, nil
		}
		return nil, nil
	}
	ctl := endpointSliceController
	for _, c := range []struct {
		name   string
		svc    *corev1.Service
		slices []discoveryv1.EndpointSlice
		whyHas string
	}{
		{"selector, no endpoints yet", selected(nil), nil, ""},
		{"selector, the controller's slices", selected(nil), []discoveryv1.EndpointSlice{slice("m-abc", ctl, ep("10.0.0.1", "a", "m-0"))}, ""},
		{"a slice's address is another pod's", selected(nil), []discoveryv1.EndpointSlice{slice("m-abc", ctl, ep("10.0.9.9", "a", "m-0"))}, "not pod m-0's"},
		{"a slice's address names a pod of another namespace", selected(nil), []discoveryv1.EndpointSlice{slice("m-abc", ctl, ep("10.0.0.1", "b", "m-0"))}, "no pod of namespace a"},
		{"a slice's address names no pod", selected(nil), []discoveryv1.EndpointSlice{slice("m-abc", ctl, ep("10.0.0.1", "", ""))}, "no pod of namespace a"},
		{"a slice names a pod that does not exist", selected(nil), []discoveryv1.EndpointSlice{slice("m-abc", ctl, ep("10.0.0.1", "a", "gone"))}, "not pod gone's"},
		{"headless with a selector", selected(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }), nil, ""},
		{"no such Service", nil, nil, "no such Service"},
		{"ExternalName", selected(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "mooncake-master.b.svc.cluster.local"
		}), nil, "ExternalName"},
		{"no selector", selected(func(s *corev1.Service) { s.Spec.Selector = nil }), nil, "no selector"},
		{"empty selector", selected(func(s *corev1.Service) { s.Spec.Selector = map[string]string{} }), nil, "no selector"},
		{"selector and a hand-written slice", selected(nil), []discoveryv1.EndpointSlice{slice("m-abc", ctl), slice("evil", "someone")}, "evil"},
		{"selector and an unlabelled slice", selected(nil), []discoveryv1.EndpointSlice{slice("evil", "")}, "evil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := serviceProof(c.svc, c.slices, podIPs)
			if (why == "") != (c.whyHas == "") || !strings.Contains(why, c.whyHas) {
				t.Errorf("serviceProof = %q, want containing %q", why, c.whyHas)
			}
		})
	}
}
