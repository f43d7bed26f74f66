package mooncake_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/mooncake/flushjob"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

func startMaster(t *testing.T, opts ...mooncaketest.Option) (*mooncaketest.Master, *mooncake.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real mooncake_master")
	}
	m := mooncaketest.Start(t, opts...)
	c, err := mooncake.NewClient(m.AdminURL, &http.Client{}, mooncake.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// sglangKeys returns the keys an MLA model's TP0 writes for pages page hashes under an
// extra_backend_tag: `{tag}_{model}_{sha256}` with the suffixes __k, _0_k and _1_k.
func sglangKeys(tag, model string, pages int) []string {
	var keys []string
	for i := range pages {
		sum := sha256.Sum256([]byte(tag + model + strconv.Itoa(i)))
		h := hex.EncodeToString(sum[:])
		for _, suffix := range []string{"__k", "_0_k", "_1_k"} {
			keys = append(keys, fmt.Sprintf("%s_%s_%s%s", tag, model, h, suffix))
		}
	}
	return keys
}

func listKeys(t *testing.T, c *mooncake.Client) []string {
	t.Helper()
	var keys []string
	if err := c.Keys(ctx(t), func(k string) error {
		keys = append(keys, k)
		return nil
	}); err != nil {
		t.Fatalf("Keys: %v", err)
	}
	slices.Sort(keys)
	return keys
}

func sorted(keys ...[]string) []string {
	out := slices.Concat(keys...)
	slices.Sort(out)
	return out
}

func TestHealthOfARealMaster(t *testing.T) {
	_, c := startMaster(t)
	h, err := c.Health(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !h.Ready() || h.Role != "leader" || h.HAState != "serving" {
		t.Errorf("Health() = %+v, want a ready leader that is serving", h)
	}
}

func TestSummaryKeysAndPrefixCount(t *testing.T) {
	m, c := startMaster(t)
	dsv4 := sglangKeys("hc-abc", "deepseek-ai-DeepSeek-V4", 20)
	other := sglangKeys("hc-abd", "deepseek-ai-DeepSeek-V4", 7)
	const size = 4096
	m.PutKeys(t, slices.Concat(dsv4, other), size)

	s, err := c.Summary(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(dsv4) + len(other))
	if s.KeyCount != n {
		t.Errorf("Summary().KeyCount = %d, want %d", s.KeyCount, n)
	}
	if s.UsedBytes < n*size || s.CapacityBytes < s.UsedBytes {
		t.Errorf("Summary() used %d of %d bytes, want at least %d used and capacity above it", s.UsedBytes, s.CapacityBytes, n*size)
	}
	// The master counts a client as active only after the client's first heartbeat (a ping the
	// master answers with "remount", then the remount: MasterService::Ping and ReMountSegment),
	// which the client sends on its own schedule after its puts: on a loaded machine the first
	// summary can come before it.
	testutil.Eventually(t, 15*time.Second, "the serving client counted as active", func() (bool, string) {
		s, err := c.Summary(ctx(t))
		if err != nil {
			return false, err.Error()
		}
		return s.ActiveClients >= 1, fmt.Sprintf("Summary().ActiveClients = %d", s.ActiveClients)
	})

	if diff := cmp.Diff(sorted(dsv4, other), listKeys(t, c)); diff != "" {
		t.Errorf("Keys (-want +got):\n%s", diff)
	}

	tests := map[string]struct {
		prefix string
		want   int64
	}{
		"one namespace":     {"hc-abc_", int64(len(dsv4))},
		"the other":         {"hc-abd_", int64(len(other))},
		"shared start":      {"hc-ab", n},
		"no such namespace": {"hc-zzz_", 0},
		"empty prefix":      {"", n},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := c.CountKeysWithPrefix(ctx(t), tc.prefix)
			if err != nil || got != tc.want {
				t.Errorf("CountKeysWithPrefix(%q) = %d, %v; want %d", tc.prefix, got, err, tc.want)
			}
		})
	}
}

