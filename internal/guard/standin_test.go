package guard_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/guard"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The keys clients present, and the server keys the stand-in holds for them, as in a rank pod.
const (
	apiKey         = "api-key-7f3a9c-0123456789abcdefghijklmn"
	adminKey       = "admin-key-2b8e41-0123456789abcdefghijklmn"
	serverAPIKey   = "server-api-key-5d1e07-0123456789abcdefghij"
	serverAdminKey = "server-admin-key-c4a9f2-0123456789abcdefgh"
)

// pairs are the proxy's key pairs for the stand-in.
var pairs = []guard.KeyPair{{Client: adminKey, Server: serverAdminKey}, {Client: apiKey, Server: serverAPIKey}}

// anyKey tells whether body holds any of the four keys.
func anyKey(body string) bool {
	for _, k := range []string{apiKey, adminKey, serverAPIKey, serverAdminKey} {
		if strings.Contains(body, k) {
			return true
		}
	}
	return false
}

// standin runs the SGLang stand-in (cmd/sglang-standin: the pinned release's argument check,
// its key rules, its /server_info) on 127.0.0.1:port (a free one when port is ""), as the
// operator renders a leader's command line with both server keys, and returns its URL.
func standin(t *testing.T, port string) string {
	t.Helper()
	bin, err := testutil.BuildStandin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if port == "" {
		port = freePort(t)
	}
	cmd := exec.Command(bin, "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V4", "--tp-size", "8",
		"--host", "127.0.0.1", "--port", port, "--admin-api-key", serverAdminKey, "--api-key", serverAPIKey)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	u := "http://127.0.0.1:" + port
	waitHealthy(t, u)
	return u
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func waitHealthy(t *testing.T, u string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, u+" answers /health", func() (bool, string) {
		resp, err := http.Get(u + "/health")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

func get(t *testing.T, method, u, bearer string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// Through the proxy, a holder of the API key reads the server's arguments without the keys,
// and everything else SGLang answers, and refuses, stays as SGLang answers it.
func TestProxyInFrontOfTheStandin(t *testing.T) {
	direct := standin(t, "")
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	p := httptest.NewServer(guard.Proxy(u, pairs))
	defer p.Close()

	// The leak the proxy closes: the server itself hands the admin key to an API key holder,
	// in the arguments, in every scheduler's copy and in the command line.
	for _, path := range []string{"/server_info", "/get_server_info"} {
		status, body := get(t, http.MethodGet, direct+path, serverAPIKey)
		if status != http.StatusOK || strings.Count(body, serverAdminKey) < 3 {
			t.Fatalf("direct %s: %d, the admin key %d times: the stand-in no longer answers as the release does", path, status, strings.Count(body, serverAdminKey))
		}
	}

	for _, path := range []string{"/server_info", "/get_server_info"} {
		status, body := get(t, http.MethodGet, p.URL+path, apiKey)
		if status != http.StatusOK {
			t.Fatalf("%s through the proxy: %d %s", path, status, body)
		}
		if anyKey(body) {
			t.Errorf("%s through the proxy still holds a key", path)
		}
		var info map[string]any
		if err := json.Unmarshal([]byte(body), &info); err != nil {
			t.Fatal(err)
		}
		// What the router reads to register a server is still there.
		for k, want := range map[string]any{
			"model_path": "deepseek-ai/DeepSeek-V4", "served_model_name": "deepseek-ai/DeepSeek-V4", "tp_size": float64(8),
			"api_key": guard.Redacted, "admin_api_key": guard.Redacted,
		} {
			if info[k] != want {
				t.Errorf("%s: %s = %v, want %v", path, k, info[k], want)
			}
		}
		if lc, _ := info["launch_command"].(string); !strings.Contains(lc, "--admin-api-key <redacted>") || !strings.Contains(lc, "--tp-size 8") {
			t.Errorf("%s: launch_command %q", path, lc)
		}
	}

	// SGLang's own refusals and permissions reach the client as they are, for the clients'
	// keys; the server's keys, which SGLang logs, open nothing through the proxy, though they
	// open the server itself.
	if status, _ := get(t, http.MethodPost, direct+"/hicache/storage-backend/clear", serverAdminKey); status != http.StatusOK {
		t.Fatalf("the stand-in refuses its own admin key (%d): the test would prove nothing", status)
	}
	for _, tc := range []struct {
		method, path, bearer string
		status               int
	}{
		{http.MethodGet, "/server_info", "", http.StatusUnauthorized},
		{http.MethodGet, "/server_info", adminKey, http.StatusUnauthorized},
		{http.MethodGet, "/health", "", http.StatusOK},
		{http.MethodGet, "/v1/models", apiKey, http.StatusOK},
		{http.MethodPost, "/hicache/storage-backend/clear", apiKey, http.StatusUnauthorized},
		{http.MethodPost, "/hicache/storage-backend/clear", adminKey, http.StatusOK},
		{http.MethodPost, "/hicache/storage-backend/clear", serverAdminKey, http.StatusUnauthorized},
		{http.MethodGet, "/v1/models", serverAPIKey, http.StatusUnauthorized},
		{http.MethodGet, "/v1/models", serverAdminKey, http.StatusUnauthorized},
	} {
		status, body := get(t, tc.method, p.URL+tc.path, tc.bearer)
		if status != tc.status {
			t.Errorf("%s %s with %q: %d %s, want %d", tc.method, tc.path, tc.bearer, status, body, tc.status)
		}
		if anyKey(body) {
			t.Errorf("%s %s: a key is in the answer", tc.method, tc.path)
		}
	}
}

// The proxy as the rank pods run it: `manager guard` from the operator's binary on another
// address at the same port number as the server (the pod IP there, 127.0.0.2 here), which binds
// beside SGLang's loopback socket; the keys come from the rank container's variables; SIGTERM
// ends it.
func TestManagerGuardCommand(t *testing.T) {
	port := freePort(t)
	direct := standin(t, port)
	bin, err := testutil.BuildManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "guard", "--listen-host", "127.0.0.2", "--port", port)
	cmd.Env = append(os.Environ(), "HICACHE_ADMIN_API_KEY="+adminKey, "HICACHE_API_KEY="+apiKey,
		"HICACHE_SERVER_ADMIN_KEY="+serverAdminKey, "HICACHE_SERVER_API_KEY="+serverAPIKey)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	proxied := "http://127.0.0.2:" + port
	waitHealthy(t, proxied)

	if _, body := get(t, http.MethodGet, direct+"/server_info", serverAPIKey); !strings.Contains(body, serverAdminKey) {
		t.Fatal("the stand-in's own answer holds no admin key: the test would prove nothing")
	}
	status, body := get(t, http.MethodGet, proxied+"/server_info", apiKey)
	if status != http.StatusOK || anyKey(body) || !strings.Contains(body, `"admin_api_key":"<redacted>"`) {
		t.Errorf("through manager guard: %d, a key in it: %v", status, anyKey(body))
	}
	if status, _ := get(t, http.MethodPost, proxied+"/hicache/storage-backend/clear", adminKey); status != http.StatusOK {
		t.Errorf("an admin call through manager guard: %d", status)
	}
	if status, _ := get(t, http.MethodPost, proxied+"/hicache/storage-backend/clear", serverAdminKey); status != http.StatusUnauthorized {
		t.Errorf("the server's admin key through manager guard: %d, want 401", status)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("manager guard after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("manager guard did not end after SIGTERM")
	}
}
