package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// fixedLayoutChange tells whether a Fixed-namespace deployment's layout changed under its
// namespace: the groups must stop and the namespace be flushed before the new layout starts.
func fixedLayoutChange(hcd *hicachev1alpha1.HiCacheDeployment, res *resolve.Resolved) bool {
	old := hcd.Status.Cache
	return hcd.Spec.Storage != nil && hcd.Spec.Storage.NamespaceStrategy == hicachev1alpha1.NamespaceFixed &&
		old != nil && old.LayoutHash != "" && old.LayoutHash != res.Fingerprint && old.Namespace == res.Namespace
}

// flushName is the CacheFlush a deployment creates for one stale namespace at one generation of
// its spec: deterministic, so a repeated reconcile never creates a second one, and new for every
// later change, so a namespace that goes stale again is flushed again.
func flushName(hcd, namespace string, generation int64) string {
	return boundedName(fmt.Sprintf("%s-flush-%s-g%d", hcd, namespace, generation), 253)
}

// boundedName cuts a name to max characters, replacing the cut part by a hash of the whole so
// that two long names stay distinct.
func boundedName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:max-len(suffix)], "-.") + suffix
}

// buildFlush is a flush of one namespace of a backend, owned by the deployment.
func buildFlush(hcd *hicachev1alpha1.HiCacheDeployment, name, backend, namespace, reason string) *hicachev1alpha1.CacheFlush {
	return &hicachev1alpha1.CacheFlush{
		TypeMeta: metav1.TypeMeta{APIVersion: hicachev1alpha1.GroupVersion.String(), Kind: "CacheFlush"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: hcd.Namespace, Labels: commonLabels(hcd),
			OwnerReferences: []metav1.OwnerReference{ownerRef(hcd)},
		},
		Spec: hicachev1alpha1.CacheFlushSpec{
			BackendRef: hicachev1alpha1.LocalObjectReference{Name: backend},
			Scope:      hicachev1alpha1.FlushScopeNamespace,
			Namespace:  namespace,
			Force:      ptr.To(true),
			Reason:     truncate(reason, 1024),
		},
	}
}

// createFlush creates a flush unless it exists; it returns the flush as it is.
func (r *HiCacheDeploymentReconciler) createFlush(ctx context.Context, cf *hicachev1alpha1.CacheFlush) (*hicachev1alpha1.CacheFlush, error) {
	var cur hicachev1alpha1.CacheFlush
	err := r.Get(ctx, client.ObjectKeyFromObject(cf), &cur)
	if err == nil {
		return &cur, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err := r.Create(ctx, cf); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return cf, nil
}

// drainAndFlush stops every writer of a Fixed namespace, flushes it, and lets the new layout
// start once the flush completed.
func (r *HiCacheDeploymentReconciler) drainAndFlush(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	old := hcd.Status.Cache
	ns := old.Namespace
	if cond := meta.FindStatusCondition(hcd.Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent); cond == nil || cond.Reason != hicachev1alpha1.ReasonWaitingForFlush {
		r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonWaitingForFlush, "Recreate",
			"The cache layout changed (%s → %s) under the fixed namespace %s: stopping every serving group, flushing the namespace, then starting the new layout",
			old.ShortHash, obs.resolved.ShortHash, ns)
	}
	// 0. A Fixed namespace belongs to one deployment: stopping this one's writers could never
	// empty a namespace another deployment keeps writing, so nothing is stopped.
	var others hicachev1alpha1.HiCacheDeploymentList
	if err := r.List(ctx, &others, client.InNamespace(hcd.Namespace), client.MatchingFields{backendRefIndex: hcd.Spec.Storage.BackendRef.Name}); err != nil {
		return err
	}
	for i := range others.Items {
		o := &others.Items[i]
		if o.UID != hcd.UID && o.Status.Cache != nil && o.Status.Cache.Namespace == ns {
			obs.drain = fmt.Sprintf("the fixed namespace %s is also written by HiCacheDeployment %s, so it cannot be flushed; give each deployment its own spec.storage.namespace", ns, o.Name)
			return nil
		}
	}
	// 1. Stop the writers: every group goes, and every pod of the deployment with it (also one a
	// StatefulSet created while it was being deleted, which the garbage collector would only
	// remove later).
	for g, grp := range obs.groups {
		if grp.sts.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, grp.sts, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		delete(obs.groups, g)
	}
	var left corev1.PodList
	if err := r.List(ctx, &left, client.InNamespace(hcd.Namespace), client.MatchingLabels{LabelDeployment: hcd.Name}); err != nil {
		return err
	}
	if len(left.Items) > 0 {
		if err := r.deletePods(ctx, left.Items); err != nil {
			return err
		}
		obs.drain = fmt.Sprintf("stopping %d rank pods that write namespace %s", len(left.Items), ns)
		return nil
	}
	// 2. Flush the namespace, once.
	cf, err := r.createFlush(ctx, buildFlush(hcd, flushName(hcd.Name, ns, hcd.Generation), hcd.Spec.Storage.BackendRef.Name, ns,
		fmt.Sprintf("Layout of %s changed from %s to %s under the fixed namespace %s", hcd.Name, old.ShortHash, obs.resolved.ShortHash, ns)))
	if err != nil {
		return err
	}
	if !meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete) {
		obs.drain = fmt.Sprintf("waiting for CacheFlush %s of namespace %s", cf.Name, ns)
		if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
			obs.drain += ": " + c.Message
		}
		return nil
	}
	// 3. The namespace is empty: the new layout starts on the next reconcile.
	obs.cache.LayoutHash, obs.cache.ShortHash, obs.cache.Facts = obs.resolved.Fingerprint, obs.resolved.ShortHash, obs.resolved.FactList()
	obs.cache.LastFlush = flushRecord(cf)
	return nil
}

