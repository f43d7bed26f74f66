package store

import (
	"strings"
	"testing"
)

func TestAuthorize(t *testing.T) {
	grant := Grant{Name: "shared", RPCAddress: "mooncake-master.b.svc.cluster.local:50051",
		AdminURLs: []string{"http://mooncake-master.b.svc.cluster.local:9003"}, Namespaces: []string{"a"}}
	etcdGrant := Grant{Name: "ha", RPCAddress: "etcd://etcd.b.svc:2379", AdminURLs: []string{"http://10.0.0.7:9003"}, Namespaces: []string{"*"}}
	for _, c := range []struct {
		name, rpc, admin string
		grants           []Grant
		want             string
	}{
		{"own service, short", "mooncake-master:50051", "http://mooncake-master:9003", nil, AuthoritySameHost},
		{"own service, spelled two ways", "mooncake-master.a:50051", "http://Mooncake-Master.a.svc.cluster.local.:9003/", nil, AuthoritySameHost},
		{"own service, https", "m.a.svc:50051", "https://m.a.svc", nil, AuthoritySameHost},
		{"loopback literal both", "127.0.0.1:50051", "http://127.0.0.1:9003", nil, AuthoritySameHost},
		{"ipv6 loopback both", "[::1]:50051", "http://[::1]:9003", nil, AuthoritySameHost},
		{"ipv4-mapped loopback vs loopback", "[::ffff:127.0.0.1]:50051", "http://127.0.0.1:9003", nil, AuthoritySameHost},
		{"bogus rpc, admin at B's master", "bogus:50051", "http://mooncake-master.b.svc:9003", nil, AuthorityOtherHost},
		{"rpc names B's master", "mooncake-master.b:50051", "http://mooncake-master.b:9003", nil, AuthorityOtherNamespace},
		{"rpc names B's master, fully qualified", "mooncake-master.b.svc.cluster.local.:50051", "http://MOONCAKE-MASTER.b.svc.cluster.local:9003", nil, AuthorityOtherNamespace},
		{"B's master granted to a", "mooncake-master.b:50051", "http://mooncake-master.b.svc:9003", []Grant{grant}, AuthorityGranted},
		{"grant for another namespace", "mooncake-master.b:50051", "http://mooncake-master.b.svc:9003", []Grant{{Name: "g", RPCAddress: grant.RPCAddress, AdminURLs: grant.AdminURLs, Namespaces: []string{"c"}}}, AuthorityOtherNamespace},
		{"grant for another admin port", "mooncake-master.b:50051", "http://mooncake-master.b.svc:9004", []Grant{grant}, AuthorityOtherNamespace},
		{"grant for another scheme", "mooncake-master.b:50051", "https://mooncake-master.b.svc:9003", []Grant{grant}, AuthorityOtherNamespace},
		{"ip vs name", "10.0.0.7:50051", "http://mooncake-master:9003", nil, AuthorityOtherHost},
		{"name vs ip", "mooncake-master:50051", "http://10.0.0.7:9003", nil, AuthorityOtherHost},
		{"two names", "m1:50051", "http://m2:9003", nil, AuthorityOtherHost},
		{"same non-loopback ip", "10.0.0.7:50051", "http://10.0.0.7:9003", nil, AuthorityUnprovable},
		{"same ipv6", "[fd00::7]:50051", "http://[fd00::7]:9003", nil, AuthorityUnprovable},
		// Another loopback address is another master on the same machine: another tenant's.
		{"loopback vs other loopback", "127.0.0.1:50051", "http://127.0.0.2:9003", nil, AuthorityOtherHost},
		{"loopback vs its IPv4-mapped spelling", "127.0.0.2:1", "http://[::ffff:127.0.0.1]:9003", nil, AuthorityOtherHost},
		{"loopback vs a pod ip", "127.0.0.1:50051", "http://10.0.0.7:9003", nil, AuthorityOtherHost},
		{"localhost both", "localhost:50051", "http://localhost:9003", nil, AuthorityUnprovable},
		{"localhost vs loopback", "127.0.0.1:50051", "http://localhost:9003", nil, AuthorityUnprovable},
		{"external dns name", "mooncake.example.com:50051", "http://mooncake.example.com:9003", nil, AuthorityUnprovable},
		{"pod dns name", "10-0-0-7.a.pod.cluster.local:50051", "http://10-0-0-7.a.pod.cluster.local:9003", nil, AuthorityUnprovable},
		{"cluster suffix inside another name", "m.a.svc.cluster.local.evil:50051", "http://m.a.svc.cluster.local.evil:9003", nil, AuthorityUnprovable},
		{"numeric service name", "2130706433:50051", "http://2130706433:9003", nil, AuthorityUnprovable},
		{"short ip", "127.1:50051", "http://127.1:9003", nil, AuthorityUnprovable},
		{"userinfo", "m:50051", "http://m.b.svc@m:9003", nil, AuthorityBadAdminURL},
		{"encoded host", "m:50051", "http://m%2eb:9003", nil, AuthorityBadAdminURL},
		{"path", "m:50051", "http://m:9003/api", nil, AuthorityBadAdminURL},
		{"query", "m:50051", "http://m:9003?x=1", nil, AuthorityBadAdminURL},
		{"fragment", "m:50051", "http://m:9003#x", nil, AuthorityBadAdminURL},
		{"other scheme", "m:50051", "ftp://m:9003", nil, AuthorityBadAdminURL},
		{"no scheme", "m:50051", "m:9003", nil, AuthorityBadAdminURL},
		{"backslash", "m:50051", "http://m\\@b:9003", nil, AuthorityBadAdminURL},
		{"ipv6 zone", "[fe80::1%25eth0]:50051", "http://[fe80::1%25eth0]:9003", nil, AuthorityBadAdminURL},
		{"leading-zero port", "m:50051", "http://m:09003", nil, AuthorityBadAdminURL},
		{"empty admin url", "m:50051", "", nil, AuthorityBadAdminURL},
		{"etcd, admin on an etcd host of the namespace", "etcd://etcd:2379", "http://etcd:9003", nil, AuthoritySameHost},
		// An etcd on loopback names no master: any master on the operator's host listens there.
		{"etcd, admin on the loopback etcd host", "etcd://127.0.0.1:2379;127.0.0.1:2380", "http://127.0.0.1:9003", nil, AuthorityUnprovable},
		{"etcd on ipv6 loopback, admin on it", "etcd://[::1]:2379", "http://[::1]:9003", nil, AuthorityUnprovable},
		{"etcd on loopback then a Service", "etcd://127.0.0.1:2379;etcd:2379", "http://etcd:9003", nil, AuthoritySameHost},
		// Another loopback address is another host: nothing says its master uses this etcd.
		{"etcd on loopback, admin on another loopback address", "etcd://127.0.0.1:2379", "http://127.0.0.3:9003", nil, AuthorityUnprovable},
		{"etcd on loopback, admin on its IPv4-mapped spelling", "etcd://127.0.0.2:2379", "http://[::ffff:127.0.0.1]:9003", nil, AuthorityUnprovable},
		{"etcd on loopback, admin on localhost", "etcd://127.0.0.1:2379", "http://localhost:9003", nil, AuthorityUnprovable},
		{"etcd on localhost", "etcd://localhost:2379", "http://127.0.0.1:9003", nil, AuthorityUnprovable},
		{"etcd on loopback, granted", "etcd://127.0.0.1:2379", "http://127.0.0.3:9003", []Grant{{Name: "l", RPCAddress: "etcd://127.0.0.1:2379", AdminURLs: []string{"http://127.0.0.3:9003"}, Namespaces: []string{"a"}}}, AuthorityGranted},
		{"etcd, admin on another host", "etcd://etcd:2379", "http://master-0:9003", nil, AuthorityUnprovable},
		{"etcd, admin on B's master", "etcd://etcd:2379", "http://mooncake-master.b:9003", nil, AuthorityUnprovable},
		{"etcd of namespace b", "etcd://etcd.b:2379", "http://etcd.b:9003", nil, AuthorityUnprovable},
		{"etcd, admin on a pod ip", "etcd://10.0.0.5:2379", "http://10.0.0.5:9003", nil, AuthorityUnprovable},
		{"etcd granted", "etcd://etcd.b.svc.cluster.local:2379", "http://10.0.0.7:9003", []Grant{etcdGrant}, AuthorityGranted},
		{"etcd granted, other master", "etcd://etcd.b:2379", "http://10.0.0.8:9003", []Grant{etcdGrant}, AuthorityUnprovable},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Authorize(c.rpc, c.admin, "a", "", c.grants)
			if got.Reason != c.want || got.Allowed != (c.want == AuthoritySameHost || c.want == AuthorityGranted) {
				t.Errorf("Authorize(%q, %q) = %+v, want reason %s", c.rpc, c.admin, got, c.want)
			}
			if got.Message == "" {
				t.Error("no message")
			}
			// Only an own-namespace Service's name leaves the proof of its endpoints to the caller.
			if svc := got.Service; (svc != "") != (got.Allowed && got.Reason == AuthoritySameHost && !strings.HasPrefix(c.rpc, "127.") && !strings.HasPrefix(c.rpc, "[") && !strings.HasPrefix(c.rpc, "etcd://127.0.0.1:2379;127")) {
				t.Errorf("Authorize(%q, %q) names Service %q", c.rpc, c.admin, svc)
			}
		})
	}
}

