package hicachedeployment

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/config/crd"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

func withRouter(h *hicachev1alpha1.HiCacheDeployment, policy string) *hicachev1alpha1.HiCacheDeployment {
	h.Spec.Router = &hicachev1alpha1.RouterSpec{Replicas: 2, Policy: hicachev1alpha1.RoutingPolicy(policy)}
	return h
}

// The router discovers exactly the groups' leaders of its deployment, in its namespace, and the
// client Service fronts the router instead of the leaders.
func TestRouterFrontsTheLeaders(t *testing.T) {
	h := withRouter(testsupport.MakeHCD("q").TP(4).Obj(), "power_of_two")
	objs, err := BuildRouter(h, storeuse.DefaultRouterImage)
	if err != nil {
		t.Fatal(err)
	}
	c := objs.Deployment.Spec.Template.Spec.Containers[0]
	if c.Image != storeuse.DefaultRouterImage || *objs.Deployment.Spec.Replicas != 2 {
		t.Errorf("router image %s, %d replicas", c.Image, *objs.Deployment.Spec.Replicas)
	}
	want := []string{"--service-discovery-namespace", h.Namespace, "--service-discovery-port", "30000",
		"--selector", appsv1.PodIndexLabel + "=0", hicachev1alpha1.LabelDeployment + "=q", "--policy", "power_of_two"}
	for i := 0; i+1 < len(want); i += 2 {
		j := slices.Index(c.Args, want[i])
		if j < 0 || j+1 >= len(c.Args) || c.Args[j+1] != want[i+1] {
			t.Errorf("router args %q lack %s %s", c.Args, want[i], want[i+1])
		}
	}
	if !metav1.IsControlledBy(objs.Deployment, h) || !metav1.IsControlledBy(objs.Role, h) {
		t.Errorf("the router's objects are not owned by the deployment")
	}
	// Its pods are not serving pods: the deployment's NetworkPolicy and pod watch do not see them.
	podLabels := objs.Deployment.Spec.Template.Labels
	if _, ok := podLabels[hicachev1alpha1.LabelDeployment]; ok {
		t.Errorf("router pods carry %s: %v", hicachev1alpha1.LabelDeployment, podLabels)
	}
	svc := BuildClientService(h)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
		t.Errorf("the client Service selects %v, not the router pods %v", svc.Spec.Selector, podLabels)
	}
	if port := c.Ports[slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == router.PortHTTP })]; port.ContainerPort != SGLangPort || svc.Spec.Ports[0].TargetPort.StrVal != router.PortHTTP {
		t.Errorf("client Service targets %v, the router listens on %v", svc.Spec.Ports[0].TargetPort, port)
	}
	// Without a router the client Service fronts the leaders, as before.
	plain := BuildClientService(testsupport.MakeHCD("q").TP(4).Obj())
	if plain.Spec.Selector[appsv1.PodIndexLabel] != "0" || plain.Spec.Selector[hicachev1alpha1.LabelDeployment] != "q" {
		t.Errorf("client Service without a router selects %v", plain.Spec.Selector)
	}
}

func TestRouterImageFromTheSpec(t *testing.T) {
	h := withRouter(testsupport.MakeHCD("q").Obj(), "")
	h.Spec.Router.Image = "registry.example/smg:1.13.0"
	objs, err := BuildRouter(h, storeuse.DefaultRouterImage)
	if err != nil {
		t.Fatal(err)
	}
	c := objs.Deployment.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example/smg:1.13.0" || !slices.Contains(c.Args, router.DefaultPolicy) {
		t.Errorf("image %s, args %q; want the spec's image and the default policy", c.Image, c.Args)
	}
}

// With spec.security.clients, the router is admitted to the leaders' HTTP port beside them.
func TestRouterIsTheLeadersClient(t *testing.T) {
	h := withRouter(testsupport.MakeHCD("q").TP(4).Obj(), "")
	h.Spec.Security = &hicachev1alpha1.ServingSecurity{Clients: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gateway"}}}}}
	r := testsupport.MustResolve(t, h)
	np := BuildDeploymentNetworkPolicy(h, r)
	var found bool
	for _, p := range np.Spec.Ingress[0].From {
		if p.PodSelector != nil && p.PodSelector.MatchLabels[hicachev1alpha1.LabelRouter] == "q" {
			found = true
		}
	}
	if !found || len(np.Spec.Ingress[0].From) != 2 {
		t.Errorf("HTTP ingress from %+v, want the user's clients and the router", np.Spec.Ingress[0].From)
	}
	if len(h.Spec.Security.Clients) != 1 {
		t.Errorf("building the policy changed spec.security.clients")
	}
}

// pdWithRouter is the PD sample (prefill TP 8 x 2 groups, decode TP 16 x 1 group) with a router.
func pdWithRouter(t *testing.T, r hicachev1alpha1.RouterSpec) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	h := testutil.LoadSample(t, "pd_deepseek_v4.yaml")
	h.Namespace = "serving"
	h.Spec.Router = &r
	h.Default()
	return h
}

