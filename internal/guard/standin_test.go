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
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/guard"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const (
	apiKey   = "api-key-7f3a9c"
	adminKey = "admin-key-2b8e41"
)

// standin runs the SGLang stand-in (cmd/sglang-standin: the pinned release's argument check,
// its key rules, its /server_info) on loopback, as the operator renders a leader's command line
// with both keys, and returns its URL.
func standin(t *testing.T) string {
	t.Helper()
	bin, err := testutil.BuildStandin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	cmd := exec.Command(bin, "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V4", "--tp-size", "8",
		"--host", "127.0.0.1", "--port", port, "--admin-api-key", adminKey, "--api-key", apiKey)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	u := "http://127.0.0.1:" + port
	testutil.Eventually(t, 30*time.Second, "the stand-in answers /health", func() (bool, string) {
		resp, err := http.Get(u + "/health")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return u
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
	direct := standin(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	p := httptest.NewServer(guard.Proxy(u, []string{apiKey, adminKey}))
	defer p.Close()

	// The leak the proxy closes: the server itself hands the admin key to an API key holder,
	// in the arguments, in every scheduler's copy and in the command line.
	for _, path := range []string{"/server_info", "/get_server_info"} {
		status, body := get(t, http.MethodGet, direct+path, apiKey)
		if status != http.StatusOK || strings.Count(body, adminKey) < 3 {
			t.Fatalf("direct %s: %d, the admin key %d times: the stand-in no longer answers as the release does", path, status, strings.Count(body, adminKey))
		}
	}

	for _, path := range []string{"/server_info", "/get_server_info"} {
		status, body := get(t, http.MethodGet, p.URL+path, apiKey)
		if status != http.StatusOK {
			t.Fatalf("%s through the proxy: %d %s", path, status, body)
		}
		if strings.Contains(body, adminKey) || strings.Contains(body, apiKey) {
			t.Errorf("%s through the proxy still holds a key: the admin key %d times, the API key %d times", path, strings.Count(body, adminKey), strings.Count(body, apiKey))
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

	// SGLang's own refusals and permissions reach the client as they are.
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
	} {
		status, body := get(t, tc.method, p.URL+tc.path, tc.bearer)
		if status != tc.status {
			t.Errorf("%s %s with %q: %d %s, want %d", tc.method, tc.path, tc.bearer, status, body, tc.status)
		}
		if strings.Contains(body, adminKey) {
			t.Errorf("%s %s: the admin key is in the answer", tc.method, tc.path)
		}
	}
}
