package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
)

// A deployment with spec.router gets a router that discovers its leaders, with the right to watch
// the namespace's pods and nothing more; the client Service fronts the router. Removing
// spec.router removes the router and points the Service back at the leaders.
func TestRouterInFrontOfTheGroups(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	h := hcd(t, ns, qwen3)
	h.Spec.Router = &hicachev1alpha1.RouterSpec{Replicas: 1, Policy: "cache_aware"}
	create(t, h)
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "qwen3", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 60*time.Second)

	ctx := context.Background()
	key := types.NamespacedName{Namespace: ns, Name: "qwen3-router"}
	var dep appsv1.Deployment
	eventually(t, 30*time.Second, "the router Deployment", func() (bool, string) {
		err := k8s.Get(ctx, key, &dep)
		return err == nil, fmt.Sprint(err)
	})
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != storeuse.DefaultRouterImage || dep.Spec.Template.Spec.ServiceAccountName != "qwen3-router" {
		t.Errorf("router runs %s as %s", c.Image, dep.Spec.Template.Spec.ServiceAccountName)
	}
	spec, err := router.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(c.Args); err != nil {
		t.Errorf("the pinned router refuses the applied command line: %v", err)
	}
	for _, want := range []string{"--service-discovery", hicachev1alpha1.LabelDeployment + "=qwen3", "apps.kubernetes.io/pod-index=0"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("router args %q lack %s", c.Args, want)
		}
	}
	var role rbacv1.Role
	if err := k8s.Get(ctx, key, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"pods"}) || slices.ContainsFunc(role.Rules[0].Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
		t.Errorf("router role %+v grants more than reading pods", role.Rules)
	}
	var rb rbacv1.RoleBinding
	var sa corev1.ServiceAccount
	if err := k8s.Get(ctx, key, &rb); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, key, &sa); err != nil {
		t.Fatal(err)
	}
	// The router reaches every leader: its own policy admits only the servers' clients (here,
	// with no spec.security.clients, the pods of the namespace) and selects its pods.
	var np networkingv1.NetworkPolicy
	if err := k8s.Get(ctx, key, &np); err != nil {
		t.Fatalf("the router's NetworkPolicy: %v", err)
	}
	if !maps.Equal(np.Spec.PodSelector.MatchLabels, map[string]string{hicachev1alpha1.LabelRouter: "qwen3"}) ||
		len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0].NamespaceSelector != nil {
		t.Errorf("the router's NetworkPolicy selects %v and admits %+v, want the router pods and the namespace's pods", np.Spec.PodSelector.MatchLabels, np.Spec.Ingress)
	}
	// Its management routes take a key of its own, generated into a Secret owned by the
	// deployment and given to the router only by reference; it is never given the servers' admin key.
	var routerKey corev1.Secret
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen3-router-admin"}, &routerKey); err != nil {
		t.Fatalf("the router's key Secret: %v", err)
	}
	if p := resolve.KeyProblem(routerKey.Data[resolve.GeneratedAdminKeyField]); p != "" || !metav1.IsControlledBy(&routerKey, getHCD(t, ns, "qwen3")) {
		t.Errorf("the router's generated key %s; owned by the deployment: %v", p, metav1.IsControlledBy(&routerKey, getHCD(t, ns, "qwen3")))
	}
	refs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	if !maps.Equal(refs, map[string]string{resolve.RouterAdminKeyEnv: "qwen3-router-admin/admin-api-key"}) {
		t.Errorf("the router's key variables %v, want only its own key, from its Secret", refs)
	}
	for _, a := range c.Args {
		if strings.Contains(a, string(routerKey.Data[resolve.GeneratedAdminKeyField])) {
			t.Errorf("the router's command line holds its key in clear")
		}
	}

	// spec.security.clients names who reaches the router: the policy admits them, and no longer
	// the namespace's pods; the router, then the leaders' client, also reaches the leaders.
	gateway := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "gateway"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gateway"}},
	}
	update(t, getHCD(t, ns, "qwen3"), func(h *hicachev1alpha1.HiCacheDeployment) {
		h.Spec.Security = &hicachev1alpha1.ServingSecurity{Clients: []networkingv1.NetworkPolicyPeer{gateway}}
	})
	eventually(t, 30*time.Second, "the router's policy admits spec.security.clients", func() (bool, string) {
		if err := k8s.Get(ctx, key, &np); err != nil {
			return false, err.Error()
		}
		ok := len(np.Spec.Ingress) == 1 && len(np.Spec.Ingress[0].From) == 1 && equality.Semantic.DeepEqual(np.Spec.Ingress[0].From[0], gateway)
		return ok, fmt.Sprintf("admits %+v", np.Spec.Ingress)
	})
	var leaders networkingv1.NetworkPolicy
	eventually(t, 30*time.Second, "the leaders' policy admits the clients and the router", func() (bool, string) {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen3-sglang"}, &leaders); err != nil {
			return false, err.Error()
		}
		if len(leaders.Spec.Ingress) == 0 {
			return false, "no ingress rule"
		}
		from := leaders.Spec.Ingress[0].From
		ok := len(from) == 2 && equality.Semantic.DeepEqual(from[0], gateway) && from[1].NamespaceSelector == nil && from[1].PodSelector != nil &&
			maps.Equal(from[1].PodSelector.MatchLabels, map[string]string{hicachev1alpha1.LabelRouter: "qwen3"})
		return ok, fmt.Sprintf("admits %+v", from)
	})

	var svc corev1.Service
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen3"}, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector[hicachev1alpha1.LabelRouter] != "qwen3" || len(svc.Spec.Selector) != 1 {
		t.Errorf("the client Service selects %v, want the router pods", svc.Spec.Selector)
	}

	update(t, getHCD(t, ns, "qwen3"), func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Router = nil })
	eventually(t, 30*time.Second, "the router removed, the Service on the leaders", func() (bool, string) {
		for _, obj := range []client.Object{&appsv1.Deployment{}, &networkingv1.NetworkPolicy{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.ServiceAccount{}} {
			if err := k8s.Get(ctx, key, obj); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%T still there (%v)", obj, err)
			}
		}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "qwen3"}, &svc); err != nil {
			return false, err.Error()
		}
		return svc.Spec.Selector["apps.kubernetes.io/pod-index"] == "0", fmt.Sprintf("Service selects %v", svc.Spec.Selector)
	})
}
