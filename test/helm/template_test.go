package helm

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// fullname is the name of the release's objects with default values.
const fullname = release

// chartMeta is what the tests read from Chart.yaml.
type chartMeta struct {
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

func readChart(t *testing.T) chartMeta {
	t.Helper()
	var c chartMeta
	readYAML(t, "charts/hicache-operator/Chart.yaml", &c)
	if c.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return c
}

func deployment(t *testing.T, m manifest, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	typed(t, m, "Deployment", name, &d)
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("Deployment %s has %d containers, want 1 (manager)", name, n)
	}
	return &d
}

func manager(d *appsv1.Deployment) corev1.Container { return d.Spec.Template.Spec.Containers[0] }

// args maps each --flag=value argument to its value.
func args(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Fatalf("argument %q is not --flag=value", a)
		}
		if _, dup := out[name]; dup {
			t.Fatalf("flag --%s is given twice in %q", name, c.Args)
		}
		out[name] = value
	}
	return out
}

func port(c corev1.Container, name string) *corev1.ContainerPort {
	for i := range c.Ports {
		if c.Ports[i].Name == name {
			return &c.Ports[i]
		}
	}
	return nil
}

// rulesOf reads the rules of the (Cluster)Role in a file of config/rbac.
func rulesOf(t *testing.T, rel string) []rbacv1.PolicyRule {
	t.Helper()
	var r rbacv1.ClusterRole
	readYAML(t, rel, &r)
	if len(r.Rules) == 0 {
		t.Fatalf("%s has no rules", rel)
	}
	return r.Rules
}

