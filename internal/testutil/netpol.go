package testutil

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PolicyPod is a pod as NetworkPolicies see it: its namespace, the labels of that namespace and
// its own labels.
type PolicyPod struct {
	Namespace       string
	NamespaceLabels map[string]string
	Labels          map[string]string
}

// PolicySelects tells whether a NetworkPolicy applies to pod (its podSelector, in its
// namespace), with Kubernetes' own label selector code.
func PolicySelects(np *networkingv1.NetworkPolicy, pod PolicyPod) bool {
	if np.Namespace != pod.Namespace {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	return err == nil && sel.Matches(labels.Set(pod.Labels))
}

// PolicyAdmits tells whether the ingress rules of np let from reach a pod it selects on port
// (a number; named ports are not resolved) over protocol, as the NetworkPolicy API defines it:
// a peer with only a podSelector means pods of the policy's namespace, a namespaceSelector
// alone every pod of the namespaces it selects, both together the pods it selects in those
// namespaces; an empty From or Ports list matches everything; endPort makes a range.
func PolicyAdmits(np *networkingv1.NetworkPolicy, from PolicyPod, port int32, protocol corev1.Protocol) bool {
	for _, rule := range np.Spec.Ingress {
		if portsMatch(rule.Ports, port, protocol) && peersMatch(np.Namespace, rule.From, from) {
			return true
		}
	}
	return false
}

func portsMatch(ports []networkingv1.NetworkPolicyPort, port int32, protocol corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != protocol {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.Type != intstr.Int {
			continue
		}
		lo, hi := p.Port.IntVal, p.Port.IntVal
		if p.EndPort != nil {
			hi = *p.EndPort
		}
		if port >= lo && port <= hi {
			return true
		}
	}
	return false
}

func peersMatch(policyNS string, peers []networkingv1.NetworkPolicyPeer, from PolicyPod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if peer.IPBlock != nil {
			continue
		}
		if peer.NamespaceSelector == nil {
			if from.Namespace != policyNS {
				continue
			}
		} else {
			sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			if err != nil || !sel.Matches(labels.Set(from.NamespaceLabels)) {
				continue
			}
		}
		if peer.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil || !sel.Matches(labels.Set(from.Labels)) {
				continue
			}
		}
		return true
	}
	return false
}
