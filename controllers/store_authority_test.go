package controllers

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
	slice := func(name, by string) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "a",
			Labels: map[string]string{discoveryv1.LabelServiceName: "m", discoveryv1.LabelManagedBy: by}}}
	}
	for _, c := range []struct {
		name   string
		svc    *corev1.Service
		slices []metav1.PartialObjectMetadata
		whyHas string
	}{
		{"selector, no endpoints yet", selected(nil), nil, ""},
		{"selector, the controller's slices", selected(nil), []metav1.PartialObjectMetadata{slice("m-abc", endpointSliceController)}, ""},
		{"headless with a selector", selected(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }), nil, ""},
		{"no such Service", nil, nil, "no such Service"},
		{"ExternalName", selected(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "mooncake-master.b.svc.cluster.local"
		}), nil, "ExternalName"},
		{"no selector", selected(func(s *corev1.Service) { s.Spec.Selector = nil }), nil, "no selector"},
		{"empty selector", selected(func(s *corev1.Service) { s.Spec.Selector = map[string]string{} }), nil, "no selector"},
		{"selector and a hand-written slice", selected(nil), []metav1.PartialObjectMetadata{slice("m-abc", endpointSliceController), slice("evil", "someone")}, "evil"},
		{"selector and an unlabelled slice", selected(nil), []metav1.PartialObjectMetadata{slice("evil", "")}, "evil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := serviceProof(c.svc, c.slices)
			if (why == "") != (c.whyHas == "") || !strings.Contains(why, c.whyHas) {
				t.Errorf("serviceProof = %q, want containing %q", why, c.whyHas)
			}
		})
	}
}
