// Package mooncaketest runs a real mooncake_master for tests, from the Python virtual
// environment that hack/mooncake.sh installs at bin/mooncake-venv (installing it on first use),
// and fills it with objects through hack/mooncake/store.py.
//
// Every process it starts gets its own process group and is killed in t.Cleanup, so a test run
// leaves no process behind.
package mooncaketest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	healthTimeout = 30 * time.Second
	readyTimeout  = 60 * time.Second
	stopGrace     = 5 * time.Second
)

var (
	// installs holds one *installation per hack/ script run by RunScriptOnce.
	installs sync.Map
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// Root returns the repository root: the nearest directory above the working directory that
// holds go.mod.
func Root(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				rootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = errors.New("no go.mod above the working directory")
				return
			}
			dir = parent
		}
	})
	if rootErr != nil {
		t.Fatalf("finding the repository root: %v", rootErr)
	}
	return rootDir
}

type installation struct {
	once sync.Once
	err  error
}

// RunScriptOnce runs hack/<script> (an install script that skips work already done) once per
// test binary, failing t if it failed; later calls, from any test, get the first outcome.
func RunScriptOnce(t testing.TB, script string, timeout time.Duration) {
	t.Helper()
	root := Root(t)
	v, _ := installs.LoadOrStore(script, &installation{})
	in := v.(*installation)
	in.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", script))
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			in.err = fmt.Errorf("hack/%s failed (%v); its output:\n%s", script, err, out)
		}
	})
	if in.err != nil {
		t.Fatal(in.err)
	}
}

// Venv returns the path of bin/mooncake-venv after making sure it holds the pinned Mooncake
// release. hack/mooncake.sh takes a file lock, so test packages running in parallel wait for
// one install instead of racing.
func Venv(t testing.TB) string {
	t.Helper()
	RunScriptOnce(t, "mooncake.sh", 15*time.Minute)
	return filepath.Join(Root(t), "bin", "mooncake-venv")
}

// Python returns the interpreter of the virtual environment, which can import mooncake.store.
func Python(t testing.TB) string {
	t.Helper()
	return filepath.Join(Venv(t), "bin", "python")
}

// Script returns the path of a file under hack/mooncake, e.g. Script(t, "flush.py").
func Script(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(Root(t), "hack", "mooncake", name)
}

var versionRE = regexp.MustCompile(`version (\S+) \(git: ([0-9a-f]+)\)`)

// MasterVersion runs mooncake_master --version and returns the release and git commit. The
// master does not report its version over HTTP.
func MasterVersion(t testing.TB) (version, commit string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(Venv(t), "bin", "mooncake_master"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("mooncake_master --version: %v\n%s", err, out)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("mooncake_master --version printed no version: %q", out)
	}
	return string(m[1]), string(m[2])
}

type config struct {
	args    []string
	tenants []string
	// standby: the master may come up as an HA standby, which never reports service_ready.
	standby bool
	// host and ports to bind instead of 127.0.0.1 and free ports (HA members: one port, several
	// loopback addresses, as pods of one Deployment have).
	host             string
	rpcPort, admPort int
}

// Option configures Start.
type Option func(*config)

// WithArgs adds mooncake_master flags, e.g. WithArgs("--default_kv_lease_ttl=2000").
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithTenants turns on strict multi-tenancy and registers these tenants with a 1 GiB quota each.
// Clients of any other tenant cannot write.
func WithTenants(tenants ...string) Option {
	return func(c *config) { c.tenants = append(c.tenants, tenants...) }
}

// Master is a running mooncake_master on loopback.
type Master struct {
	// RPCAddr is the address clients use (MOONCAKE_MASTER), 127.0.0.1:PORT.
	RPCAddr string
	// AdminURL is the admin HTTP endpoint (--metrics_port), http://127.0.0.1:PORT.
	AdminURL string

	t       testing.TB
	bin     string
	args    []string
	logPath string
	// standby makes start wait for /health to answer at all (an HA standby is never ready).
	standby bool

	// ClientAddr, when set, is the address clients use instead of RPCAddr (etcd://... for HA
	// masters), and clientEnv what they need with it (MC_STORE_CLUSTER_ID).
	ClientAddr string
	clientEnv  []string

	mu     sync.Mutex
	proc   *process
	stores []*process // store.py serve processes, for tests of this package
}

