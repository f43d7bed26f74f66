package hicachedeployment

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestServingSecurity(t *testing.T) {
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	with := func(f func(c *corev1.SecurityContext)) *corev1.SecurityContext {
		c := restricted.DeepCopy()
		f(c)
		return c
	}
	localhost := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("sglang.json")}
	for name, tc := range map[string]struct {
		pod  *corev1.PodSecurityContext
		user *corev1.SecurityContext
		want *corev1.SecurityContext
	}{
		"nothing set: root, as the image runs, left alone": {},
		"root named on the container":                      {user: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0))}, want: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0))}},
		"runAsNonRoot false":                               {pod: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false)}},
		"non-root pod": {
			pod:  &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			want: restricted,
		},
		"a user on the pod": {
			pod:  &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000))},
			want: restricted,
		},
		"root on the container wins over a user on the pod": {
			pod:  &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000))},
			user: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0))},
			want: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0))},
		},
		// The user named wins: root, which the kubelet then refuses to start beside runAsNonRoot.
		"root user on the pod, runAsNonRoot on the container": {
			pod:  &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(0))},
			user: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
			want: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
		},
		"runAsNonRoot false on the container, a user on the pod": {
			pod:  &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(1000))},
			user: &corev1.SecurityContext{RunAsNonRoot: ptr.To(false)},
			want: with(func(c *corev1.SecurityContext) { c.RunAsNonRoot = ptr.To(false) }),
		},
		"the user's capabilities kept": {
			user: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}},
			want: with(func(c *corev1.SecurityContext) {
				c.RunAsNonRoot = ptr.To(true)
				c.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}
			}),
		},
		"the pod's seccomp profile kept": {
			pod:  &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: localhost},
			want: with(func(c *corev1.SecurityContext) { c.SeccompProfile = nil }),
		},
		"the container's seccomp profile kept": {
			user: &corev1.SecurityContext{RunAsUser: ptr.To(int64(7)), SeccompProfile: localhost},
			want: with(func(c *corev1.SecurityContext) { c.RunAsUser = ptr.To(int64(7)); c.SeccompProfile = localhost }),
		},
		"privileged: escalation left to the API server's rule": {
			user: &corev1.SecurityContext{RunAsUser: ptr.To(int64(7)), Privileged: ptr.To(true)},
			want: with(func(c *corev1.SecurityContext) {
				c.RunAsUser, c.Privileged, c.AllowPrivilegeEscalation = ptr.To(int64(7)), ptr.To(true), nil
			}),
		},
		"SYS_ADMIN: escalation left unset": {
			user: &corev1.SecurityContext{RunAsUser: ptr.To(int64(7)), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}},
			want: with(func(c *corev1.SecurityContext) {
				c.RunAsUser, c.AllowPrivilegeEscalation = ptr.To(int64(7)), nil
				c.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
			}),
		},
		"escalation the user allowed": {
			user: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(true)},
			want: with(func(c *corev1.SecurityContext) {
				c.RunAsNonRoot, c.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true)
			}),
		},
	} {
		t.Run(name, func(t *testing.T) {
			user := tc.user.DeepCopy()
			got := servingSecurity(tc.pod, tc.user)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("security context (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(user, tc.user); diff != "" {
				t.Errorf("the spec's context was changed in place (-before +after):\n%s", diff)
			}
		})
	}
}