func TestDefaults(t *testing.T) {
	m := render(t)
	chart := readChart(t)

	// Exactly these objects, so that nothing appears or goes missing unnoticed.
	want := []string{
		"ClusterRole/" + fullname + "-flush-override",
		"ClusterRole/" + fullname + "-manager",
		"ClusterRole/" + fullname + "-metrics-auth",
		"ClusterRole/" + fullname + "-metrics-reader",
		"ClusterRoleBinding/" + fullname + "-manager",
		"ClusterRoleBinding/" + fullname + "-metrics-auth",
		"Deployment/" + fullname,
		"Role/" + fullname + "-leader-election",
		"RoleBinding/" + fullname + "-leader-election",
		"Service/" + fullname + "-metrics",
		"ServiceAccount/" + fullname,
		"ValidatingAdmissionPolicy/" + fullname + "-flush-override",
		"ValidatingAdmissionPolicyBinding/" + fullname + "-flush-override",
	}
	got := m.names()
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}
	for _, u := range m {
		l := u.GetLabels()
		if l["app.kubernetes.io/managed-by"] != "Helm" || l["app.kubernetes.io/instance"] != release || l["app.kubernetes.io/version"] != chart.AppVersion {
			t.Errorf("%s/%s labels %v lack managed-by Helm, instance %s or version %s", u.GetKind(), u.GetName(), l, release, chart.AppVersion)
		}
		switch u.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if u.GetNamespace() != "" {
				t.Errorf("cluster-scoped %s/%s has namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
			}
		default:
			if u.GetNamespace() != namespace {
				t.Errorf("%s/%s is in namespace %q, want the release namespace %s", u.GetKind(), u.GetName(), u.GetNamespace(), namespace)
			}
		}
	}

	d := deployment(t, m, fullname)
	c := manager(d)
	if c.Image != images.Operator {
		t.Errorf("image %q, want %q (the image make images builds)", c.Image, images.Operator)
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy %q, want IfNotPresent", c.ImagePullPolicy)
	}
	// Each replica claims the flushes it runs under its own name.
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env %+v: want POD_NAME from metadata.name, the manager's identity in flush claims", c.Env)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %s, want 1", show(d.Spec.Replicas, func(n *int32) any { return *n }))
	}
	wantArgs := map[string]string{
		"leader-elect":              "true",
		"health-probe-bind-address": ":8081",
		"metrics-bind-address":      ":8443",
		"backend-poll-interval":     "15s",
		"deployment-workers":        strconv.Itoa(storeuse.DefaultDeploymentWorkers),
		"zap-log-level":             "info",
		// The rank pods' proxy runs the operator's own image.
		"guard-image": c.Image,
	}
	if diff := cmp.Diff(wantArgs, args(t, c)); diff != "" {
		t.Errorf("manager flags (-want +got):\n%s", diff)
	}

	t.Run("restricted security context", func(t *testing.T) {
		checkRestricted(t, d)
	})

	t.Run("probes", func(t *testing.T) {
		probes := port(c, "probes")
		if probes == nil || probes.ContainerPort != 8081 {
			t.Fatalf("container port probes %+v, want 8081 (--health-probe-bind-address=:8081)", probes)
		}
		for name, p := range map[string]struct {
			probe *corev1.Probe
			path  string
		}{"liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s probe %+v, want an HTTP GET of %s", name, p.probe, p.path)
				continue
			}
			if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port != intstr.FromString("probes") {
				t.Errorf("%s probe gets %s on port %s, want %s on probes", name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path)
			}
		}
	})

	t.Run("metrics service", func(t *testing.T) {
		var svc corev1.Service
		typed(t, m, "Service", fullname+"-metrics", &svc)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 || svc.Spec.Ports[0].TargetPort != intstr.FromString("metrics") {
			t.Errorf("metrics Service ports %+v, want 8443 to the container port metrics", svc.Spec.Ports)
		}
		if p := port(c, "metrics"); p == nil || p.ContainerPort != 8443 {
			t.Errorf("container port metrics %+v, want 8443", p)
		}
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("metrics Service selector %v does not select the pod labels %v", svc.Spec.Selector, d.Spec.Template.Labels)
		}
	})

	t.Run("rbac", func(t *testing.T) {
		var sa corev1.ServiceAccount
		typed(t, m, "ServiceAccount", fullname, &sa)
		if d.Spec.Template.Spec.ServiceAccountName != sa.Name {
			t.Errorf("the pod runs as ServiceAccount %q, want %q", d.Spec.Template.Spec.ServiceAccountName, sa.Name)
		}
		subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: namespace}}
		for name, want := range map[string]string{
			fullname + "-manager":      "config/rbac/role.yaml",
			fullname + "-metrics-auth": "config/rbac/metrics_auth_role.yaml",
		} {
			var role rbacv1.ClusterRole
			typed(t, m, "ClusterRole", name, &role)
			if diff := cmp.Diff(rulesOf(t, want), role.Rules); diff != "" {
				t.Errorf("ClusterRole %s rules differ from %s (-config +chart):\n%s", name, want, diff)
			}
			var b rbacv1.ClusterRoleBinding
			typed(t, m, "ClusterRoleBinding", name, &b)
			if diff := cmp.Diff(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, b.RoleRef); diff != "" {
				t.Errorf("ClusterRoleBinding %s roleRef (-want +got):\n%s", name, diff)
			}
			if diff := cmp.Diff(subject, b.Subjects); diff != "" {
				t.Errorf("ClusterRoleBinding %s subjects (-want +got):\n%s", name, diff)
			}
		}
		var reader rbacv1.ClusterRole
		typed(t, m, "ClusterRole", fullname+"-metrics-reader", &reader)
		if diff := cmp.Diff(rulesOf(t, "config/rbac/metrics_reader_role.yaml"), reader.Rules); diff != "" {
			t.Errorf("metrics-reader rules differ from config/rbac (-config +chart):\n%s", diff)
		}

		var le rbacv1.Role
		typed(t, m, "Role", fullname+"-leader-election", &le)
		if diff := cmp.Diff(rulesOf(t, "config/rbac/leader_election_role.yaml"), le.Rules); diff != "" {
			t.Errorf("leader-election Role rules differ from config/rbac (-config +chart):\n%s", diff)
		}
		var leb rbacv1.RoleBinding
		typed(t, m, "RoleBinding", fullname+"-leader-election", &leb)
		if diff := cmp.Diff(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: le.Name}, leb.RoleRef); diff != "" {
			t.Errorf("leader-election RoleBinding roleRef (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(subject, leb.Subjects); diff != "" {
			t.Errorf("leader-election RoleBinding subjects (-want +got):\n%s", diff)
		}
	})
}

