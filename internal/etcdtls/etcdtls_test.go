package etcdtls

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"
)

var (
	t0    = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hosts = Hosts{DNS: []string{"*.b-etcd-peers.ns.svc", "b-etcd.ns.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
)

func issue(t *testing.T, old Bundle, p Plan, h Hosts, at time.Time) Bundle {
	t.Helper()
	b, err := Issue(rand.Reader, old, p, "ns.b", h, at)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fresh(t *testing.T) Bundle {
	return issue(t, nil, Plan{NewCA: true, NewLeaves: true}, hosts, t0)
}

func TestPlanRenewal(t *testing.T) {
	good := fresh(t)
	other := fresh(t)
	day := 24 * time.Hour
	with := func(k string, v []byte) Bundle {
		b := Bundle{}
		for k, v := range good {
			b[k] = v
		}
		if v == nil {
			delete(b, k)
		} else {
			b[k] = v
		}
		return b
	}
	for _, c := range []struct {
		name             string
		b                Bundle
		h                Hosts
		at               time.Time
		newCA, newLeaves bool
		reason           string
	}{
		{"empty", Bundle{}, hosts, t0, true, true, "no usable CA"},
		{"fresh", good, hosts, t0, false, false, ""},
		{"leaves at 59 days", good, hosts, t0.Add(59 * day), false, false, ""},
		{"leaves at 60 days", good, hosts, t0.Add(60*day + backdate), false, true, "server.crt expires"},
		{"leaves expired", good, hosts, t0.Add(91 * day), false, true, "does not verify"},
		{"CA at 3.5 years", good, hosts, t0.Add(3*365*day + 183*day), true, true, "the CA expires"},
		{"CA key missing", with(KeyCAKey, nil), hosts, t0, true, true, "ca.key holds no PEM"},
		{"CA key of another CA", with(KeyCAKey, other[KeyCAKey]), hosts, t0, true, true, "is not the key of ca.crt"},
		{"server cert of another CA", with(KeyServerCert, other[KeyServerCert]), hosts, t0, false, true, "server.crt does not verify"},
		{"client key of another cert", with(KeyClientKey, other[KeyClientKey]), hosts, t0, false, true, "client.key is not the key of client.crt"},
		{"client cert missing", with(KeyClientCert, nil), hosts, t0, false, true, "client.crt: no PEM"},
		{"client cert where the server's goes", with(KeyServerCert, good[KeyClientCert]), hosts, t0, false, true, "server.crt does not verify"},
		{"hosts changed", good, Hosts{DNS: []string{"b-etcd.other.svc"}}, t0, false, true, "the etcd is reached at"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := PlanRenewal(c.b, c.h, c.at)
			if p.NewCA != c.newCA || p.NewLeaves != c.newLeaves || !strings.Contains(p.Reason, c.reason) || (c.reason == "") != (p.Reason == "") {
				t.Fatalf("plan %+v, want newCA %v newLeaves %v reason with %q", p, c.newCA, c.newLeaves, c.reason)
			}
			if p.Reason != "" {
				// What the plan asks for, carried out, needs nothing more.
				b := issue(t, c.b, p, c.h, c.at)
				if again := PlanRenewal(b, c.h, c.at); again.Reason != "" {
					t.Fatalf("after carrying out %+v: %+v", p, again)
				}
				if !p.NewCA && !bytes.Equal(b[KeyCACert], c.b[KeyCACert]) {
					t.Error("renewing the leaves replaced the CA")
				}
			}
		})
	}
	if p := PlanRenewal(good, hosts, t0); !p.RenewAt.Equal(t0.Add(-backdate).Add((LeafValidity + backdate) * 2 / 3)) {
		t.Errorf("RenewAt %v, want two thirds into the leaves' life", p.RenewAt)
	}
}

// A leaf issued late in the CA's life does not outlive it.
func TestLeafNeverOutlivesTheCA(t *testing.T) {
	b := fresh(t)
	late := t0.Add(CAValidity - 10*24*time.Hour)
	b = issue(t, b, Plan{NewLeaves: true}, hosts, late)
	ca, _ := parseCert(b[KeyCACert])
	srv, _ := parseCert(b[KeyServerCert])
	if srv.NotAfter.After(ca.NotAfter) {
		t.Errorf("server certificate until %v, the CA until %v", srv.NotAfter, ca.NotAfter)
	}
}

// The certificates do what etcd asks of them: a mutual TLS handshake with the server certificate
// on one side and the client certificate on the other, both verified against the CA, succeeds
// for a name the server certificate holds; a client without a certificate is refused, and so is a
// client certificate of another CA. The client certificate has no Common Name (etcd's proxy
// refuses one that has).
func TestCertificatesMakeAMutualTLSHandshake(t *testing.T) {
	b, other := fresh(t), fresh(t)
	now := time.Now()
	b = issue(t, b, Plan{NewCA: true, NewLeaves: true}, hosts, now)
	other = issue(t, other, Plan{NewCA: true, NewLeaves: true}, hosts, now)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b[KeyCACert])
	srvCert, err := tls.X509KeyPair(b[KeyServerCert], b[KeyServerKey])
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := parseCert(b[KeyClientCert])
	if cli.Subject.CommonName != "" {
		t.Errorf("client certificate's Common Name %q, want none", cli.Subject.CommonName)
	}
	handshake := func(clientPair []byte, clientKey []byte, serverName string) error {
		a, c := net.Pipe()
		defer a.Close()
		defer c.Close()
		srv := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
		cfg := &tls.Config{RootCAs: pool, ServerName: serverName}
		if clientPair != nil {
			kp, err := tls.X509KeyPair(clientPair, clientKey)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		deadline := time.Now().Add(10 * time.Second)
		_ = a.SetDeadline(deadline)
		_ = c.SetDeadline(deadline)
		done := make(chan error, 1)
		go func() {
			err := srv.Handshake()
			if err == nil {
				_, err = srv.Write([]byte{1})
			}
			done <- err
		}()
		// With TLS 1.3 a client learns that its certificate was refused at its first read.
		cc := tls.Client(c, cfg)
		cerr := cc.Handshake()
		if cerr == nil {
			_, cerr = cc.Read(make([]byte, 1))
		}
		_ = c.Close()
		serr := <-done
		if cerr != nil {
			return cerr
		}
		return serr
	}
	if err := handshake(b[KeyClientCert], b[KeyClientKey], "b-etcd-0.b-etcd-peers.ns.svc"); err != nil {
		t.Errorf("the proxies' certificate against a member: %v", err)
	}
	if err := handshake(b[KeyServerCert], b[KeyServerKey], "b-etcd.ns.svc"); err != nil {
		t.Errorf("a member's certificate against another (peer): %v", err)
	}
	if err := handshake(nil, nil, "b-etcd.ns.svc"); err == nil {
		t.Error("a client without a certificate made the handshake")
	}
	if err := handshake(other[KeyClientCert], other[KeyClientKey], "b-etcd.ns.svc"); err == nil {
		t.Error("a client certificate of another CA made the handshake")
	}
	if err := handshake(b[KeyClientCert], b[KeyClientKey], "b-etcd.elsewhere.svc"); err == nil {
		t.Error("the server certificate was accepted for a name it does not hold")
	}
}

func TestCAFingerprintFollowsTheCA(t *testing.T) {
	b := fresh(t)
	leaves := issue(t, b, Plan{NewLeaves: true}, hosts, t0)
	ca := issue(t, b, Plan{NewCA: true, NewLeaves: true}, hosts, t0)
	if CAFingerprint(b) != CAFingerprint(leaves) || CAFingerprint(b) == CAFingerprint(ca) {
		t.Errorf("fingerprints %s (new leaves %s, new CA %s): want it to change with the CA only", CAFingerprint(b), CAFingerprint(leaves), CAFingerprint(ca))
	}
}
