package guard

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	fuzzAdmin = "fuzzADMINkey-0123456789abcdefghijklmnop"
	fuzzAPI   = "fuzzAPIkey-ZYXWVUTSRQPONMLKJIHGFEDCBA98"
)

// starletteLike routes as Starlette 1.10 does (compile_path: "^" + path + "$" matched with
// Python's re, whose "$" also matches before one trailing newline) on the path uvicorn hands it
// (percent-decoded), and answers /server_info as SGLang 0.5.23 does: the keys in clear.
func starletteLike() http.Handler {
	info := regexp.MustCompile(`^/(get_)?server_info\n?$`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := url.PathUnescape(strings.SplitN(r.RequestURI, "?", 2)[0])
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if info.MatchString(p) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"api_key":%q,"admin_api_key":%q,"ssl_keyfile_password":"pw","launch_command":"--api-key %s --admin-api-key %s"}`, fuzzAPI, fuzzAdmin, fuzzAPI, fuzzAdmin)
			return
		}
		http.NotFound(w, r)
	})
}

// rawGet sends "GET target" as bytes on a fresh connection (no client-side check of the target)
// and returns the whole answer.
func rawGet(t testing.TB, addr, target string) []byte {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: guard\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", target, fuzzAPI)
	b, _ := io.ReadAll(bufio.NewReader(c))
	return b
}

func leaks(b []byte) bool {
	return bytes.Contains(b, []byte(fuzzAdmin)) || bytes.Contains(b, []byte(fuzzAPI)) || bytes.Contains(b, []byte(`"pw"`))
}

// variants are the request targets of route with every byte inserted at every position, raw and
// percent-encoded in both hex cases.
func variants(route string) []string {
	var out []string
	for pos := 0; pos <= len(route); pos++ {
		for b := 0; b < 256; b++ {
			for _, ins := range []string{string([]byte{byte(b)}), fmt.Sprintf("%%%02X", b), fmt.Sprintf("%%%02x", b)} {
				out = append(out, route[:pos]+ins+route[pos:])
			}
		}
	}
	return out
}

// Every byte at every position of the two info paths, raw and percent-encoded (both hex
// cases), through the proxy to a server that routes as Starlette does: no key comes back.
func TestGuardPathFuzz(t *testing.T) {
	up := httptest.NewServer(starletteLike())
	defer up.Close()
	u, _ := url.Parse(up.URL)
	p := httptest.NewServer(Proxy(u, []KeyPair{{fuzzAdmin, fuzzAdmin}, {fuzzAPI, fuzzAPI}}))
	defer p.Close()
	addr := strings.TrimPrefix(p.URL, "http://")
	direct := strings.TrimPrefix(up.URL, "http://")
	if !leaks(rawGet(t, direct, "/server_info%0A")) {
		t.Fatal("the upstream does not answer /server_info%0A with the keys: the test would prove nothing")
	}
	start := time.Now()
	n, leaked := 0, 0
	for _, route := range []string{"/server_info", "/get_server_info"} {
		for _, target := range variants(route) {
			n++
			if leaks(rawGet(t, addr, target)) {
				leaked++
				if leaked <= 20 {
					t.Errorf("%q: a key came back", target)
				}
			}
			// Also with a query after it.
			n++
			if leaks(rawGet(t, addr, target+"?x=1")) {
				leaked++
				if leaked <= 20 {
					t.Errorf("%q?x=1: a key came back", target)
				}
			}
		}
	}
	t.Logf("%d requests, %d leaked, in %v", n, leaked, time.Since(start))
}

// FuzzGuardPath: any request target, through the proxy to a server that routes as Starlette
// does, returns no key.
func FuzzGuardPath(f *testing.F) {
	for _, s := range []string{"/server_info", "/server_info%0A", "/get_server_info%0a", "//server_info", "/./server_info", "/server_info/"} {
		f.Add(s)
	}
	up := httptest.NewServer(starletteLike())
	defer up.Close()
	u, _ := url.Parse(up.URL)
	p := httptest.NewServer(Proxy(u, []KeyPair{{fuzzAdmin, fuzzAdmin}, {fuzzAPI, fuzzAPI}}))
	defer p.Close()
	addr := strings.TrimPrefix(p.URL, "http://")
	f.Fuzz(func(t *testing.T, target string) {
		if strings.ContainsAny(target, " \r\n") || target == "" {
			return // not one request line
		}
		if leaks(rawGet(t, addr, target)) {
			t.Errorf("%q: a key came back", target)
		}
	})
}
