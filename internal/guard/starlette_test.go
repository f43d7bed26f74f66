//go:build starlette

// Run with: go test -tags starlette -run TestGuardInFrontOfStarlette ./internal/guard/ (needs
// uvicorn in bin/sglang-venv, which hack/sglang/requirements.txt does not pin yet; until then
// PYTHONPATH may point at a directory holding uvicorn 0.54.0). Not part of make test: through
// uvicorn on the two-core machine it takes minutes.

package guard_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/guard"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

const (
	realAPIKey   = "real-api-key-0123456789abcdefghijklmnopq"
	realAdminKey = "real-admin-key-0123456789abcdefghijklmno"
)

// starlette starts hack/conformance/http_routes.py (a Starlette 1.10 app under uvicorn with
// every route of SGLang 0.5.23's http_server.py, read from the installed wheel's source) with
// bin/sglang-venv's Python, and returns its address and its routes.
func starlette(t *testing.T) (string, []string) {
	t.Helper()
	root := mooncaketest.Root(t)
	py := filepath.Join(root, "bin", "sglang-venv", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s: %v (hack/sglang-venv.sh installs it)", py, err)
	}
	port := freePort(t)
	cmd := exec.Command(py, filepath.Join(root, "hack", "conformance", "http_routes.py"), port, realAPIKey, realAdminKey)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var routes []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "route" {
			routes = append(routes, f[1])
		}
	}
	addr := "127.0.0.1:" + port
	waitHealthy(t, "http://"+addr)
	return addr, routes
}

// send writes one GET of target as raw bytes and returns the whole answer.
func send(t testing.TB, addr, target string) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", target, realAPIKey)
	b, _ := io.ReadAll(c)
	return string(b)
}

func holdsAKey(s string) bool {
	return strings.Contains(s, realAdminKey) || strings.Contains(s, realAPIKey) || strings.Contains(s, "tls-password-in-clear")
}

var param = regexp.MustCompile(`\{[^}]*\}`)

// concrete is a route with its parameters filled as a client would.
func concrete(route string) string {
	return param.ReplaceAllStringFunc(route, func(p string) string {
		if strings.HasSuffix(p, ":path}") {
			return "Qwen/Qwen3-8B"
		}
		return "resp_1"
	})
}

func insertions(route string, pos, b int) []string {
	return []string{route[:pos] + string([]byte{byte(b)}) + route[pos:], route[:pos] + fmt.Sprintf("%%%02X", b) + route[pos:], route[:pos] + fmt.Sprintf("%%%02x", b) + route[pos:]}
}

// The proxy in front of a real Starlette/uvicorn server with SGLang's routes: every route is
// reachable through it, and no spelling of a path returns a key: every byte 0x00-0xff, raw and
// percent-encoded in both hex cases, at every position of /server_info and /get_server_info,
// and 24 sampled (position, byte) pairs of every other route.
func TestGuardInFrontOfStarlette(t *testing.T) {
	direct, routes := starlette(t)
	if len(routes) < 50 {
		t.Fatalf("%d routes read from the wheel: the parse of http_server.py found too few", len(routes))
	}
	if !holdsAKey(send(t, direct, "/server_info%0A")) {
		t.Fatal("Starlette does not answer /server_info%0A with the keys: the test would prove nothing")
	}
	u, _ := url.Parse("http://" + direct)
	p := httptest.NewServer(guard.Proxy(u, []string{realAdminKey, realAPIKey}))
	defer p.Close()
	addr := strings.TrimPrefix(p.URL, "http://")

	for _, r := range routes {
		got := send(t, addr, concrete(r))
		if strings.HasPrefix(got, "HTTP/1.1 400") {
			t.Errorf("route %s (%s) is refused by the proxy: %.300s", r, concrete(r), got)
		}
	}
	info := send(t, addr, "/server_info")
	if !strings.HasPrefix(info, "HTTP/1.1 200") || holdsAKey(info) || !strings.Contains(info, `"admin_api_key":"<redacted>"`) {
		t.Errorf("/server_info through the proxy: %.400s", info)
	}

	start := time.Now()
	n, leaked, forwarded := 0, 0, 0
	check := func(target string) {
		n++
		got := send(t, addr, target)
		if !strings.HasPrefix(got, "HTTP/1.1 400") {
			forwarded++
		}
		if holdsAKey(got) {
			leaked++
			if leaked <= 20 {
				t.Errorf("%q: a key came back", target)
			}
		}
	}
	for _, r := range []string{"/server_info", "/get_server_info"} {
		for pos := 0; pos <= len(r); pos++ {
			for b := range 256 {
				for _, target := range insertions(r, pos, b) {
					check(target)
				}
			}
		}
	}
	full := n
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range routes {
		c := concrete(r)
		for range 24 {
			for _, target := range insertions(c, rng.IntN(len(c)+1), rng.IntN(256)) {
				check(target)
			}
		}
	}
	t.Logf("%d requests (%d on the info paths, %d sampled on %d other routes), %d forwarded, %d leaked, in %v", n, full, n-full, len(routes), forwarded, leaked, time.Since(start))
}