// selectorArg reads the label selector that follows flag on a router command line: its
// key=value words up to the next flag.
func selectorArg(t *testing.T, args []string, flag string) labels.Selector {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 {
		return nil
	}
	set := labels.Set{}
	for _, w := range args[i+1:] {
		if strings.HasPrefix(w, "--") {
			break
		}
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			t.Fatalf("%s %q is not key=value", flag, w)
		}
		set[k] = v
	}
	return labels.SelectorFromSet(set)
}

// rankPodLabels are the labels of a rank pod of a deployment with roles: the group's labels, its
// role and its index in the group.
func rankPodLabels(h *hicachev1alpha1.HiCacheDeployment, role hicachev1alpha1.Role, g, index int) labels.Set {
	l := labels.Set(groupLabels(h, GroupKey{role: role, index: g}))
	l[roleLabel] = string(role)
	l[appsv1.PodIndexLabel] = strconv.Itoa(index)
	return l
}

// In prefill/decode mode the router discovers exactly the leaders of each role apart: its prefill
// selector matches the prefill groups' leaders and nothing else, its decode selector the decode
// groups' leaders, and neither matches a follower or another deployment's pods.
func TestPDRouterDiscoversEachRolesLeaders(t *testing.T) {
	h := pdWithRouter(t, hicachev1alpha1.RouterSpec{DecodePolicy: "power_of_two"})
	objs, err := BuildRouter(h, storeuse.DefaultRouterImage)
	if err != nil {
		t.Fatal(err)
	}
	args := objs.Deployment.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--pd-disaggregation") || slices.Contains(args, "--selector") {
		t.Fatalf("router args %q: want prefill/decode mode and no regular selector", args)
	}
	for flag, want := range map[string]string{"--policy": "cache_aware", "--decode-policy": "power_of_two", "--service-discovery-namespace": "serving"} {
		if i := slices.Index(args, flag); i < 0 || args[i+1] != want {
			t.Errorf("router args %q: want %s %s", args, flag, want)
		}
	}
	if slices.Contains(args, "--prefill-policy") {
		t.Errorf("router args %q: an unset spec.router.prefillPolicy renders --prefill-policy", args)
	}
	other := h.DeepCopy()
	other.Name = "other"
	pods := map[string]labels.Set{
		"prefill-0 leader":   rankPodLabels(h, hicachev1alpha1.RolePrefill, 0, 0),
		"prefill-1 leader":   rankPodLabels(h, hicachev1alpha1.RolePrefill, 1, 0),
		"decode-0 leader":    rankPodLabels(h, hicachev1alpha1.RoleDecode, 0, 0),
		"decode-0 follower":  rankPodLabels(h, hicachev1alpha1.RoleDecode, 0, 1),
		"prefill-0 follower": rankPodLabels(h, hicachev1alpha1.RolePrefill, 0, 1),
		"another's prefill":  rankPodLabels(other, hicachev1alpha1.RolePrefill, 0, 0),
		"another's decode":   rankPodLabels(other, hicachev1alpha1.RoleDecode, 0, 0),
		"a router pod":       labels.Set(objs.Deployment.Spec.Template.Labels),
	}
	for flag, want := range map[string][]string{
		"--prefill-selector": {"prefill-0 leader", "prefill-1 leader"},
		"--decode-selector":  {"decode-0 leader"},
	} {
		sel := selectorArg(t, args, flag)
		if sel == nil {
			t.Fatalf("router args %q lack %s", args, flag)
		}
		var got []string
		for name, l := range pods {
			if sel.Matches(l) {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s %s matches %q, want %q", flag, sel, got, want)
		}
	}
}

func TestPDRouterPolicies(t *testing.T) {
	for name, tc := range map[string]struct {
		spec hicachev1alpha1.RouterSpec
		want map[string]string // flag -> value; "" means absent
	}{
		"cache-aware for both by default": {spec: hicachev1alpha1.RouterSpec{},
			want: map[string]string{"--policy": "cache_aware", "--prefill-policy": "", "--decode-policy": ""}},
		"one policy for both": {spec: hicachev1alpha1.RouterSpec{Policy: "round_robin"},
			want: map[string]string{"--policy": "round_robin", "--prefill-policy": "", "--decode-policy": ""}},
		"each role its own": {spec: hicachev1alpha1.RouterSpec{PrefillPolicy: "prefix_hash", DecodePolicy: "least_load"},
			want: map[string]string{"--policy": "cache_aware", "--prefill-policy": "prefix_hash", "--decode-policy": "least_load"}},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := BuildRouter(pdWithRouter(t, tc.spec), storeuse.DefaultRouterImage)
			if err != nil {
				t.Fatal(err)
			}
			args := objs.Deployment.Spec.Template.Spec.Containers[0].Args
			for flag, want := range tc.want {
				i := slices.Index(args, flag)
				switch {
				case want == "" && i >= 0:
					t.Errorf("router args %q: want no %s", args, flag)
				case want != "" && (i < 0 || args[i+1] != want):
					t.Errorf("router args %q: want %s %s", args, flag, want)
				}
			}
		})
	}
}