func flushRecord(cf *hicachev1alpha1.CacheFlush) *hicachev1alpha1.FlushRecord {
	return &hicachev1alpha1.FlushRecord{Name: cf.Name, Namespace: cf.Spec.Namespace, Removed: cf.Status.Removed, CompletionTime: cf.Status.CompletionTime}
}

// reconcileStaleNamespaces creates a CacheFlush for each namespace an older layout left behind,
// once no serving pod and no other deployment uses it, and forgets it when the flush completed.
func (r *HiCacheDeploymentReconciler) reconcileStaleNamespaces(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	cs := obs.cache
	if cs == nil || len(cs.StaleNamespaces) == 0 {
		return nil
	}
	// A deployment whose storage was removed still flushes what it left on its old backend.
	policy := hicachev1alpha1.FlushAuto
	if hcd.Spec.Storage != nil {
		policy = hcd.Spec.Storage.FlushPolicy
	}
	keep := cs.StaleNamespaces[:0:0]
	for _, s := range cs.StaleNamespaces {
		s.BlockedBy = ""
		backend := s.Backend
		if backend == "" && hcd.Spec.Storage != nil {
			backend = hcd.Spec.Storage.BackendRef.Name
		}
		if backend == "" {
			continue // written before backends were recorded, and no backend to flush it on
		}
		if s.Flush != "" {
			var cf hicachev1alpha1.CacheFlush
			err := r.Get(ctx, client.ObjectKey{Namespace: hcd.Namespace, Name: s.Flush}, &cf)
			switch {
			case apierrors.IsNotFound(err):
				s.Flush = "" // deleted by hand: decide again
			case err != nil:
				return err
			case meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete):
				cs.LastFlush = flushRecord(&cf)
				continue // flushed: no longer stale
			default:
				if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
					s.BlockedBy = truncate("flush failed: "+c.Message, 512)
				}
				keep = append(keep, s)
				continue
			}
		}
		if policy == hicachev1alpha1.FlushManual {
			s.BlockedBy = fmt.Sprintf("flushPolicy is Manual: run kubectl hicache flush %s --prefix %s", backend, s.Namespace)
			keep = append(keep, s)
			continue
		}
		user, err := r.namespaceUser(ctx, hcd, backend, s.Namespace)
		if err != nil {
			return err
		}
		if user != "" {
			s.BlockedBy = truncate("still used by "+user, 512)
			keep = append(keep, s)
			continue
		}
		cf, err := r.createFlush(ctx, buildFlush(hcd, flushName(hcd.Name, s.Namespace, hcd.Generation), backend, s.Namespace,
			fmt.Sprintf("%s moved from layout %s (namespace %s) to %s (namespace %s); nothing uses the old namespace any more",
				hcd.Name, s.LayoutHash, s.Namespace, obs.resolved.ShortHash, obs.resolved.Namespace)))
		if err != nil {
			return err
		}
		if s.Flush == "" {
			r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonFlushRequested, "Flush",
				"Namespace %s of the old layout %s is no longer used; CacheFlush %s removes it", s.Namespace, s.LayoutHash, cf.Name)
		}
		s.Flush = cf.Name
		keep = append(keep, s)
	}
	if len(keep) == 0 {
		keep = nil
	}
	cs.StaleNamespaces = keep
	return nil
}

// namespaceUser names a serving pod or another deployment that still uses a namespace of a
// backend, or "" when none does.
func (r *HiCacheDeploymentReconciler) namespaceUser(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, backend, ns string) (string, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(hcd.Namespace), client.MatchingLabels{LabelCacheNamespace: ns, LabelBackend: backend}); err != nil {
		return "", err
	}
	if len(pods.Items) > 0 {
		return fmt.Sprintf("%d serving pods (e.g. %s)", len(pods.Items), pods.Items[0].Name), nil
	}
	var list hicachev1alpha1.HiCacheDeploymentList
	if err := r.List(ctx, &list, client.InNamespace(hcd.Namespace), client.MatchingFields{backendRefIndex: backend}); err != nil {
		return "", err
	}
	for i := range list.Items {
		h := &list.Items[i]
		if h.UID != hcd.UID && h.Status.Cache != nil && h.Status.Cache.Namespace == ns {
			return "HiCacheDeployment " + h.Name, nil
		}
	}
	return "", nil
}

func hasBlockedStale(cs *hicachev1alpha1.CacheStatus) bool {
	if cs == nil {
		return false
	}
	for _, s := range cs.StaleNamespaces {
		// Another deployment's pods do not wake this one: poll while they hold a namespace.
		if strings.HasPrefix(s.BlockedBy, "still used by") {
			return true
		}
	}
	return false
}
