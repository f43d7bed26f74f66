package router

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Deployment is what a router is run as: where, with which image and how many copies.
type Deployment struct {
	// Name names every object; Namespace is where they live (the servers' namespace, which
	// Config.Namespace must equal: the router's Role grants only that namespace's pods).
	Name, Namespace string
	Image           string
	// PullPolicy defaults to IfNotPresent.
	PullPolicy corev1.PullPolicy
	// Replicas is the number of router pods.
	Replicas int32
	// Labels are added to every object and the router pods; Selector must be a subset of them
	// that selects the router pods alone.
	Labels, Selector map[string]string
	// Resources of the router container.
	Resources corev1.ResourceRequirements
	// NodeSelector and Tolerations place the router pods.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Owner, when set, owns every object.
	Owner *metav1.OwnerReference
	// Env is added to the router container: the secretKeyRef variables its keys' references
	// (Config.APIKey, Config.ControlPlaneKey) name, so that the pod spec names only Secrets.
	Env []corev1.EnvVar
}

// Objects are the Kubernetes objects of one router: its identity and the right to watch the
// servers' pods, the Deployment, and the Service clients use.
type Objects struct {
	ServiceAccount *corev1.ServiceAccount
	Role           *rbacv1.Role
	RoleBinding    *rbacv1.RoleBinding
	Deployment     *appsv1.Deployment
	Service        *corev1.Service
}

// Container port names of the router pods.
const (
	PortHTTP    = "http"
	PortHealth  = "health"
	PortMetrics = "metrics"
)

// Build renders the objects of a router that runs cfg. The router discovers its workers by
// watching pods (list and watch in the namespace; it reads no pod by name); its readiness is its own /readiness (ready
// once it has healthy workers), its liveness /liveness, both on the dedicated probe port.
func Build(d Deployment, cfg Config) (*Objects, error) {
	if d.Name == "" || d.Namespace == "" || d.Image == "" {
		return nil, fmt.Errorf("a router needs a name, a namespace and an image")
	}
	if cfg.Namespace != d.Namespace {
		return nil, fmt.Errorf("the router in namespace %s would discover pods of namespace %s, which its Role does not grant", d.Namespace, cfg.Namespace)
	}
	if len(d.Selector) == 0 {
		return nil, fmt.Errorf("a router needs a selector of its own pods")
	}
	for k, v := range d.Selector {
		if d.Labels[k] != v {
			return nil, fmt.Errorf("the router's selector %s=%s is not one of its labels", k, v)
		}
	}
	args, err := Args(cfg)
	if err != nil {
		return nil, err
	}
	port, health, metrics := cfg.Ports()
	meta := func() metav1.ObjectMeta {
		m := metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: clone(d.Labels)}
		if d.Owner != nil {
			m.OwnerReferences = []metav1.OwnerReference{*d.Owner}
		}
		return m
	}
	pull := d.PullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(PortHealth)}},
			PeriodSeconds:    period,
			TimeoutSeconds:   2,
			FailureThreshold: failures,
		}
	}
	container := corev1.Container{
		Name:            "router",
		Image:           d.Image,
		ImagePullPolicy: pull,
		Command:         Command(),
		Args:            args,
		Ports: []corev1.ContainerPort{
			{Name: PortHTTP, ContainerPort: int32(port), Protocol: corev1.ProtocolTCP},
			{Name: PortHealth, ContainerPort: int32(health), Protocol: corev1.ProtocolTCP},
			{Name: PortMetrics, ContainerPort: int32(metrics), Protocol: corev1.ProtocolTCP},
		},
		Resources: d.Resources,
		// The root file system is read-only: whatever the router caches goes to /tmp.
		Env:            append([]corev1.EnvVar{{Name: "HOME", Value: "/tmp"}}, d.Env...),
		VolumeMounts:   []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
		StartupProbe:   probe("/liveness", 1, 60),
		ReadinessProbe: probe("/readiness", 2, 1),
		LivenessProbe:  probe("/liveness", 10, 3),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(int64(65532)),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	podLabels := clone(d.Labels)
	o := &Objects{
		ServiceAccount: &corev1.ServiceAccount{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(),
		},
		Role: &rbacv1.Role{
			TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: meta(),
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}}},
		},
		RoleBinding: &rbacv1.RoleBinding{
			TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"}, ObjectMeta: meta(),
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: d.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: d.Name, Namespace: d.Namespace}},
		},
		Deployment: &appsv1.Deployment{
			TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: meta(),
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(d.Replicas),
				Selector: &metav1.LabelSelector{MatchLabels: clone(d.Selector)},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
					Spec: corev1.PodSpec{
						ServiceAccountName: d.Name,
						Containers:         []corev1.Container{container},
						Volumes:            []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
						NodeSelector:       d.NodeSelector,
						Tolerations:        d.Tolerations,
						SecurityContext: &corev1.PodSecurityContext{
							RunAsNonRoot:   ptr.To(true),
							SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
					},
				},
			},
		},
		Service: &corev1.Service{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: meta(),
			Spec: corev1.ServiceSpec{
				Selector: clone(d.Selector),
				Ports: []corev1.ServicePort{
					{Name: PortHTTP, Port: int32(port), TargetPort: intstr.FromString(PortHTTP), Protocol: corev1.ProtocolTCP},
					{Name: PortMetrics, Port: int32(metrics), TargetPort: intstr.FromString(PortMetrics), Protocol: corev1.ProtocolTCP},
				},
			},
		},
	}
	return o, nil
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
