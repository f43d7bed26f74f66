package storeuse

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// StoreHTTPPort is the HTTP API of mooncake_store_service (its --port default): /api/put,
// /api/remove_all, /api/unmount. Nothing the operator runs needs it, so no policy admits it.
const StoreHTTPPort = 8080

// OperatorPodLabels are labels the chart puts on the operator's pods; the policies admit the
// operator to the masters' admin port by them.
var OperatorPodLabels = map[string]string{
	"app.kubernetes.io/name":      "hicache-operator",
	"app.kubernetes.io/component": "manager",
}

const NamespaceNameLabel = "kubernetes.io/metadata.name"

func TCPPort(p int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(p))}
}

// PortsExcept is every TCP and UDP port but the excluded ones, as ranges: the ports of
// torch.distributed, NCCL and Mooncake's transfer engine are chosen at run time, while a
// server's HTTP API must stay closed to the same peers.
func PortsExcept(excluded ...int32) []networkingv1.NetworkPolicyPort {
	ex := slices.Clone(excluded)
	slices.Sort(ex)
	ex = slices.Compact(ex)
	var out []networkingv1.NetworkPolicyPort
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		lo := int32(1)
		for _, p := range append(ex, 65536) {
			if p > lo {
				np := networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt32(lo))}
				if hi := p - 1; hi > lo {
					np.EndPort = ptr.To(hi)
				}
				out = append(out, np)
			}
			lo = p + 1
		}
	}
	return out
}

// OperatorPeer is the operator's pods: in its own namespace when it is known, else in any.
func OperatorPeer(operatorNamespace string) networkingv1.NetworkPolicyPeer {
	ns := &metav1.LabelSelector{}
	if operatorNamespace != "" {
		ns.MatchLabels = map[string]string{NamespaceNameLabel: operatorNamespace}
	}
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: &metav1.LabelSelector{MatchLabels: OperatorPodLabels}}
}

// BackendPeer is every pod of the namespace that uses backend cb: the serving ranks of the
// deployments on it, its store pods and its flush Jobs; not its master or its managed etcd's
// members, which call none of them.
func BackendPeer(cb string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{hicachev1alpha1.LabelBackend: cb},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app.kubernetes.io/component", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"master", "etcd"}},
		},
	}}
}

func IngressPolicy(name, namespace string, labels map[string]string, owners []metav1.OwnerReference, selector map[string]string, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, OwnerReferences: owners},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			// An empty list admits nothing; nil would be dropped and read the same.
			Ingress: append([]networkingv1.NetworkPolicyIngressRule{}, rules...),
		},
	}
}
