package hicachedeployment

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// The keys reach the rank pods only as secretKeyRef variables: the pod spec, status and events
// name the Secret, never its value. The clients' keys (spec.security's, or the generated admin
// key) go only to the proxy in front of SGLang; SGLang holds the server keys of the
// deployment's server-key Secret, which the kubelet expands into --admin-api-key and --api-key
// and which SGLang 0.5.23 writes to its log (resolve.ServerAdminKeyEnv). The operator reads
// Secrets one at a time, uncached, by name (RBAC get, no list or watch), only to say in the
// status when one a deployment needs is missing, and creates the Secrets of the keys it
// generates: the admin key of a deployment that names none, the server keys, the router's key.

func secretEnv(name string, k hicachev1alpha1.SecretKeyReference) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: k.Name}, Key: k.Key}}}
}

// keyEnv is the variables of the clients' keys, which the proxy in front of SGLang checks.
func keyEnv(hcd *hicachev1alpha1.HiCacheDeployment) []corev1.EnvVar {
	admin, _ := resolve.AdminKeySecret(hcd)
	env := []corev1.EnvVar{secretEnv(resolve.AdminAPIKeyEnv, admin)}
	if k := resolve.APIKeySecret(hcd); k != nil {
		env = append(env, secretEnv(resolve.APIKeyEnv, *k))
	}
	return env
}

