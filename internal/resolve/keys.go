package resolve

import (
	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// The container variables SGLang's keys reach the server through: secretKeyRef variables that
// the kubelet expands into --admin-api-key and --api-key, so that the pod spec names only the
// Secret. The pinned release reads neither key from its environment.
const (
	AdminAPIKeyEnv = "HICACHE_ADMIN_API_KEY" //nolint:gosec // G101: a variable's name, not a credential
	APIKeyEnv      = "HICACHE_API_KEY"       //nolint:gosec // G101: a variable's name, not a credential
)

// GeneratedAdminKeyField is the key of the admin API key in the Secret the operator generates.
const GeneratedAdminKeyField = "admin-api-key"

// GeneratedAdminKeySecret is the Secret the operator generates for a deployment that names no
// admin key.
func GeneratedAdminKeySecret(hcd string) string { return hcd + "-sglang-admin" }

// AdminKeySecret is the Secret key the admin API key comes from: spec.security's, or the one
// the operator generates. generated tells which.
func AdminKeySecret(hcd *hicachev1alpha1.HiCacheDeployment) (ref hicachev1alpha1.SecretKeyReference, generated bool) {
	if s := hcd.Spec.Security; s != nil && s.AdminAPIKeySecretRef != nil {
		return *s.AdminAPIKeySecretRef, false
	}
	return hicachev1alpha1.SecretKeyReference{Name: GeneratedAdminKeySecret(hcd.Name), Key: GeneratedAdminKeyField}, true
}

// APIKeySecret is the Secret key the API key comes from, nil when the OpenAI endpoints need none.
func APIKeySecret(hcd *hicachev1alpha1.HiCacheDeployment) *hicachev1alpha1.SecretKeyReference {
	if s := hcd.Spec.Security; s != nil {
		return s.APIKeySecretRef
	}
	return nil
}