func TestParseGrant(t *testing.T) {
	g, err := ParseGrant("name=shared;rpc=m.b.svc:50051;admin=http://m.b.svc:9003,http://m2.b.svc:9003;namespaces=a,c")
	if err != nil || g.Name != "shared" || g.RPCAddress != "m.b.svc:50051" || len(g.AdminURLs) != 2 || len(g.Namespaces) != 2 {
		t.Fatalf("ParseGrant = %+v, %v", g, err)
	}
	if a := Authorize("m.b:50051", "http://m2.b.svc.cluster.local:9003", "c", "", []Grant{g}); !a.Allowed {
		t.Errorf("the parsed grant does not allow namespace c: %+v", a)
	}
	o, err := ParseGrant("name=o;rpc=m.b.svc:50051;admin=http://m.b.svc:9003;namespaces=a,b;override=true")
	if err != nil || !o.AllowCrossNamespaceOverride {
		t.Fatalf("ParseGrant with override = %+v, %v", o, err)
	}
	for _, bad := range []string{
		"name=x;rpc=m:1;admin=http://m:2;namespaces=a;override=yes",
		"", "name=x;rpc=m:1;admin=http://m:2", "name=x;rpc=m:1;admin=http://u@m:2;namespaces=a",
		"name=x;rpc=m:1;admin=http://m:2;namespaces=a;extra=1", "name=x;name=y;rpc=m:1;admin=http://m:2;namespaces=a",
	} {
		if _, err := ParseGrant(bad); err == nil {
			t.Errorf("ParseGrant(%q) accepted", bad)
		}
	}
}

