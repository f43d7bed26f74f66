// Package mooncake talks to the admin HTTP endpoint of a Mooncake master (mooncake_master
// --metrics_port, 9003 by default): health, store summary, key listing, segments and remove_all.
//
// The shapes it expects were read from mooncake_master 0.3.13.post1; docs/compatibility.md
// lists what that release offers. The master reports no version over HTTP.
package mooncake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// Default deadlines of a Client.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultListTimeout    = 5 * time.Minute
)

// Bounds of the answers read: a server that sends more gets a *ProtocolError, not more memory.
const (
	// maxJSONBody bounds a JSON answer (tenant quotas, remove_all).
	maxJSONBody = 4 << 20
	// maxHealthBody bounds a /health answer, about 100 bytes from a real master.
	maxHealthBody = 64 << 10
	// maxMetricsBody bounds a /metrics page: a few hundred lines per tenant and segment.
	maxMetricsBody = 16 << 20
	// maxErrorBody is how much of a non-200 answer is read for Mooncake's error code.
	maxErrorBody = 4 << 10
)

// Paths of the master's admin API.
const (
	PathHealth       = "/health"
	PathMetrics      = "/metrics"
	PathAllKeys      = "/get_all_keys"
	PathRemoveAll    = "/api/v1/remove_all"
	PathTenantQuotas = "/api/v1/tenant_quotas"
	PathSegments     = "/get_segments_detail"
)

// mooncakeUnavailableInCurrentMode is Mooncake's ErrorCode UNAVAILABLE_IN_CURRENT_MODE.
const mooncakeUnavailableInCurrentMode = -1011

// Client calls one master's admin endpoint. It is safe for concurrent use.
type Client struct {
	base           *url.URL
	http           *http.Client
	requestTimeout time.Duration
	listTimeout    time.Duration
}

// Option changes a Client.
type Option func(*Client)

// WithRequestTimeout bounds each small request (health, metrics, remove_all). Default 10 s.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.requestTimeout = d } }

// WithListTimeout bounds a whole key listing, which streams every key. Default 5 min.
func WithListTimeout(d time.Duration) Option { return func(c *Client) { c.listTimeout = d } }

