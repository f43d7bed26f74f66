// Package guard is a reverse proxy for SGLang's HTTP server that keeps the server's keys out of
// what the server reports about itself.
//
// SGLang 0.5.23 answers GET /server_info (and the deprecated /get_server_info) with every
// server argument, --api-key and --admin-api-key included, and with the command line it was
// started with; the endpoint needs no more than the API key (none when no API key is set). So
// whoever may call the OpenAI-compatible API could read the admin key, which unlocks clearing
// the L3 store, weight updates and the other admin endpoints (docs/compatibility.md, "SGLang's
// API keys"). The proxy forwards every request unchanged, streams unbuffered, and rewrites only
// the answers of those two paths, with the secrets replaced by "<redacted>".
//
// This file holds the decisions (which paths, which fields, which flags) as pure functions; the
// proxy is in proxy.go.
package guard

import (
	"bytes"
	"encoding/json"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// Redacted replaces a secret, as SGLang itself writes the watermark secrets it redacts.
const Redacted = "<redacted>"

// SecretFields are the server arguments of SGLang 0.5.23 whose value is a secret, by the name
// /server_info reports them under (ServerArgs attribute names): the two keys, and the password
// of the TLS key file. They are redacted wherever they occur in an answer: at its top level,
// and in every scheduler's copy under internal_states.
var SecretFields = []string{"api_key", "admin_api_key", "ssl_keyfile_password"}

// SecretFlags are the command-line flags of those fields, whose values launch_command holds.
var SecretFlags = []string{"--api-key", "--admin-api-key", "--ssl-keyfile-password"}

// commandFields are the fields that hold a command line as one space-separated string.
var commandFields = []string{"launch_command"}

// infoPaths are the paths whose answers report the server's arguments.
var infoPaths = []string{"/server_info", "/get_server_info"}

// Redacts tells whether the answer to a request for urlPath (the decoded path, as SGLang routes
// it) must be redacted: one whose path ends in one of the info paths. It matches more than the
// two routes (any method, a trailing slash, repeated or dot segments, and any prefix, because
// with --fastapi-root-path SGLang also serves them below that prefix): redacting an answer that
// holds no secret costs nothing, missing one that does would leak the keys.
func Redacts(urlPath string) bool {
	p := path.Clean("/" + urlPath)
	for _, ip := range infoPaths {
		if strings.HasSuffix(p, ip) {
			return true
		}
	}
	return false
}

// RedactBody is the answer body b of a redacted path with every secret replaced: each
// SecretFields member at any depth, the values of SecretFlags in launch_command, and any
// occurrence of a known secret value (the keys the proxy itself was given) in any string or
// member name. ok is false for a body that is not exactly one JSON document: where the secret
// fields are in it cannot be told, so it must not be passed on (an empty body is passed).
func RedactBody(b []byte, known []string) (out []byte, ok bool) {
	known = nonEmpty(known)
	if len(bytes.TrimSpace(b)) == 0 {
		return b, true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers keep their digits
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	v = redactValue(v, known)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, false
	}
	return replaceKnown(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), known), true
}

func redactValue(v any, known []string) any {
	switch t := v.(type) {
	case map[string]any:
		for k, item := range t {
			switch {
			case slices.Contains(SecretFields, k):
				if item != nil {
					t[k] = Redacted
				}
			case slices.Contains(commandFields, k):
				if s, ok := item.(string); ok {
					t[k] = replaceKnownString(RedactCommandLine(s), known)
				} else {
					t[k] = redactValue(item, known)
				}
			default:
				t[k] = redactValue(item, known)
			}
		}
		return t
	case []any:
		for i := range t {
			t[i] = redactValue(t[i], known)
		}
		return t
	case string:
		return replaceKnownString(t, known)
	}
	return v
}

// RedactCommandLine is a command line, as SGLang reports it (its arguments joined by spaces),
// with the value of every secret flag replaced: "--admin-api-key K" and "--admin-api-key=K", and
// the abbreviations argparse accepts ("--admin-api K"). Any prefix of a secret flag counts, so an
// ambiguous abbreviation that argparse would refuse is redacted too; that costs only a value
// that was no secret.
func RedactCommandLine(s string) string {
	fields := strings.Split(s, " ")
	for i := 0; i < len(fields); i++ {
		name, _, hasValue := strings.Cut(fields[i], "=")
		if !isSecretFlag(name) {
			continue
		}
		if hasValue {
			fields[i] = name + "=" + Redacted
			continue
		}
		if i+1 < len(fields) {
			fields[i+1] = Redacted
			i++
		}
	}
	return strings.Join(fields, " ")
}

// isSecretFlag tells whether name is a secret flag or a prefix of one that argparse could take
// for it (at least one character past the dashes). A flag of the pinned release spelled out in
// full is itself, not an abbreviation: --ssl-keyfile is the key file's path, no secret.
func isSecretFlag(name string) bool {
	if len(name) < 3 || !strings.HasPrefix(name, "--") {
		return false
	}
	if spec, err := argspec.Default(); err == nil {
		if a, ok := spec.Lookup(name); ok {
			return slices.Contains(SecretFields, a.Dest)
		}
	}
	for _, f := range SecretFlags {
		if strings.HasPrefix(f, name) {
			return true
		}
	}
	return false
}

func replaceKnown(b []byte, known []string) []byte {
	for _, k := range known {
		b = bytes.ReplaceAll(b, []byte(k), []byte(Redacted))
	}
	return b
}

func replaceKnownString(s string, known []string) string {
	for _, k := range known {
		s = strings.ReplaceAll(s, k, Redacted)
	}
	return s
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
