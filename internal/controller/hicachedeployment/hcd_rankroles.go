package hicachedeployment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

// rankRoleFieldOwner sets the role labels and annotations of rank pods: a field owner of its own, so
// that its apply touches nothing else of the pod.
const rankRoleFieldOwner = storeuse.FieldOwner + "-rank-roles"

// rankRoleMetadata is what the pod of node rank index carries for its role: spec.template.leader for
// rank 0, spec.template.follower for the others, stamped with hicachev1alpha1.AnnotationRankRoleHash. It is nil for a
// role with nothing to set. The pods of a group share one template, so these are set on each pod
// once it exists rather than rendered into the StatefulSet.
func rankRoleMetadata(t *hicachev1alpha1.PodOverrides, index int) (labels, annotations map[string]string, err error) {
	role := t.Follower
	if index == 0 {
		role = t.Leader
	}
	if role == nil || len(role.Labels)+len(role.Annotations) == 0 {
		return nil, nil, nil
	}
	labels, annotations = maps.Clone(role.Labels), maps.Clone(role.Annotations)
	b, err := json.Marshal([]map[string]string{labels, annotations})
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(b)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[hicachev1alpha1.AnnotationRankRoleHash] = hex.EncodeToString(sum[:8])
	return labels, annotations, nil
}

// podRankRoleCurrent tells whether pod already carries what rankRoleMetadata wants of it.
func podRankRoleCurrent(pod *corev1.Pod, annotations map[string]string) bool {
	return pod.Annotations[hicachev1alpha1.AnnotationRankRoleHash] == annotations[hicachev1alpha1.AnnotationRankRoleHash]
}

// applyRankRoles sets the role labels and annotations of every observed rank pod whose recorded role
// hash differs from the desired one (a pod that had some and should have none loses them).
func (r *HiCacheDeploymentReconciler) applyRankRoles(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	var errs []error
	for g, grp := range obs.groups {
		if slices.Contains(obs.rolling, g) || slices.Contains(obs.recreated, g) {
			continue // its pods were just deleted
		}
		for i := range grp.pods {
			pod := &grp.pods[i]
			index, err := strconv.Atoi(pod.Labels[appsv1.PodIndexLabel])
			if err != nil {
				continue
			}
			labels, annotations, err := rankRoleMetadata(&hcd.Spec.Template, index)
			if err != nil {
				return err
			}
			if podRankRoleCurrent(pod, annotations) {
				continue
			}
			ac := corev1ac.Pod(pod.Name, pod.Namespace).WithLabels(labels).WithAnnotations(annotations).
				WithUID(pod.UID) // never onto a replacement of the same name
			if err := r.Apply(ctx, ac, client.FieldOwner(rankRoleFieldOwner), client.ForceOwnership); err != nil && !r.podGone(ctx, pod) {
				errs = append(errs, fmt.Errorf("setting the role labels and annotations of pod %s: %w", pod.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// podGone tells whether pod was deleted or replaced since it was observed: an apply to it then
// fails (its UID no longer matches, or it would create a pod of nothing but metadata) and is
// not an error, the replacement's own event brings the deployment back.
func (r *HiCacheDeploymentReconciler) podGone(ctx context.Context, pod *corev1.Pod) bool {
	var now corev1.Pod
	err := r.Get(ctx, client.ObjectKeyFromObject(pod), &now)
	return apierrors.IsNotFound(err) || err == nil && (now.UID != pod.UID || now.DeletionTimestamp != nil)
}
