package guard_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hicache-io/hicache-operator/internal/guard"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

func TestForwards(t *testing.T) {
	cases := map[string]struct {
		listen, upstream string
		ports            []int
		want             []string
		err              string
	}{
		"the HTTP port":            {listen: "10.0.0.7", upstream: "127.0.0.1", ports: []int{30000}, want: []string{"10.0.0.7:30000 -> http://127.0.0.1:30000"}},
		"and a bootstrap port":     {listen: "10.0.0.7", upstream: "127.0.0.1", ports: []int{30000, 8998}, want: []string{"10.0.0.7:30000 -> http://127.0.0.1:30000", "10.0.0.7:8998 -> http://127.0.0.1:8998"}},
		"an IPv6 pod IP":           {listen: "fd00::7", upstream: "127.0.0.1", ports: []int{30000}, want: []string{"[fd00::7]:30000 -> http://127.0.0.1:30000"}},
		"no pod IP (unset POD_IP)": {upstream: "127.0.0.1", ports: []int{30000}, err: "--listen-host and --upstream-host are both needed"},
		"no port":                  {listen: "10.0.0.7", upstream: "127.0.0.1", err: "at least one --port"},
		"a port out of range":      {listen: "10.0.0.7", upstream: "127.0.0.1", ports: []int{70000}, err: "between 1 and 65535"},
		"a port twice":             {listen: "10.0.0.7", upstream: "127.0.0.1", ports: []int{30000, 30000}, err: "given twice"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fs, err := guard.Forwards(tc.listen, tc.upstream, tc.ports)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range fs {
				got = append(got, f.Listen+" -> "+f.Upstream.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// The proxy reads each client key with the server key that stands for it, from the variables
// the operator renders.
func TestKeyEnvIsTheRankContainers(t *testing.T) {
	want := []struct{ Client, Server string }{{resolve.AdminAPIKeyEnv, resolve.ServerAdminKeyEnv}, {resolve.APIKeyEnv, resolve.ServerAPIKeyEnv}}
	if !slices.Equal(guard.KeyEnv, want) {
		t.Errorf("KeyEnv %v, want %v", guard.KeyEnv, want)
	}
}

// A client key goes with a server key, and the two differ: a server holding a client's key
// would be opened by a key read from its log.
func TestKeyPairs(t *testing.T) {
	const c, s, c2, s2 = "client-key-0123456789abcdefghijklmnopq", "server-key-0123456789abcdefghijklmnopq", "client-api-0123456789abcdefghijklmnopq", "server-api-0123456789abcdefghijklmnopq"
	for name, tc := range map[string]struct {
		env  map[string]string
		want []guard.KeyPair
		err  string
	}{
		"none":                  {env: map[string]string{}},
		"admin":                 {env: map[string]string{resolve.AdminAPIKeyEnv: c, resolve.ServerAdminKeyEnv: s}, want: []guard.KeyPair{{Client: c, Server: s}}},
		"both":                  {env: map[string]string{resolve.AdminAPIKeyEnv: c, resolve.ServerAdminKeyEnv: s, resolve.APIKeyEnv: c2, resolve.ServerAPIKeyEnv: s2}, want: []guard.KeyPair{{Client: c, Server: s}, {Client: c2, Server: s2}}},
		"client without server": {env: map[string]string{resolve.AdminAPIKeyEnv: c}, err: "go together"},
		"server without client": {env: map[string]string{resolve.ServerAPIKeyEnv: s}, err: "go together"},
		"the same key":          {env: map[string]string{resolve.AdminAPIKeyEnv: c, resolve.ServerAdminKeyEnv: c}, err: "the same key"},
		"a short server key":    {env: map[string]string{resolve.AdminAPIKeyEnv: c, resolve.ServerAdminKeyEnv: "short"}, err: "$" + resolve.ServerAdminKeyEnv},
	} {
		got, err := guard.KeyPairs(func(n string) string { return tc.env[n] })
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), c) || strings.Contains(err.Error(), s) {
				t.Errorf("%s: %v, want an error with %q that quotes no key", name, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", name, got, err, tc.want)
		}
	}
}

func TestCommandNeedsAForward(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{nil, {"--listen-host", "127.0.0.2"}, {"--listen-host", "127.0.0.2", "--port", "x"}, {"--listen-host", "127.0.0.2", "--port", "1", "extra"}} {
		if err := guard.Command(context.Background(), args, func(string) string { return "" }, &out); err == nil {
			t.Errorf("guard %v: no error", args)
		}
	}
}

// A key the proxy could not find in every spelling of it is refused before anything listens.
func TestCommandRefusesAnUnsafeKey(t *testing.T) {
	for _, key := range []string{"short-key-zq", "a key with spaces and thirty-two bytes", "0123456789abcdef0123456789abcdef\n"} {
		var out bytes.Buffer
		env := func(name string) string {
			switch name {
			case resolve.AdminAPIKeyEnv:
				return key
			case resolve.ServerAdminKeyEnv:
				return "server-key-0123456789abcdefghijklmnopq"
			}
			return ""
		}
		err := guard.Command(context.Background(), []string{"--listen-host", "127.0.0.2", "--port", "1"}, env, &out)
		if err == nil || !strings.Contains(err.Error(), "$"+resolve.AdminAPIKeyEnv) || strings.Contains(err.Error(), key) {
			t.Errorf("key %q: %v, want a refusal naming the variable, not the key", key, err)
		}
	}
}
