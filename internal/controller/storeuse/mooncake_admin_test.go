package storeuse

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

// A probe of an admin endpoint that answers like no master does (garbage, silence, a drip, an
// answer without end, a compressed bomb, a redirect loop) fails within the probe's deadline, with
// the operator's own HTTP client, and the memory it allocates is bounded by the answer bounds of
// the admin client, not by what the endpoint sends: an endless answer is endless on loopback.
func TestProbeOfAHostileEndpointIsBoundedInTimeAndMemory(t *testing.T) {
	const deadline = time.Second
	// What a probe may allocate: twice the largest bound of an answer it reads (a /metrics page)
	// and 1 MiB more for the client and the parser.
	const maxAlloc = 2*16<<20 + 1<<20
	admin := mooncakeAdmin{HTTP: NewAdminHTTPClient()}
	for _, mode := range mooncaketest.HostileModes {
		t.Run(string(mode), func(t *testing.T) {
			h := mooncaketest.StartHostile(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := admin.Probe(ctx, h.URL)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			h.Close()

			if err == nil {
				t.Fatal("the probe succeeded")
			}
			requireProbeError(t, mode, err)
			t.Logf("%s: %v after %v, %d KiB allocated", mode, err, took.Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>10)
			if took > deadline+500*time.Millisecond {
				t.Errorf("the probe took %v with a deadline of %v", took, deadline)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > maxAlloc {
				t.Errorf("the probe allocated %d MiB; want at most %d MiB", alloc>>20, maxAlloc>>20)
			}
			for _, r := range h.Requests() {
				if strings.Contains(r.Query, "loop=") {
					t.Errorf("the client followed a redirect to %s?%s", r.Path, r.Query)
				}
				if r.Took > deadline+500*time.Millisecond {
					t.Errorf("the endpoint answered %s for %v before the client left", r.Path, r.Took)
				}
			}
		})
	}
}

// requireProbeError checks that the error is the admin client's kind for what the endpoint did.
func requireProbeError(t *testing.T, mode mooncaketest.HostileMode, err error) {
	t.Helper()
	var (
		ue *mooncake.UnreachableError
		pe *mooncake.ProtocolError
		he *mooncake.HTTPError
	)
	switch mode {
	case mooncaketest.HostileSilent, mooncaketest.HostileDripHeaders, mooncaketest.HostileDripBody:
		if !errors.As(err, &ue) || !ue.Timeout {
			t.Errorf("%v (%T): want an *UnreachableError that timed out", err, err)
		}
	case mooncaketest.HostileHugeBody, mooncaketest.HostileHugeMetrics, mooncaketest.HostileGzipBomb:
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("%v (%T): want a *ProtocolError about the answer's size", err, err)
		}
	case mooncaketest.HostileRedirectLoop:
		if !errors.As(err, &he) || he.StatusCode != 302 {
			t.Errorf("%v (%T): want an *HTTPError with status 302", err, err)
		}
	default: // not HTTP, headers over the client's bound
		if !errors.As(err, &ue) {
			t.Errorf("%v (%T): want an *UnreachableError", err, err)
		}
	}
}
