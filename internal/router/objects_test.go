package router

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func pdConfig(ns string) Config {
	return Config{Namespace: ns, WorkerPort: 30000,
		PrefillSelector: map[string]string{"hicache.io/deployment": "x", "hicache.io/role": "prefill"},
		DecodeSelector:  map[string]string{"hicache.io/deployment": "x", "hicache.io/role": "decode"},
		ControlPlaneKey: "$(ROUTER_KEY)"}
}

func TestBuild(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/name": "router", "hicache.io/deployment": "x"}
	key := corev1.EnvVar{Name: "ROUTER_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "x-router-admin"}, Key: "admin-api-key"}}}
	o, err := Build(Deployment{Name: "x-router", Namespace: "serving", Image: "localhost/smg:1.13.0", Replicas: 2, Labels: labels, Selector: labels,
		Env: []corev1.EnvVar{key}}, pdConfig("serving"))
	if err != nil {
		t.Fatal(err)
	}
	// It may list and watch the pods of its namespace, nothing else: its discovery is a watch.
	if len(o.Role.Rules) != 1 || !slices.Equal(o.Role.Rules[0].Resources, []string{"pods"}) || !slices.Equal(o.Role.Rules[0].Verbs, []string{"list", "watch"}) {
		t.Errorf("role rules %+v, want list and watch on pods only", o.Role.Rules)
	}
	if s := o.RoleBinding.Subjects; len(s) != 1 || s[0].Name != o.ServiceAccount.Name || s[0].Namespace != "serving" || o.RoleBinding.RoleRef.Name != o.Role.Name {
		t.Errorf("role binding %+v does not bind the router's service account to its role", o.RoleBinding)
	}
	pod := o.Deployment.Spec.Template.Spec
	if pod.ServiceAccountName != o.ServiceAccount.Name || *o.Deployment.Spec.Replicas != 2 {
		t.Errorf("pods run as %q, %d replicas", pod.ServiceAccountName, *o.Deployment.Spec.Replicas)
	}
	c := pod.Containers[0]
	if !slices.Equal(c.Command, Command()) || !slices.Contains(c.Args, "--pd-disaggregation") {
		t.Errorf("container runs %q %q", c.Command, c.Args)
	}
	// The key reaches the container only from its Secret, which the command line names by variable.
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == key.Name && e.ValueFrom == key.ValueFrom }) ||
		!slices.Contains(c.Args, "operator:operator:admin:$(ROUTER_KEY)") {
		t.Errorf("container env %+v, args %q: want the control-plane key from its Secret", c.Env, c.Args)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != PortHealth {
			t.Errorf("%s probe %+v is not on the probe port", name, p)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readiness" {
		t.Errorf("readiness probe on %s, want the router's /readiness", c.ReadinessProbe.HTTPGet.Path)
	}
	if sc := c.SecurityContext; sc == nil || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("container security context %+v does not meet the restricted profile", sc)
	}
	if o.Service.Spec.Selector["app.kubernetes.io/name"] != "router" || o.Service.Spec.Ports[0].Port != DefaultPort {
		t.Errorf("service %+v", o.Service.Spec)
	}
}

func TestBuildRefuses(t *testing.T) {
	labels := map[string]string{"a": "b"}
	for name, tc := range map[string]struct {
		d    Deployment
		cfg  Config
		want string
	}{
		"another namespace": {d: Deployment{Name: "r", Namespace: "a", Image: "i", Labels: labels, Selector: labels}, cfg: pdConfig("b"), want: "which its Role does not grant"},
		"no selector":       {d: Deployment{Name: "r", Namespace: "a", Image: "i", Labels: labels}, cfg: pdConfig("a"), want: "selector of its own pods"},
		"selector not a label": {d: Deployment{Name: "r", Namespace: "a", Image: "i", Labels: labels, Selector: map[string]string{"c": "d"}}, cfg: pdConfig("a"),
			want: "is not one of its labels"},
		"no image":      {d: Deployment{Name: "r", Namespace: "a", Labels: labels, Selector: labels}, cfg: pdConfig("a"), want: "needs a name, a namespace and an image"},
		"a bad command": {d: Deployment{Name: "r", Namespace: "a", Image: "i", Labels: labels, Selector: labels}, cfg: Config{Namespace: "a", WorkerPort: 1}, want: "needs a Selector"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Build(tc.d, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
