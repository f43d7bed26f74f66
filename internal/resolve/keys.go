package resolve

import (
	"fmt"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// The container variables of the keys, all secretKeyRef variables, so that the pod spec names
// only Secrets. AdminAPIKeyEnv and APIKeyEnv are the keys clients present (spec.security's, or
// the generated admin key); only the proxy in front of SGLang (the guard container) and the
// router hold them. ServerAdminKeyEnv and ServerAPIKeyEnv are the keys SGLang itself holds (the
// kubelet expands them into --admin-api-key and --api-key), from the deployment's server-key
// Secret: SGLang 0.5.23 logs its arguments, keys included, so the keys it holds open nothing but
// its loopback port, and the proxy swaps a client's key for the server's. The pinned release
// reads neither key from its environment.
const (
	AdminAPIKeyEnv    = "HICACHE_ADMIN_API_KEY"    //nolint:gosec // G101: a variable's name, not a credential
	APIKeyEnv         = "HICACHE_API_KEY"          //nolint:gosec // G101: a variable's name, not a credential
	ServerAdminKeyEnv = "HICACHE_SERVER_ADMIN_KEY" //nolint:gosec // G101: a variable's name, not a credential
	ServerAPIKeyEnv   = "HICACHE_SERVER_API_KEY"   //nolint:gosec // G101: a variable's name, not a credential
	// RouterAdminKeyEnv carries the router's control-plane key into the router container.
	RouterAdminKeyEnv = "HICACHE_ROUTER_ADMIN_KEY"
)

// GeneratedAdminKeyField is the key of the admin API key in the Secret the operator generates.
const GeneratedAdminKeyField = "admin-api-key"

// The keys of the server-key Secret: the server's admin key, and its API key (used only when
// spec.security names an API key).
const (
	ServerAdminKeyField = "admin-api-key"
	ServerAPIKeyField   = "api-key"
)

// ServerKeySecret is the Secret the operator generates for every deployment with the keys SGLang
// holds (ServerAdminKeyEnv, ServerAPIKeyEnv). No client is given them.
func ServerKeySecret(hcd string) string { return hcd + "-sglang-server" }

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

// GeneratedRouterAdminKeySecret is the Secret the operator generates for the router's
// control-plane key (its /workers, /flush_cache, ... routes), under GeneratedAdminKeyField. No
// server holds it, and the router holds no admin key of the servers.
func GeneratedRouterAdminKeySecret(hcd string) string { return hcd + "-router-admin" }

// RouterAdminKeySecret is the Secret key the router's control-plane key comes from; always the
// one the operator generates.
func RouterAdminKeySecret(hcd *hicachev1alpha1.HiCacheDeployment) hicachev1alpha1.SecretKeyReference {
	return hicachev1alpha1.SecretKeyReference{Name: GeneratedRouterAdminKeySecret(hcd.Name), Key: GeneratedAdminKeyField}
}

// APIKeySecret is the Secret key the API key comes from, nil when the OpenAI endpoints need none.
func APIKeySecret(hcd *hicachev1alpha1.HiCacheDeployment) *hicachev1alpha1.SecretKeyReference {
	if s := hcd.Spec.Security; s != nil {
		return s.APIKeySecretRef
	}
	return nil
}

// Bounds of a key's length: long enough that a key cannot occur by chance in what the server
// answers (the proxy in front of it replaces every occurrence), short enough to bound what the
// proxy holds back of a stream while it could be a key's start.
const (
	MinKeyLength = 32
	MaxKeyLength = 512
)

// keyByte tells whether c may be in a key: ASCII letters, digits, '-', '_' and '.'. These are
// the characters every encoding the key can pass through leaves as they are: JSON (any encoder,
// HTML-safe ones included: no '"', '\', '/', '<', '>', '&' or non-ASCII), URL encoding (RFC
// 3986 unreserved, so no '+' read as a space), Python's shlex.quote and SGLang's space-joined
// launch_command (no whitespace). A key so spelled has one spelling in every answer, the one the
// proxy replaces, and none of Redacted's characters.
func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}

// KeyProblem says why v cannot be one of SGLang's keys, or "". It never quotes v.
func KeyProblem(v []byte) string {
	if len(v) < MinKeyLength || len(v) > MaxKeyLength {
		return fmt.Sprintf("holds a key of %d bytes, which must be %d to %d bytes long", len(v), MinKeyLength, MaxKeyLength)
	}
	for i, c := range v {
		if !keyByte(c) {
			what := fmt.Sprintf("byte %d", i)
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				what += " (whitespace, a trailing newline included)"
			}
			return fmt.Sprintf("holds a key whose %s is not an ASCII letter, digit, '-', '_' or '.'", what)
		}
	}
	return ""
}

// KeyAdvice is how to make a key that KeyProblem accepts.
const KeyAdvice = "make one with `openssl rand -hex 32` (and store it without a trailing newline: kubectl create secret generic NAME --from-literal=KEY=\"$(openssl rand -hex 32)\")"
