package mooncake

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

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
	// Err is the underlying transport error.
	Err error
}

func (e *UnreachableError) Error() string {
	what := "cannot reach"
	if e.Timeout {
		what = "timed out waiting for"
	}
	if errors.Is(e.Err, io.EOF) {
		return fmt.Sprintf("the Mooncake master admin endpoint (%s %s) closed the connection without an HTTP answer (%v); is that port the master's --rpc_port instead of its --metrics_port?",
			e.Method, e.URL, e.Err)
	}
	return fmt.Sprintf("%s the Mooncake master admin endpoint (%s %s): %v; check that mooncake_master runs and that its --metrics_port is reachable from here",
		what, e.Method, e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// HTTPError reports an answer with an unexpected HTTP status.
type HTTPError struct {
	// Method and URL of the request.
	Method, URL string
	// StatusCode is the HTTP status the master answered with.
	StatusCode int
	// Body is the start of the response body (at most 512 bytes).
	Body string
	// Code and Message are Mooncake's error_code and error_message when the body is Mooncake's
	// JSON error shape; Code is 0 otherwise.
	Code    int
	Message string
}

func (e *HTTPError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the Mooncake master answered %s %s with HTTP %d", e.Method, e.URL, e.StatusCode)
	switch {
	case e.Code != 0 || e.Message != "":
		fmt.Fprintf(&b, " (Mooncake error %d: %s)", e.Code, e.Message)
	case e.Body != "":
		fmt.Fprintf(&b, ": %q", e.Body)
	}
	switch {
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
	// Reason says what is wrong, as a sentence fragment.
	Reason string
	// Excerpt is the start of the offending input (at most 200 bytes).
	Excerpt string
	// Err is an underlying decoding error, if any.
	Err error
}

func (e *ProtocolError) Error() string {
	var b strings.Builder
	b.WriteString("unexpected response from the Mooncake master")
	if e.URL != "" {
		fmt.Fprintf(&b, " at %s", e.URL)
	}
	fmt.Fprintf(&b, ": %s", e.Reason)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Excerpt != "" {
		fmt.Fprintf(&b, " (starts %q)", e.Excerpt)
	}
	b.WriteString("; is the URL a Mooncake master's admin port, of a supported release?")
	return b.String()
}

func (e *ProtocolError) Unwrap() error { return e.Err }

func excerpt(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
