package store

import "testing"

func TestID(t *testing.T) {
	const svc = "mooncake-master.team-a.svc.cluster.local:50051"
	cases := map[string]struct {
		address, namespace, domain string
		want                       string
	}{
		"a Service name alone, relative to the backend's namespace": {address: "mooncake-master:50051", namespace: "team-a", want: svc},
		"service.namespace":                  {address: "mooncake-master.team-a:50051", namespace: "team-b", want: svc},
		"service.namespace.svc":              {address: "mooncake-master.team-a.svc:50051", namespace: "team-b", want: svc},
		"the fully qualified name":           {address: "mooncake-master.team-a.svc.cluster.local:50051", namespace: "x", want: svc},
		"a trailing dot":                     {address: "mooncake-master.team-a.svc.cluster.local.:50051", namespace: "x", want: svc},
		"upper case":                         {address: "Mooncake-Master.TEAM-A.svc:50051", namespace: "x", want: svc},
		"no port: the master's default":      {address: "mooncake-master.team-a.svc", namespace: "x", want: svc},
		"the same name in another namespace": {address: "mooncake-master:50051", namespace: "team-b", want: "mooncake-master.team-b.svc.cluster.local:50051"},
		"another cluster domain":             {address: "m.ns.svc:1", namespace: "x", domain: "corp.example.", want: "m.ns.svc.corp.example:1"},
		"a name under the domain is kept":    {address: "m.ns.svc.corp.example:1", namespace: "x", domain: "corp.example", want: "m.ns.svc.corp.example:1"},
		"an external name":                   {address: "Master.Example.COM:50051", namespace: "x", want: "master.example.com:50051"},
		"IPv4":                               {address: "10.0.0.7:50051", namespace: "x", want: "10.0.0.7:50051"},
		"IPv4 without a port":                {address: "10.0.0.7", namespace: "x", want: "10.0.0.7:50051"},
		"IPv4-mapped IPv6 is IPv4":           {address: "[::ffff:10.0.0.7]:50051", namespace: "x", want: "10.0.0.7:50051"},
		"IPv6 compressed, lower case":        {address: "[2001:DB8:0:0:0:0:0:1]:7000", namespace: "x", want: "[2001:db8::1]:7000"},
		"IPv6 without a port":                {address: "2001:db8::1", namespace: "x", want: "[2001:db8::1]:50051"},
		"bracketed IPv6 without a port":      {address: "[2001:db8::1]", namespace: "x", want: "[2001:db8::1]:50051"},
		"localhost is the loopback address":  {address: "localhost:1234", namespace: "x", want: "127.0.0.1:1234"},
		"the loopback address":               {address: "127.0.0.1:1234", namespace: "x", want: "127.0.0.1:1234"},
		"a port with leading zeros":          {address: "10.0.0.7:050051", namespace: "x", want: "10.0.0.7:50051"},
		"surrounding space":                  {address: " 10.0.0.7:1 ", namespace: "x", want: "10.0.0.7:1"},
		"empty":                              {address: "", namespace: "x", want: ""},
		"etcd: endpoints sorted, normal form": {address: "etcd://E2.ns:2379;e1:2379", namespace: "team-a",
			want: "etcd://e1.team-a.svc.cluster.local:2379,e2.ns.svc.cluster.local:2379"},
		"etcd: either separator, duplicates dropped": {address: "ETCD://10.0.0.2:2379,10.0.0.1;10.0.0.2:2379", namespace: "x",
			want: "etcd://10.0.0.1:2379,10.0.0.2:2379"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ID(c.address, c.namespace, c.domain); got != c.want {
				t.Errorf("ID(%q, %q, %q) = %q, want %q", c.address, c.namespace, c.domain, got, c.want)
			}
		})
	}
}

// Spellings of one store give one ID; different stores never do.
func TestIDSameAndDifferent(t *testing.T) {
	same := [][2]string{ // address, namespace of the backend
		{"mooncake-master:50051", "serving"},
		{"mooncake-master.serving:50051", "team-b"},
		{"MOONCAKE-MASTER.serving.svc.:50051", "default"},
		{"mooncake-master.serving.svc.cluster.local", "kube-system"},
	}
	want := ID(same[0][0], same[0][1], "")
	for _, s := range same[1:] {
		if got := ID(s[0], s[1], ""); got != want {
			t.Errorf("%q in %s is %q, want the same store as %q in %s (%q)", s[0], s[1], got, same[0][0], same[0][1], want)
		}
	}
	different := [][2]string{
		{"mooncake-master:50052", "serving"},
		{"mooncake-master:50051", "team-b"},
		{"other-master.serving:50051", "serving"},
		{"10.0.0.7:50051", "serving"},
	}
	for _, d := range different {
		if got := ID(d[0], d[1], ""); got == want {
			t.Errorf("%q in %s is the same store as %q in %s (%q)", d[0], d[1], same[0][0], same[0][1], got)
		}
	}
}

func TestWithCluster(t *testing.T) {
	cases := map[string]struct{ id, cluster, want string }{
		"an etcd store and its cluster": {"etcd://e:2379", "ns.mc", "etcd://e:2379#ns.mc"},
		"the default cluster id":        {"etcd://e:2379", "", "etcd://e:2379#mooncake_cluster"},
		"a plain master has no cluster": {"m.ns.svc.cluster.local:50051", "ns.mc", "m.ns.svc.cluster.local:50051"},
		"empty":                         {"", "x", ""},
	}
	for name, tc := range cases {
		if got := WithCluster(tc.id, tc.cluster); got != tc.want {
			t.Errorf("%s: WithCluster(%q, %q) = %q, want %q", name, tc.id, tc.cluster, got, tc.want)
		}
	}
	if ID("etcd://a:1", "x", "") == ID("a:1", "x", "") {
		t.Error("an etcd:// address and a master's address must not be one store")
	}
}
