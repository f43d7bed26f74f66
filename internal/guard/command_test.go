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

func TestParseForward(t *testing.T) {
	cases := map[string]struct {
		in, listen, upstream, err string
	}{
		"the pod IP to loopback": {in: "10.0.0.7:30000=127.0.0.1:30000", listen: "10.0.0.7:30000", upstream: "http://127.0.0.1:30000"},
		"IPv6":                   {in: "[fd00::7]:30000=127.0.0.1:30000", listen: "[fd00::7]:30000", upstream: "http://127.0.0.1:30000"},
		"every address":          {in: ":8998=127.0.0.1:8998", listen: ":8998", upstream: "http://127.0.0.1:8998"},
		"no upstream":            {in: "10.0.0.7:30000", err: "write it LISTEN=UPSTREAM"},
		"no port":                {in: "10.0.0.7=127.0.0.1:30000", err: `"10.0.0.7" is not a host:port`},
		"no upstream host":       {in: "10.0.0.7:30000=:30000", err: `":30000" is not a host:port`},
		"a URL is no host:port":  {in: "10.0.0.7:30000=http://127.0.0.1:30000", err: "is not a host:port"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := guard.ParseForward(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Listen != tc.listen || f.Upstream.String() != tc.upstream {
				t.Errorf("got %s -> %s, want %s -> %s", f.Listen, f.Upstream, tc.listen, tc.upstream)
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
	for _, args := range [][]string{nil, {"extra"}, {"--forward", "x"}} {
		if err := guard.Command(context.Background(), args, func(string) string { return "" }, &out); err == nil {
			t.Errorf("guard %v: no error", args)
		}
	}
}
