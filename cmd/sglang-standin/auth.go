package main

import (
	"crypto/subtle"
	"strings"
)

// authLevel is how an endpoint is guarded, as SGLang 0.5.23 marks its endpoints
// (srt/utils/auth.py AuthLevel).
type authLevel int

const (
	levelNormal authLevel = iota
	levelAdminOptional
	levelAdminForce
)

// decide is SGLang 0.5.23's decide_request_auth: whether a request may pass, and the status of
// its refusal. The rules are read from the release's source (docs/compatibility.md, "SGLang's API
// keys").
func decide(method, path, authorization, apiKey, adminKey string, level authLevel) (bool, int) {
	if method == "OPTIONS" || strings.HasPrefix(path, "/health") || strings.HasPrefix(path, "/ready") || strings.HasPrefix(path, "/metrics") {
		return true, 0
	}
	bearer := func(want string) bool {
		scheme, token, ok := strings.Cut(authorization, " ")
		return ok && strings.EqualFold(scheme, "bearer") && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
	}
	switch level {
	case levelAdminForce:
		if adminKey == "" {
			return false, 403
		}
		return bearer(adminKey), 401
	case levelAdminOptional:
		switch {
		case adminKey != "":
			return bearer(adminKey), 401
		case apiKey != "":
			return bearer(apiKey), 401
		}
		return true, 0
	}
	if apiKey != "" {
		return bearer(apiKey), 401
	}
	return true, 0
}