func TestKeysStreamsManyKeys(t *testing.T) {
	m, c := startMaster(t)
	const n = 30000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("hc-many_m_%064x__k", i)
	}
	m.PutKeys(t, keys, 16)
	var seen int
	err := c.Keys(ctx(t), func(k string) error {
		if !strings.HasPrefix(k, "hc-many_m_") {
			return fmt.Errorf("unexpected key %q", k)
		}
		seen++
		return nil
	})
	if err != nil || seen != n {
		t.Fatalf("Keys streamed %d keys, %v; want %d", seen, err, n)
	}
	stop := errors.New("stop")
	seen = 0
	err = c.Keys(ctx(t), func(string) error {
		seen++
		if seen == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 10 {
		t.Fatalf("Keys = %v after %d keys, want the callback's error after 10", err, seen)
	}
}

// exists probes keys with a client, which gives each a read lease on the master.
func exists(t *testing.T, m *mooncaketest.Master, keys ...string) {
	t.Helper()
	args := []string{mooncaketest.Script(t, "store.py"), "--master", m.RPCAddr, "exists"}
	for _, k := range keys {
		args = append(args, "--key", k)
	}
	out, err := exec.CommandContext(ctx(t), mooncaketest.Python(t), args...).Output()
	if err != nil {
		t.Fatalf("store.py exists: %v", err)
	}
	if want := fmt.Sprintf(`{"exists": %d}`, len(keys)); strings.TrimSpace(string(out)) != want {
		t.Fatalf("store.py exists printed %q, want %q", out, want)
	}
}

func TestRemoveAllHonoursLeasesUnlessForced(t *testing.T) {
	// A long lease, so that the probed key is still leased when remove_all runs.
	m, c := startMaster(t, mooncaketest.WithArgs("--default_kv_lease_ttl=60s"))
	keys := sglangKeys("hc-abc", "deepseek-ai-DeepSeek-V4", 4)
	m.PutKeys(t, keys, 1024)
	exists(t, m, keys[0])

	removed, err := c.RemoveAll(ctx(t), mooncake.RemoveAllOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if removed != int64(len(keys)-1) {
		t.Errorf("RemoveAll without force removed %d, want %d (all but the leased key)", removed, len(keys)-1)
	}
	if diff := cmp.Diff([]string{keys[0]}, listKeys(t, c)); diff != "" {
		t.Errorf("keys left after RemoveAll without force (-want +got):\n%s", diff)
	}

	removed, err = c.RemoveAll(ctx(t), mooncake.RemoveAllOptions{Force: true})
	if err != nil || removed != 1 {
		t.Errorf("RemoveAll(force) = %d, %v; want 1", removed, err)
	}
	if got := listKeys(t, c); len(got) != 0 {
		t.Errorf("keys left after RemoveAll(force): %q", got)
	}
	s, err := c.Summary(ctx(t))
	if err != nil || s.KeyCount != 0 || s.UsedBytes != 0 {
		t.Errorf("Summary() after RemoveAll(force) = %+v, %v; want no keys and no used bytes", s, err)
	}
}

func TestRemoveAllRefusesATenantWithoutMultiTenancy(t *testing.T) {
	m, c := startMaster(t)
	keys := sglangKeys("hc-abc", "m", 2)
	m.PutKeys(t, keys, 256)

	_, err := c.TenantQuotas(ctx(t))
	var he *mooncake.HTTPError
	if !errors.Is(err, mooncake.ErrMultiTenancyDisabled) || !errors.As(err, &he) || he.StatusCode != http.StatusConflict {
		t.Fatalf("TenantQuotas() error = %v; want ErrMultiTenancyDisabled from an HTTP 409", err)
	}

	removed, err := c.RemoveAll(ctx(t), mooncake.RemoveAllOptions{Force: true, TenantID: "t1"})
	if !errors.Is(err, mooncake.ErrMultiTenancyDisabled) || removed != 0 {
		t.Fatalf("RemoveAll(tenant t1) = %d, %v; want a refusal wrapping ErrMultiTenancyDisabled", removed, err)
	}
	if diff := cmp.Diff(sorted(keys), listKeys(t, c)); diff != "" {
		t.Errorf("the refused RemoveAll touched keys (-want +got):\n%s", diff)
	}
}

func TestRemoveAllScopedToATenant(t *testing.T) {
	m, c := startMaster(t, mooncaketest.WithTenants("default", "t1"))
	mine := sglangKeys("hc-abc", "m", 2)
	theirs := sglangKeys("hc-abc", "m", 3) // the same key names, in another tenant
	m.PutKeysAs(t, "default", mine, 256)
	m.PutKeysAs(t, "t1", theirs, 256)

	s, err := c.Summary(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(mine) + len(theirs)); s.KeyCount != want {
		t.Errorf("KeyCount = %d, want %d", s.KeyCount, want)
	}
	if got := s.Tenants["t1"].ChargedBytes; got != int64(len(theirs)*256) {
		t.Errorf("tenant t1 charged %d bytes, want %d", got, len(theirs)*256)
	}
	q, err := c.TenantQuotas(ctx(t))
	if err != nil || len(q) != 2 {
		t.Fatalf("TenantQuotas() = %+v, %v; want two tenants", q, err)
	}

	removed, err := c.RemoveAll(ctx(t), mooncake.RemoveAllOptions{Force: true, TenantID: "t1"})
	if err != nil || removed != int64(len(theirs)) {
		t.Fatalf("RemoveAll(tenant t1) = %d, %v; want %d", removed, err, len(theirs))
	}
	s, err = c.Summary(ctx(t))
	if err != nil || s.KeyCount != int64(len(mine)) || s.Tenants["t1"].ChargedBytes != 0 {
		t.Errorf("after RemoveAll(t1): Summary() = %+v, %v; want only the default tenant's %d keys", s, err, len(mine))
	}
	// /get_all_keys lists the default tenant only.
	if diff := cmp.Diff(sorted(mine), listKeys(t, c)); diff != "" {
		t.Errorf("default tenant's keys (-want +got):\n%s", diff)
	}
}

type flushRun struct {
	result   flushjob.Result
	exitCode int
	stderr   string
}

// runFlush runs the embedded flush script (not the file in the tree) with env.
func runFlush(t *testing.T, env ...string) flushRun {
	t.Helper()
	script := filepath.Join(t.TempDir(), "flush.py")
	if err := os.WriteFile(script, []byte(flushjob.Script), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx(t), mooncaketest.Python(t), script)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var run flushRun
	run.stderr = stderr.String()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		run.exitCode = ee.ExitCode()
	case err != nil:
		t.Fatalf("running flush.py: %v", err)
	}
	if run.exitCode == flushjob.ExitOK || run.exitCode == flushjob.ExitNotEmpty {
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("flush.py printed %d lines on stdout, want one JSON line: %q\nstderr: %s", len(lines), stdout.String(), run.stderr)
		}
		dec := json.NewDecoder(strings.NewReader(lines[0]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&run.result); err != nil {
			t.Fatalf("flush.py printed %q: %v", lines[0], err)
		}
	}
	return run
}

func TestFlushScriptRemovesOneNamespace(t *testing.T) {
	m, c := startMaster(t)
	target := sglangKeys("hc.abc", "deepseek-ai-DeepSeek-V4", 10)
	// Keys a regex built without escaping "." would also match.
	lookalike := sglangKeys("hcXabc", "deepseek-ai-DeepSeek-V4", 3)
	neighbour := sglangKeys("hc.abd", "deepseek-ai-DeepSeek-V4", 5)
	m.PutKeys(t, slices.Concat(target, lookalike, neighbour), 2048)

	run := runFlush(t, "MOONCAKE_MASTER="+m.RPCAddr, "MOONCAKE_ADMIN_URL="+m.AdminURL, "MOONCAKE_FLUSH_PREFIX=hc.abc_")
	if run.exitCode != 0 {
		t.Fatalf("flush.py exited %d: %s", run.exitCode, run.stderr)
	}
	zero := int64(0)
	want := flushjob.Result{Removed: int64(len(target)), Left: &zero}
	if diff := cmp.Diff(want, run.result); diff != "" {
		t.Errorf("flush.py result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sorted(lookalike, neighbour), listKeys(t, c)); diff != "" {
		t.Errorf("keys after the flush (-want +got):\n%s", diff)
	}
	if run.stderr != "" {
		t.Errorf("flush.py wrote to stderr on success: %q", run.stderr)
	}
}

func TestFlushScriptWithoutForceReportsLeftKeys(t *testing.T) {
	m, c := startMaster(t, mooncaketest.WithArgs("--default_kv_lease_ttl=60s"))
	keys := sglangKeys("hc-abc", "m", 3)
	m.PutKeys(t, keys, 512)
	exists(t, m, keys[1])

	run := runFlush(t, "MOONCAKE_MASTER="+m.RPCAddr, "MOONCAKE_ADMIN_URL="+m.AdminURL, "MOONCAKE_FLUSH_PREFIX=hc-abc_",
		"MOONCAKE_FLUSH_FORCE=false", "MOONCAKE_FLUSH_REQUIRE_EMPTY=true")
	one := int64(1)
	if run.exitCode != flushjob.ExitNotEmpty {
		t.Fatalf("flush.py exited %d, want %d (keys left): %s", run.exitCode, flushjob.ExitNotEmpty, run.stderr)
	}
	if diff := cmp.Diff(flushjob.Result{Removed: int64(len(keys) - 1), Left: &one}, run.result); diff != "" {
		t.Errorf("flush.py result (-want +got):\n%s", diff)
	}
	if !strings.Contains(run.stderr, "still listed") {
		t.Errorf("stderr %q does not explain the exit code", run.stderr)
	}
	if diff := cmp.Diff([]string{keys[1]}, listKeys(t, c)); diff != "" {
		t.Errorf("keys left (-want +got):\n%s", diff)
	}
}

func TestFlushScriptFailures(t *testing.T) {
	m, _ := startMaster(t)
	tests := map[string]struct {
		env      []string
		wantCode int
		wantMsg  string
	}{
		"master down": {
			env:      []string{"MOONCAKE_MASTER=127.0.0.1:1", "MOONCAKE_FLUSH_PREFIX=x"},
			wantCode: flushjob.ExitFailed,
			wantMsg:  "cannot reach the Mooncake master at 127.0.0.1:1",
		},
		"admin URL is not the admin port": {
			env:      []string{"MOONCAKE_MASTER=" + m.RPCAddr, "MOONCAKE_ADMIN_URL=http://" + m.RPCAddr, "MOONCAKE_FLUSH_PREFIX=x"},
			wantCode: flushjob.ExitFailed,
			wantMsg:  "removed 0 keys with prefix 'x', then cannot list keys",
		},
		"master address is the admin port": {
			env:      []string{"MOONCAKE_MASTER=" + strings.TrimPrefix(m.AdminURL, "http://"), "MOONCAKE_FLUSH_PREFIX=x", "MOONCAKE_FLUSH_TIMEOUT=3"},
			wantCode: flushjob.ExitFailed,
			wantMsg:  "gave up after 3s",
		},
		"no prefix": {
			env:      []string{"MOONCAKE_MASTER=" + m.RPCAddr},
			wantCode: flushjob.ExitUsage,
			wantMsg:  "would remove every key",
		},
		"no master": {
			env:      []string{"MOONCAKE_MASTER=", "MOONCAKE_FLUSH_PREFIX=x"},
			wantCode: flushjob.ExitUsage,
			wantMsg:  "master address is required",
		},
		"bad boolean": {
			env:      []string{"MOONCAKE_MASTER=" + m.RPCAddr, "MOONCAKE_FLUSH_PREFIX=x", "MOONCAKE_FLUSH_FORCE=maybe"},
			wantCode: flushjob.ExitUsage,
			wantMsg:  "is not a boolean",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			run := runFlush(t, tc.env...)
			if run.exitCode != tc.wantCode || !strings.Contains(run.stderr, tc.wantMsg) {
				t.Errorf("flush.py exited %d with %q; want exit %d and a message containing %q", run.exitCode, run.stderr, tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// flush.py's messages reach CacheFlush status: whatever the admin URL answers, they say what was
// asked and what kind of answer came back, never what it said.
func TestFlushScriptNeverQuotesTheAdminURLsAnswer(t *testing.T) {
	m, _ := startMaster(t)
	const secret = "XYZZY-token=0f9e8d7c6b5a"
	answers := map[string]struct {
		answer  http.HandlerFunc
		wantMsg string
	}{
		"an error page": {
			answer: func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, secret)
			},
			wantMsg: "HTTP 500",
		},
		"a redirect": {
			answer: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "http://127.0.0.1:1/"+secret, http.StatusFound)
			},
			wantMsg: "HTTP 302",
		},
		"not HTTP": {
			answer: func(w http.ResponseWriter, _ *http.Request) {
				conn, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					return
				}
				_, _ = buf.WriteString(secret + " " + secret + "\r\n\r\n")
				_ = buf.Flush()
				_ = conn.Close()
			},
			wantMsg: "not HTTP",
		},
	}
	for name, tc := range answers {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(tc.answer)
			defer srv.Close()
			run := runFlush(t, "MOONCAKE_MASTER="+m.RPCAddr, "MOONCAKE_ADMIN_URL="+srv.URL, "MOONCAKE_FLUSH_PREFIX=x")
			if run.exitCode != flushjob.ExitFailed || !strings.Contains(run.stderr, tc.wantMsg) || !strings.Contains(run.stderr, srv.URL) {
				t.Errorf("flush.py exited %d with %q; want exit %d and a message naming the URL and %q", run.exitCode, run.stderr, flushjob.ExitFailed, tc.wantMsg)
			}
			if strings.Contains(run.stderr, "XYZZY") || strings.Contains(run.stderr, "0f9e8d7c6b5a") {
				t.Errorf("flush.py quotes the admin URL's answer: %q", run.stderr)
			}
		})
	}
}