// Start runs mooncake_master on free loopback ports, waits until /health reports the service
// ready, and stops it (with its process group) when the test ends.
func Start(t testing.TB, opts ...Option) *Master {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	dir := t.TempDir()
	m := &Master{t: t, bin: filepath.Join(Venv(t), "bin", "mooncake_master"), logPath: filepath.Join(dir, "master.log"), standby: cfg.standby}
	extra := append([]string{}, cfg.args...)
	if len(cfg.tenants) > 0 {
		policy := filepath.Join(dir, "tenant_quotas.yaml")
		var b strings.Builder
		b.WriteString("version: 1\ntenants:\n")
		for _, tn := range cfg.tenants {
			fmt.Fprintf(&b, "  - name: %s\n    quota: 1GB\n", strconv.Quote(tn))
		}
		if err := os.WriteFile(policy, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		extra = append(extra, "--enable_multi_tenants=true", "--tenant_quota_connector_type=file", "--tenant_quota_connector_uri="+policy)
	}
	t.Cleanup(m.Stop)

	// A port found free may be taken before the master binds it: try a few times.
	var lastErr error
	host := "127.0.0.1"
	if cfg.host != "" {
		host = cfg.host
	}
	for attempt := 0; attempt < 3; attempt++ {
		rpc, admin := freePort(t), freePort(t)
		if cfg.rpcPort != 0 {
			rpc, admin = cfg.rpcPort, cfg.admPort
		}
		m.RPCAddr = net.JoinHostPort(host, strconv.Itoa(rpc))
		m.AdminURL = "http://" + net.JoinHostPort(host, strconv.Itoa(admin))
		m.args = append([]string{
			"--rpc_address=" + host, "--rpc_port=" + strconv.Itoa(rpc),
			"--metrics_host=" + host, "--metrics_port=" + strconv.Itoa(admin),
			"--enable_metric_reporting=false",
		}, extra...)
		if lastErr = m.start(); lastErr == nil {
			return m
		}
		m.Stop()
	}
	t.Fatalf("mooncake_master did not start: %v", lastErr)
	return nil
}

// Stop stops the master (SIGTERM, then SIGKILL after 5 s). It may be called more than once.
func (m *Master) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		_ = killGroup(m.proc.cmd, syscall.SIGCONT) // a frozen master cannot act on SIGTERM
		m.proc.stop(stopGrace)
		m.proc = nil
	}
}

// Restart stops the master and starts it again on the same ports. Its metadata is gone: a
// master without snapshots or HA forgets every object when it stops.
func (m *Master) Restart() {
	m.t.Helper()
	m.Stop()
	// The ports were just released by the same process; give the kernel a moment if needed.
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if err = m.start(); err == nil {
			return
		}
		m.Stop()
		time.Sleep(200 * time.Millisecond)
	}
	m.t.Fatalf("restarting mooncake_master on %s: %v", m.RPCAddr, err)
}

// Freeze stops the master's processes with SIGSTOP, as a master that hangs: connections are
// still accepted by the kernel, nothing answers. Thaw (or the test's end) resumes it.
func (m *Master) Freeze() {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		m.t.Fatal("Freeze: the master is not running")
	}
	if err := killGroup(m.proc.cmd, syscall.SIGSTOP); err != nil {
		m.t.Fatalf("freezing mooncake_master: %v", err)
	}
}

// Thaw resumes a frozen master (SIGCONT); it does nothing to a running one.
func (m *Master) Thaw() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		_ = killGroup(m.proc.cmd, syscall.SIGCONT)
	}
}

// Log returns the last lines of the master's log.
func (m *Master) Log() string { return tail(m.logPath, 40) }

func (m *Master) start() error {
	p, err := startProcess(m.bin, m.args, m.logPath, nil, nil)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	want := []byte(`"service_ready":true`)
	if m.standby {
		want = []byte(`"status":"ok"`)
	}
	if err := waitHealthy(m.AdminURL, p, healthTimeout, want); err != nil {
		return fmt.Errorf("%w; master log:\n%s", err, m.Log())
	}
	if m.standby {
		return nil // a standby opens its RPC port only once it leads
	}
	// /health may say service_ready before the RPC port listens: a test that freezes the master
	// right away would leave clients refused instead of hanging.
	if err := waitListening(m.RPCAddr, p, healthTimeout); err != nil {
		return fmt.Errorf("%w; master log:\n%s", err, m.Log())
	}
	return nil
}