// A role's policy without roles is refused with the field to change, as the API server's rule
// refuses it.
func TestRolePolicyWithoutRolesIsRefused(t *testing.T) {
	h := withRouter(testsupport.MakeHCD("q").TP(4).Obj(), "")
	h.Spec.Router.DecodePolicy = "power_of_two"
	_, err := BuildRouter(h, storeuse.DefaultRouterImage)
	if err == nil || !strings.Contains(err.Error(), "spec.router.decodePolicy") || !strings.Contains(err.Error(), "only with spec.roles") {
		t.Fatalf("got %v, want a refusal naming spec.router.decodePolicy", err)
	}
}

// The prefill leaders tell the router their bootstrap port, the one rendered into their
// --disaggregation-bootstrap-port; decode pods carry nothing for it.
func TestRolePodAnnotationsCarryTheBootstrapPort(t *testing.T) {
	for name, tc := range map[string]struct {
		port int32 // spec.roles.transfer.bootstrapPort; 0 leaves the default
		want string
	}{
		"the default": {want: "8998"},
		"a port set":  {port: 9100, want: "9100"},
	} {
		t.Run(name, func(t *testing.T) {
			h := testutil.LoadSample(t, "pd_deepseek_v4.yaml")
			h.Spec.Roles.Transfer.BootstrapPort = tc.port
			roles, err := resolve.RolesOf(h)
			if err != nil {
				t.Fatal(err)
			}
			if got := RolePodAnnotations(roles, hicachev1alpha1.RolePrefill); len(got) != 1 || got[router.BootstrapPortAnnotation] != tc.want {
				t.Errorf("prefill annotations %v, want %s=%s", got, router.BootstrapPortAnnotation, tc.want)
			}
			if got := RolePodAnnotations(roles, hicachev1alpha1.RoleDecode); len(got) != 0 {
				t.Errorf("decode annotations %v, want none", got)
			}
			cfg, _, err := resolve.RoleServerConfig(roles, roles.Prefill, testsupport.TestBackend(), "x:5000")
			if err != nil {
				t.Fatal(err)
			}
			args, err := sglang.Args(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.Index(args, "--disaggregation-bootstrap-port"); i < 0 || args[i+1] != tc.want {
				t.Errorf("prefill args %q: want --disaggregation-bootstrap-port %s, the port the router is told", args, tc.want)
			}
		})
	}
}

// routerPolicyEnums are the values the CRD admits for spec.router's policies, by field.
func routerPolicyEnums(t *testing.T) map[string][]string {
	t.Helper()
	b, err := crd.Bases.ReadFile("bases/hicache.io_hicachedeployments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &def); err != nil {
		t.Fatal(err)
	}
	props := def.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["router"].Properties
	out := map[string][]string{}
	for _, field := range []string{"policy", "prefillPolicy", "decodePolicy"} {
		for _, v := range props[field].Enum {
			var s string
			if err := json.Unmarshal(v.Raw, &s); err != nil {
				t.Fatal(err)
			}
			out[field] = append(out[field], s)
		}
		if len(out[field]) == 0 {
			t.Fatalf("the CRD admits no value of spec.router.%s", field)
		}
	}
	return out
}

// Every policy the API admits renders a router command line the pinned router accepts, in both
// modes: the router's own argument table is the judge (BuildRouter checks against it).
func TestEveryAdmittedPolicyRendersAnAcceptedRouter(t *testing.T) {
	enums := routerPolicyEnums(t)
	for _, p := range enums["policy"] {
		if _, err := BuildRouter(withRouter(testsupport.MakeHCD("q").TP(4).Obj(), p), storeuse.DefaultRouterImage); err != nil {
			t.Errorf("spec.router.policy %s without roles: %v", p, err)
		}
		if _, err := BuildRouter(pdWithRouter(t, hicachev1alpha1.RouterSpec{Policy: hicachev1alpha1.RoutingPolicy(p)}), storeuse.DefaultRouterImage); err != nil {
			t.Errorf("spec.router.policy %s with roles: %v", p, err)
		}
	}
	for _, p := range enums["prefillPolicy"] {
		if _, err := BuildRouter(pdWithRouter(t, hicachev1alpha1.RouterSpec{PrefillPolicy: hicachev1alpha1.PrefillRoutingPolicy(p)}), storeuse.DefaultRouterImage); err != nil {
			t.Errorf("spec.router.prefillPolicy %s: %v", p, err)
		}
	}
	for _, p := range enums["decodePolicy"] {
		if _, err := BuildRouter(pdWithRouter(t, hicachev1alpha1.RouterSpec{DecodePolicy: hicachev1alpha1.RoutingPolicy(p)}), storeuse.DefaultRouterImage); err != nil {
			t.Errorf("spec.router.decodePolicy %s: %v", p, err)
		}
	}
}
