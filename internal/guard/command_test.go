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

// The proxy reads the keys from the variables the rank container gets them in.
func TestKeyEnvIsTheRankContainers(t *testing.T) {
	if !slices.Equal(guard.KeyEnv, []string{resolve.AdminAPIKeyEnv, resolve.APIKeyEnv}) {
		t.Errorf("KeyEnv %v, the rank container's %s and %s", guard.KeyEnv, resolve.AdminAPIKeyEnv, resolve.APIKeyEnv)
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
			if name == resolve.AdminAPIKeyEnv {
				return key
			}
			return ""
		}
		err := guard.Command(context.Background(), []string{"--listen-host", "127.0.0.2", "--port", "1"}, env, &out)
		if err == nil || !strings.Contains(err.Error(), "$"+resolve.AdminAPIKeyEnv) || strings.Contains(err.Error(), key) {
			t.Errorf("key %q: %v, want a refusal naming the variable, not the key", key, err)
		}
	}
}
