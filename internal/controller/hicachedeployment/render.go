package hicachedeployment

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	recon "github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// rendered is what a deployment's spec renders to, before anything is written: the objects every
// reconcile applies, and each serving group's StatefulSet.
type rendered struct {
	configMap     *corev1.ConfigMap
	clientService *corev1.Service
	groups        map[GroupKey]*appsv1.StatefulSet
}

// render builds every serving group of every role and the ConfigMap of a resolved deployment
// (res its layout, served what it runs): nothing is written unless the whole deployment renders.
func render(hcd *hicachev1alpha1.HiCacheDeployment, served []*servingRole, res *resolve.Resolved, be *resolve.Backend, image PodImages) (*rendered, error) {
	out := &rendered{groups: map[GroupKey]*appsv1.StatefulSet{}}
	for _, sr := range served {
		for g := range sr.res.Replicas {
			k := GroupKey{role: sr.role, index: g}
			sts, err := buildRoleGroup(hcd, sr, be, g, image)
			if err != nil {
				return nil, reconcile.TerminalError(fmt.Errorf("rendering %s: %w", k.describe(), err))
			}
			out.groups[k] = sts
		}
	}
	// The ConfigMap holds the plan, layout and extra config of the first kind of group (with roles
	// the prefill's, whose namespace both share) and the plans of the others.
	first := served[0]
	_, mcfg, err := roleServerConfig(hcd, first, be, GroupKey{role: first.role})
	if err != nil {
		return nil, reconcile.TerminalError(fmt.Errorf("rendering the Mooncake configuration: %w", err))
	}
	out.configMap, err = BuildConfigMap(hcd, res, mcfg)
	if err == nil {
		err = addRolePlans(out.configMap, served[1:])
	}
	if err != nil {
		return nil, fmt.Errorf("rendering the ConfigMap: %w", err)
	}
	out.clientService = BuildClientService(hcd)
	return out, nil
}

// sortedKeys are the groups of a rendering in role, then index order.
func (r *rendered) sortedKeys() []GroupKey {
	keys := make([]GroupKey, 0, len(r.groups))
	for k := range r.groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// RenderServingGroups renders the StatefulSets the operator applies for a deployment whose ranks
// use backend be (nil without an L3 store), in role then group order: what tools compare with
// what they show of a deployment (kubectl hicache plan). image is the SGLang image; the proxy
// in front of it runs DefaultGuardImage.
func RenderServingGroups(hcd *hicachev1alpha1.HiCacheDeployment, be *resolve.Backend, image string) ([]*appsv1.StatefulSet, error) {
	res, served, err := resolveServing(hcd)
	if err != nil {
		return nil, err
	}
	r, err := render(hcd, served, res, be, PodImages{SGLang: image, Guard: storeuse.DefaultGuardImage})
	if err != nil {
		return nil, err
	}
	out := make([]*appsv1.StatefulSet, 0, len(r.groups))
	for _, k := range r.sortedKeys() {
		out = append(out, r.groups[k])
	}
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
func RenderChildren(hcd *hicachev1alpha1.HiCacheDeployment, cb *hicachev1alpha1.CacheBackend, opts storeuse.Options) ([]client.Object, error) {
	opts = opts.WithDefaults()
	var be *resolve.Backend
	if hcd.Spec.Storage != nil {
		if cb == nil || cb.Spec.Mooncake == nil {
			return nil, fmt.Errorf("deployment %s writes to CacheBackend %q: pass it", hcd.Name, hcd.Spec.Storage.BackendRef.Name)
		}
		// The endpoints it publishes; for an external master that has none yet, those its spec
		// names, which it publishes once probed.
		ep := cb.Status.Endpoints
		if ep == nil {
			ep = storeuse.SpecEndpoints(cb)
		}
		be = BackendOf(cb, ep, opts.DefaultEtcdImage)
	}
	res, served, err := resolveServing(hcd)
	if err != nil {
		return nil, err
	}
	image := PodImages{SGLang: hcd.Spec.SGLang.Image, Guard: opts.GuardImage}
	if image.SGLang == "" {
		image.SGLang = opts.DefaultSGLangImage
	}
	r, err := render(hcd, served, res, be, image)
	if err != nil {
		return nil, err
	}
	// The Secrets of the keys the operator generates, with fresh keys, as ensureKeys creates them.
	var objs []client.Object
	for _, ks := range keySecrets(hcd) {
		if ks.build == nil {
			continue
		}
		sec, err := ks.build()
		if err != nil {
			return nil, err
		}
		objs = append(objs, sec)
	}
	applied := []client.Object{r.configMap, r.clientService}
	if hcd.Spec.Router != nil {
		ro, err := BuildRouter(hcd, opts.DefaultRouterImage)
		if err != nil {
			return nil, err
		}
		applied = append(applied, ro.ServiceAccount, ro.Role, ro.RoleBinding, ro.Deployment)
	}
	applied = append(applied, BuildDeploymentNetworkPolicy(hcd, res))
	for _, k := range r.sortedKeys() {
		applied = append(applied, buildHeadlessService(hcd, k), BuildGroupNetworkPolicy(hcd, k), r.groups[k])
	}
	for _, o := range applied {
		if err := recon.StampAppliedHash(o); err != nil {
			return nil, err
		}
	}
	return append(objs, applied...), nil
}
