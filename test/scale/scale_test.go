package scale

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/scalebench"
)

// TestScaleSmoke runs the benchmark's harness at N = 5: both runs converge, the raw run creates
// exactly the objects the operator applies, and every figure is read from the manager.
func TestScaleSmoke(t *testing.T) {
	res := run(t, config{n: 5, rest: 5 * time.Second, managerBin: buildManager(t), progress: os.Stderr, audit: true})
	if t.Failed() {
		return
	}
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{"the raw run took time", res.RawSeconds > 0},
		{"the operator run took time", res.OperatorSeconds > 0},
		{"the manager wrote (children, status)", res.Writes >= float64(res.N)},
		{"the manager reconciled each deployment at least twice (create, then Ready)", res.Reconciles >= 2*float64(res.N)},
		{"a reconcile time was read", res.ReconcileP99 > 0},
		{"the heap was read", res.HeapBytes > 0},
		{"the peak RSS was read", res.PeakRSSBytes > res.HeapBytes/2},
	} {
		if !c.ok {
			t.Errorf("%s: no, in %+v", c.what, res)
		}
	}
}

// BenchmarkScale measures N = 50, 200, 1000 (BENCH_N="50,200" to choose) and writes the table into
// docs/benchmarks.md (BENCH_WRITE=0 not to). BENCH_REST is the time at rest (60s);
// BENCH_MANAGER_FLAGS adds manager flags (recorded beside the figures); BENCH_MANAGER_BIN runs
// another binary than one built from this tree; BENCH_PROFILE_DIR receives the manager's heap
// profile at rest and a CPU profile of the first 30 s of each N; BENCH_AUDIT=1 logs the manager's
// writes, and all its requests, by resource and verb from the API server's audit log. Run it with make bench-scale.
func BenchmarkScale(b *testing.B) {
	ns := []int{50, 200, 1000}
	if v := os.Getenv("BENCH_N"); v != "" {
		ns = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("BENCH_N=%q: give positive numbers separated by commas", v)
			}
			ns = append(ns, n)
		}
	}
	rest := time.Minute
	if v := os.Getenv("BENCH_REST"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("BENCH_REST=%q: %v", v, err)
		}
		rest = d
	}
	bin := buildManager(b)
	flags := strings.Fields(os.Getenv("BENCH_MANAGER_FLAGS"))
	profiles := os.Getenv("BENCH_PROFILE_DIR")
	if profiles != "" {
		if err := os.MkdirAll(profiles, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	var results []scalebench.Result
	for i := 0; i < b.N; i++ {
		results = results[:0]
		for _, n := range ns {
			r := run(b, config{n: n, rest: rest, managerBin: bin, managerFlags: flags, progress: os.Stderr,
				profileDir: profiles, cpuProfile: 30 * time.Second, audit: os.Getenv("BENCH_AUDIT") == "1"})
			results = append(results, r)
			if row, err := json.Marshal(r); err == nil {
				fmt.Fprintf(os.Stderr, "result: %s\n", row)
			}
			b.ReportMetric(r.OperatorSeconds/r.RawSeconds, "operator/raw@"+strconv.Itoa(n))
		}
	}
	if os.Getenv("BENCH_WRITE") == "0" {
		return
	}
	path := filepath.Join(repoRoot(), "docs", "benchmarks.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	recorded, err := scalebench.Recorded(string(doc))
	if err != nil {
		b.Fatal(err)
	}
	section, err := scalebench.Section(scalebench.Merge(recorded, results))
	if err != nil {
		b.Fatal(err)
	}
	out, err := scalebench.ReplaceSection(string(doc), section)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote the table into %s", path)
}
