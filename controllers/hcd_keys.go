package controllers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// SGLang's keys reach the rank pods only as secretKeyRef variables, which the kubelet expands
// into --admin-api-key and --api-key: the pod spec, status, events and logs name the Secret,
// never its value. The operator reads Secrets one at a time, uncached, by name (RBAC get, no
// list or watch), only to say in the status when one a deployment needs is missing, and creates
// the admin key's Secret of a deployment that names none.

// keyEnv is the rank container's variables of SGLang's keys.
func keyEnv(hcd *hicachev1alpha1.HiCacheDeployment) []corev1.EnvVar {
	ref := func(name string, k hicachev1alpha1.SecretKeyReference) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: k.Name}, Key: k.Key}}}
	}
	admin, _ := resolve.AdminKeySecret(hcd)
	env := []corev1.EnvVar{ref(resolve.AdminAPIKeyEnv, admin)}
	if k := resolve.APIKeySecret(hcd); k != nil {
		env = append(env, ref(resolve.APIKeyEnv, *k))
	}
	return env
}

// adminKeyBytes is the entropy of a generated admin key.
const adminKeyBytes = 32

// newAdminKey is a random admin key: 32 bytes, base64url without padding (43 characters).
func newAdminKey() ([]byte, error) {
	b := make([]byte, adminKeyBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	out := make([]byte, base64.RawURLEncoding.EncodedLen(len(b)))
	base64.RawURLEncoding.Encode(out, b)
	return out, nil
}

// buildAdminKeySecret is the Secret of a generated admin key, owned by the deployment so that it
// goes with it. Its value is set once, at creation; the operator never writes it again.
func buildAdminKeySecret(hcd *hicachev1alpha1.HiCacheDeployment, key []byte) *corev1.Secret {
	ref, _ := resolve.AdminKeySecret(hcd)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: ref.Name, Namespace: hcd.Namespace,
			Labels: commonLabels(hcd), OwnerReferences: []metav1.OwnerReference{ownerRef(hcd)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{ref.Key: key},
	}
}

// keySecretProblem says what is wrong with a Secret a deployment takes a key from, or "" when
// it holds a key resolve.KeyProblem accepts. field is the spec field that names it; generated is true for the
// operator's own Secret, which must be the deployment's. It never quotes the Secret's data.
func keySecretProblem(hcd *hicachev1alpha1.HiCacheDeployment, field string, ref hicachev1alpha1.SecretKeyReference, s *corev1.Secret, generated bool) string {
	if s == nil {
		return fmt.Sprintf("Secret %q, named by %s, does not exist in namespace %s: create it with the key under %q", ref.Name, field, hcd.Namespace, ref.Key)
	}
	if generated && !metav1.IsControlledBy(s, hcd) {
		return fmt.Sprintf("Secret %q exists and is not this deployment's, so the operator does not generate the admin API key in it: name it in spec.security.adminAPIKeySecretRef to use its key, or delete it", ref.Name)
	}
	if len(s.Data[ref.Key]) == 0 {
		return fmt.Sprintf("Secret %q, named by %s, has no key %q, or it is empty: add the key to the Secret", ref.Name, field, ref.Key)
	}
	if p := resolve.KeyProblem(s.Data[ref.Key]); p != "" {
		return fmt.Sprintf("Secret %q, named by %s, under %q %s, so the proxy in front of SGLang could not replace every spelling of it in the server's answers: %s", ref.Name, field, ref.Key, p, resolve.KeyAdvice)
	}
	return ""
}

// adoptableKeySecret tells whether s is the admin key's Secret the operator generated for hcd
// that lost its owner reference (stripped by hand, or dropped by a restore from a backup): it has
// no controller and carries every label the operator gave it. Such a Secret is given its owner
// back rather than refused; one with another controller, or without the operator's labels, stays
// someone else's.
func adoptableKeySecret(hcd *hicachev1alpha1.HiCacheDeployment, s *corev1.Secret) bool {
	if s == nil || metav1.GetControllerOf(s) != nil {
		return false
	}
	for k, v := range commonLabels(hcd) {
		if s.Labels[k] != v {
			return false
		}
	}
	return true
}

// adoptKeySecret puts the deployment's controller reference back on its admin key's Secret. The
// patch carries the owner references and the resourceVersion only, never the key.
func (r *HiCacheDeploymentReconciler) adoptKeySecret(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, s *corev1.Secret) error {
	before := s.DeepCopy()
	s.OwnerReferences = append(s.OwnerReferences, ownerRef(hcd))
	if err := r.Patch(ctx, s, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonAdminKeySecretAdopted, "AdoptAdminKeySecret",
		"Secret %s, which holds the generated admin API key, had lost its owner reference: it is the deployment's again", s.Name)
	return nil
}

// ensureKeys checks the Secrets of SGLang's keys and generates the admin key's Secret when the
// deployment names none; it returns a conditionError a user must act on.
func (r *HiCacheDeploymentReconciler) ensureKeys(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment) error {
	get := func(name string) (*corev1.Secret, error) {
		var s corev1.Secret
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: hcd.Namespace, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &s, nil
	}
	admin, generated := resolve.AdminKeySecret(hcd)
	s, err := get(admin.Name)
	if err != nil {
		return fmt.Errorf("reading the admin API key's Secret %s: %w", admin.Name, err)
	}
	if s == nil && generated {
		key, err := newAdminKey()
		if err != nil {
			return fmt.Errorf("generating an admin API key: %w", err)
		}
		s = buildAdminKeySecret(hcd, key)
		if err := r.Create(ctx, s); err != nil {
			return fmt.Errorf("creating the admin API key's Secret %s: %w", admin.Name, err)
		}
		r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonAdminKeyGenerated, "GenerateAdminKey",
			"Generated SGLang's admin API key in Secret %s (key %s); the admin endpoints take it as a bearer token", admin.Name, admin.Key)
	}
	if generated && adoptableKeySecret(hcd, s) {
		if err := r.adoptKeySecret(ctx, hcd, s); err != nil {
			return fmt.Errorf("giving the admin API key's Secret %s its owner back: %w", admin.Name, err)
		}
	}
	if msg := keySecretProblem(hcd, "spec.security.adminAPIKeySecretRef", admin, s, generated); msg != "" {
		return &conditionError{reason: hicachev1alpha1.ReasonKeySecretInvalid, message: msg}
	}
	if ref := resolve.APIKeySecret(hcd); ref != nil {
		s, err := get(ref.Name)
		if err != nil {
			return fmt.Errorf("reading the API key's Secret %s: %w", ref.Name, err)
		}
		if msg := keySecretProblem(hcd, "spec.security.apiKeySecretRef", *ref, s, false); msg != "" {
			return &conditionError{reason: hicachev1alpha1.ReasonKeySecretInvalid, message: msg}
		}
	}
	return nil
}