func TestCrossNamespaceOverride(t *testing.T) {
	over := Grant{Name: "over", RPCAddress: "m.s.svc:50051", AdminURLs: []string{"http://m.s.svc:9003"}, Namespaces: []string{"a", "b"}, AllowCrossNamespaceOverride: true}
	plain := over
	plain.Name, plain.AllowCrossNamespaceOverride = "plain", false
	every := over
	every.Name, every.Namespaces = "every", []string{"*"}
	for _, c := range []struct {
		name, rpc, flushNS string
		users              []string
		grants             []Grant
		want, whyHas       string
	}{
		{"granted", "m.s:50051", "a", []string{"b"}, []Grant{over}, "over", ""},
		{"granted, fully qualified", "m.s.svc.cluster.local.:50051", "b", []string{"a", "b"}, []Grant{over}, "over", ""},
		{"no grant", "m.s:50051", "a", []string{"b"}, nil, "", "sets allowCrossNamespaceOverride"},
		{"grant without the override", "m.s:50051", "a", []string{"b"}, []Grant{plain}, "", "sets allowCrossNamespaceOverride"},
		{"user outside the grant", "m.s:50051", "a", []string{"c"}, []Grant{over}, "", "namespace c"},
		{"flush outside the grant", "m.s:50051", "c", []string{"a"}, []Grant{over}, "", "namespace c"},
		{"every namespace", "m.s:50051", "x", []string{"y", "z"}, []Grant{every}, "every", ""},
		{"another store", "m2.s:50051", "a", []string{"b"}, []Grant{over}, "", "sets allowCrossNamespaceOverride"},
		{"short name is the flush's namespace", "m:50051", "s", []string{"a"}, []Grant{every}, "every", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, why := CrossNamespaceOverride(c.grants, c.rpc, c.flushNS, "", c.users)
			if got != c.want || (got == "" && !strings.Contains(why, c.whyHas)) {
				t.Errorf("CrossNamespaceOverride = %q, %q; want %q, why containing %q", got, why, c.want, c.whyHas)
			}
		})
	}
}
