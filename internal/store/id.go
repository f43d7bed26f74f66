// Package store decides when two CacheBackends name one L3 store. A store is its master: two
// backends, in any Kubernetes namespaces, whose RPC addresses reach the same mooncake_master hold
// the same objects, so what one flushes the other's deployments lose. The operator knows this by
// an ID, the master's RPC address in one normal form, published in each CacheBackend's
// status.storeID and indexed.
package store

import (
	"net"
	"net/netip"
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
	host, port := splitHostPort(address)
	return normalHost(host, strings.ToLower(namespace), clusterDomain) + ":" + strconv.Itoa(port)
}

// splitHostPort splits host[:port], [ipv6][:port] or a bare IPv6 literal.
func splitHostPort(address string) (string, int) {
	if h, p, err := net.SplitHostPort(address); err == nil {
		if n, err := strconv.Atoi(p); err == nil && n > 0 && n <= 65535 {
			return h, n
		}
		return h, DefaultRPCPort
	}
	// No port: a bare host, a bracketed IPv6 literal, or a bare IPv6 literal.
	return strings.TrimSuffix(strings.TrimPrefix(address, "["), "]"), DefaultRPCPort
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