func TestStoppedMasterIsUnreachableAndRestartRecovers(t *testing.T) {
	m, c := startMaster(t)
	m.PutKeys(t, []string{"hc-abc_m_0__k"}, 128)
	m.Stop()

	calls := map[string]func() error{
		"Health":  func() error { _, err := c.Health(ctx(t)); return err },
		"Summary": func() error { _, err := c.Summary(ctx(t)); return err },
		"Keys":    func() error { return c.Keys(ctx(t), func(string) error { return nil }) },
		"RemoveAll": func() error {
			_, err := c.RemoveAll(ctx(t), mooncake.RemoveAllOptions{Force: true})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			var ue *mooncake.UnreachableError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--metrics_port") {
				t.Errorf("%s on a stopped master: %v (%T); want an *UnreachableError that names --metrics_port", name, err, err)
			}
		})
	}

	m.Restart()
	h, err := c.Health(ctx(t))
	if err != nil || !h.Ready() {
		t.Fatalf("Health() after Restart = %+v, %v", h, err)
	}
	// Without snapshots or HA a restarted master has forgotten every object.
	s, err := c.Summary(ctx(t))
	if err != nil || s.KeyCount != 0 {
		t.Errorf("Summary() after Restart = %+v, %v; want no keys", s, err)
	}
}