// waitListening waits until addr accepts TCP connections.
func waitListening(addr string, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("mooncake_master exited before listening on %s (%v)", addr, p.waitErr)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mooncake_master did not listen on %s within %v: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PutKeys stores the keys, size bytes each, in a segment of a store.py serve process that stays
// alive until the test ends: objects live in the memory of the client that holds them and
// vanish when it exits.
func (m *Master) PutKeys(t testing.TB, keys []string, size int) {
	t.Helper()
	m.PutKeysAs(t, "", keys, size)
}

// PutKeysAs is PutKeys for a client of the given tenant (empty: the default tenant).
func (m *Master) PutKeysAs(t testing.TB, tenant string, keys []string, size int) {
	t.Helper()
	dir := t.TempDir()
	keysFile := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(keysFile, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	master := m.RPCAddr
	if m.ClientAddr != "" {
		master = m.ClientAddr
	}
	args := []string{Script(t, "store.py"), "--master", master, "--admin-url", m.AdminURL}
	if tenant != "" {
		args = append(args, "--tenant-id", tenant)
	}
	args = append(args, "serve", "--size", strconv.Itoa(size), "--keys-file", keysFile, "--exit-on-stdin-eof")
	logPath := filepath.Join(dir, "store.log")
	ready := make(chan string, 1)
	p, err := startProcess(Python(t), args, logPath, ready, m.clientEnv)
	if err != nil {
		t.Fatalf("starting store.py serve: %v", err)
	}
	t.Cleanup(func() { p.stop(0) })
	m.mu.Lock()
	m.stores = append(m.stores, p)
	m.mu.Unlock()
	select {
	case line := <-ready:
		want := fmt.Sprintf("ready %d", len(keys))
		if line != want {
			t.Fatalf("store.py serve printed %q, want %q; its log:\n%s", line, want, tail(logPath, 40))
		}
	case <-p.done:
		t.Fatalf("store.py serve exited before putting %d keys (%v); its log:\n%s", len(keys), p.waitErr, tail(logPath, 40))
	case <-time.After(readyTimeout):
		t.Fatalf("store.py serve did not put %d keys within %v; its log:\n%s", len(keys), readyTimeout, tail(logPath, 40))
	}
}

// process is a child in its own process group.
type process struct {
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	stdin   io.WriteCloser
	done    chan struct{}
	waitErr error
	once    sync.Once
}

// startProcess runs bin with args, its output appended to logPath, with env added to this
// process's environment. With ready non-nil, the first line of stdout is sent to it (and stdout
// goes to the log afterwards).
func startProcess(bin string, args []string, logPath string, ready chan<- string, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Cancel = func() error { return killGroup(cmd, syscall.SIGKILL) }
	cmd.WaitDelay = stopGrace
	cmd.Stderr = logFile
	p := &process{cmd: cmd, cancel: cancel, done: make(chan struct{})}
	var stdout io.ReadCloser
	if ready != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			cancel()
			_ = logFile.Close()
			return nil, err
		}
		// Kept open until stop: store.py exits when it closes, even if this process dies.
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			cancel()
			_ = logFile.Close()
			return nil, err
		}
	} else {
		cmd.Stdout = logFile
	}
	if err := cmd.Start(); err != nil {
		cancel()
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	readerDone := make(chan struct{})
	if stdout == nil {
		close(readerDone)
	} else {
		go func() {
			defer close(readerDone)
			sc := bufio.NewScanner(stdout)
			first := true
			for sc.Scan() {
				if first {
					ready <- strings.TrimSpace(sc.Text())
					first = false
					continue
				}
				fmt.Fprintln(logFile, sc.Text())
			}
			_, _ = io.Copy(logFile, stdout) // after a line too long for the scanner
		}()
	}
	go func() {
		// Wait closes the stdout pipe: read it to the end first.
		<-readerDone
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM to the group, waits up to grace, then kills the group and waits.
func (p *process) stop(grace time.Duration) {
	p.once.Do(func() {
		if grace > 0 {
			_ = killGroup(p.cmd, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(grace):
			}
		}
		_ = killGroup(p.cmd, syscall.SIGKILL)
		p.cancel()
		if p.stdin != nil {
			_ = p.stdin.Close()
		}
		<-p.done
	})
}

func killGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	// The child leads its own group (Setpgid), so -pid addresses the whole group.
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

func waitHealthy(adminURL string, p *process, timeout time.Duration, want []byte) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	var last string
	for {
		select {
		case <-p.done:
			return fmt.Errorf("mooncake_master exited before serving /health (%v)", p.waitErr)
		default:
		}
		resp, err := client.Get(adminURL + "/health")
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, want) {
				return nil
			}
			last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mooncake_master did not answer %s on %s/health within %v (last answer: %s)", want, adminURL, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
