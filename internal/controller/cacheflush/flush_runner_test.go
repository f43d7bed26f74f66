package cacheflush

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

// A hung master (SIGSTOP: the kernel still accepts connections, nothing answers) held the local
// runner for as long as flush.py's own timeout allowed. The run ends at the attempt's deadline,
// and the script's whole process group — the Mooncake client runs in a forked child — goes.
func TestLocalFlusherStopsAtItsDeadline(t *testing.T) {
	m := mooncaketest.Start(t)
	m.Freeze()
	defer m.Thaw()
	f := LocalFlusher{Python: mooncaketest.Python(t)}
	req := storeuse.NamespaceFlushRequest{
		Flush: testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), Prefix: "hc-0123456789_", Force: true, Attempt: 1,
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: m.RPCAddr}, Deadline: 4 * time.Second,
	}
	start := time.Now()
	_, done, err := f.FlushNamespace(context.Background(), req)
	took := time.Since(start)
	if !done || err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("done %v, err %v; want the run ended by its deadline", done, err)
	}
	if took > 4*time.Second+3*time.Second {
		t.Errorf("the run took %s, its deadline is 4s", took.Round(100*time.Millisecond))
	}
	if left := processesNaming(t, m.RPCAddr); len(left) > 0 {
		t.Errorf("processes of the flush script outlive it: %v", left)
	}
}

// processesNaming lists the processes whose command line contains s.
func processesNaming(t *testing.T, s string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, s) && strings.Contains(cmd, "flush.py") {
			out = append(out, filepath.Base(filepath.Dir(d))+": "+cmd)
		}
	}
	return out
}
