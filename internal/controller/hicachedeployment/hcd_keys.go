package hicachedeployment

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

func secretEnv(name string, k hicachev1alpha1.SecretKeyReference) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: k.Name}, Key: k.Key}}}
}

// keyEnv is the rank container's variables of SGLang's keys.
func keyEnv(hcd *hicachev1alpha1.HiCacheDeployment) []corev1.EnvVar {
	admin, _ := resolve.AdminKeySecret(hcd)
	env := []corev1.EnvVar{secretEnv(resolve.AdminAPIKeyEnv, admin)}
	if k := resolve.APIKeySecret(hcd); k != nil {
		env = append(env, secretEnv(resolve.APIKeyEnv, *k))
	}
	return env
}

// routerKeyEnv is the router container's variables of its keys: its own control-plane key,
// and SGLang's API key when the servers require one (the router requires it of its clients and
// presents it to the leaders). Never the servers' admin key.
func routerKeyEnv(hcd *hicachev1alpha1.HiCacheDeployment) []corev1.EnvVar {
	env := []corev1.EnvVar{secretEnv(resolve.RouterAdminKeyEnv, resolve.RouterAdminKeySecret(hcd))}
	if k := resolve.APIKeySecret(hcd); k != nil {
		env = append(env, secretEnv(resolve.APIKeyEnv, *k))
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
	return buildKeySecret(hcd, ref, key)
}

// buildKeySecret is the Secret of a key the operator generates under ref.
func buildKeySecret(hcd *hicachev1alpha1.HiCacheDeployment, ref hicachev1alpha1.SecretKeyReference, key []byte) *corev1.Secret {
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
		if field == routerKeyField {
			return fmt.Sprintf("Secret %q exists and is not this deployment's, so the operator does not generate the router's control-plane key in it: delete it, or rename the deployment", ref.Name)
		}
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
func (r *HiCacheDeploymentReconciler) adoptKeySecret(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, s *corev1.Secret, what string) error {
	before := s.DeepCopy()
	s.OwnerReferences = append(s.OwnerReferences, ownerRef(hcd))
	if err := r.Patch(ctx, s, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonAdminKeySecretAdopted, "AdoptAdminKeySecret",
		"Secret %s, which holds %s, generated, had lost its owner reference: it is the deployment's again", s.Name, what)
	return nil
}

// routerKeyField is what names the router's control-plane key in messages: no field does, the
// operator generates it for every deployment with spec.router.
const routerKeyField = "spec.router (the router's control-plane key)"

// ensureKeys checks the Secrets of SGLang's keys and generates the admin key's Secret when the
// deployment names none, and the router's control-plane key's Secret while it has spec.router;
// it returns a conditionError a user must act on.
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
	// ensure reads the Secret of ref, generating it first when the operator owns it and it is
	// missing, and says what is wrong with it.
	ensure := func(what, field, event string, ref hicachev1alpha1.SecretKeyReference, generated bool) error {
		s, err := get(ref.Name)
		if err != nil {
			return fmt.Errorf("reading the %s's Secret %s: %w", what, ref.Name, err)
		}
		if s == nil && generated {
			key, err := newAdminKey()
			if err != nil {
				return fmt.Errorf("generating the %s: %w", what, err)
			}
			s = buildKeySecret(hcd, ref, key)
			if err := r.Create(ctx, s); err != nil {
				return fmt.Errorf("creating the %s's Secret %s: %w", what, ref.Name, err)
			}
			r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonAdminKeyGenerated, "GenerateAdminKey",
				"Generated %s in Secret %s (key %s); %s", what, ref.Name, ref.Key, event)
		}
		if generated && adoptableKeySecret(hcd, s) {
			if err := r.adoptKeySecret(ctx, hcd, s, what); err != nil {
				return fmt.Errorf("giving the %s's Secret %s its owner back: %w", what, ref.Name, err)
			}
		}
		if msg := keySecretProblem(hcd, field, ref, s, generated); msg != "" {
			return &conditionError{reason: hicachev1alpha1.ReasonKeySecretInvalid, message: msg}
		}
		return nil
	}
	admin, generated := resolve.AdminKeySecret(hcd)
	if err := ensure("SGLang's admin API key", "spec.security.adminAPIKeySecretRef", "the admin endpoints take it as a bearer token", admin, generated); err != nil {
		return err
	}
	if hcd.Spec.Router != nil {
		if err := ensure("the router's control-plane key", routerKeyField, "the router's /workers, /flush_cache and other management routes take it as a bearer token", resolve.RouterAdminKeySecret(hcd), true); err != nil {
			return err
		}
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
