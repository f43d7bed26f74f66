package store

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
)

// Grant is a cluster administrator's word that a store's master answers its admin API at the
// listed URLs and that backends of the listed Kubernetes namespaces may use it. It is the only
// way a backend reaches a master the rules of Authorize cannot prove its own. Grants come from
// ClusterCacheStoreGrant objects (cluster-scoped) and from the manager's --store-grant flag: another
// namespace's Service, an IP literal that is not loopback, a name outside the cluster, the masters
// of an etcd:// address.
type Grant struct {
	// Name names the grant in messages.
	Name string
	// RPCAddress is the store's master RPC address (store.ID form, or any spelling of it that is
	// fully qualified: a grant has no namespace of its own).
	RPCAddress string
	// AdminURLs are the admin URLs of the store's masters.
	AdminURLs []string
	// Namespaces are the Kubernetes namespaces whose backends may use the store; "*" is every one.
	Namespaces []string
	// AllowCrossNamespaceOverride lets a flush with spec.allowInUse in one of Namespaces empty
	// what users in other namespaces of the grant use.
	AllowCrossNamespaceOverride bool
}

// Authority is what Authorize decided.
type Authority struct {
	// Allowed says the operator may call the admin URL for the store.
	Allowed bool
	// Reason is a CamelCase word for a condition.
	Reason string
	// Message says why, and when refused, what to do.
	Message string
	// Service, when set, is the Service of the backend's own namespace the decision rests on:
	// the admin URL is allowed only once the caller has proved that the Service reaches pods of
	// that namespace alone (ServiceProof).
	Service string
}

// Reasons of an Authority.
const (
	AuthoritySameHost       = "SameHost"
	AuthorityGranted        = "Granted"
	AuthorityBadAdminURL    = "AdminURLRefused"
	AuthorityOtherHost      = "AdminHostNotRPCHost"
	AuthorityOtherNamespace = "OtherNamespace"
	AuthorityUnprovable     = "HostNotProvable"
	AuthorityServiceRefused = "ServiceNotProvable"
)

// Authorize decides, with no lookup of any name, whether the operator may call adminURL as the
// admin API of the store at rpcAddress for a CacheBackend in Kubernetes namespace namespace. Deny
// by default: it allows only
//
//   - a grant naming this store (same ID), this admin URL (same normal form) and this namespace;
//   - or, for a host:port rpcAddress, an admin URL whose host is the RPC address's host in
//     store.ID's normal form, when that host is a Service of the backend's own namespace
//     (svc, svc.<namespace>, svc.<namespace>.svc[.<domain>]) or a loopback IP literal spelled
//     as the same address on both sides.
//
// Everything else is refused: an IP literal that is not loopback (a pod or Service of any
// namespace may have it), a Service of another namespace, a name outside the cluster's Service
// domain (it resolves to what its owner says), the name localhost (spell 127.0.0.1), an
// etcd:// address but on a Service of the backend's namespace that the address names (its
// masters' hosts are not in it; an etcd on loopback proves nothing), and an admin URL with user information, a
// query, a fragment, a path, an escape or a zone in its host, or a scheme other than http/https.
func Authorize(rpcAddress, adminURL, namespace, clusterDomain string, grants []Grant) Authority {
	if clusterDomain == "" {
		clusterDomain = DefaultClusterDomain
	}
	domain := strings.ToLower(strings.Trim(clusterDomain, "."))
	ns := strings.ToLower(namespace)
	id := ID(rpcAddress, namespace, clusterDomain)
	admin, err := parseAdminURL(adminURL)
	if id == "" {
		return Authority{Reason: AuthorityBadAdminURL, Message: "spec.mooncake.external.rpcAddress is empty"}
	}
	if err != nil {
		return Authority{Reason: AuthorityBadAdminURL, Message: fmt.Sprintf(
			"spec.mooncake.external.adminURL %q is refused: %v; write it as http://<host>:<port> with the RPC address's host", adminURL, err)}
	}
	for _, g := range grants {
		if ID(g.RPCAddress, "", clusterDomain) != id || !grantsNamespace(g, ns) {
			continue
		}
		for _, u := range g.AdminURLs {
			if gu, err := parseAdminURL(u); err == nil && gu.key(ns, domain) == admin.key(ns, domain) {
				return Authority{Allowed: true, Reason: AuthorityGranted, Message: fmt.Sprintf(
					"The store grant %s grants namespace %s the admin URL %s for store %s", g.Name, namespace, adminURL, id)}
			}
		}
	}
	grantHint := fmt.Sprintf("or ask a cluster administrator for a ClusterCacheStoreGrant that lists store %s, the admin URL %s and namespace %s", WithCluster(id, ""), adminURL, namespace)
	rpc := strings.TrimSpace(rpcAddress)
	if rest, ok := cutPrefixFold(rpc, EtcdScheme); ok {
		// The masters of an etcd:// address are not in it: the admin URL is provably one of
		// them only when it is on a host the address names (etcd and masters on one host) and
		// that host is the backend namespace's own: a Service of it, whose pods are that
		// namespace's. A loopback address proves nothing here: it is the operator's own host,
		// where the etcd's address names no master, and any master of any tenant on that host
		// listens on it (the masters of the etcd included, whatever their addresses).
		var first Authority
		for i, e := range strings.FieldsFunc(rest, func(r rune) bool { return r == ';' || r == ',' }) {
			h, _ := splitHostPort(strings.TrimSpace(e), DefaultEtcdPort)
			var a Authority
			if nh := normalHost(h, ns, domain); loopback(nh) || strings.EqualFold(strings.TrimSuffix(h, "."), "localhost") {
				a = Authority{Reason: AuthorityUnprovable, Message: fmt.Sprintf("the etcd host %s is a loopback address, which names the operator's own host and none of the masters on it", h)}
			} else {
				a = sameHost(h, rpcAddress, admin.host, adminURL, namespace, ns, domain, grantHint)
			}
			if a.Allowed {
				return a
			}
			if i == 0 {
				first = a
			}
		}
		return Authority{Reason: AuthorityUnprovable, Message: fmt.Sprintf(
			"spec.mooncake.external.rpcAddress %s names an etcd, not the masters, and the admin URL %s is on none of its hosts (%s): the operator cannot tell that it is one of this store's masters; ask a cluster administrator for a ClusterCacheStoreGrant that lists store %s, its masters' admin URLs and namespace %s",
			rpcAddress, adminURL, first.Message, WithCluster(id, ""), namespace)}
	}
	rpcHost, _ := splitHostPort(rpc, DefaultRPCPort)
	return sameHost(rpcHost, rpcAddress, admin.host, adminURL, namespace, ns, domain, grantHint)
}

