package mooncaketest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HostileMode is one way an admin endpoint named as a master's can answer.
type HostileMode string

// The hostile modes. Each answers /health with it; HostileHugeMetrics answers /health as a ready
// master and /metrics with it.
const (
	// HostileGarbage answers bytes that are not HTTP, then closes.
	HostileGarbage HostileMode = "garbage"
	// HostileSilent accepts the connection and the request and never answers.
	HostileSilent HostileMode = "silent"
	// HostileDripHeaders sends a status line, then a header one byte every 20 ms, forever.
	HostileDripHeaders HostileMode = "drip-headers"
	// HostileDripBody sends 200 and the start of a JSON object, then one byte every 20 ms, forever.
	HostileDripBody HostileMode = "drip-body"
	// HostileHugeHeader sends a status line and a header line that never ends, as fast as it is read.
	HostileHugeHeader HostileMode = "huge-header"
	// HostileInformational sends 103 Early Hints answers, one after the other, forever.
	HostileInformational HostileMode = "1xx-flood"
	// HostileHugeBody sends 200 and a JSON object that never ends, as fast as it is read.
	HostileHugeBody HostileMode = "huge-body"
	// HostileHugeMetrics answers /health as a ready master, then /metrics with a page of comment
	// lines that never ends, as fast as it is read.
	HostileHugeMetrics HostileMode = "huge-metrics"
	// HostileGzipBomb sends 200 with Content-Encoding gzip: 64 KiB on the wire that inflate to a
	// 64 MiB JSON object.
	HostileGzipBomb HostileMode = "gzip-bomb"
	// HostileRedirectLoop redirects (302) to itself with a new query each time.
	HostileRedirectLoop HostileMode = "redirect-loop"
)

// HostileModes is every hostile mode.
var HostileModes = []HostileMode{
	HostileGarbage, HostileSilent, HostileDripHeaders, HostileDripBody, HostileHugeHeader, HostileInformational,
	HostileHugeBody, HostileHugeMetrics, HostileGzipBomb, HostileRedirectLoop,
}

// HostileRequest is one request a Hostile endpoint answered, as it saw it.
type HostileRequest struct {
	Mode HostileMode
	Path string
	// Query is the request's raw query: a redirect loop's followed requests carry "loop=N".
	Query string
	// Took is from the request to the client closing the connection or leaving it, or to the
	// answer being complete when the mode has an end.
	Took time.Duration
	// Bytes is how much of the answer was written to the connection.
	Bytes int64
}

// Hostile is an admin endpoint on loopback that answers like no master does. Every /health
// request takes the next of its modes, in turn; other paths answer in the mode of the last
// /health request (the first mode before any).
type Hostile struct {
	// URL is the endpoint, http://127.0.0.1:PORT.
	URL string

	modes    []HostileMode
	next     atomic.Int64
	last     atomic.Value // the mode of the last /health request
	l        net.Listener
	bomb     []byte
	mu       sync.Mutex
	requests []HostileRequest
	conns    map[net.Conn]bool
	done     chan struct{}
	wg       sync.WaitGroup
}

// hostileCap bounds any one answer without end, so that a client that never gives up does not
// hold the test forever; a bounded client leaves long before.
const hostileCap = 2 * time.Minute

// StartHostile starts a hostile endpoint answering in modes, in turn (every mode when none is
// given), and stops it when the test ends.
func StartHostile(tb testing.TB, modes ...HostileMode) *Hostile {
	tb.Helper()
	if len(modes) == 0 {
		modes = HostileModes
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	h := &Hostile{URL: "http://" + l.Addr().String(), modes: modes, l: l, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	h.bomb = gzipBomb(tb)
	h.last.Store(string(modes[0]))
	h.wg.Add(1)
	go h.accept()
	tb.Cleanup(h.Close)
	return h
}

// Requests returns what the endpoint answered so far.
func (h *Hostile) Requests() []HostileRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]HostileRequest(nil), h.requests...)
}

