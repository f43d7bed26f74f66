package testutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The peer forms of the NetworkPolicy API, as its documentation defines them.
func TestPolicyAdmits(t *testing.T) {
	app := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	prod := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	policy := func(from ...networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "home"}, Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: from, Ports: []networkingv1.NetworkPolicyPort{
				{Port: ptr.To(intstr.FromInt32(80))},
				{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(1000)), EndPort: ptr.To(int32(2000))},
			}}}}}
	}
	aHome := PolicyPod{Namespace: "home", Labels: map[string]string{"app": "a"}}
	aProd := PolicyPod{Namespace: "p", NamespaceLabels: map[string]string{"env": "prod"}, Labels: map[string]string{"app": "a"}}
	bProd := PolicyPod{Namespace: "p", NamespaceLabels: map[string]string{"env": "prod"}, Labels: map[string]string{"app": "b"}}
	cases := map[string]struct {
		np   *networkingv1.NetworkPolicy
		from PolicyPod
		port int32
		prot corev1.Protocol
		want bool
	}{
		"pod selector: own namespace":         {policy(networkingv1.NetworkPolicyPeer{PodSelector: app}), aHome, 80, corev1.ProtocolTCP, true},
		"pod selector: not another namespace": {policy(networkingv1.NetworkPolicyPeer{PodSelector: app}), aProd, 80, corev1.ProtocolTCP, false},
		"namespace selector alone: every pod": {policy(networkingv1.NetworkPolicyPeer{NamespaceSelector: prod}), bProd, 80, corev1.ProtocolTCP, true},
		"both: the pods in those namespaces":  {policy(networkingv1.NetworkPolicyPeer{NamespaceSelector: prod, PodSelector: app}), bProd, 80, corev1.ProtocolTCP, false},
		"empty namespace selector: any":       {policy(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: app}), aProd, 80, corev1.ProtocolTCP, true},
		"no peers: everyone":                  {policy(), bProd, 80, corev1.ProtocolTCP, true},
		"protocol defaults to TCP":            {policy(), bProd, 80, corev1.ProtocolUDP, false},
		"endPort makes a range":               {policy(), bProd, 1500, corev1.ProtocolUDP, true},
		"outside the range":                   {policy(), bProd, 2001, corev1.ProtocolUDP, false},
		"ipBlock peers are not pods":          {policy(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}), aHome, 80, corev1.ProtocolTCP, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := PolicyAdmits(tc.np, tc.from, tc.port, tc.prot); got != tc.want {
				t.Errorf("PolicyAdmits = %v, want %v", got, tc.want)
			}
		})
	}
}
