package guard

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// through starts the proxy in front of upstream, which holds the same keys as its clients, and
// returns its URL.
func through(t testing.TB, upstream http.Handler, known ...string) string {
	t.Helper()
	var pairs []KeyPair
	for _, k := range known {
		pairs = append(pairs, KeyPair{Client: k, Server: k})
	}
	return throughPairs(t, upstream, pairs)
}

// throughPairs starts the proxy with the key pairs in front of upstream and returns its URL.
func throughPairs(t testing.TB, upstream http.Handler, pairs []KeyPair) string {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := httptest.NewServer(Proxy(u, pairs))
	t.Cleanup(p.Close)
	return p.URL
}

// A stream reaches the client chunk by chunk, as the server writes it: the server writes its
// second chunk only after the client has read the first, so a proxy that held a response back
// until it ended (or until a buffer filled) would never deliver the first one.
func TestStreamsAreNotBuffered(t *testing.T) {
	read := make(chan struct{})
	url := through(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"text\":\"a\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-read:
		case <-time.After(10 * time.Second):
			return
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	resp, err := http.Post(url+"/generate", "application/json", strings.NewReader(`{"text":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	done := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		done <- line
	}()
	select {
	case line := <-done:
		if line != "data: {\"text\":\"a\"}\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first chunk of the stream did not arrive before the stream went on: the proxy holds it back")
	}
	close(read)
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(rest) != "\ndata: [DONE]\n\n" {
		t.Errorf("rest of the stream %q", rest)
	}
}

// A request passes as it is: method, path, query, headers (the bearer token included) and body;
// the answer passes with its status, headers and body, but for the keys, which are replaced in
// the answer of every path, headers included.
func TestOtherRequestsPassUnchanged(t *testing.T) {
	const admin = "ADMIN-KEY-abc-0123456789abcdefghijk"
	url := through(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen := r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("Authorization") + " " + string(b)
		w.Header().Set("X-Seen", strings.ReplaceAll(seen, admin, "THE-KEY"))
		w.Header().Set("X-Echo", admin)
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, `{"admin_api_key":"`+admin+`"}`)
	}), admin)
	req, _ := http.NewRequest(http.MethodPost, url+"/hicache/storage-backend/clear?x=1", strings.NewReader("body"))
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Seen") != "POST /hicache/storage-backend/clear?x=1 Bearer THE-KEY body" {
		t.Errorf("status %d, seen %q", resp.StatusCode, resp.Header.Get("X-Seen"))
	}
	if resp.Header.Get("X-Echo") != Redacted {
		t.Errorf("a header of the answer holds %q", resp.Header.Get("X-Echo"))
	}
	if string(b) != `{"admin_api_key":"<redacted>"}` {
		t.Errorf("body %s", b)
	}
}

// The answer of /server_info is redacted even when the client asks for gzip and the server
// would send it; its length, which the redaction changes, is not declared (chunked).
func TestInfoIsRedactedWhateverTheEncoding(t *testing.T) {
	const admin = "ADMIN-KEY-abc"
	body := `{"admin_api_key":"` + admin + `","model_path":"m"}`
	url := through(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			_, _ = io.WriteString(gz, body)
			_ = gz.Close()
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	for _, path := range []string{"/server_info", "/get_server_info"} {
		req, _ := http.NewRequest(http.MethodGet, url+path, nil)
		req.Header.Set("Accept-Encoding", "gzip") // set by hand: the client does not decompress
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := `{"admin_api_key":"<redacted>","model_path":"m"}`
		if string(b) != want || resp.Header.Get("Content-Encoding") != "" || resp.ContentLength != -1 {
			t.Errorf("%s: %q (encoding %q, length %d), want %s", path, b, resp.Header.Get("Content-Encoding"), resp.ContentLength, want)
		}
	}
}

// An answer the proxy cannot read whole is refused, never passed on unredacted.
func TestATooLargeInfoIsRefused(t *testing.T) {
	url := through(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"admin_api_key":"k","pad":"`)
		_, _ = io.WriteString(w, strings.Repeat("x", MaxInfoBody))
		_, _ = io.WriteString(w, `"}`)
	}))
	resp, err := http.Get(url + "/server_info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(b), `"k"`) || !strings.Contains(string(b), "larger than") {
		t.Errorf("status %d, body %.200s", resp.StatusCode, b)
	}
}

// A server that does not answer (still starting) is a 502 with a sentence, as a probe sees it.
func TestNoServerIsABadGateway(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(up.URL)
	up.Close()
	p := httptest.NewServer(Proxy(u, nil))
	defer p.Close()
	resp, err := http.Get(p.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "may still be starting") {
		t.Errorf("status %d, body %s", resp.StatusCode, b)
	}
}

// What a request costs through the proxy, on loopback, against the same request sent to the
// server directly (BenchmarkDirect): the server answers a small JSON body at once.
func BenchmarkProxy(b *testing.B) {
	benchmarkGet(b, true, "/generate")
}

func BenchmarkDirect(b *testing.B) {
	benchmarkGet(b, false, "/generate")
}

// BenchmarkProxyServerInfo is a redacted answer of the size SGLang's is (about 550 fields).
func BenchmarkProxyServerInfo(b *testing.B) {
	benchmarkGet(b, true, "/server_info")
}

func benchmarkGet(b *testing.B, proxied bool, path string) {
	var info strings.Builder
	info.WriteString(`{"api_key":"k1","admin_api_key":"k2","launch_command":"--model-path m --admin-api-key k2"`)
	for i := range 550 {
		fmt.Fprintf(&info, `,"field_%d":"value-%d"`, i, i)
	}
	info.WriteString("}")
	small := `{"text":"hello","meta_info":{"completion_tokens":1}}`
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/server_info" {
			_, _ = io.WriteString(w, info.String())
			return
		}
		_, _ = io.WriteString(w, small)
	})
	var url string
	if proxied {
		url = through(b, h, "k1", "k2")
	} else {
		up := httptest.NewServer(h)
		b.Cleanup(up.Close)
		url = up.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Get(url + path)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}