// Close stops the endpoint and closes every connection.
func (h *Hostile) Close() {
	select {
	case <-h.done:
		return
	default:
	}
	close(h.done)
	_ = h.l.Close()
	h.mu.Lock()
	for c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

func (h *Hostile) accept() {
	defer h.wg.Done()
	for {
		c, err := h.l.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.conns[c] = true
		h.mu.Unlock()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.serve(c)
			_ = c.Close()
			h.mu.Lock()
			delete(h.conns, c)
			h.mu.Unlock()
		}()
	}
}

// serve answers the requests of one connection until a mode ends it.
func (h *Hostile) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		mode := HostileMode(h.last.Load().(string))
		if req.URL.Path == "/health" {
			mode = h.modes[int(h.next.Add(1)-1)%len(h.modes)]
			h.last.Store(string(mode))
		}
		start := time.Now()
		_ = c.SetWriteDeadline(start.Add(hostileCap))
		w := &countingWriter{w: c}
		keep := h.answer(mode, req, w, br)
		h.mu.Lock()
		h.requests = append(h.requests, HostileRequest{Mode: mode, Path: req.URL.Path, Query: req.URL.RawQuery, Took: time.Since(start), Bytes: w.n})
		h.mu.Unlock()
		if !keep {
			return
		}
	}
}

// answer writes the answer of mode; it reports whether the connection may carry another
// request. An answer without end lasts until the client leaves: then the connection's read
// ends.
func (h *Hostile) answer(mode HostileMode, req *http.Request, w *countingWriter, br *bufio.Reader) bool {
	forever := func(chunk []byte, interval time.Duration) {
		gone := make(chan struct{})
		go func() {
			_, _ = br.ReadByte()
			close(gone)
		}()
		stop := time.After(hostileCap)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			var tick <-chan time.Time
			if interval > 0 {
				tick = time.After(interval)
			} else {
				ready := make(chan time.Time)
				close(ready)
				tick = ready
			}
			select {
			case <-gone:
				return
			case <-h.done:
				return
			case <-stop:
				return
			case <-tick:
			}
		}
	}
	big := bytes.Repeat([]byte("a"), 32<<10)
	switch {
	case mode == HostileHugeMetrics && req.URL.Path == "/health":
		body := `{"status":"ok","role":"leader","ha_state":"serving","service_ready":true}`
		_, _ = fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return true
	case mode == HostileHugeMetrics:
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nmaster_key_count 0\n")
		forever([]byte("# "+strings.Repeat("b", 1021)+"\n"), 0)
	case mode == HostileGarbage:
		_, _ = w.Write(bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef, '\r', '\n'}, 200))
	case mode == HostileSilent:
		forever(nil, 50*time.Millisecond)
	case mode == HostileDripHeaders:
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Drip: ")
		forever([]byte("d"), 20*time.Millisecond)
	case mode == HostileDripBody:
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"status\":\"ok\",\"x\":\"")
		forever([]byte("d"), 20*time.Millisecond)
	case mode == HostileHugeHeader:
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Huge: ")
		forever(big, 0)
	case mode == HostileInformational:
		forever([]byte("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"), 0)
	case mode == HostileHugeBody:
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"status\":\"ok\",\"x\":\"")
		forever(big, 0)
	case mode == HostileGzipBomb:
		_, _ = fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", len(h.bomb))
		_, _ = w.Write(h.bomb)
		return true
	case mode == HostileRedirectLoop:
		n := 0
		_, _ = fmt.Sscanf(req.URL.Query().Get("loop"), "%d", &n)
		_, _ = fmt.Fprintf(w, "HTTP/1.1 302 Found\r\nLocation: %s?loop=%d\r\nContent-Length: 0\r\n\r\n", req.URL.Path, n+1)
		return true
	}
	return false
}

// gzipBomb is a gzip stream of a JSON object with a 64 MiB string.
func gzipBomb(tb testing.TB) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.WriteString(zw, `{"status":"ok","x":"`)
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	for range 64 {
		_, _ = zw.Write(chunk)
	}
	_, _ = io.WriteString(zw, `"}`)
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