// checkRestricted checks the operator pod against the restricted Pod Security profile, and a
// read-only root filesystem on top.
func checkRestricted(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("the pod shares host namespaces: network %v, PID %v, IPC %v", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s mounts the host path %s", v.Name, v.HostPath.Path)
		}
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("the pod securityContext does not set runAsNonRoot: true")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("the pod securityContext sets seccompProfile %s, want RuntimeDefault", show(psc, func(p *corev1.PodSecurityContext) any { return p.SeccompProfile }))
	}
	if psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		t.Error("the pod runs as user 0")
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s has no securityContext", c.Name)
			continue
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s: allowPrivilegeEscalation %s, want false", c.Name, show(sc.AllowPrivilegeEscalation, func(b *bool) any { return *b }))
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("container %s is privileged", c.Name)
		}
		if sc.Capabilities == nil || !cmp.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s capabilities %+v, want drop [ALL] and nothing added", c.Name, sc.Capabilities)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s: readOnlyRootFilesystem %s, want true", c.Name, show(sc.ReadOnlyRootFilesystem, func(b *bool) any { return *b }))
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			t.Errorf("container %s runs as user 0", c.Name)
		}
	}
}

func TestValues(t *testing.T) {
	tests := map[string]struct {
		sets  []string
		check func(t *testing.T, m manifest)
	}{
		"watchNamespaces become --watch-namespaces and Roles in those namespaces": {
			sets: []string{"watchNamespaces={a,b}"},
			check: func(t *testing.T, m manifest) {
				if got := args(t, manager(deployment(t, m, fullname)))["watch-namespaces"]; got != "a,b" {
					t.Errorf("--watch-namespaces=%q, want a,b", got)
				}
				// No cluster-wide grant of the manager's rules, and nothing else bound cluster-wide
				// but the metrics authentication.
				for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
					if m.find(kind, fullname+"-manager") != nil {
						t.Errorf("with watchNamespaces the chart still renders %s %s-manager", kind, fullname)
					}
				}
				for _, b := range m.ofKind("ClusterRoleBinding") {
					if b.GetName() != fullname+"-metrics-auth" {
						t.Errorf("with watchNamespaces the chart binds ClusterRoleBinding %s", b.GetName())
					}
				}
				want := map[string]bool{"a": true, "b": true}
				subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: namespace}}
				for _, kind := range []string{"Role", "RoleBinding"} {
					got := map[string]bool{}
					for _, u := range m.ofKind(kind) {
						if u.GetName() != fullname+"-manager" {
							continue
						}
						got[u.GetNamespace()] = true
						if kind == "Role" {
							var r rbacv1.Role
							if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &r, true); err != nil {
								t.Fatal(err)
							}
							if diff := cmp.Diff(rulesOf(t, "config/rbac/role.yaml"), r.Rules); diff != "" {
								t.Errorf("Role %s/%s rules differ from config/rbac/role.yaml (-config +chart):\n%s", r.Namespace, r.Name, diff)
							}
							continue
						}
						var b rbacv1.RoleBinding
						if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &b, true); err != nil {
							t.Fatal(err)
						}
						if diff := cmp.Diff(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: fullname + "-manager"}, b.RoleRef); diff != "" {
							t.Errorf("RoleBinding %s/%s roleRef (-want +got):\n%s", b.Namespace, b.Name, diff)
						}
						if diff := cmp.Diff(subject, b.Subjects); diff != "" {
							t.Errorf("RoleBinding %s/%s subjects (-want +got):\n%s", b.Namespace, b.Name, diff)
						}
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("the namespaces of the %ss %s-manager (-want +got):\n%s", kind, fullname, diff)
					}
				}
			},
		},
		"storeGrants become ClusterCacheStoreGrants": {
			sets: []string{"storeGrants[0].name=shared", "storeGrants[0].rpcAddress=m.b.svc:50051", "storeGrants[0].adminURLs={http://m.b.svc:9003,http://m2.b.svc:9003}",
				"storeGrants[0].namespaces={a,c}", "storeGrants[0].allowCrossNamespaceOverride=true"},
			check: func(t *testing.T, m manifest) {
				var g hicachev1alpha1.ClusterCacheStoreGrant
				typed(t, m, "ClusterCacheStoreGrant", "shared", &g)
				want := hicachev1alpha1.ClusterCacheStoreGrantSpec{RPCAddress: "m.b.svc:50051", AdminURLs: []string{"http://m.b.svc:9003", "http://m2.b.svc:9003"},
					Namespaces: []string{"a", "c"}, AllowCrossNamespaceOverride: true}
				if diff := cmp.Diff(want, g.Spec); diff != "" {
					t.Errorf("ClusterCacheStoreGrant shared (-want +got):\n%s", diff)
				}
				if g.Namespace != "" {
					t.Errorf("the cluster-scoped grant has namespace %q", g.Namespace)
				}
				// No role of the chart lets anyone write grants: the manager reads them, and no
				// role is aggregated into the namespaced admin, edit or view roles.
				for _, kind := range []string{"ClusterRole", "Role"} {
					for _, u := range m.ofKind(kind) {
						var r rbacv1.ClusterRole
						if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
							t.Fatal(err)
						}
						for l := range r.Labels {
							if strings.HasPrefix(l, "rbac.authorization.k8s.io/aggregate-to-") {
								t.Errorf("%s %s is aggregated (%s)", kind, r.Name, l)
							}
						}
						for _, rule := range r.Rules {
							if slices.Contains(rule.Resources, "clustercachestoregrants") || slices.Contains(rule.Resources, "*") {
								if extra := slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == "list" || v == "watch" }); len(extra) > 0 {
									t.Errorf("%s %s grants %v on clustercachestoregrants", kind, r.Name, extra)
								}
							}
						}
					}
				}
				if a := args(t, manager(deployment(t, m, fullname))); a["store-grant"] != "" || a["cluster-scoped-reads"] != "" {
					t.Errorf("without watchNamespaces the grants are objects, not flags: %v", a)
				}
			},
		},
		"storeGrants with watchNamespaces become --store-grant": {
			sets: []string{"watchNamespaces={a}", "storeGrants[0].name=shared", "storeGrants[0].rpcAddress=m.b.svc:50051", "storeGrants[0].adminURLs={http://m.b.svc:9003}",
				"storeGrants[0].namespaces={a}"},
			check: func(t *testing.T, m manifest) {
				if objs := m.ofKind("ClusterCacheStoreGrant"); len(objs) > 0 {
					t.Errorf("with watchNamespaces the chart renders %d ClusterCacheStoreGrants the manager cannot read", len(objs))
				}
				a := args(t, manager(deployment(t, m, fullname)))
				if a["cluster-scoped-reads"] != "false" {
					t.Errorf("--cluster-scoped-reads=%q, want false", a["cluster-scoped-reads"])
				}
				g, err := store.ParseGrant(a["store-grant"])
				if err != nil {
					t.Fatalf("the manager would refuse --store-grant=%q: %v", a["store-grant"], err)
				}
				if want := (store.Grant{Name: "shared", RPCAddress: "m.b.svc:50051", AdminURLs: []string{"http://m.b.svc:9003"}, Namespaces: []string{"a"}}); !cmp.Equal(want, g) {
					t.Errorf("--store-grant is %+v, want %+v", g, want)
				}
			},
		},
		"metrics disabled": {
			sets: []string{"metrics.enabled=false", "metrics.serviceMonitor.enabled=true"},
			check: func(t *testing.T, m manifest) {
				c := manager(deployment(t, m, fullname))
				if got := args(t, c)["metrics-bind-address"]; got != "0" {
					t.Errorf("--metrics-bind-address=%q, want 0 (off)", got)
				}
				if p := port(c, "metrics"); p != nil {
					t.Errorf("the container still declares the metrics port %+v", p)
				}
				for _, kind := range []string{"Service", "ServiceMonitor"} {
					if objs := m.ofKind(kind); len(objs) > 0 {
						t.Errorf("with metrics off the chart still renders a %s", kind)
					}
				}
				for _, name := range []string{fullname + "-metrics-auth", fullname + "-metrics-reader"} {
					if m.find("ClusterRole", name) != nil {
						t.Errorf("with metrics off the chart still renders ClusterRole %s", name)
					}
				}
			},
		},
		"ServiceMonitor": {
			sets: []string{"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=10s", "metrics.serviceMonitor.labels.release=prometheus"},
			check: func(t *testing.T, m manifest) {
				sm := m.find("ServiceMonitor", fullname)
				if sm == nil {
					t.Fatalf("no ServiceMonitor in %v", m.names())
				}
				if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetNamespace() != namespace {
					t.Errorf("ServiceMonitor %s in %q, want monitoring.coreos.com/v1 in %s", sm.GetAPIVersion(), sm.GetNamespace(), namespace)
				}
				if sm.GetLabels()["release"] != "prometheus" || sm.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
					t.Errorf("ServiceMonitor labels %v, want release=prometheus beside the chart's labels", sm.GetLabels())
				}
				var svc corev1.Service
				typed(t, m, "Service", fullname+"-metrics", &svc)
				sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
				if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(svc.Labels)) {
					t.Errorf("ServiceMonitor selector %v does not select the metrics Service (labels %v)", sel, svc.Labels)
				}
				endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
				if len(endpoints) != 1 {
					t.Fatalf("ServiceMonitor endpoints %v, want one", endpoints)
				}
				ep, _ := endpoints[0].(map[string]any)
				if ep["port"] != svc.Spec.Ports[0].Name || ep["scheme"] != "https" || ep["interval"] != "10s" {
					t.Errorf("ServiceMonitor endpoint %v, want port %q over https every 10s", ep, svc.Spec.Ports[0].Name)
				}
			},
		},
		"image tag": {
			sets: []string{"image.repository=registry.example/op", "image.tag=v9.9.9", "image.pullPolicy=Always"},
			check: func(t *testing.T, m manifest) {
				c := manager(deployment(t, m, fullname))
				if c.Image != "registry.example/op:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
					t.Errorf("image %q pull %q, want registry.example/op:v9.9.9 pulled Always", c.Image, c.ImagePullPolicy)
				}
				if got := args(t, c)["guard-image"]; got != c.Image {
					t.Errorf("--guard-image=%q, want the operator's own image %s", got, c.Image)
				}
			},
		},
		"leader election off": {
			sets: []string{"leaderElection=false"},
			check: func(t *testing.T, m manifest) {
				if got := args(t, manager(deployment(t, m, fullname)))["leader-elect"]; got != "false" {
					t.Errorf("--leader-elect=%q, want false", got)
				}
			},
		},
		"several replicas": {
			sets: []string{"replicas=3"},
			check: func(t *testing.T, m manifest) {
				d := deployment(t, m, fullname)
				if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 || args(t, manager(d))["leader-elect"] != "true" {
					t.Errorf("replicas %s with --leader-elect=%s, want 3 with leader election", show(d.Spec.Replicas, func(n *int32) any { return *n }), args(t, manager(d))["leader-elect"])
				}
			},
		},
		"operator settings": {
			sets: []string{"backendPollInterval=1m", "deploymentWorkers=8", "logLevel=debug", "defaults.sglangImage=sglang:x", "defaults.mooncakeImage=mooncake:y"},
			check: func(t *testing.T, m manifest) {
				got := args(t, manager(deployment(t, m, fullname)))
				want := map[string]string{"backend-poll-interval": "1m", "deployment-workers": "8", "zap-log-level": "debug", "default-sglang-image": "sglang:x", "default-mooncake-image": "mooncake:y"}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("--%s=%q, want %q", k, got[k], v)
					}
				}
			},
		},
		"pod settings": {
			sets: []string{
				"podAnnotations.team=serving",
				"podLabels.tier=control",
				`podLabels.app\.kubernetes\.io/name=other`,
				"priorityClassName=system-cluster-critical",
				"nodeSelector.pool=system",
				"tolerations[0].key=dedicated",
				"tolerations[0].operator=Exists",
				"topologySpreadConstraints[0].maxSkew=1",
				"topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
				"topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
				"resources.requests.cpu=250m",
				"resources.limits.memory=1Gi",
				"imagePullSecrets[0].name=pull",
			},
			check: func(t *testing.T, m manifest) {
				d := deployment(t, m, fullname)
				pod := d.Spec.Template
				if pod.Annotations["team"] != "serving" || pod.Annotations["kubectl.kubernetes.io/default-container"] != "manager" {
					t.Errorf("pod annotations %v, want team=serving and the default container", pod.Annotations)
				}
				if pod.Labels["tier"] != "control" {
					t.Errorf("pod labels %v, want tier=control", pod.Labels)
				}
				if sel, err := metav1LabelSelector(d); err != nil || !sel.Matches(labels.Set(pod.Labels)) {
					t.Errorf("podLabels broke the Deployment: selector %v does not match pod labels %v (%v)", d.Spec.Selector, pod.Labels, err)
				}
				if pod.Spec.PriorityClassName != "system-cluster-critical" || pod.Spec.NodeSelector["pool"] != "system" {
					t.Errorf("priorityClassName %q nodeSelector %v", pod.Spec.PriorityClassName, pod.Spec.NodeSelector)
				}
				if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "dedicated" {
					t.Errorf("tolerations %+v", pod.Spec.Tolerations)
				}
				if len(pod.Spec.TopologySpreadConstraints) != 1 || pod.Spec.TopologySpreadConstraints[0].MaxSkew != 1 {
					t.Errorf("topologySpreadConstraints %+v", pod.Spec.TopologySpreadConstraints)
				}
				if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "pull" {
					t.Errorf("imagePullSecrets %+v", pod.Spec.ImagePullSecrets)
				}
				r := manager(d).Resources
				if r.Requests.Cpu().String() != "250m" || r.Limits.Memory().String() != "1Gi" || r.Requests.Memory().String() != "128Mi" {
					t.Errorf("resources %v, want cpu request 250m, memory limit 1Gi and the default memory request 128Mi", r)
				}
			},
		},
		"fullnameOverride names everything": {
			sets: []string{"fullnameOverride=hicache"},
			check: func(t *testing.T, m manifest) {
				for _, u := range m {
					if !strings.HasPrefix(u.GetName(), "hicache") || strings.HasPrefix(u.GetName(), release) {
						t.Errorf("%s/%s is not named after fullnameOverride", u.GetKind(), u.GetName())
					}
				}
				var b rbacv1.ClusterRoleBinding
				typed(t, m, "ClusterRoleBinding", "hicache-manager", &b)
				if len(b.Subjects) != 1 || b.Subjects[0].Name != "hicache" || deployment(t, m, "hicache").Spec.Template.Spec.ServiceAccountName != "hicache" {
					t.Errorf("the binding %+v and the pod must name the ServiceAccount hicache", b.Subjects)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := render(t, tc.sets...)
			tc.check(t, m)
			checkRestricted(t, deployment(t, m, m.ofKind("Deployment")[0].GetName()))
		})
	}
}