// serverKeyEnv is the variables of the server keys: the serving container's (its
// --admin-api-key and --api-key), and the proxy's, which presents them for the clients' keys.
func serverKeyEnv(hcd *hicachev1alpha1.HiCacheDeployment) []corev1.EnvVar {
	name := resolve.ServerKeySecret(hcd.Name)
	env := []corev1.EnvVar{secretEnv(resolve.ServerAdminKeyEnv, hicachev1alpha1.SecretKeyReference{Name: name, Key: resolve.ServerAdminKeyField})}
	if resolve.APIKeySecret(hcd) != nil {
		env = append(env, secretEnv(resolve.ServerAPIKeyEnv, hicachev1alpha1.SecretKeyReference{Name: name, Key: resolve.ServerAPIKeyField}))
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

// buildKeySecret is the Secret of a key the operator generates under ref.
func buildKeySecret(hcd *hicachev1alpha1.HiCacheDeployment, ref hicachev1alpha1.SecretKeyReference, key []byte) *corev1.Secret {
	return buildKeysSecret(hcd, ref.Name, map[string][]byte{ref.Key: key})
}

// buildKeysSecret is a Secret of keys the operator generates, owned by the deployment so that it
// goes with it. Its values are set once, at creation; the operator never writes them again.
func buildKeysSecret(hcd *hicachev1alpha1.HiCacheDeployment, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: hcd.Namespace,
			Labels: commonLabels(hcd), OwnerReferences: []metav1.OwnerReference{ownerRef(hcd)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// serverKeyFields are the keys of the server-key Secret.
var serverKeyFields = []string{resolve.ServerAdminKeyField, resolve.ServerAPIKeyField}

// buildServerKeySecret is the server-key Secret of hcd with fresh keys: both, whether or not the
// deployment names an API key today, so that naming one later needs no new Secret.
func buildServerKeySecret(hcd *hicachev1alpha1.HiCacheDeployment) (*corev1.Secret, error) {
	data := map[string][]byte{}
	for _, f := range serverKeyFields {
		k, err := newAdminKey()
		if err != nil {
			return nil, err
		}
		data[f] = k
	}
	return buildKeysSecret(hcd, resolve.ServerKeySecret(hcd.Name), data), nil
}

// keySecretProblem says what is wrong with a Secret a deployment takes a key from, or "" when
// it holds a key resolve.KeyProblem accepts. field is the spec field that names it; generated is true for the
// operator's own Secret, which must be the deployment's. It never quotes the Secret's data.
func keySecretProblem(hcd *hicachev1alpha1.HiCacheDeployment, field string, ref hicachev1alpha1.SecretKeyReference, s *corev1.Secret, generated bool) string {
	if s == nil {
		return fmt.Sprintf("Secret %q, named by %s, does not exist in namespace %s: create it with the key under %q", ref.Name, field, hcd.Namespace, ref.Key)
	}
	if generated && !metav1.IsControlledBy(s, hcd) {
		if field == serverKeyField {
			return fmt.Sprintf("Secret %q exists and is not this deployment's, so the operator does not generate the server keys in it: delete it, or rename the deployment", ref.Name)
		}
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

// serverKeyField is what names the server keys in messages: no field does, the operator
// generates them for every deployment.
const serverKeyField = "the server keys the operator generates for SGLang"

// keySecret is one Secret of keys a deployment takes: what it holds and the field that names
// it (for messages and Events), its name and keys, and, for one the operator generates, how to
// build it with fresh keys.
type keySecret struct {
	what, field, event string
	name               string
	keys               []string
	// build makes the Secret with fresh keys; nil for a Secret the user names.
	build func() (*corev1.Secret, error)
}

// keySecrets are the Secrets of keys hcd takes, in the order the operator checks them: the admin
// key's (generated when the deployment names none), the server keys', the router's
// control-plane key's while it has spec.router (both generated), and the API key's when
// spec.security names one.
func keySecrets(hcd *hicachev1alpha1.HiCacheDeployment) []keySecret {
	one := func(ref hicachev1alpha1.SecretKeyReference) func() (*corev1.Secret, error) {
		return func() (*corev1.Secret, error) {
			key, err := newAdminKey()
			if err != nil {
				return nil, err
			}
			return buildKeySecret(hcd, ref, key), nil
		}
	}
	admin, generated := resolve.AdminKeySecret(hcd)
	out := []keySecret{{what: "SGLang's admin API key", field: "spec.security.adminAPIKeySecretRef", event: "the admin endpoints take it as a bearer token",
		name: admin.Name, keys: []string{admin.Key}}}
	if generated {
		out[0].build = one(admin)
	}
	out = append(out, keySecret{what: "the server keys", field: serverKeyField, event: "SGLang holds them, and the proxy in front of it presents them for the clients' keys",
		name: resolve.ServerKeySecret(hcd.Name), keys: serverKeyFields, build: func() (*corev1.Secret, error) { return buildServerKeySecret(hcd) }})
	if hcd.Spec.Router != nil {
		ref := resolve.RouterAdminKeySecret(hcd)
		out = append(out, keySecret{what: "the router's control-plane key", field: routerKeyField, event: "the router's /workers, /flush_cache and other management routes take it as a bearer token",
			name: ref.Name, keys: []string{ref.Key}, build: one(ref)})
	}
	if ref := resolve.APIKeySecret(hcd); ref != nil {
		out = append(out, keySecret{what: "API key", field: "spec.security.apiKeySecretRef", name: ref.Name, keys: []string{ref.Key}})
	}
	return out
}

// ensureKeys checks the Secrets of keySecrets and generates the ones the operator owns when they
// are missing; it returns a conditionError a user must act on.
func (r *HiCacheDeploymentReconciler) ensureKeys(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment) error {
	for _, ks := range keySecrets(hcd) {
		if err := r.ensureKeySecret(ctx, hcd, ks); err != nil {
			return err
		}
	}
	return nil
}

// ensureKeySecret reads the Secret of ks, generating it first when the operator owns it and it
// is missing, and says what is wrong with any of its keys.
func (r *HiCacheDeploymentReconciler) ensureKeySecret(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, ks keySecret) error {
	generated := ks.build != nil
	var s *corev1.Secret
	var got corev1.Secret
	switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: hcd.Namespace, Name: ks.name}, &got); {
	case err == nil:
		s = &got
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the %s's Secret %s: %w", ks.what, ks.name, err)
	case generated:
		if s, err = ks.build(); err != nil {
			return fmt.Errorf("generating the %s: %w", ks.what, err)
		}
		if err := r.Create(ctx, s); err != nil {
			return fmt.Errorf("creating the %s's Secret %s: %w", ks.what, ks.name, err)
		}
		r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonAdminKeyGenerated, "GenerateAdminKey",
			"Generated %s in Secret %s (%s); %s", ks.what, ks.name, keyList(ks.keys), ks.event)
	}
	if generated && adoptableKeySecret(hcd, s) {
		if err := r.adoptKeySecret(ctx, hcd, s, ks.what); err != nil {
			return fmt.Errorf("giving the %s's Secret %s its owner back: %w", ks.what, ks.name, err)
		}
	}
	for _, k := range ks.keys {
		if msg := keySecretProblem(hcd, ks.field, hicachev1alpha1.SecretKeyReference{Name: ks.name, Key: k}, s, generated); msg != "" {
			return &conditionError{reason: hicachev1alpha1.ReasonKeySecretInvalid, message: msg}
		}
	}
	return nil
}

// keyList names the keys of a Secret in an Event: "key admin-api-key", "keys a, b".
func keyList(keys []string) string {
	if len(keys) == 1 {
		return "key " + keys[0]
	}
	return "keys " + strings.Join(keys, ", ")
}
