package hicachedeployment

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// PodImages are the images of a rank pod: SGLang's, and the operator's, which runs the proxy in
// front of it.
type PodImages struct {
	SGLang string
	Guard  string
}

// GuardContainer is the proxy in front of SGLang's HTTP server in every rank pod (`manager
// guard`, internal/guard). SGLang 0.5.23 reports its keys in /server_info to anyone its API key
// admits (anyone at all without one), so SGLang listens on loopback only (sglang.LoopbackHost)
// and this container owns the pod IP at the same ports: SGLang's HTTP port, and on a prefill
// rank the PD bootstrap port (bootstrapPort, 0 for none), which decode servers and the group's
// followers reach. It forwards everything unchanged, streams unbuffered, and answers
// /server_info and /get_server_info with the keys taken out; the probes, the Services and the
// router reach SGLang through it. It holds the clients' keys and the server keys SGLang holds
// instead (SGLang 0.5.23 logs its own), swaps the one for the other in each request's
// Authorization (guard.ServerAuthorization), drops any other, and replaces every key wherever
// it appears in an answer. It holds no privilege (the restricted Pod
// Security profile) and asks for little: it only copies bytes.
func GuardContainer(hcd *hicachev1alpha1.HiCacheDeployment, bootstrapPort int32, image string) corev1.Container {
	args := []string{"guard", "--listen-host=$(POD_IP)", "--upstream-host=" + sglang.LoopbackHost, "--port=" + strconv.Itoa(SGLangPort)}
	ports := []corev1.ContainerPort{{Name: "http", ContainerPort: SGLangPort, Protocol: corev1.ProtocolTCP}}
	if bootstrapPort > 0 {
		args = append(args, "--port="+strconv.Itoa(int(bootstrapPort)))
		ports = append(ports, corev1.ContainerPort{Name: "bootstrap", ContainerPort: bootstrapPort, Protocol: corev1.ProtocolTCP})
	}
	env := []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
	return corev1.Container{
		Name:    resolve.GuardContainer,
		Image:   image,
		Command: []string{"/manager"},
		Args:    args,
		Env:     append(append(env, keyEnv(hcd)...), serverKeyEnv(hcd)...),
		Ports:   ports,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(int64(65532)),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}