// sameHost allows an admin host that is provably the RPC host: the same normal form, a Service
// of the backend's own namespace or a loopback literal. Two different loopback addresses are two
// hosts: on one machine, another loopback address is another master's (another tenant's), and
// nothing in an etcd:// address says which masters beside it use that etcd.
func sameHost(rpcHost, rpcAddress, adminHost, adminURL, namespace, ns, domain, grantHint string) Authority {
	id := rpcAddress
	if strings.EqualFold(strings.TrimSuffix(rpcHost, "."), "localhost") || strings.EqualFold(strings.TrimSuffix(adminHost, "."), "localhost") {
		return Authority{Reason: AuthorityUnprovable, Message: fmt.Sprintf(
			"the name localhost is refused in spec.mooncake.external (rpcAddress %s, adminURL %s): spell the loopback address 127.0.0.1 on both, %s", rpcAddress, adminURL, grantHint)}
	}
	if strings.ContainsAny(rpcHost, "%") {
		return Authority{Reason: AuthorityUnprovable, Message: fmt.Sprintf(
			"spec.mooncake.external.rpcAddress %s has a zone or an escape in its host: write the host plainly", rpcAddress)}
	}
	rh, ah := normalHost(rpcHost, ns, domain), normalHost(adminHost, ns, domain)
	if rh != ah {
		return Authority{Reason: AuthorityOtherHost, Message: fmt.Sprintf(
			"spec.mooncake.external.adminURL %s names host %s, the rpcAddress %s names host %s: the operator calls only the admin API of the master the RPC address names; make the two hosts the same, %s", adminURL, ah, rpcAddress, rh, grantHint)}
	}
	if ip, err := netip.ParseAddr(strings.Trim(rh, "[]")); err == nil {
		if ip.IsLoopback() {
			return Authority{Allowed: true, Reason: AuthoritySameHost, Message: fmt.Sprintf("The admin URL's host is the RPC address's host, loopback address %s", rh)}
		}
		return Authority{Reason: AuthorityUnprovable, Message: fmt.Sprintf(
			"the store's host %s is an IP literal, which a pod or Service of any namespace may hold: name the master by its Service in namespace %s, %s", rh, namespace, grantHint)}
	}
	suffix := ".svc." + domain
	if !strings.HasSuffix(rh, suffix) {
		return Authority{Reason: AuthorityUnprovable, Message: fmt.Sprintf(
			"the store's host %s is not a Service of the cluster (*.<namespace>%s): the operator cannot tell whose master it reaches; name the master by its Service in namespace %s, %s", rh, suffix, namespace, grantHint)}
	}
	labels := strings.Split(strings.TrimSuffix(rh, suffix), ".")
	if len(labels) != 2 || !serviceName.MatchString(labels[0]) {
		return Authority{Reason: AuthorityUnprovable, Message: fmt.Sprintf(
			"the store's host %s is not a Service name <service>.<namespace>%s, %s", rh, suffix, grantHint)}
	}
	if labels[1] != ns {
		return Authority{Reason: AuthorityOtherNamespace, Message: fmt.Sprintf(
			"the store's host %s is a Service of namespace %s, not of this backend's namespace %s: another namespace's master is used only through a store grant; ask a cluster administrator for one that lists store %s, the admin URL %s and namespace %s", rh, labels[1], namespace, id, adminURL, namespace)}
	}
	return Authority{Allowed: true, Reason: AuthoritySameHost, Service: labels[0], Message: fmt.Sprintf("The admin URL's host is the RPC address's host, Service %s of namespace %s", rh, namespace)}
}

