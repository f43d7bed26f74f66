package controllers

import (
	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// adminAuthority decides whether the operator may call adminURL as the admin API of cb's store
// (store.Authorize): a managed backend's admin URLs are the operator's own (its master's Service
// in the backend's namespace, or its pods' IPs), an external backend's only what its RPC address
// provably names or a cluster administrator's grant lists. Every admin call (probe, leader
// following, flush, count, drain) is made only after it allowed that URL.
func adminAuthority(cb *hicachev1alpha1.CacheBackend, adminURL string, grants []store.Grant) store.Authority {
	m := cb.Spec.Mooncake
	switch {
	case m == nil:
		return store.Authority{Reason: store.AuthorityBadAdminURL, Message: "spec.mooncake is not set"}
	case m.External != nil:
		return store.Authorize(m.External.RPCAddress, adminURL, cb.Namespace, "", grants)
	}
	return store.Authority{Allowed: true, Reason: "Managed", Message: "The operator runs this master"}
}
