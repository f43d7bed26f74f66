package guard

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// The key boundary. SGLang 0.5.23 logs every server argument at start, its keys included
// (engine.py, `server_args=`, docs/compatibility.md), so anyone who may read the rank pod's log
// would hold the keys the server checks. The server therefore never holds a client's key: it
// holds keys of its own (the server keys, from a Secret no client is given), and the proxy, the
// only way into the pod's SGLang port, swaps a client's key for the server key that stands for
// it. A server key, wherever it was read, opens nothing from outside the pod: the proxy does
// not pass it.
//
// Deny by default: the only Authorization the server ever receives is one the proxy wrote, for a
// client key it holds. Any other (none, another scheme, an unknown token, a server key, two
// headers) reaches the server without a key, which SGLang answers as it answers a request with a
// wrong one (its health, readiness and metrics routes take none either way).

// KeyPair is a key clients present (Client) and the key the server behind the proxy holds for
// the same rights (Server).
type KeyPair struct {
	Client string
	Server string
}

// known is every key value of pairs, to take out of the server's answers.
func known(pairs []KeyPair) []string {
	var out []string
	for _, p := range pairs {
		out = append(out, p.Client, p.Server)
	}
	return nonEmpty(out)
}

// ServerAuthorization is the Authorization header the proxy sends the server for a request
// that carries the Authorization values vs: "Bearer " and the server key of the client key the
// bearer token is, or "" (send none). A token is read as SGLang reads one: the header split at
// its first space, the scheme "bearer" in any ASCII case, the token compared whole. More than
// one Authorization header is refused: which one a server reads is not something the proxy
// should guess.
func ServerAuthorization(vs []string, pairs []KeyPair) (string, *Refusal) {
	if len(vs) > 1 {
		return "", &Refusal{Status: http.StatusBadRequest, Message: "the request has more than one Authorization header; send one"}
	}
	if len(vs) == 0 {
		return "", nil
	}
	scheme, token, ok := strings.Cut(vs[0], " ")
	if !ok || !asciiFold(scheme, "bearer") || token == "" {
		return "", nil
	}
	out := ""
	for _, p := range pairs {
		// Every pair is compared, in constant time, so that the time taken tells nothing of
		// which key, if any, the token matched.
		if p.Client != "" && p.Server != "" && subtle.ConstantTimeCompare([]byte(token), []byte(p.Client)) == 1 {
			out = "Bearer " + p.Server
		}
	}
	return out, nil
}

// asciiFold tells whether s is lower (ASCII lowercase) in any ASCII case. Unlike
// strings.EqualFold it folds no other character (U+017F 'ſ' is not 's').
func asciiFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
