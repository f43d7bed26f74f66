package controllers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// SGLang's keys reach the rank pods only as secretKeyRef variables, which the kubelet expands
// into --admin-api-key and --api-key: the pod spec, status, events and logs name the Secret,
// never its value. The operator reads Secrets one at a time, uncached, by name (RBAC get, no
// list or watch), only to say in the status when one a deployment needs is missing (and then not
// on every reconcile: see planKeyCheck), and creates the admin key's Secret of a deployment that
// names none.

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
// it holds a non-empty key. field is the spec field that names it; generated is true for the
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

// What a reconcile knows of the key Secrets. The operator has no watch on Secrets (RBAC get, no
// list or watch), so it reads them by name; a deployment's Secrets are read when it is not known
// that they are in order: at its first reconcile in this process (after a restart or a change of
// leader, one read per deployment), when the spec names other Secrets, when the last check found
// a problem, when a rank container waits on a Secret it names (the kubelet could not start it:
// CreateContainerConfigError), and at least once per check period. A Secret that goes away after
// that does not stop running ranks (the kubelet reads it when a container starts), and a rank
// that starts without it says so in its status, which wakes the deployment.

// DefaultKeySecretCheckPeriod is how often the Secrets of a deployment's keys are read again
// when nothing else calls for it: each deployment is reconciled once per period (plus up to a
// quarter of it, spread by its UID) at rest.
const DefaultKeySecretCheckPeriod = 30 * time.Minute

// keyCheck is what the last check of a deployment's key Secrets found.
type keyCheck struct {
	uid types.UID
	// refs are the references it checked (keyRefs).
	refs string
	// ok: every Secret existed and held its key.
	ok bool
	at time.Time
}

// keyRefs identifies the Secret references of hcd's keys.
func keyRefs(hcd *hicachev1alpha1.HiCacheDeployment) string {
	admin, generated := resolve.AdminKeySecret(hcd)
	s := admin.Name + "/" + admin.Key
	if generated {
		s += " (generated)"
	}
	if k := resolve.APIKeySecret(hcd); k != nil {
		s += ", " + k.Name + "/" + k.Key
	}
	return s
}

// keyAction is what a reconcile does about the key Secrets.
type keyAction int

const (
	// keysKnown: no request; they were found in order for these references within the period.
	keysKnown keyAction = iota
	// keysRead: read every Secret (and create the generated one when it is missing).
	keysRead
	// keysCreate: create the generated admin key's Secret without reading it first (a deployment
	// that has never run), and read the API key's.
	keysCreate
)

func (a keyAction) String() string {
	return [...]string{"known", "read", "create"}[a]
}

// keyFacts is what decides whether a reconcile reads the key Secrets.
type keyFacts struct {
	// refs are the spec's references now (keyRefs); generated: the admin key's Secret is the
	// operator's to generate.
	refs      string
	generated bool
	// last is the last check of this deployment (its UID) in this process, nil if none.
	last *keyCheck
	// hasGroups: the deployment has serving groups, so it has run before.
	hasGroups bool
	// waiting says which rank containers wait on a Secret the spec names (podsWaitingOnSecrets).
	waiting []string
	now     time.Time
	// period is how long a check holds (keyCheckPeriod).
	period time.Duration
}

// planKeyCheck decides what a reconcile does about the key Secrets, and why.
func planKeyCheck(f keyFacts) (keyAction, string) {
	switch {
	case len(f.waiting) > 0:
		return keysRead, f.waiting[0]
	case f.last == nil && f.generated && !f.hasGroups:
		return keysCreate, "a deployment that has not run yet: its admin key's Secret is generated"
	case f.last == nil:
		return keysRead, "not checked since the operator started"
	case f.last.refs != f.refs:
		return keysRead, "the spec names other Secrets: " + f.refs
	case !f.last.ok:
		return keysRead, "the last check found a problem"
	case !f.now.Before(f.last.at.Add(f.period)):
		return keysRead, "the check period has passed"
	}
	return keysKnown, ""
}

// keyRecheckIn is how long until the Secrets checked by last are read again.
func keyRecheckIn(last *keyCheck, now time.Time, period time.Duration) time.Duration {
	if last == nil || !last.ok {
		return 0 // a problem is retried as the failed reconcile is
	}
	return max(last.at.Add(period).Sub(now), time.Second)
}

// keyCheckPeriod is base spread over [base, 1.25 base) by the deployment's UID, so that
// deployments checked together (all of them when the operator starts) are not read again at the
// same moment.
func keyCheckPeriod(base time.Duration, uid types.UID) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return base + time.Duration(float64(base)/4*float64(h.Sum32()%1024)/1024)
}

