package main

import "testing"

// The cases of SGLang 0.5.23's own decide_request_auth, as its source states them.
func TestDecide(t *testing.T) {
	const api, admin = "k-api", "k-admin"
	cases := map[string]struct {
		method, path, authz, api, admin string
		level                           authLevel
		ok                              bool
		status                          int
	}{
		"health is open":                        {"GET", "/health", "", api, admin, levelNormal, true, 0},
		"health_generate is open":               {"GET", "/health_generate", "", api, admin, levelNormal, true, 0},
		"metrics are open":                      {"GET", "/metrics", "", api, admin, levelAdminOptional, true, 0},
		"OPTIONS is open":                       {"OPTIONS", "/hicache/storage-backend/clear", "", api, admin, levelAdminOptional, true, 0},
		"admin endpoint, no keys: open":         {"POST", "/hicache/storage-backend/clear", "", "", "", levelAdminOptional, true, 0},
		"admin endpoint, admin key, none sent":  {"POST", "/hicache/storage-backend/clear", "", "", admin, levelAdminOptional, false, 401},
		"admin endpoint, admin key sent":        {"POST", "/hicache/storage-backend/clear", "Bearer " + admin, "", admin, levelAdminOptional, true, 0},
		"bearer is case-insensitive":            {"POST", "/hicache/storage-backend/clear", "bearer " + admin, "", admin, levelAdminOptional, true, 0},
		"admin endpoint refuses the API key":    {"POST", "/hicache/storage-backend/clear", "Bearer " + api, api, admin, levelAdminOptional, false, 401},
		"admin endpoint, only an API key":       {"POST", "/flush_cache", "Bearer " + api, api, "", levelAdminOptional, true, 0},
		"a wrong admin key":                     {"POST", "/flush_cache", "Bearer nope", "", admin, levelAdminOptional, false, 401},
		"not a bearer token":                    {"POST", "/flush_cache", "Basic " + admin, "", admin, levelAdminOptional, false, 401},
		"normal endpoint, admin key only":       {"POST", "/generate", "", "", admin, levelNormal, true, 0},
		"normal endpoint, API key needed":       {"POST", "/v1/chat/completions", "", api, admin, levelNormal, false, 401},
		"normal endpoint, API key sent":         {"POST", "/v1/chat/completions", "Bearer " + api, api, admin, levelNormal, true, 0},
		"normal endpoint refuses the admin key": {"POST", "/v1/chat/completions", "Bearer " + admin, api, admin, levelNormal, false, 401},
		"force without an admin key":            {"POST", "/x", "Bearer " + api, api, "", levelAdminForce, false, 403},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ok, status := decide(tc.method, tc.path, tc.authz, tc.api, tc.admin, tc.level)
			if ok != tc.ok || (!ok && status != tc.status) {
				t.Errorf("decide = %v %d, want %v %d", ok, status, tc.ok, tc.status)
			}
		})
	}
}