func TestWrongEndpoints(t *testing.T) {
	m, _ := startMaster(t)
	t.Run("a path the master does not serve", func(t *testing.T) {
		c, err := mooncake.NewClient(m.AdminURL+"/nope", &http.Client{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Health(ctx(t))
		var he *mooncake.HTTPError
		if !errors.As(err, &he) || he.StatusCode != http.StatusNotFound || !strings.Contains(err.Error(), "does not serve that path") {
			t.Errorf("Health() at an unknown path: %v; want an *HTTPError 404 with a hint", err)
		}
	})
	t.Run("the RPC port instead of the admin port", func(t *testing.T) {
		c, err := mooncake.NewClient("http://"+m.RPCAddr, &http.Client{}, mooncake.WithRequestTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Health(ctx(t))
		var ue *mooncake.UnreachableError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--rpc_port") {
			t.Errorf("Health() against the RPC port: %v; want an *UnreachableError that suggests the --rpc_port mix-up", err)
		}
	})
	t.Run("the caller cancels", func(t *testing.T) {
		c, err := mooncake.NewClient(m.AdminURL, &http.Client{})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = c.Health(cctx)
		var ue *mooncake.UnreachableError
		if !errors.Is(err, context.Canceled) || errors.As(err, &ue) {
			t.Errorf("Health() with a cancelled context: %v; want context.Canceled, not an *UnreachableError", err)
		}
	})
}
