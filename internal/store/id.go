// Package store decides when two CacheBackends name one L3 store. A store is its master: two
// backends, in any Kubernetes namespaces, whose RPC addresses reach the same mooncake_master hold
// the same objects, so what one flushes the other's deployments lose. The operator knows this by
// an ID, the master's RPC address in one normal form, published in each CacheBackend's
// status.storeID and indexed.
package store

import (
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// DefaultRPCPort is mooncake_master's RPC port (--rpc_port) when an address names none.
const DefaultRPCPort = 50051

// DefaultClusterDomain is the DNS domain of Services when the cluster names none.
const DefaultClusterDomain = "cluster.local"

// ID is the identity of the store a master RPC address reaches, for a CacheBackend in Kubernetes
// namespace namespace of a cluster whose Services live under clusterDomain ("" means
// cluster.local). It is host:port with:
//
//   - the host lowercased and without a trailing dot;
//   - a Service name made one fully qualified name, as a pod's DNS search path resolves it:
//     "svc" is svc.<namespace>.svc.<domain>, "svc.ns" is svc.ns.svc.<domain>, "svc.ns.svc" is
//     svc.ns.svc.<domain>;
//   - an IP literal in its canonical form (IPv4-mapped IPv6 as IPv4, IPv6 compressed and in
//     brackets), and localhost as 127.0.0.1;
//   - the port as a decimal number, DefaultRPCPort when there is none.
//
// Two spellings that resolve to one Service give one ID; a Service's name and its ClusterIP, or
// two DNS names of one host, do not (the operator resolves no names). ID returns "" for an empty
// address.
func ID(address, namespace, clusterDomain string) string {
	address = strings.TrimSpace(address)
	if address == "" {
		return ""
	}
	if clusterDomain == "" {
		clusterDomain = DefaultClusterDomain
	}
	clusterDomain = strings.ToLower(strings.Trim(clusterDomain, "."))
	namespace = strings.ToLower(namespace)
	if rest, ok := cutPrefixFold(address, EtcdScheme); ok {
		return etcdID(rest, namespace, clusterDomain)
	}
	host, port := splitHostPort(address, DefaultRPCPort)
	return normalHost(host, namespace, clusterDomain) + ":" + strconv.Itoa(port)
}

// EtcdScheme starts the address of masters with HA: etcd://host:port[;host:port...] names the
// etcd they elect their leader in, and clients find the leader there.
const EtcdScheme = "etcd://"

// DefaultEtcdPort is etcd's client port when an endpoint names none.
const DefaultEtcdPort = 2379

// IsEtcd reports whether a master address is an etcd:// address.
func IsEtcd(address string) bool {
	_, ok := cutPrefixFold(strings.TrimSpace(address), EtcdScheme)
	return ok
}

// WithCluster is the ID of the store a set of HA masters form: the ID of their etcd:// address
// and their cluster id (--cluster_id), since stores on one etcd differ by it. An empty cluster id
// is Mooncake's default, mooncake_cluster.
func WithCluster(id, clusterID string) string {
	if id == "" || !IsEtcd(id) {
		return id
	}
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	return id + "#" + clusterID
}

// DefaultClusterID is mooncake_master's --cluster_id when none is given.
const DefaultClusterID = "mooncake_cluster"

// etcdID is etcd:// and the endpoints in their normal form, sorted, without duplicates, joined
// by ",": the endpoints in any order and with either separator (";" or ",") name one etcd.
func etcdID(endpoints, namespace, domain string) string {
	seen := map[string]bool{}
	var out []string
	for _, e := range strings.FieldsFunc(endpoints, func(r rune) bool { return r == ';' || r == ',' }) {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		host, port := splitHostPort(e, DefaultEtcdPort)
		n := normalHost(host, namespace, domain) + ":" + strconv.Itoa(port)
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return EtcdScheme + strings.Join(out, ",")
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// splitHostPort splits host[:port], [ipv6][:port] or a bare IPv6 literal; def is the port when
// there is none.
func splitHostPort(address string, def int) (string, int) {
	if h, p, err := net.SplitHostPort(address); err == nil {
		if n, err := strconv.Atoi(p); err == nil && n > 0 && n <= 65535 {
			return h, n
		}
		return h, def
	}
	// No port: a bare host, a bracketed IPv6 literal, or a bare IPv6 literal.
	return strings.TrimSuffix(strings.TrimPrefix(address, "["), "]"), def
}

func normalHost(host, namespace, domain string) string {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i] // an IPv6 zone names an interface of one host, not a store
	}
	if host == "localhost" {
		return "127.0.0.1"
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if ip.Is6() {
			return "[" + ip.String() + "]"
		}
		return ip.String()
	}
	labels := strings.Split(host, ".")
	switch {
	case strings.HasSuffix(host, ".svc."+domain):
		return host
	case len(labels) == 1:
		return host + "." + namespace + ".svc." + domain
	case len(labels) == 2:
		return host + ".svc." + domain
	case len(labels) == 3 && labels[2] == "svc":
		return host + "." + domain
	}
	return host
}
