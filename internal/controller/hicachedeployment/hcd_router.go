package hicachedeployment

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
)

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch;delete

// routerName names every object of a deployment's router.
func routerName(hcd string) string { return hcd + "-router" }

// routerSelector selects a deployment's router pods. They carry no hicache.io/deployment label:
// they are not serving pods, and the deployment's NetworkPolicy does not cover them.
func routerSelector(hcd *hicachev1alpha1.HiCacheDeployment) map[string]string {
	return map[string]string{hicachev1alpha1.LabelRouter: hcd.Name}
}

func routerLabels(hcd *hicachev1alpha1.HiCacheDeployment) map[string]string {
	l := routerSelector(hcd)
	l["app.kubernetes.io/name"] = "sglang-router"
	l["app.kubernetes.io/instance"] = hcd.Name
	l["app.kubernetes.io/managed-by"] = storeuse.FieldOwner
	return l
}

// roleLabel is the label key of the role (prefill, decode) of a serving group of a deployment with
// spec.roles, on its StatefulSets and pods.
const roleLabel = hicachev1alpha1.LabelRole

// RolePodAnnotations are what the router needs on the rank pods of one role: on prefill pods, the
// port of their bootstrap server (spec.roles.transfer.bootstrapPort, as rendered into
// --disaggregation-bootstrap-port), which the router reads from the leader and gives the decode
// server with each request; nothing on decode pods. They are set whether spec.router is set or
// not, so that adding or removing the router rolls no group.
func RolePodAnnotations(roles *resolve.Roles, role hicachev1alpha1.Role) map[string]string {
	if role != hicachev1alpha1.RolePrefill {
		return nil
	}
	return map[string]string{router.BootstrapPortAnnotation: strconv.Itoa(int(roles.Transfer.BootstrapPort))}
}

// BuildRouter renders the router of a deployment (what the reconciler applies while spec.router
// is set, image being the operator's default router image). Without spec.roles it discovers the
// leaders of the serving groups (pod 0 of each group) in the deployment's namespace and routes by
// spec.router.policy. With spec.roles it runs in prefill/decode mode: the prefill and the decode
// leaders are discovered apart, by their role label, and each request goes to one of each,
// chosen by spec.router.prefillPolicy and decodePolicy (spec.router.policy when unset); the
// prefill leader's bootstrap port comes from its annotation (RolePodAnnotations). The
// deployment's client Service fronts it (buildClientService), so its own Service is not used.
func BuildRouter(hcd *hicachev1alpha1.HiCacheDeployment, image string) (*router.Objects, error) {
	cfg, err := resolve.RouterConfig(hcd)
	if err != nil {
		return nil, err
	}
	spec := hcd.Spec.Router
	if spec.Image != "" {
		image = spec.Image
	}
	labels := routerLabels(hcd)
	objs, err := router.Build(router.Deployment{
		Name: routerName(hcd.Name), Namespace: hcd.Namespace, Image: image,
		Replicas: max(spec.Replicas, 1), Labels: labels, Selector: routerSelector(hcd),
		Resources: spec.Resources, Owner: ptr.To(ownerRef(hcd)), Env: routerKeyEnv(hcd),
	}, cfg)
	if err != nil {
		return nil, fmt.Errorf("spec.router: %w", err)
	}
	return objs, nil
}

// reconcileRouter applies the router's objects while spec.router is set, and removes them once it
// is not.
func (r *HiCacheDeploymentReconciler) reconcileRouter(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment) error {
	name := routerName(hcd.Name)
	if hcd.Spec.Router == nil {
		for _, obj := range []client.Object{&appsv1.Deployment{}, &networkingv1.NetworkPolicy{}, &rbacv1.RoleBinding{}, &rbacv1.Role{}, &corev1.ServiceAccount{}} {
			if err := r.Get(ctx, client.ObjectKey{Namespace: hcd.Namespace, Name: name}, obj); err != nil {
				if client.IgnoreNotFound(err) != nil {
					return fmt.Errorf("reading the router's %T: %w", obj, err)
				}
				continue
			}
			if !metav1.IsControlledBy(obj, hcd) {
				continue
			}
			if err := r.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("removing the router's %T: %w", obj, err)
			}
		}
		return nil
	}
	objs, err := BuildRouter(hcd, r.Options.DefaultRouterImage)
	if err != nil {
		return err
	}
	policy, err := buildRouterNetworkPolicy(hcd)
	if err != nil {
		return err
	}
	a := reconcile.Applier{Client: r.Client}
	// The policy first: the router reaches every leader, and no router pod may run unguarded.
	if _, err := a.ApplyIfChanged(ctx, policy, &networkingv1.NetworkPolicy{}); err != nil {
		return fmt.Errorf("applying the router's NetworkPolicy: %w", err)
	}
	for _, o := range []struct {
		obj, existing client.Object
	}{
		{objs.ServiceAccount, &corev1.ServiceAccount{}},
		{objs.Role, &rbacv1.Role{}},
		{objs.RoleBinding, &rbacv1.RoleBinding{}},
		{objs.Deployment, &appsv1.Deployment{}},
	} {
		if _, err := a.ApplyIfChanged(ctx, o.obj, o.existing); err != nil {
			return fmt.Errorf("applying the router: %w", err)
		}
	}
	return nil
}
