package cachebackend

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The operator is admitted to the admin port from any namespace only when its own is unknown.
func TestMasterPolicyOperatorNamespace(t *testing.T) {
	np := BuildMasterNetworkPolicy(testsupport.ManagedBackend("mc"), "")
	if !testutil.PolicyAdmits(np, testsupport.PodIn("anywhere", storeuse.OperatorPodLabels), 9003, corev1.ProtocolTCP) {
		t.Error("with no operator namespace, the operator's pods are not admitted to the admin port")
	}
	if testutil.PolicyAdmits(np, testsupport.PodIn("anywhere", map[string]string{"app.kubernetes.io/name": "hicache-operator"}), 9003, corev1.ProtocolTCP) {
		t.Error("a pod with only the operator's name label is admitted to the admin port")
	}
}