// show prints what f picks from p, or "unset" when p is nil.
func show[T any](p *T, f func(*T) any) string {
	if p == nil {
		return "unset"
	}
	v := f(p)
	if v == nil {
		return "unset"
	}
	return fmt.Sprintf("%v", v)
}

func metav1LabelSelector(d *appsv1.Deployment) (labels.Selector, error) {
	if d.Spec.Selector == nil {
		return labels.Nothing(), nil
	}
	return labels.ValidatedSelectorFromSet(d.Spec.Selector.MatchLabels)
}

func TestRefusedValues(t *testing.T) {
	tests := map[string]struct {
		sets []string
		// want are pieces of the error a person reads: the value's path and why.
		want []string
	}{
		"unknown pull policy":   {sets: []string{"image.pullPolicy=Sometimes"}, want: []string{"/image/pullPolicy", "IfNotPresent", "Always", "Never"}},
		"negative replicas":     {sets: []string{"replicas=-1"}, want: []string{"/replicas", "minimum"}},
		"unknown top-level key": {sets: []string{"replica=2"}, want: []string{"'replica' not allowed"}},
		"unknown nested key":    {sets: []string{"metrics.port=9090"}, want: []string{"/metrics", "'port' not allowed"}},
		"bad namespace":         {sets: []string{"watchNamespaces={Team_A}"}, want: []string{"/watchNamespaces/0", "Team_A"}},
		"bad interval":          {sets: []string{"backendPollInterval=soon"}, want: []string{"/backendPollInterval", "soon"}},
		"no workers":            {sets: []string{"deploymentWorkers=0"}, want: []string{"/deploymentWorkers", "minimum"}},
		"bad quantity":          {sets: []string{"resources.limits.memory=lots"}, want: []string{"/resources/limits/memory", "lots"}},
		"unknown log level":     {sets: []string{"logLevel=verbose"}, want: []string{"/logLevel", "info"}},
		"bad fullnameOverride":  {sets: []string{"fullnameOverride=My_Operator"}, want: []string{"/fullnameOverride", "My_Operator"}},
		"grant admin URL with userinfo": {sets: []string{"storeGrants[0].name=g", "storeGrants[0].rpcAddress=m.b.svc:1", "storeGrants[0].adminURLs={http://u@m.b.svc:9003}", "storeGrants[0].namespaces={a}"},
			want: []string{"/storeGrants/0/adminURLs/0", "http://u@m.b.svc:9003"}},
		"grant without namespaces": {sets: []string{"storeGrants[0].name=g", "storeGrants[0].rpcAddress=m.b.svc:1", "storeGrants[0].adminURLs={http://m.b.svc:9003}"},
			want: []string{"/storeGrants/0", "namespaces"}},
		"replicas without leader": {sets: []string{"replicas=2", "leaderElection=false"}, want: []string{"replicas is 2 but leaderElection is false", "set leaderElection=true or replicas=1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, stderr, err := runHelm(t, append([]string{"template", release, chartDir(), "--namespace", namespace}, setArgs(tc.sets)...)...)
			if err == nil {
				t.Fatalf("helm template accepted %v; it rendered %d bytes", tc.sets, len(out))
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("the error does not say %q:\n%s", w, stderr)
				}
			}
		})
	}
}

