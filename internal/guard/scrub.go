package guard

import (
	"bytes"
	"net/http"
	"strings"
)

// scrubWriter is the client side of every answer the proxy gives, on every path and port: every
// byte of the status line's headers, the body and the trailers passes through it, and every
// occurrence of a key in them is replaced by Redacted. The body is scanned as it streams: a
// write is passed on at once but for the longest tail that could be the start of a key (at most
// the longest key's length less one byte), which waits for the next write or the end. A stream
// whose chunks end in a byte no key holds (every SSE event ends in "\n") is never held back.
//
// It does not implement http.Hijacker nor Unwrap, so nothing behind it (a protocol upgrade that
// would splice the connection) can write past it. A body's length can change, so the answer's
// Content-Length is dropped (HTTP/1.1 chunked framing).
type scrubWriter struct {
	w      http.ResponseWriter
	keys   [][]byte
	maxLen int
	tail   []byte
	wrote  bool
	err    error
}

func newScrubWriter(w http.ResponseWriter, known []string) *scrubWriter {
	s := &scrubWriter{w: w}
	for _, k := range known {
		s.keys = append(s.keys, []byte(k))
		s.maxLen = max(s.maxLen, len(k))
	}
	return s
}

func (s *scrubWriter) Header() http.Header { return s.w.Header() }

func (s *scrubWriter) WriteHeader(code int) {
	s.scrubHeader()
	if code >= 200 {
		if s.wrote {
			return
		}
		s.wrote = true
		s.w.Header().Del("Content-Length")
	}
	s.w.WriteHeader(code)
}

func (s *scrubWriter) scrubHeader() {
	h := s.w.Header()
	for name, vs := range h {
		for i, v := range vs {
			vs[i] = s.replaceString(v)
		}
		if clean := s.replaceString(name); clean != name {
			h[clean] = append(h[clean], vs...)
			delete(h, name)
		}
	}
}

func (s *scrubWriter) replaceString(v string) string {
	for _, k := range s.keys {
		if strings.Contains(v, string(k)) {
			v = strings.ReplaceAll(v, string(k), Redacted)
		}
	}
	return v
}

func (s *scrubWriter) Write(p []byte) (int, error) {
	if !s.wrote {
		s.WriteHeader(http.StatusOK)
	}
	if s.err != nil {
		return 0, s.err
	}
	if len(s.keys) == 0 {
		return s.w.Write(p)
	}
	data := p
	if len(s.tail) > 0 {
		data = append(s.tail, p...)
		s.tail = nil
	}
	data = ReplaceKeys(data, s.keys)
	hold := HoldBack(data, s.keys, s.maxLen)
	if n := len(data) - hold; n > 0 {
		if _, err := s.w.Write(data[:n]); err != nil {
			s.err = err
			return 0, err
		}
	}
	if hold > 0 {
		s.tail = append([]byte(nil), data[len(data)-hold:]...)
	}
	return len(p), nil
}

// FlushError passes on what was written but a possible key's start.
func (s *scrubWriter) FlushError() error {
	if !s.wrote {
		s.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(s.w).Flush()
}

func (s *scrubWriter) Flush() { _ = s.FlushError() }

// finish writes the held tail (the body ended: it is no key) and scrubs the trailers.
func (s *scrubWriter) finish() {
	if len(s.tail) > 0 && s.err == nil {
		_, _ = s.w.Write(s.tail)
	}
	s.tail = nil
	s.scrubHeader()
}

// ReplaceKeys is b with every occurrence of a key replaced by Redacted, leftmost first. A key
// holds none of Redacted's characters ('<', '>'; resolve.KeyProblem), so a replacement never
// forms a new occurrence.
func ReplaceKeys(b []byte, keys [][]byte) []byte {
	for _, k := range keys {
		if bytes.Contains(b, k) {
			b = bytes.ReplaceAll(b, k, []byte(Redacted))
		}
	}
	return b
}

// HoldBack is the length of the longest tail of b, shorter than maxLen, that is the start of a
// key: the bytes that must wait for what follows before they can be told not to be one.
func HoldBack(b []byte, keys [][]byte, maxLen int) int {
	for l := min(len(b), maxLen-1); l > 0; l-- {
		t := b[len(b)-l:]
		for _, k := range keys {
			if len(k) > l && bytes.HasPrefix(k, t) {
				return l
			}
		}
	}
	return 0
}
