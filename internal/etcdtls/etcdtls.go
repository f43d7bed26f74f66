// Package etcdtls issues and renews the certificates of a backend's managed etcd: a CA of the
// backend's own, one certificate the members serve clients and each other with (server and
// client usage, named by every member's and the client Service's DNS names), and one client
// certificate the etcd proxies in the masters' and the clients' pods present. Everything here is
// pure: the caller passes the time and stores the PEM it gets back.
//
// The client certificate has no Common Name: etcd's gRPC proxy (etcd grpc-proxy start) refuses
// to present one that has, since etcd with authentication enabled would take the name as a user.
package etcdtls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"slices"
	"time"
)

// The keys of the Secret that holds a backend's certificates.
const (
	KeyCACert     = "ca.crt"
	KeyCAKey      = "ca.key"
	KeyServerCert = "server.crt"
	KeyServerKey  = "server.key"
	KeyClientCert = "client.crt"
	KeyClientKey  = "client.key"
)

// Lifetimes and renewal: a certificate is renewed once two thirds of its life have passed, so a
// leaf (90 days) is renewed with a month to spare and the CA (5 years) with more than a year.
const (
	CAValidity   = 5 * 365 * 24 * time.Hour
	LeafValidity = 90 * 24 * time.Hour
	// backdate covers clocks of the members a little behind the operator's.
	backdate = 5 * time.Minute
)

// Bundle is the PEM of every certificate and key of one etcd.
type Bundle map[string][]byte

// Hosts are the names and addresses the server certificate is valid for.
type Hosts struct {
	DNS []string
	IPs []net.IP
}

// issued is a certificate with its key, in PEM.
type issued struct{ cert, key []byte }

func newKey(r io.Reader) (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), r)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial(r io.Reader) (*big.Int, error) {
	return rand.Int(r, new(big.Int).Lsh(big.NewInt(1), 127))
}

