package controllers

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// rendered is what a deployment's spec renders to, before anything is written: the objects every
// reconcile applies, and each serving group's StatefulSet.
type rendered struct {
	configMap     *corev1.ConfigMap
	clientService *corev1.Service
	groups        []*appsv1.StatefulSet
}

// render builds every serving group and the ConfigMap of a resolved deployment: nothing is
// written unless the whole deployment renders.
func render(hcd *hicachev1alpha1.HiCacheDeployment, res *resolve.Resolved, be *resolve.Backend, image string) (*rendered, error) {
	out := &rendered{groups: make([]*appsv1.StatefulSet, res.Replicas)}
	for g := range res.Replicas {
		sts, err := buildGroup(hcd, res, be, g, image)
		if err != nil {
			return nil, reconcile.TerminalError(fmt.Errorf("rendering serving group %d: %w", g, err))
		}
		out.groups[g] = sts
	}
	_, mcfg, err := serverConfig(hcd, res, be, 0)
	if err != nil {
		return nil, reconcile.TerminalError(fmt.Errorf("rendering the Mooncake configuration: %w", err))
	}
	if out.configMap, err = buildConfigMap(hcd, res, mcfg); err != nil {
		return nil, fmt.Errorf("rendering the ConfigMap: %w", err)
	}
	out.clientService = buildClientService(hcd)
	return out, nil
}

// RenderChildren is, without a cluster, every object the HiCacheDeployment controller writes for
// a new deployment (with a UID) on the Ready backend cb (nil without storage), in the order it
// writes them: the generated admin key's Secret (with a fresh key), the ConfigMap, the client
// Service, the router's objects, the deployment's NetworkPolicy, then each serving group's
// headless Service, NetworkPolicy and StatefulSet. Every object but the Secret carries the
// applied-hash annotation the controller stamps, so that an object the controller applied can be
// compared with one rendered here by that annotation alone. It is what a client doing the
// controller's work without it would create (the scale benchmark's baseline).
func RenderChildren(hcd *hicachev1alpha1.HiCacheDeployment, cb *hicachev1alpha1.CacheBackend, opts Options) ([]client.Object, error) {
	opts = opts.withDefaults()
	var be *resolve.Backend
	if hcd.Spec.Storage != nil {
		if cb == nil || cb.Spec.Mooncake == nil {
			return nil, fmt.Errorf("deployment %s writes to CacheBackend %q: pass it", hcd.Name, hcd.Spec.Storage.BackendRef.Name)
		}
		// The endpoints it publishes; for an external master that has none yet, those its spec
		// names, which it publishes once probed.
		ep := cb.Status.Endpoints
		if ep == nil {
			ep = specEndpoints(cb)
		}
		be = backendOf(cb.Name, ep)
	}
	res, err := resolve.Resolve(hcd)
	if err != nil {
		return nil, err
	}
	image := hcd.Spec.SGLang.Image
	if image == "" {
		image = opts.DefaultSGLangImage
	}
	r, err := render(hcd, res, be, image)
	if err != nil {
		return nil, err
	}
	var objs []client.Object
	if _, generated := resolve.AdminKeySecret(hcd); generated {
		key, err := newAdminKey()
		if err != nil {
			return nil, err
		}
		objs = append(objs, buildAdminKeySecret(hcd, key))
	}
	applied := []client.Object{r.configMap, r.clientService}
	if hcd.Spec.Router != nil {
		ro, err := BuildRouter(hcd, opts.DefaultRouterImage)
		if err != nil {
			return nil, err
		}
		applied = append(applied, ro.ServiceAccount, ro.Role, ro.RoleBinding, ro.Deployment)
	}
	applied = append(applied, buildDeploymentNetworkPolicy(hcd, res))
	for g, sts := range r.groups {
		applied = append(applied, buildHeadlessService(hcd, g), buildGroupNetworkPolicy(hcd, g), sts)
	}
	for _, o := range applied {
		if err := stampAppliedHash(o); err != nil {
			return nil, err
		}
	}
	return append(objs, applied...), nil
}
