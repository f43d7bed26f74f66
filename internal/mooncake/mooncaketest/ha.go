package mooncaketest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Etcd is a real single-member etcd (bin/etcd, the one the local control plane uses) on
// loopback, for masters with HA.
type Etcd struct {
	// Endpoint is its client address, 127.0.0.1:PORT.
	Endpoint string
	proc     *process
	logPath  string
}

// StartEtcd runs bin/etcd on free loopback ports and stops it when the test ends.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	bin := filepath.Join(Root(t), "bin", "etcd")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("bin/etcd is missing (make tools builds it): %v", err)
	}
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		client, peer := freePort(t), freePort(t)
		e := &Etcd{Endpoint: "127.0.0.1:" + strconv.Itoa(client), logPath: filepath.Join(dir, "etcd.log")}
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		args := []string{"--data-dir=" + filepath.Join(dir, fmt.Sprintf("data-%d", attempt)), "--unsafe-no-fsync=true",
			"--listen-client-urls=http://" + e.Endpoint, "--advertise-client-urls=http://" + e.Endpoint,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL, "--initial-cluster=default=" + peerURL}
		p, err := startProcess(bin, args, e.logPath, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.proc = p
		if lastErr = waitHTTP("http://"+e.Endpoint+"/health", p, 30*time.Second, `"health":"true"`); lastErr == nil {
			t.Cleanup(func() { p.stop(stopGrace) })
			return e
		}
		p.stop(0)
	}
	t.Fatalf("etcd did not start: %v", lastErr)
	return nil
}

// Log returns the last lines of etcd's log.
func (e *Etcd) Log() string { return tail(e.logPath, 40) }

// HA is a set of masters that elect their leader in one etcd.
type HA struct {
	// ClientAddr is what clients use: etcd://ENDPOINT.
	ClientAddr string
	// ClusterID is the masters' --cluster_id; clients read it as MC_STORE_CLUSTER_ID.
	ClusterID string
	Masters   []*Master
}

// StartHA runs n masters with --enable_ha on etcd e under cluster id cluster, with metadata
// replication (--enable_oplog) when oplog is set, and waits until one of them serves.
func StartHA(t testing.TB, e *Etcd, cluster string, n int, oplog bool, opts ...Option) *HA {
	t.Helper()
	h := &HA{ClientAddr: "etcd://" + e.Endpoint, ClusterID: cluster}
	// Every member on the same ports at its own loopback address, as the pods of a Deployment:
	// a standby's answer names the leader's RPC address, and the operator finds the leader's
	// admin API at the same port.
	rpc, admin := freePort(t), freePort(t)
	for i := 0; i < n; i++ {
		host := "127.0.0." + strconv.Itoa(i+2)
		all := append([]Option{WithArgs("--enable_ha=true", "--ha_backend_type=etcd", "--ha_backend_connstring="+e.Endpoint,
			"--cluster_id="+cluster, "--enable_oplog="+strconv.FormatBool(oplog)),
			func(c *config) { c.standby, c.host, c.rpcPort, c.admPort = true, host, rpc, admin }}, opts...)
		m := Start(t, all...)
		m.ClientAddr, m.clientEnv = h.ClientAddr, []string{"MC_STORE_CLUSTER_ID=" + cluster}
		h.Masters = append(h.Masters, m)
	}
	h.WaitLeader(t, nil, 60*time.Second)
	return h
}

// ClientEnv is the environment a client of these masters needs besides the address.
func (h *HA) ClientEnv() []string { return []string{"MC_STORE_CLUSTER_ID=" + h.ClusterID} }

// Role asks a master GET /role: "leader", "standby", or "" when it does not answer.
func (m *Master) Role() string {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(m.AdminURL + "/role")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	return strings.TrimSpace(string(b))
}

// Serving reports whether the master serves (/health says service_ready).
func (m *Master) Serving() bool {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(m.AdminURL + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return strings.Contains(string(b), `"service_ready":true`)
}

// Leader is the master that serves now, nil when none does.
func (h *HA) Leader() *Master {
	for _, m := range h.Masters {
		if m.Serving() {
			return m
		}
	}
	return nil
}

// WaitLeader waits until a master other than not serves, and returns it with how long it took.
func (h *HA) WaitLeader(t testing.TB, not *Master, timeout time.Duration) (*Master, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		if l := h.Leader(); l != nil && l != not {
			return l, time.Since(start)
		}
		if time.Since(start) > timeout {
			var logs strings.Builder
			for i, m := range h.Masters {
				fmt.Fprintf(&logs, "--- master %d (%s):\n%s\n", i, m.AdminURL, m.Log())
			}
			t.Fatalf("no master served within %v; logs:\n%s", timeout, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill kills the master with SIGKILL, as a node or process that dies: no goodbye to etcd, so
// the others wait for its lease to expire.
func (m *Master) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		_ = killGroup(m.proc.cmd, syscall.SIGKILL)
		m.proc.stop(0)
		m.proc = nil
	}
}

// RPCHostPort is the master's own RPC address (what the leader publishes in etcd).
func (m *Master) RPCHostPort() string {
	h, p, _ := net.SplitHostPort(m.RPCAddr)
	return net.JoinHostPort(h, p)
}

func waitHTTP(url string, p *process, timeout time.Duration, want string) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering %s (%v)", url, p.waitErr)
		default:
		}
		resp, err := c.Get(url)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if strings.Contains(string(b), want) {
				return nil
			}
			last = string(b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer %s within %v (last: %s)", url, want, timeout, last)
}
