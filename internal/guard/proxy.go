package guard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxInfoBody bounds the answer of a redacted path the proxy reads whole (SGLang's
// /server_info is tens of kilobytes per data-parallel rank). A larger answer is refused, not
// passed on unread.
const MaxInfoBody = 16 << 20

// refusal is why the proxy refuses to pass on an answer it cannot redact; its text is the
// answer's error.
type refusal string

func (r refusal) Error() string { return string(r) }

// Proxy refuses every request whose target is not spelled as SGLang's routes are (CheckRequest),
// forwards the rest to the SGLang server at upstream (http://127.0.0.1:30000) with a client's
// key swapped for the server's (ServerAuthorization: keys are the pairs; any other
// Authorization is dropped), and answers the paths Redacts names with the secrets taken out;
// every key of keys, client's and server's, is also replaced wherever it appears in any answer.
//
// Everything else passes as it is, headers and body, in both directions: responses are flushed
// as soon as the server writes them (a /generate stream is never held back), requests are not
// read ahead, upgrades (websockets) are spliced, and no timeout cuts a long generation. The
// upstream is reached directly, whatever proxy the environment names.
func Proxy(upstream *url.URL, keys []KeyPair) http.Handler {
	known := known(keys)
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			// Every answer must arrive as plain bytes to be scanned for the keys.
			pr.Out.Header.Set("Accept-Encoding", "identity")
		},
		Transport:     transport,
		FlushInterval: -1,
		BufferPool:    &bufferPool{},
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return refusal("the server switched protocols, which the proxy does not pass: it could not take the keys out of what the connection carries")
			}
			if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
				return refusal(fmt.Sprintf("the server's answer is encoded (%s), so the proxy cannot take the keys out of it", ce))
			}
			if resp.Request == nil || !Redacts(resp.Request.URL.Path) {
				return nil
			}
			return redactResponse(resp, known)
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			msg := "the SGLang server behind this proxy does not answer; it may still be starting"
			var r refusal
			if errors.As(err, &r) {
				msg = r.Error()
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = fmt.Fprintf(w, `{"error":%q}`+"\n", msg)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := CheckRequest(r.Method, r.RequestURI, r.Header); ref != nil {
			refuse(w, ref)
			return
		}
		authz, ref := ServerAuthorization(r.Header.Values("Authorization"), keys)
		if ref != nil {
			refuse(w, ref)
			return
		}
		r.Header.Del("Authorization")
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		sw := newScrubWriter(w, known)
		defer sw.finish()
		rp.ServeHTTP(sw, r)
	})
}

// refuse answers a request the proxy does not forward.
func refuse(w http.ResponseWriter, ref *Refusal) {
	if ref.Status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", strings.Join(Methods, ", "))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ref.Status)
	_, _ = fmt.Fprintf(w, `{"error":%q}`+"\n", ref.Message)
}

// redactResponse replaces the body of resp by its redaction.
func redactResponse(resp *http.Response, known []string) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxInfoBody+1))
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if len(b) > MaxInfoBody {
		return refusal(fmt.Sprintf("the server's answer is larger than the %d bytes the proxy reads to take the keys out of it", MaxInfoBody))
	}
	b, ok := RedactBody(b, known)
	if !ok {
		return refusal("the server's answer to " + resp.Request.URL.Path + " is not one JSON document, so the proxy cannot find the secrets in it")
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("ETag")
	return nil
}

// bufferPool reuses the buffers the proxy copies bodies through (32 KiB each), which it would
// otherwise allocate per request.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// Server is the HTTP server of the proxy on addr, with the limits an exposed port needs and
// none that would cut a stream.
func Server(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
	}
}