func TestLint(t *testing.T) {
	out, stderr, err := runHelm(t, "lint", "--strict", chartDir())
	if err != nil || !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
		t.Fatalf("helm lint --strict: %v\n%s%s", err, out, stderr)
	}
	for _, level := range []string{"[WARNING]", "[ERROR]"} {
		if strings.Contains(out, level) {
			t.Errorf("helm lint reports %s:\n%s", level, out)
		}
	}
}

// TestCRDsMatchConfig checks that the chart ships the CRDs of config/crd/bases, unchanged.
func TestCRDsMatchConfig(t *testing.T) {
	m := renderArgs(t, "template", release, chartDir(), "--namespace", namespace, "--include-crds")
	dir := filepath.Join(repoRoot(), "config", "crd", "bases")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", dir, err)
	}
	crds := map[string]*unstructured.Unstructured{}
	for _, u := range m.ofKind("CustomResourceDefinition") {
		crds[u.GetName()] = u
	}
	for _, f := range files {
		var want map[string]any
		readYAML(t, filepath.Join("config", "crd", "bases", filepath.Base(f)), &want)
		name, _, _ := unstructured.NestedString(want, "metadata", "name")
		got, ok := crds[name]
		if !ok {
			t.Errorf("the chart has no CRD %s (from %s); run make generate", name, filepath.Base(f))
			continue
		}
		delete(crds, name)
		if diff := cmp.Diff(want, got.Object); diff != "" {
			t.Errorf("the chart's CRD %s differs from config/crd/bases; run make generate (-config +chart):\n%s", name, diff)
		}
	}
	if len(crds) > 0 {
		t.Errorf("the chart has CRDs that config/crd/bases has not: %v", slices.Sorted(maps.Keys(crds)))
	}
}

