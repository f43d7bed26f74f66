package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/guard"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

// The keys the app behind the guard reports, long and of the charset the operator generates.
const (
	fuzzAdminKey = "adm1n-k3y-0123456789abcdefghijklmnopqrstuv"
	fuzzAPIKey   = "ap1-k3y-0123456789ABCDEFGHIJKLMNOPQRSTUV"
)

// guardApp starts hack/conformance/guard_app.py: a Starlette app, served by uvicorn, that
// registers every route of the pinned SGLang's HTTP server and answers each with the keys as
// /server_info reports them. It returns its address and the routes.
func guardApp(t *testing.T) (string, []string) {
	t.Helper()
	python := sglangPython(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, python, filepath.Join(mooncaketest.Root(t), "hack", "conformance", "guard_app.py"))
	cmd.Env = append(os.Environ(), "GUARD_APP_KEYS="+fuzzAdminKey+","+fuzzAPIKey)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("hack/conformance/guard_app.py: %v", err)
	}
	var hello struct {
		Port   int      `json:"port"`
		Routes []string `json:"routes"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil {
		t.Fatalf("guard_app.py said %q: %v", line, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", hello.Port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("guard_app.py does not listen on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return addr, hello.Routes
}

// rawGet sends "GET target" as raw bytes (no client between: any byte reaches the server as
// written) and returns the answer, status line and all.
func rawGet(addr, target string) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"); err != nil {
		return nil, err
	}
	return io.ReadAll(c)
}

func leaks(answer []byte) bool {
	return bytes.Contains(answer, []byte(fuzzAdminKey)) || bytes.Contains(answer, []byte(fuzzAPIKey))
}

// fillParams gives a route's path parameters the values a client would send.
var fillParams = strings.NewReplacer("{model:path}", "Qwen/Qwen3-32B", "{response_id}", "resp_0a1b", "{method}", "dump")

// The guard in front of an app that routes like SGLang 0.5.23 (Starlette, served by uvicorn,
// every route of the pinned http_server.py answering with the keys): every byte 0x00-0xff, raw
// and percent-encoded in both hex cases, at every position of /server_info and
// /get_server_info and at the end of every other route, and every route as a client writes it:
// no answer holds a key. Without the guard, the same app gives the keys back on the routes and
// on /server_info%0A (Starlette's `$` matches before a trailing newline), which is what makes
// this a test of the guard and not of the app.
func TestGuardPathFuzzAgainstStarlette(t *testing.T) {
	app, routes := guardApp(t)
	if len(routes) < 50 {
		t.Fatalf("only %d routes read from the pinned http_server.py", len(routes))
	}
	for _, r := range routes {
		if err := guard.CheckRequest(http.MethodGet, fillParams.Replace(r), http.Header{}); err != nil {
			t.Errorf("the guard refuses SGLang's own route %s: %v", r, err)
		}
	}
	// The app is SGLang-shaped: without the guard, /server_info%0A is routed to the handler.
	if b, err := rawGet(app, "/server_info%0A"); err != nil || !leaks(b) {
		t.Fatalf("without the guard, /server_info%%0A does not reach the handler (%v): %.200s", err, b)
	}
	u, _ := url.Parse("http://" + app)
	proxy := httptest.NewServer(guard.Proxy(u, []guard.KeyPair{{Client: fuzzAdminKey, Server: fuzzAdminKey}, {Client: fuzzAPIKey, Server: fuzzAPIKey}}))
	defer proxy.Close()
	paddr := strings.TrimPrefix(proxy.URL, "http://")
	if b, err := rawGet(paddr, "/server_info"); err != nil || !bytes.Contains(b, []byte("200 OK")) || !bytes.Contains(b, []byte(guard.Redacted)) {
		t.Fatalf("/server_info through the guard: %v %.300s", err, b)
	}

	var targets []string
	for _, r := range routes {
		r = fillParams.Replace(r)
		targets = append(targets, r)
		positions := []int{len(r)}
		if r == "/server_info" || r == "/get_server_info" {
			positions = positions[:0]
			for i := 1; i <= len(r); i++ {
				positions = append(positions, i)
			}
		}
		for _, i := range positions {
			for b := 0; b < 256; b++ {
				for _, ins := range []string{string([]byte{byte(b)}), fmt.Sprintf("%%%02X", b), fmt.Sprintf("%%%02x", b)} {
					targets = append(targets, r[:i]+ins+r[i:])
				}
			}
		}
	}
	start := time.Now()
	var leaked, refused, sent atomic.Int64
	var mu sync.Mutex
	var leakedTargets []string
	work := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for target := range work {
				b, err := rawGet(paddr, target)
				sent.Add(1)
				if err != nil {
					continue
				}
				if bytes.HasPrefix(b, []byte("HTTP/1.1 400")) {
					refused.Add(1)
				}
				if leaks(b) {
					leaked.Add(1)
					mu.Lock()
					leakedTargets = append(leakedTargets, fmt.Sprintf("%q", target))
					mu.Unlock()
				}
			}
		}()
	}
	for _, target := range targets {
		work <- target
	}
	close(work)
	wg.Wait()
	t.Logf("%d targets over %d routes through the guard in %s: %d refused with 400, %d answers with a key",
		sent.Load(), len(routes), time.Since(start).Round(time.Millisecond), refused.Load(), leaked.Load())
	if n := leaked.Load(); n > 0 {
		if len(leakedTargets) > 20 {
			leakedTargets = leakedTargets[:20]
		}
		t.Errorf("%d answers through the guard hold a key, e.g. %s", n, strings.Join(leakedTargets, ", "))
	}
}
