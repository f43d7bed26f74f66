package mooncake

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// secret starts every answer of the servers below: no error message may carry any of it.
const secret = "XYZZY-token=0f9e8d7c6b5a"

// Whatever a URL answers, the client's errors say what was asked and what kind of answer came
// back, never what it said: their messages reach status that others read.
func TestErrorsNeverQuoteTheAnswer(t *testing.T) {
	ready := `{"status":"ok","role":"leader","ha_state":"serving","service_ready":true}`
	answers := map[string]http.HandlerFunc{
		"an HTML page": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, "<html><body>%s</body></html>", secret)
		},
		"plain text": func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, secret) },
		"JSON with other fields": func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, `{"status":%q,"service_ready":"%s","success":%q}`, secret, secret, secret)
		},
		"Mooncake's error shape": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, `{"success":false,"error_code":-1011,"error_message":%q}`, secret)
		},
		"an error page": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, secret)
		},
		"a redirect": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/"+secret, http.StatusFound)
		},
		"metrics that are not samples": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == PathHealth {
				fmt.Fprint(w, ready)
				return
			}
			fmt.Fprintf(w, "%s_metric{a=%q} 1\n%s 1 2 3\nmaster_key_count %s\n", strings.ToLower(secret[:5]), secret, secret, secret)
		},
		"an answer that is not HTTP": func(w http.ResponseWriter, _ *http.Request) {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString(secret + " " + secret + "\r\n\r\n")
			_ = buf.Flush()
			_ = conn.Close()
		},
		"a bad status line": func(w http.ResponseWriter, _ *http.Request) {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 " + secret + "\r\n\r\n")
			_ = buf.Flush()
			_ = conn.Close()
		},
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(answer)
			defer srv.Close()
			c, err := NewClient(srv.URL, &http.Client{Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func() error{
				"Health":       func() error { _, err := c.Health(context.Background()); return err },
				"Summary":      func() error { _, err := c.Summary(context.Background()); return err },
				"TenantQuotas": func() error { _, err := c.TenantQuotas(context.Background()); return err },
				"RemoveAll":    func() error { _, err := c.RemoveAll(context.Background(), RemoveAllOptions{}); return err },
			}
			failed := 0
			for call, f := range calls {
				err := f()
				if err == nil {
					continue
				}
				failed++
				if msg := err.Error(); strings.Contains(strings.ToUpper(msg), "XYZZY") || strings.Contains(msg, "0f9e8d7c6b5a") {
					t.Errorf("%s: the message quotes the answer: %s", call, msg)
				}
				if !strings.Contains(err.Error(), srv.URL) {
					t.Errorf("%s: the message %q does not name the URL asked", call, err)
				}
			}
			if failed == 0 {
				t.Errorf("no call failed against %s", name)
			}
		})
	}
}

// An answer larger than the bound of its endpoint is refused, not read into memory.
func TestAnswersAreBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bw := bufio.NewWriter(w)
		defer bw.Flush()
		switch r.URL.Path {
		case PathHealth:
			fmt.Fprintf(bw, `{"status":"ok","service_ready":true,"x":"%s"}`, strings.Repeat("a", maxHealthBody))
		case PathMetrics:
			fmt.Fprint(bw, "master_total_capacity_bytes 1\nmaster_allocated_bytes 0\nmaster_key_count 0\n")
			line := "# " + strings.Repeat("b", 1000) + "\n"
			for range maxMetricsBody/len(line) + 1 {
				fmt.Fprint(bw, line)
			}
		}
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL, &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var pe *ProtocolError
	if _, err := c.Health(context.Background()); !errors.As(err, &pe) || !strings.Contains(err.Error(), "larger than 65536 bytes") {
		t.Errorf("Health() of a %d-byte answer: %v; want a *ProtocolError about its size", maxHealthBody+40, err)
	}
	if _, err := c.Summary(context.Background()); !errors.As(err, &pe) || !strings.Contains(err.Error(), "larger than 16777216 bytes") {
		t.Errorf("Summary() of a metrics page over %d bytes: %v; want a *ProtocolError about its size", maxMetricsBody, err)
	}
}

// A server that accepts and never answers, or answers its headers and then stalls, holds a
// call only until the caller's deadline.
func TestAStalledServerIsBoundedByTheCallersDeadline(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	stall := make(chan struct{})
	headersOnly := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "master_total_capacity_bytes 1\n")
		w.(http.Flusher).Flush()
		<-stall
	}))
	defer headersOnly.Close()
	defer close(stall) // before Close, which waits for the handler

	for name, u := range map[string]string{"accepts, never answers": "http://" + l.Addr().String(), "stalls in the body": headersOnly.URL} {
		t.Run(name, func(t *testing.T) {
			c, err := NewClient(u, &http.Client{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err = c.Summary(ctx)
			took := time.Since(start)
			var ue *UnreachableError
			if !errors.As(err, &ue) || !ue.Timeout {
				t.Errorf("Summary() = %v; want an *UnreachableError that timed out", err)
			}
			if took > 2*time.Second {
				t.Errorf("Summary() returned after %v with a 300 ms deadline", took)
			}
		})
	}
}

func TestHealthState(t *testing.T) {
	tests := map[string]struct {
		h    Health
		want HealthState
	}{
		"captured":            {Health{Status: "ok", Role: "leader", HAState: "serving", ServiceReady: true}, HealthServing},
		"standby role":        {Health{Status: "ok", Role: "standby"}, HealthStandby},
		"standby state":       {Health{Status: "ok", HAState: "standby"}, HealthStandby},
		"starting":            {Health{Status: "ok", Role: "leader"}, HealthNotServing},
		"an unknown status":   {Health{Status: "whatever", ServiceReady: true}, HealthNotServing},
		"unknown role, ready": {Health{Status: "ok", Role: "other", ServiceReady: true}, HealthServing},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.h.State(); got != tc.want {
				t.Errorf("%+v.State() = %s, want %s", tc.h, got, tc.want)
			}
		})
	}
}

func TestDescribeAnswer(t *testing.T) {
	tests := map[string]string{
		"":                          "empty",
		"  \n":                      "empty",
		"<!DOCTYPE html><p>x</p>":   "an HTML page, 23 bytes",
		"<html>":                    "an HTML page, 6 bytes",
		"<?xml version='1.0'?><a/>": "markup, 25 bytes",
		`{"a":1}`:                   "a JSON object, 7 bytes",
		`[1]`:                       "JSON that is not an object, 3 bytes",
		"404 Not Found":             "text, 13 bytes",
		"\x00\x01":                  "binary data, 2 bytes",
	}
	for in, want := range tests {
		if got := describeAnswer([]byte(in)); got != want {
			t.Errorf("describeAnswer(%q) = %q, want %q", in, got, want)
		}
	}
}