// TestFlagsAreTheManagers checks that every flag the chart passes is one the manager binary
// defines: cmd/manager/main.go's own flags, read from its source, and the zap flags it binds.
func TestFlagsAreTheManagers(t *testing.T) {
	defined := managerFlags(t)
	m := render(t, "watchNamespaces={a}", "defaults.sglangImage=s", "defaults.mooncakeImage=m")
	for name := range args(t, manager(deployment(t, m, fullname))) {
		if !defined[name] {
			t.Errorf("the chart passes --%s, which cmd/manager does not define (it defines %v)", name, slices.Sorted(maps.Keys(defined)))
		}
	}
}

// managerFlags lists the flags of cmd/manager: the string literal names of its flag.XxxVar calls
// and the flags zap.Options binds.
func managerFlags(t *testing.T) map[string]bool {
	t.Helper()
	defs, src, path := managerFlagDefs(t)
	defined := map[string]bool{}
	for _, d := range defs {
		defined[d.name] = true
	}
	if !strings.Contains(string(src), "BindFlags(flag.CommandLine)") {
		t.Fatalf("%s no longer binds zap's flags; update this test", path)
	}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	(&zap.Options{}).BindFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { defined[f.Name] = true })
	if len(defined) < 5 {
		t.Fatalf("found only %v in %s; the parser missed the flag definitions", defined, path)
	}
	return defined
}

