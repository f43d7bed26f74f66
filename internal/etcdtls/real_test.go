package etcdtls_test

import (
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/etcdtls"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

// writeBundle issues a bundle for an etcd on loopback and writes it to files.
func writeBundle(t *testing.T) mooncaketest.TLSFiles {
	t.Helper()
	h := etcdtls.Hosts{DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	b, err := etcdtls.Issue(rand.Reader, nil, etcdtls.Plan{NewCA: true, NewLeaves: true}, "loopback", h, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for k, v := range b {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := func(k string) string { return filepath.Join(dir, k) }
	return mooncaketest.TLSFiles{CA: p(etcdtls.KeyCACert), ServerCert: p(etcdtls.KeyServerCert), ServerKey: p(etcdtls.KeyServerKey),
		ClientCert: p(etcdtls.KeyClientCert), ClientKey: p(etcdtls.KeyClientKey)}
}

// The real etcd serves clients with mutual TLS on the certificates Issue makes, and the pinned
// mooncake_master (which has no TLS setting of its own) elects its leader through etcd's gRPC
// proxy holding the client certificate: two masters elect one, a Mooncake Python client puts
// objects through etcd://PROXY, and when the leader is killed the standby takes over through
// the proxy (leases, watches and transactions pass it). A client without the certificate, and a
// plaintext one, are refused by etcd.
func TestMastersElectThroughTheProxyAndEtcdRefusesOthers(t *testing.T) {
	f := writeBundle(t)
	e := mooncaketest.StartTLSEtcd(t, f)

	if code, err := mooncaketest.TLSGet(f, "https://"+e.Endpoint+"/health", true); err != nil || code != 200 {
		t.Fatalf("GET /health with the client certificate: %d %v", code, err)
	}
	if code, err := mooncaketest.TLSGet(f, "https://"+e.Endpoint+"/health", false); err == nil {
		t.Errorf("GET /health without a client certificate answered %d, want the handshake refused", code)
	}
	c, err := net.DialTimeout("tcp", e.Endpoint, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A plaintext HTTP/2 client's preface: etcd answers it with a TLS alert or closes.
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err == nil {
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		if n > 0 && buf[0] != 0x15 && !strings.HasPrefix(string(buf[:n]), "HTTP/1") {
			t.Errorf("a plaintext client read %q from etcd, want a TLS alert or nothing", buf[:n])
		}
		if strings.HasPrefix(string(buf[:n]), "HTTP/1") && !strings.Contains(string(buf[:n]), "400") {
			t.Errorf("a plaintext client read %q from etcd, want a refusal", buf[:n])
		}
	}
	_ = c.Close()

	px := mooncaketest.StartGRPCProxy(t, e, f)
	ha := mooncaketest.StartHA(t, px, "tls.loopback", 2, true)
	leader := ha.Leader()
	leader.PutKeys(t, []string{"tls_a", "tls_b"}, 4096)
	leader.Kill()
	next, took := ha.WaitLeader(t, leader, 60*time.Second)
	t.Logf("the standby served %v after the leader was killed, through the proxy", took.Round(100*time.Millisecond))
	next.PutKeys(t, []string{"tls_c"}, 4096)
}
