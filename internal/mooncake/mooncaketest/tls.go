package mooncaketest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSFiles are the PEM files of an etcd that serves clients with mutual TLS only.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// StartTLSEtcd runs bin/etcd on free loopback ports serving clients with mutual TLS only
// (--client-cert-auth, the server certificate and CA of f), its health on a plain HTTP metrics
// port, and stops it when the test ends. Endpoint is the TLS client address.
func StartTLSEtcd(t testing.TB, f TLSFiles) *Etcd {
	t.Helper()
	bin := filepath.Join(Root(t), "bin", "etcd")
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		client, peer, metrics := freePort(t), freePort(t), freePort(t)
		e := &Etcd{Endpoint: "127.0.0.1:" + strconv.Itoa(client), logPath: filepath.Join(dir, "etcd.log")}
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		args := []string{"--data-dir=" + filepath.Join(dir, fmt.Sprintf("data-%d", attempt)), "--unsafe-no-fsync=true",
			"--listen-client-urls=https://" + e.Endpoint, "--advertise-client-urls=https://" + e.Endpoint,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL, "--initial-cluster=default=" + peerURL,
			"--listen-metrics-urls=http://127.0.0.1:" + strconv.Itoa(metrics),
			"--client-cert-auth", "--trusted-ca-file=" + f.CA, "--cert-file=" + f.ServerCert, "--key-file=" + f.ServerKey}
		p, err := startProcess(bin, args, e.logPath, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.proc = p
		if lastErr = waitHTTP("http://127.0.0.1:"+strconv.Itoa(metrics)+"/health", p, 30*time.Second, `"health":"true"`); lastErr == nil {
			t.Cleanup(func() { p.stop(stopGrace) })
			return e
		}
		p.stop(0)
	}
	t.Fatalf("etcd with TLS did not start: %v", lastErr)
	return nil
}

// StartGRPCProxy runs etcd's gRPC proxy (bin/etcd grpc-proxy start) on a free loopback port,
// in plaintext there, to the TLS etcd e with the client certificate of f, as the sidecar of the
// masters' and the clients' pods does. The returned Etcd is the proxy: give it to StartHA.
func StartGRPCProxy(t testing.TB, e *Etcd, f TLSFiles) *Etcd {
	t.Helper()
	bin := filepath.Join(Root(t), "bin", "etcd")
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		px := &Etcd{Endpoint: "127.0.0.1:" + strconv.Itoa(port), logPath: filepath.Join(dir, "proxy.log")}
		p, err := startProcess(bin, GRPCProxyArgs("https://"+e.Endpoint, px.Endpoint, f), px.logPath, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		px.proc = p
		if lastErr = waitHTTP("http://"+px.Endpoint+"/health", p, 30*time.Second, `"health":"true"`); lastErr == nil {
			t.Cleanup(func() { p.stop(stopGrace) })
			return px
		}
		p.stop(0)
	}
	t.Fatalf("etcd grpc-proxy did not start: %v; log:\n%s", lastErr, tail(filepath.Join(dir, "proxy.log"), 20))
	return nil
}

// GRPCProxyArgs are the arguments of etcd grpc-proxy to endpoint (https://...) with f's client
// certificate, listening in plaintext at listen. The proxy dials its own advertised address,
// which is therefore the listen address.
func GRPCProxyArgs(endpoint, listen string, f TLSFiles) []string {
	return []string{"grpc-proxy", "start", "--endpoints=" + endpoint,
		"--cert=" + f.ClientCert, "--key=" + f.ClientKey, "--cacert=" + f.CA,
		"--listen-addr=" + listen, "--advertise-client-url=" + listen}
}

// TLSGet asks GET url of a TLS etcd with the CA of f and, when withCert, its client
// certificate; it returns the status or the error.
func TLSGet(f TLSFiles, url string, withCert bool) (int, error) {
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		return 0, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if withCert {
		kp, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			return 0, err
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}
