package mooncake

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"unicode/utf8"
)

// No error of this package carries text that the server sent: not the body of an answer, not a
// header, not an address it redirects to, not the bytes Go's HTTP client quotes when an answer is
// not HTTP. These messages end up in CacheBackend and CacheFlush status, which whoever may read
// those objects sees, and an admin URL can name any server the operator reaches. A message says
// what was asked (method and URL, both the caller's own), what this package parsed (an HTTP
// status, Mooncake's numeric error code, what kind of answer it was) and what to check.

// ErrMultiTenancyDisabled is wrapped by errors about tenant-scoped calls to a master that runs
// without --enable_multi_tenants.
var ErrMultiTenancyDisabled = errors.New("the Mooncake master runs without --enable_multi_tenants")

// UnreachableError reports that the admin endpoint could not be reached or stopped answering:
// connection refused, DNS failure, timeout, or a connection lost while reading.
type UnreachableError struct {
	// Method and URL of the request.
	Method, URL string
	// Timeout is true when the request's deadline passed.
	Timeout bool
	// Err is the underlying transport error. Its text may quote the server's answer: it is
	// never part of Error().
	Err error
}

func (e *UnreachableError) Error() string {
	cause := transportCause(e.Err)
	switch {
	case e.Timeout:
		return fmt.Sprintf("timed out waiting for the Mooncake master admin endpoint (%s %s): no answer within the deadline; check that mooncake_master runs and that its --metrics_port is reachable from here",
			e.Method, e.URL)
	case cause == causeNoHTTP || cause == causeNotHTTP:
		return fmt.Sprintf("the Mooncake master admin endpoint (%s %s) %s; is that port the master's --rpc_port instead of its --metrics_port?",
			e.Method, e.URL, cause)
	}
	return fmt.Sprintf("cannot reach the Mooncake master admin endpoint (%s %s): %s; check that mooncake_master runs and that its --metrics_port is reachable from here",
		e.Method, e.URL, cause)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// What a transport failure was, in this package's words.
const (
	causeRefused     = "connection refused"
	causeReset       = "connection reset by the server"
	causeNoHost      = "no such host"
	causeLookup      = "the host name could not be resolved"
	causeUnreachable = "no route to the host"
	causeNoHTTP      = "closed the connection without an HTTP answer"
	causeNotHTTP     = "answered with something that is not HTTP"
	causeTLSTrust    = "its TLS certificate is not trusted for this host"
	causeTLS         = "the TLS handshake failed"
	causeOther       = "the connection failed"
)

// transportCause classifies a transport error without quoting it.
func transportCause(err error) string {
	var dnsErr *net.DNSError
	var recordErr tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	switch {
	case err == nil:
		return causeOther
	case errors.Is(err, syscall.ECONNREFUSED):
		return causeRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return causeReset
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return causeNoHost
		}
		return causeLookup
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return causeUnreachable
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return causeNoHTTP
	case errors.As(err, &verifyErr), errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidCert):
		return causeTLSTrust
	case errors.As(err, &recordErr):
		return causeTLS
	// net/http reports an answer that is not HTTP/1.x only as text (which quotes the answer).
	case strings.Contains(err.Error(), "malformed HTTP"):
		return causeNotHTTP
	}
	return causeOther
}

// HTTPError reports an answer with an unexpected HTTP status.
type HTTPError struct {
	// Method and URL of the request.
	Method, URL string
	// StatusCode is the HTTP status the master answered with.
	StatusCode int
	// Code is Mooncake's error_code when the body has Mooncake's JSON error shape, 0 otherwise.
	Code int
}

func (e *HTTPError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the Mooncake master answered %s %s with HTTP %d", e.Method, e.URL, e.StatusCode)
	if e.Code != 0 {
		fmt.Fprintf(&b, " (Mooncake error code %d)", e.Code)
	}
	switch {
	case e.StatusCode >= 300 && e.StatusCode < 400:
		b.WriteString("; the URL redirects elsewhere, and redirects are not followed: name the master's admin port itself")
	case e.StatusCode == http.StatusNotFound && e.Code == 0:
		b.WriteString("; this master does not serve that path: is the URL the master's --metrics_port, and is the master Mooncake 0.3.12.post1 or newer?")
	case e.StatusCode == http.StatusServiceUnavailable:
		b.WriteString("; the master's service is not active (an HA standby, or still starting): retry, or use the leader")
	}
	return b.String()
}

// ProtocolError reports a response that does not have the shape this client expects.
type ProtocolError struct {
	// URL of the request.
	URL string
	// Reason says what is wrong, as a sentence fragment of this package's own words.
	Reason string
	// Answer says what kind of answer it was (see describeAnswer), never what it said.
	Answer string
	// Err is an underlying decoding error, if any. Its text may quote the answer: it is never
	// part of Error().
	Err error
}

func (e *ProtocolError) Error() string {
	var b strings.Builder
	b.WriteString("unexpected response from the Mooncake master")
	if e.URL != "" {
		fmt.Fprintf(&b, " at %s", e.URL)
	}
	fmt.Fprintf(&b, ": %s", e.Reason)
	if e.Answer != "" {
		fmt.Fprintf(&b, " (the answer is %s)", e.Answer)
	}
	b.WriteString("; is the URL a Mooncake master's admin port, of a supported release?")
	return b.String()
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// describeAnswer says what kind of answer b is, and how long, in this package's words only.
func describeAnswer(b []byte) string {
	t := bytes.TrimSpace(b)
	kind := "text"
	switch {
	case len(t) == 0:
		return "empty"
	case !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0:
		kind = "binary data"
	case hasPrefixFold(t, "<!doctype html") || hasPrefixFold(t, "<html") || bytes.Contains(bytes.ToLower(t), []byte("<html")):
		kind = "an HTML page"
	case t[0] == '<':
		kind = "markup"
	case json.Valid(t):
		kind = "JSON that is not an object"
		if t[0] == '{' {
			kind = "a JSON object"
		}
	}
	return fmt.Sprintf("%s, %d bytes", kind, len(b))
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}