// podsWaitingOnSecrets says which containers of pods wait, unable to start, on one of the
// Secrets named: the kubelet's CreateContainerConfigError, whose message names the Secret
// ("secret \"x\" not found", "couldn't find key k in Secret ns/x").
func podsWaitingOnSecrets(pods []corev1.Pod, names []string) []string {
	var out []string
	for i := range pods {
		p := &pods[i]
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			w := cs.State.Waiting
			if w == nil || w.Reason != "CreateContainerConfigError" {
				continue
			}
			for _, n := range names {
				if strings.Contains(w.Message, `"`+n+`"`) || strings.Contains(w.Message, "/"+n) {
					out = append(out, fmt.Sprintf("container %s of pod %s waits on Secret %s: %s", cs.Name, p.Name, n, w.Message))
					break
				}
			}
		}
	}
	return out
}

// keyChecks remembers the last check of each deployment's key Secrets, for this process.
type keyChecks struct {
	mu sync.Mutex
	m  map[types.NamespacedName]keyCheck
}

// last is the last check of hcd, nil when none is remembered for its UID.
func (k *keyChecks) last(hcd *hicachev1alpha1.HiCacheDeployment) *keyCheck {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.m[client.ObjectKeyFromObject(hcd)]
	if !ok || c.uid != hcd.UID {
		return nil
	}
	return &c
}

func (k *keyChecks) record(hcd *hicachev1alpha1.HiCacheDeployment, c keyCheck) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[types.NamespacedName]keyCheck{}
	}
	c.uid = hcd.UID
	k.m[client.ObjectKeyFromObject(hcd)] = c
}

func (k *keyChecks) forget(key types.NamespacedName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
}

// ensureKeys checks the Secrets of SGLang's keys when planKeyCheck says so, and generates the
// admin key's Secret when the deployment names none; it returns a conditionError a user must act
// on. It sets obs.keyRecheck.
func (r *HiCacheDeploymentReconciler) ensureKeys(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	admin, generated := resolve.AdminKeySecret(hcd)
	names := []string{admin.Name}
	if ref := resolve.APIKeySecret(hcd); ref != nil {
		names = append(names, ref.Name)
	}
	var pods []corev1.Pod
	for _, g := range obs.groups {
		pods = append(pods, g.pods...)
	}
	base := r.Options.KeySecretCheckPeriod
	if base <= 0 {
		base = DefaultKeySecretCheckPeriod
	}
	period := keyCheckPeriod(base, hcd.UID)
	f := keyFacts{refs: keyRefs(hcd), generated: generated, last: r.keys.last(hcd), hasGroups: len(obs.groups) > 0,
		waiting: podsWaitingOnSecrets(pods, names), now: obs.now.Time, period: period}
	action, why := planKeyCheck(f)
	if action == keysKnown {
		obs.keyRecheck = keyRecheckIn(f.last, f.now, period)
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Checking the Secrets of SGLang's keys", "action", action.String(), "why", why)
	err := r.checkKeys(ctx, hcd, action == keysCreate)
	var ce *conditionError
	switch {
	case err == nil || errors.As(err, &ce):
		c := keyCheck{refs: f.refs, ok: err == nil, at: f.now}
		r.keys.record(hcd, c)
		obs.keyRecheck = keyRecheckIn(&c, f.now, period)
	default:
		r.keys.forget(client.ObjectKeyFromObject(hcd)) // not known either way: read again
	}
	return err
}

// checkKeys reads the Secrets of SGLang's keys and generates the admin key's Secret when the
// deployment names none and it is missing; create is true to create it first, and read it only
// when it exists already.
func (r *HiCacheDeploymentReconciler) checkKeys(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, create bool) error {
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
	var s *corev1.Secret
	if !create {
		var err error
		if s, err = get(admin.Name); err != nil {
			return fmt.Errorf("reading the admin API key's Secret %s: %w", admin.Name, err)
		}
	}
	if s == nil && generated {
		created, err := r.generateAdminKey(ctx, hcd)
		switch {
		case apierrors.IsAlreadyExists(err):
			if s, err = get(admin.Name); err != nil {
				return fmt.Errorf("reading the admin API key's Secret %s: %w", admin.Name, err)
			}
		case err != nil:
			return err
		default:
			s = created
		}
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

// generateAdminKey creates the Secret of a generated admin key; an error that satisfies
// apierrors.IsAlreadyExists says that a Secret of its name exists.
func (r *HiCacheDeploymentReconciler) generateAdminKey(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment) (*corev1.Secret, error) {
	admin, _ := resolve.AdminKeySecret(hcd)
	key, err := newAdminKey()
	if err != nil {
		return nil, fmt.Errorf("generating an admin API key: %w", err)
	}
	s := buildAdminKeySecret(hcd, key)
	if err := r.Create(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		return nil, fmt.Errorf("creating the admin API key's Secret %s: %w", admin.Name, err)
	}
	r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonAdminKeyGenerated, "GenerateAdminKey",
		"Generated SGLang's admin API key in Secret %s (key %s); the admin endpoints take it as a bearer token", admin.Name, admin.Key)
	return s, nil
}
