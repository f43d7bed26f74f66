package hicachedeployment

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// servingSecurity is the security context of the containers that run the serving image (SGLang
// and the model download): spec.template.containerSecurityContext, completed to the restricted
// Pod Security level when the ranks run as a user other than root (runAsNonRoot, or a runAsUser
// above 0, on the container or the pod), in each field the user left unset:
//
//   - allowPrivilegeEscalation false, unless the container is privileged or adds SYS_ADMIN,
//     which the API server refuses beside it;
//   - every capability dropped, unless the user names capabilities (a non-root process holds
//     none once it has started anyway);
//   - the RuntimeDefault seccomp profile, unless the container or the pod names one.
//
// What the operator adds itself (RDMA's IPC_LOCK) is added on top. The upstream SGLang image
// runs as root, and root without its capabilities loses access to files of other owners (a
// weights volume written by another user), so a root container is left as the user wrote it:
// such a pod meets baseline, and its template is the same as before this rule, so no group
// rolls for it.
func servingSecurity(pod *corev1.PodSecurityContext, user *corev1.SecurityContext) *corev1.SecurityContext {
	if !runsAsNonRoot(pod, ptr.Deref(user, corev1.SecurityContext{})) {
		return user.DeepCopy()
	}
	c := user.DeepCopy()
	if c == nil {
		c = &corev1.SecurityContext{}
	}
	sysAdmin := c.Capabilities != nil && slices.Contains(c.Capabilities.Add, "SYS_ADMIN")
	if c.AllowPrivilegeEscalation == nil && !ptr.Deref(c.Privileged, false) && !sysAdmin {
		c.AllowPrivilegeEscalation = ptr.To(false)
	}
	if c.Capabilities == nil {
		c.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
	if c.SeccompProfile == nil && (pod == nil || pod.SeccompProfile == nil) {
		c.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	return c
}

// runsAsNonRoot tells whether a container is known not to run as root, as the kubelet reads its
// settings: the user (the container's, else the pod's) when one is named, else runAsNonRoot (the
// container's, else the pod's).
func runsAsNonRoot(pod *corev1.PodSecurityContext, c corev1.SecurityContext) bool {
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if u := cmp.Or(c.RunAsUser, pod.RunAsUser); u != nil {
		return *u > 0
	}
	return ptr.Deref(cmp.Or(c.RunAsNonRoot, pod.RunAsNonRoot), false)
}
