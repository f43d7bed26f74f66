package guard

import (
	"fmt"
	"net/http"
	"strings"
)

// The request boundary. The proxy forwards only requests whose target is spelled as SGLang
// 0.5.23's routes spell theirs, so that no other spelling of a path can reach a route the proxy
// does not know it reaches. Starlette's route regexes end in `$`, which in Python also matches
// before a trailing newline: "/server_info%0A" decodes to "/server_info\n" and is answered by the
// /server_info handler (docs/compatibility.md). Rather than list such spellings, the proxy
// allows one character set and refuses everything else.
//
// Every route of http_server.py (and of the routers it includes, and of the PD bootstrap server
// on a prefill rank's bootstrap port) is a path of ASCII letters, digits, '-', '_' and '.',
// separated by single slashes; the only parameters are model names (/v1/models/{model:path},
// "org/name" as Hugging Face spells them) and response ids, of the same characters. No route needs
// a percent-encoding, so none is accepted in the path: any encoding is either of an allowed
// character (a second spelling) or of a refused one.

// Methods are the methods SGLang's routes (and CORS preflights) take; any other is refused.
var Methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions}

// pathByte tells whether c may appear in a path segment.
func pathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}

// queryByte tells whether c may appear raw in a query: RFC 3986's query characters
// (unreserved, sub-delims, ':', '@', '/', '?') and '%' of a percent-encoding.
func queryByte(c byte) bool {
	return pathByte(c) || c == '~' || strings.IndexByte("!$&'()*+,;=:@/?%", c) >= 0
}

// Refusal is why a request is not forwarded: its status and a sentence for the client.
type Refusal struct {
	Status  int
	Message string
}

// CheckRequest is nil for a request the proxy forwards, or why it refuses it. requestURI is the
// request target as the client sent it (http.Request.RequestURI), never a decoded form.
func CheckRequest(method, requestURI string, header http.Header) *Refusal {
	bad := func(format string, a ...any) *Refusal {
		return &Refusal{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, a...)}
	}
	known := false
	for _, m := range Methods {
		known = known || m == method
	}
	if !known {
		return &Refusal{Status: http.StatusMethodNotAllowed, Message: fmt.Sprintf("method %q is not one SGLang's routes take (%s)", method, strings.Join(Methods, ", "))}
	}
	if header.Get("Upgrade") != "" || headerHasToken(header, "Connection", "upgrade") {
		return bad("protocol upgrades (websockets) are not passed: the proxy could not take the server's keys out of what they carry")
	}
	if !strings.HasPrefix(requestURI, "/") {
		return bad("the request target must be a path (origin form), not %q", truncate(requestURI))
	}
	p, q, hasQuery := strings.Cut(requestURI, "?")
	if r := checkPath(p); r != "" {
		return bad("path %q: %s", truncate(p), r)
	}
	if hasQuery {
		if r := checkQuery(q); r != "" {
			return bad("query %q: %s", truncate(q), r)
		}
	}
	return nil
}

// checkPath is why the raw path p is refused, or "".
func checkPath(p string) string {
	if p == "/" {
		return ""
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c != '/' && !pathByte(c) {
			return fmt.Sprintf("byte %#02x at %d is not a letter, digit, '-', '_', '.' or a separating '/' (no route of the server needs another character or any percent-encoding)", c, i)
		}
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return "an empty segment (a doubled or trailing '/')"
		case ".", "..":
			return "a dot segment"
		}
	}
	return ""
}

// checkQuery is why the raw query q is refused, or "": a byte outside RFC 3986's query
// characters, a '%' not followed by two hex digits, or an encoded control character.
func checkQuery(q string) string {
	for i := 0; i < len(q); i++ {
		c := q[i]
		if !queryByte(c) {
			return fmt.Sprintf("byte %#02x at %d is not a query character", c, i)
		}
		if c != '%' {
			continue
		}
		if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
			return fmt.Sprintf("'%%' at %d does not start a percent-encoding", i)
		}
		if v := unhex(q[i+1])<<4 | unhex(q[i+2]); v < 0x20 || v == 0x7f {
			return fmt.Sprintf("the control character %%%s at %d", q[i+1:i+3], i)
		}
		i += 2
	}
	return ""
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