func loopback(host string) bool {
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}

// serviceName is a Service's name (an RFC 1035 label): a label that starts with a digit may be
// read as a number by a resolver (2130706433 is 127.0.0.1 to inet_aton).
var serviceName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

func grantsNamespace(g Grant, ns string) bool {
	for _, n := range g.Namespaces {
		if n == "*" || strings.EqualFold(n, ns) {
			return true
		}
	}
	return false
}

type adminURLParts struct {
	scheme, host, port string
}

// key is the admin URL's normal form: scheme, normal host, port (the scheme's default when none).
func (a adminURLParts) key(ns, domain string) string {
	return a.scheme + "://" + normalHost(a.host, ns, domain) + ":" + a.port
}

// parseAdminURL accepts only scheme://host[:port][/] with scheme http or https and a host with
// no user information, escape or zone.
func parseAdminURL(s string) (adminURLParts, error) {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "%\\ \t@") {
		return adminURLParts{}, fmt.Errorf("it has an escape, a backslash, a space or user information")
	}
	u, err := url.Parse(s)
	if err != nil {
		return adminURLParts{}, fmt.Errorf("it does not parse")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return adminURLParts{}, fmt.Errorf("its scheme is %q, not http or https", u.Scheme)
	}
	if u.User != nil || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || (u.Path != "" && u.Path != "/") {
		return adminURLParts{}, fmt.Errorf("it has user information, a query, a fragment or a path")
	}
	host := u.Hostname()
	if host == "" {
		return adminURLParts{}, fmt.Errorf("it names no host")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	} else if p, err := netip.ParseAddrPort("127.0.0.1:" + port); err != nil || p.Port() == 0 || strings.HasPrefix(port, "0") {
		return adminURLParts{}, fmt.Errorf("its port %q is not a decimal port number", port)
	}
	return adminURLParts{scheme: scheme, host: host, port: port}, nil
}

// ParseGrant reads a grant from the manager's flag: name=<name>;rpc=<address>;admin=<url>[,<url>...];namespaces=<ns>[,<ns>...][;override=true]
// ("*" for every namespace; override=true is AllowCrossNamespaceOverride). Every key but
// override is required once; nothing else is accepted.
func ParseGrant(s string) (Grant, error) {
	var g Grant
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" || seen[k] {
			return Grant{}, fmt.Errorf("store grant %q: %q is not key=value, or repeats a key (name, rpc, admin, namespaces)", s, part)
		}
		seen[k] = true
		switch k {
		case "name":
			g.Name = v
		case "rpc":
			g.RPCAddress = v
		case "admin":
			for _, u := range strings.Split(v, ",") {
				if _, err := parseAdminURL(u); err != nil {
					return Grant{}, fmt.Errorf("store grant %q: admin URL %q: %v", s, u, err)
				}
				g.AdminURLs = append(g.AdminURLs, strings.TrimSpace(u))
			}
		case "namespaces":
			g.Namespaces = strings.Split(v, ",")
		case "override":
			if v != "true" && v != "false" {
				return Grant{}, fmt.Errorf("store grant %q: override is true or false, not %q", s, v)
			}
			g.AllowCrossNamespaceOverride = v == "true"
		default:
			return Grant{}, fmt.Errorf("store grant %q: unknown key %q (name, rpc, admin, namespaces, override)", s, k)
		}
	}
	if !seen["name"] || !seen["rpc"] || !seen["admin"] || !seen["namespaces"] {
		return Grant{}, fmt.Errorf("store grant %q: name, rpc, admin and namespaces are all required", s)
	}
	return g, nil
}

// CrossNamespaceOverride tells whether a grant lets a flush in Kubernetes namespace flushNS, on
// the store at rpcAddress (as the flush's backend in flushNS spells it), override users of
// namespaces userNS: a grant of that store with AllowCrossNamespaceOverride that lists flushNS
// and every namespace of userNS (or "*"). It returns the grant's name, or why none does.
func CrossNamespaceOverride(grants []Grant, rpcAddress, flushNS, clusterDomain string, userNS []string) (string, string) {
	id := ID(rpcAddress, flushNS, clusterDomain)
	if id == "" {
		return "", "the backend names no store"
	}
	why := fmt.Sprintf("no store grant of store %s sets allowCrossNamespaceOverride", WithCluster(id, ""))
next:
	for _, g := range grants {
		if ID(g.RPCAddress, "", clusterDomain) != id || !g.AllowCrossNamespaceOverride {
			continue
		}
		for _, ns := range append([]string{flushNS}, userNS...) {
			if !grantsNamespace(g, strings.ToLower(ns)) {
				why = fmt.Sprintf("the store grant %s of store %s allows cross-namespace overrides but does not list namespace %s", g.Name, WithCluster(id, ""), ns)
				continue next
			}
		}
		return g.Name, ""
	}
	return "", why
}