func sign(r io.Reader, tmpl, parent *x509.Certificate, pub, signer any) ([]byte, error) {
	s, err := serial(r)
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = s
	der, err := x509.CreateCertificate(r, tmpl, parent, pub, signer)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newCA is a self-signed CA named name, valid from now for CAValidity.
func newCA(r io.Reader, name string, now time.Time) (issued, error) {
	k, keyPEM, err := newKey(r)
	if err != nil {
		return issued{}, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	c, err := sign(r, tmpl, tmpl, &k.PublicKey, k)
	return issued{c, keyPEM}, err
}

// parsedCA is a CA certificate and key read back from PEM.
type parsedCA struct {
	cert *x509.Certificate
	key  any
}

func parseCA(b Bundle) (parsedCA, error) {
	c, err := parseCert(b[KeyCACert])
	if err != nil {
		return parsedCA{}, fmt.Errorf("%s: %w", KeyCACert, err)
	}
	if !c.IsCA {
		return parsedCA{}, fmt.Errorf("%s is not a CA certificate", KeyCACert)
	}
	blk, _ := pem.Decode(b[KeyCAKey])
	if blk == nil {
		return parsedCA{}, fmt.Errorf("%s holds no PEM block", KeyCAKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return parsedCA{}, fmt.Errorf("%s: %w", KeyCAKey, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || !ek.PublicKey.Equal(c.PublicKey) {
		return parsedCA{}, fmt.Errorf("%s is not the key of %s", KeyCAKey, KeyCACert)
	}
	return parsedCA{c, k}, nil
}

func parseCert(p []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(p)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

// newLeaf is a certificate signed by ca, valid from now for LeafValidity (never past the CA).
func newLeaf(r io.Reader, ca parsedCA, subject pkix.Name, usage []x509.ExtKeyUsage, h Hosts, now time.Time) (issued, error) {
	k, keyPEM, err := newKey(r)
	if err != nil {
		return issued{}, err
	}
	notAfter := now.Add(LeafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     subject,
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: usage,
		DNSNames:    h.DNS,
		IPAddresses: h.IPs,
	}
	c, err := sign(r, tmpl, ca.cert, &k.PublicKey, ca.key)
	return issued{c, keyPEM}, err
}

// clientSubject names the proxies' certificate: an organization, no Common Name (see the
// package's comment).
var clientSubject = pkix.Name{Organization: []string{"hicache-operator etcd clients"}}

// Issue returns the bundle plan asks for: with a new CA when plan.NewCA, else with old's CA;
// with new leaves when plan.NewLeaves. name names the CA (the backend). r is the randomness
// (crypto/rand.Reader outside tests).
func Issue(r io.Reader, old Bundle, p Plan, name string, h Hosts, now time.Time) (Bundle, error) {
	out := Bundle{}
	for k, v := range old {
		out[k] = bytes.Clone(v)
	}
	if p.NewCA {
		ca, err := newCA(r, name, now)
		if err != nil {
			return nil, fmt.Errorf("issuing the etcd CA: %w", err)
		}
		out[KeyCACert], out[KeyCAKey] = ca.cert, ca.key
	}
	if !p.NewCA && !p.NewLeaves {
		return out, nil
	}
	ca, err := parseCA(out)
	if err != nil {
		return nil, err
	}
	srv, err := newLeaf(r, ca, pkix.Name{CommonName: name}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, h, now)
	if err != nil {
		return nil, fmt.Errorf("issuing the etcd server certificate: %w", err)
	}
	cli, err := newLeaf(r, ca, clientSubject, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Hosts{}, now)
	if err != nil {
		return nil, fmt.Errorf("issuing the etcd client certificate: %w", err)
	}
	out[KeyServerCert], out[KeyServerKey] = srv.cert, srv.key
	out[KeyClientCert], out[KeyClientKey] = cli.cert, cli.key
	return out, nil
}

// Plan is what a bundle needs: a new CA (and so new leaves), new leaves, or nothing.
type Plan struct {
	NewCA, NewLeaves bool
	// Reason says why, for an Event; "" when nothing is needed.
	Reason string
	// RenewAt is when the bundle, as it stands after the plan is carried out, needs renewing
	// next (zero when the plan renews: the caller plans again on what it wrote).
	RenewAt time.Time
}

// renewAt is when a certificate is renewed: two thirds into its life.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

// PlanRenewal decides what b needs at now for an etcd serving hosts: a new CA when the CA is
// missing, unreadable or past its renewal time; new leaves when a leaf is missing, unreadable,
// not the CA's, not valid for hosts, or past its renewal time.
func PlanRenewal(b Bundle, h Hosts, now time.Time) Plan {
	ca, err := parseCA(b)
	if err != nil {
		return Plan{NewCA: true, NewLeaves: true, Reason: "no usable CA: " + err.Error()}
	}
	if at := renewAt(ca.cert); !now.Before(at) {
		return Plan{NewCA: true, NewLeaves: true, Reason: fmt.Sprintf("the CA expires at %s and is renewed from %s", ca.cert.NotAfter.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))}
	}
	next := renewAt(ca.cert)
	for _, l := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
		hosts     *Hosts
	}{{KeyServerCert, KeyServerKey, x509.ExtKeyUsageServerAuth, &h}, {KeyClientCert, KeyClientKey, x509.ExtKeyUsageClientAuth, nil}} {
		c, problem := leafProblem(b, ca, l.cert, l.key, l.usage, l.hosts, now)
		if problem != "" {
			return Plan{NewLeaves: true, Reason: problem}
		}
		if at := renewAt(c); at.Before(next) {
			next = at
		}
	}
	return Plan{RenewAt: next}
}

// leafProblem says what is wrong with one leaf of b, "" when nothing is.
func leafProblem(b Bundle, ca parsedCA, certKey, keyKey string, usage x509.ExtKeyUsage, h *Hosts, now time.Time) (*x509.Certificate, string) {
	c, err := parseCert(b[certKey])
	if err != nil {
		return nil, fmt.Sprintf("%s: %v", certKey, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Sprintf("%s does not verify against the CA: %v", certKey, err)
	}
	blk, _ := pem.Decode(b[keyKey])
	if blk == nil {
		return nil, keyKey + " holds no PEM block"
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Sprintf("%s: %v", keyKey, err)
	}
	if ek, ok := k.(*ecdsa.PrivateKey); !ok || !ek.PublicKey.Equal(c.PublicKey) {
		return nil, fmt.Sprintf("%s is not the key of %s", keyKey, certKey)
	}
	if h != nil && !sameHosts(c, *h) {
		return nil, fmt.Sprintf("%s names %v %v, the etcd is reached at %v %v", certKey, c.DNSNames, c.IPAddresses, h.DNS, h.IPs)
	}
	if at := renewAt(c); !now.Before(at) {
		return nil, fmt.Sprintf("%s expires at %s and is renewed from %s", certKey, c.NotAfter.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
	}
	return c, ""
}

func sameHosts(c *x509.Certificate, h Hosts) bool {
	if !slices.Equal(c.DNSNames, h.DNS) || len(c.IPAddresses) != len(h.IPs) {
		return false
	}
	for i := range h.IPs {
		if !c.IPAddresses[i].Equal(h.IPs[i]) {
			return false
		}
	}
	return true
}

// CAFingerprint is the SHA-256 of the CA certificate's PEM, short: it names the CA the members
// and the proxies were started with, so that a new CA restarts them (etcd reads its trusted CA
// once; the leaves it reads again at every handshake).
func CAFingerprint(b Bundle) string {
	s := sha256.Sum256(b[KeyCACert])
	return hex.EncodeToString(s[:8])
}