// flagDef is one flag defined in cmd/manager/main.go: the flag package's function that defines
// it, its name, and the source text of its default value.
type flagDef struct {
	fn, name, def string
}

// managerFlagDefs parses cmd/manager/main.go for its flag.X and flag.XVar calls, and returns them
// with the file's source and path.
func managerFlagDefs(t *testing.T) ([]flagDef, []byte, string) {
	t.Helper()
	path := filepath.Join(repoRoot(), "cmd", "manager", "main.go")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	file, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	var defs []flagDef
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "flag" {
			return true
		}
		nameArg := 0
		if strings.HasSuffix(sel.Sel.Name, "Var") {
			nameArg = 1
		}
		if len(call.Args) <= nameArg+1 {
			return true
		}
		lit, ok := call.Args[nameArg].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		name, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		def := call.Args[nameArg+1]
		defs = append(defs, flagDef{fn: sel.Sel.Name, name: name, def: string(src[def.Pos()-file.FileStart : def.End()-file.FileStart])})
		return true
	})
	return defs, src, path
}

// The chart ships config/admission's policy guarding spec.allowInUse and the ClusterRole that
// grants the override verb, under its own names.
func TestFlushOverrideMatchesConfig(t *testing.T) {
	m := render(t)
	name := fullname + "-flush-override"
	var want, got admissionregistrationv1.ValidatingAdmissionPolicy
	readYAML(t, "config/admission/flush_override_policy.yaml", &want)
	typed(t, m, "ValidatingAdmissionPolicy", name, &got)
	for i := range want.Spec.Validations {
		v := &want.Spec.Validations[i]
		v.MessageExpression = strings.ReplaceAll(v.MessageExpression, "hicache-operator-flush-override", name)
	}
	if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
		t.Errorf("the chart's policy differs from config/admission (-config +chart):\n%s", diff)
	}
	var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
	typed(t, m, "ValidatingAdmissionPolicyBinding", name, &b)
	if b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %+v, want policy %s denied", b.Spec, name)
	}
	var role rbacv1.ClusterRole
	typed(t, m, "ClusterRole", name, &role)
	if diff := cmp.Diff(rulesOf(t, "config/admission/flush_override_role.yaml"), role.Rules); diff != "" {
		t.Errorf("ClusterRole %s rules differ from config/admission (-config +chart):\n%s", name, diff)
	}
}