// NewClient returns a Client for the admin endpoint at adminURL (for example
// "http://mooncake-master:9003"), sending requests with httpClient. Redirects are not followed
// (a master never redirects; the address a redirect names is the server's text, and following
// it would reach a server the URL does not name): a redirect is an *HTTPError.
func NewClient(adminURL string, httpClient *http.Client, opts ...Option) (*Client, error) {
	if httpClient == nil {
		return nil, errors.New("mooncake.NewClient needs an *http.Client")
	}
	noRedirects := *httpClient
	noRedirects.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	httpClient = &noRedirects
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("the Mooncake admin URL %q is not a URL: %w", adminURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("the Mooncake admin URL %q must look like http://HOST:PORT (the master's --metrics_port)", adminURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("the Mooncake admin URL %q must not have a query or fragment", adminURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	c := &Client{base: u, http: httpClient, requestTimeout: DefaultRequestTimeout, listTimeout: DefaultListTimeout}
	for _, o := range opts {
		o(c)
	}
	if c.requestTimeout <= 0 || c.listTimeout <= 0 {
		return nil, errors.New("mooncake client timeouts must be positive")
	}
	return c, nil
}

// AdminURL returns the base URL the client calls.
func (c *Client) AdminURL() string { return c.base.String() }

// Health calls GET /health. A master that answers but whose service is not ready (an HA
// standby) returns a Health with ServiceReady false and no error.
func (c *Client) Health(ctx context.Context) (Health, error) {
	body, u, err := c.getJSON(ctx, PathHealth, maxHealthBody)
	if err != nil {
		return Health{}, err
	}
	h, err := ParseHealth(body)
	return h, withURL(err, u)
}

// Summary reads GET /metrics (Prometheus text) and returns capacity, usage and key count.
// /metrics/summary is human-readable text and is not used.
func (c *Client) Summary(ctx context.Context) (Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	var s Summary
	_, err := c.stream(ctx, http.MethodGet, PathMetrics, nil, func(r io.Reader) error {
		var perr error
		s, perr = ParseMetrics(limitReader(r, maxMetricsBody))
		return perr
	})
	if err != nil {
		return Summary{}, err
	}
	return s, nil
}

// Keys streams GET /get_all_keys and calls fn for each key, never holding the whole list in
// memory. It stops at the first error of fn and returns it. The master lists the keys of the
// default tenant only, and only objects whose write has completed.
func (c *Client) Keys(ctx context.Context, fn func(key string) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.listTimeout)
	defer cancel()
	_, err := c.stream(ctx, http.MethodGet, PathAllKeys, nil, func(r io.Reader) error {
		return ScanKeys(r, fn)
	})
	return err
}

// CountKeysWithPrefix counts the keys listed by /get_all_keys that start with prefix.
func (c *Client) CountKeysWithPrefix(ctx context.Context, prefix string) (int64, error) {
	var n int64
	err := c.Keys(ctx, func(key string) error {
		if strings.HasPrefix(key, prefix) {
			n++
		}
		return nil
	})
	return n, err
}

// TenantQuotas calls GET /api/v1/tenant_quotas. On a master without multi-tenancy the error
// wraps ErrMultiTenancyDisabled.
func (c *Client) TenantQuotas(ctx context.Context) ([]TenantQuota, error) {
	body, u, err := c.getJSON(ctx, PathTenantQuotas, maxJSONBody)
	if err != nil {
		var he *HTTPError
		if errors.As(err, &he) && he.StatusCode == http.StatusConflict && he.Code == mooncakeUnavailableInCurrentMode {
			return nil, fmt.Errorf("%w: %w", ErrMultiTenancyDisabled, err)
		}
		return nil, err
	}
	q, err := ParseTenantQuotas(body)
	return q, withURL(err, u)
}

// Segments calls GET /get_segments_detail: the memory segments clients have mounted, with their
// sizes. An SGLang rank with a global segment size mounts one segment.
func (c *Client) Segments(ctx context.Context) ([]Segment, error) {
	body, u, err := c.getJSON(ctx, PathSegments, maxJSONBody)
	if err != nil {
		return nil, err
	}
	s, err := ParseSegments(body)
	return s, withURL(err, u)
}

// RemoveAllOptions select what RemoveAll removes.
type RemoveAllOptions struct {
	// Force also removes objects under a read lease (read or probed within the master's
	// --default_kv_lease_ttl). Objects with a write still in flight are never removed.
	Force bool
	// TenantID limits the removal to one tenant. It needs a master with --enable_multi_tenants:
	// without it, the master ignores the tenant and removes every object, so RemoveAll refuses
	// to send a tenant to such a master. Empty means every tenant.
	TenantID string
}

// RemoveAll calls POST /api/v1/remove_all and returns the number of objects removed. It is not
// retried: a second call may remove objects written in between.
func (c *Client) RemoveAll(ctx context.Context, opts RemoveAllOptions) (int64, error) {
	q := url.Values{}
	if opts.Force {
		q.Set("force", "true")
	}
	if opts.TenantID != "" {
		if err := validateTenantID(opts.TenantID); err != nil {
			return 0, err
		}
		if _, err := c.TenantQuotas(ctx); err != nil {
			if errors.Is(err, ErrMultiTenancyDisabled) {
				return 0, fmt.Errorf("refusing a remove_all scoped to tenant %q: %w, where the tenant is ignored and every object would be removed; flush by key prefix instead, or remove TenantID to flush everything", opts.TenantID, ErrMultiTenancyDisabled)
			}
			return 0, fmt.Errorf("checking that the master isolates tenants before remove_all: %w", err)
		}
		q.Set("tenant_id", opts.TenantID)
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	var body []byte
	u, err := c.stream(ctx, http.MethodPost, PathRemoveAll, q, func(r io.Reader) error {
		var rerr error
		body, rerr = readLimited(r, maxJSONBody)
		return rerr
	})
	if err != nil {
		return 0, err
	}
	n, err := ParseRemoveAll(body)
	return n, withURL(err, u)
}

// validateTenantID accepts what the master's TenantId accepts and its admin handler can read:
// the remove_all handler does not percent-decode the query, so only characters that need no
// escaping are allowed.
func validateTenantID(t string) error {
	if len(t) > 256 {
		return fmt.Errorf("tenant id %q is longer than 256 characters", t[:32]+"...")
	}
	if t[0] == '_' {
		return fmt.Errorf("tenant id %q must not start with '_' (reserved by Mooncake)", t)
	}
	for _, r := range t {
		ok := r == '-' || r == '.' || r == '_' || r == '~' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("tenant id %q has %q: only letters, digits and - . _ ~ can be sent to the master's remove_all endpoint, which does not decode escaped characters", t, r)
		}
	}
	return nil
}

func (c *Client) url(path string, q url.Values) *url.URL {
	u := *c.base
	u.Path = c.base.Path + path
	if q != nil {
		u.RawQuery = q.Encode()
	}
	return &u
}

// getJSON performs a small GET and returns the body of a 200 answer, of at most limit bytes.
func (c *Client) getJSON(ctx context.Context, path string, limit int64) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	var body []byte
	u, err := c.stream(ctx, http.MethodGet, path, nil, func(r io.Reader) error {
		var rerr error
		body, rerr = readLimited(r, limit)
		return rerr
	})
	return body, u, err
}

// stream sends a request, checks for HTTP 200 and hands the body to read. Transport failures,
// including a connection lost while read runs, become *UnreachableError; other statuses
// *HTTPError; a *ProtocolError from read gets the URL.
func (c *Client) stream(ctx context.Context, method, path string, q url.Values, read func(io.Reader) error) (string, error) {
	return c.streamBody(ctx, method, path, q, nil, read)
}

// streamBody is stream with a JSON request body (none when body is nil).
func (c *Client) streamBody(ctx context.Context, method, path string, q url.Values, body io.Reader, read func(io.Reader) error) (string, error) {
	u := c.url(path, q).String()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return u, fmt.Errorf("building the request %s %s: %w", method, u, err)
	}
	req.Header.Set("Accept", "application/json, text/plain")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return u, c.transportError(ctx, method, u, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		he := &HTTPError{Method: method, URL: u, StatusCode: resp.StatusCode}
		he.Code, _ = parseErrorBody(b)
		return u, he
	}
	if err := read(resp.Body); err != nil {
		var pe *ProtocolError
		if errors.As(err, &pe) {
			return u, withURL(err, u)
		}
		if isTransport(err) {
			return u, c.transportError(ctx, method, u, err)
		}
		return u, err
	}
	return u, nil
}

// transportError classifies a failure of the connection. The caller's own cancellation is
// returned as is, wrapped with what was being done.
func (c *Client) transportError(ctx context.Context, method, u string, err error) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	timeout := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		timeout = true
	}
	return &UnreachableError{Method: method, URL: u, Timeout: timeout, Err: err}
}

// isTransport reports whether err came from the connection rather than from parsing.
func isTransport(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

func readLimited(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(limitReader(r, limit))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// limitedReader reads at most limit bytes of r and fails with a *ProtocolError when r has more.
type limitedReader struct {
	r        io.Reader
	n, limit int64 // n bytes left of limit
}

func limitReader(r io.Reader, limit int64) *limitedReader {
	return &limitedReader{r: r, n: limit, limit: limit}
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, err := l.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, &ProtocolError{Reason: fmt.Sprintf("the answer is larger than %d bytes", l.limit)}
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// withURL sets the URL of a *ProtocolError that has none.
func withURL(err error, u string) error {
	var pe *ProtocolError
	if errors.As(err, &pe) && pe.URL == "" {
		pe.URL = u
	}
	return err
}
