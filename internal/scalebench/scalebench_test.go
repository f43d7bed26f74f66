package scalebench

import (
	"math"
	"strings"
	"testing"
	"time"
)

const scrape = `# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="hicachedeployment",result="success"} 190
controller_runtime_reconcile_total{controller="hicachedeployment",result="requeue_after"} 10
controller_runtime_reconcile_total{controller="cachebackend",result="success"} 7
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 300
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PATCH"} 500
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PATCH"} 2
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 40
weird{path="a \"quoted\" \\ value",x=""} 1.5e3 1700000000
go_memstats_heap_alloc_bytes 1.2345e+07
h_bucket{controller="hicachedeployment",le="0.005"} 10
h_bucket{controller="hicachedeployment",le="0.01"} 50
h_bucket{controller="hicachedeployment",le="0.1"} 90
h_bucket{controller="hicachedeployment",le="+Inf"} 100
h_bucket{controller="cachebackend",le="0.005"} 1000
h_bucket{controller="cachebackend",le="+Inf"} 1000
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(scrape)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("controller_runtime_reconcile_total", map[string]string{"controller": "hicachedeployment"}); got != 200 {
		t.Errorf("hicachedeployment reconciles = %v, want 200 (both results)", got)
	}
	if got := m.SumBy("rest_client_requests_total", "method", nil); got["PATCH"] != 502 || got["POST"] != 300 || got["GET"] != 40 {
		t.Errorf("requests by method = %v", got)
	}
	if got := m.Sum("go_memstats_heap_alloc_bytes", nil); got != 12345000 {
		t.Errorf("heap = %v", got)
	}
	var weird Sample
	for _, s := range m {
		if s.Name == "weird" {
			weird = s
		}
	}
	if weird.Value != 1500 || weird.Labels["path"] != `a "quoted" \ value` || weird.Labels["x"] != "" {
		t.Errorf("escaped labels and a timestamp: %+v", weird)
	}
	for _, bad := range []string{"novalue", `x{a="b} 1`, `x{a=b} 1`, "x notanumber"} {
		if _, err := ParseMetrics(bad); err == nil {
			t.Errorf("ParseMetrics(%q) = nil error, want one", bad)
		}
	}
}

func TestQuantile(t *testing.T) {
	m, err := ParseMetrics(scrape)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Histogram("h", map[string]string{"controller": "hicachedeployment"})
	if len(h) != 4 || h[0].Le != 0.005 || !math.IsInf(h[3].Le, 1) {
		t.Fatalf("buckets = %v", h)
	}
	for _, c := range []struct {
		q, want float64
	}{
		{0.05, 0.0025}, // rank 5 of the first bucket's 10, from 0
		{0.5, 0.01},    // rank 50: the top of the second bucket
		{0.3, 0.0075},  // rank 30: half-way through the second bucket
		{0.9, 0.1},     // rank 90
		{0.99, 0.1},    // in +Inf: the highest finite bound
		{0.7, 0.055},   // rank 70: half-way through 0.01..0.1
	} {
		if got := Quantile(c.q, h); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := Quantile(0.5, nil); !math.IsNaN(got) {
		t.Errorf("Quantile of no buckets = %v, want NaN", got)
	}
	// Only what was observed between two scrapes.
	before := []Bucket{{0.005, 10}, {0.01, 10}, {0.1, 10}, {math.Inf(1), 10}}
	d := Delta(before, h)
	if d[0].Count != 0 || d[3].Count != 90 {
		t.Fatalf("delta = %v", d)
	}
	if got := Quantile(0.5, d); math.Abs(got-0.02125) > 1e-9 { // rank 45: 5 past the 40 below 0.01, of 40 in 0.01..0.1
		t.Errorf("median of the delta = %v, want 0.02125", got)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(101-i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Percentile(ds, c.q); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Percentile sorted its input in place")
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
}

func TestSectionRoundTrip(t *testing.T) {
	r200 := Result{N: 200, Nodes: 2, RawSeconds: 17, OperatorSeconds: 34, Writes: 1800, WritesByVerb: map[string]float64{"PATCH": 1000, "POST": 800},
		Reconciles: 440, LagP50: 2 * time.Second, LagP99: 5 * time.Second, ReconcileP50: 3 * time.Millisecond, ReconcileP99: 40 * time.Millisecond,
		PeakRSSBytes: 100 << 20, HeapBytes: 200 * 100 << 10, RestSeconds: 60, RestReconciles: 2, LoadStart: 1.5, LoadEnd: 2.5, CPUs: 2, Date: "2026-12-01"}
	sec, err := Section([]Result{r200})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 200 | 17.0 | 34.0 | 2.00 | 11.8 | 9.00 | 2.20 | 2.0 s / 5.0 s | 3.0 ms / 40 ms | 100 MiB | 100 KiB | 0, 0.010 | 1.5 → 2.5 |",
		"PATCH 5.00, POST 4.00 per deployment"} {
		if !strings.Contains(sec, want) {
			t.Errorf("section lacks %q:\n%s", want, sec)
		}
	}
	doc := "# Benchmarks\n\nbefore\n\n" + BeginMarker + "\nold\n" + EndMarker + "\n\nafter\n"
	out, err := ReplaceSection(doc, sec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "# Benchmarks\n\nbefore\n\n") || !strings.HasSuffix(out, "\n\nafter\n") || strings.Contains(out, "old") {
		t.Errorf("replaced document:\n%s", out)
	}
	rec, err := Recorded(out)
	if err != nil || len(rec) != 1 || rec[0].N != 200 || rec[0].LagP99 != 5*time.Second {
		t.Fatalf("recorded = %+v, %v", rec, err)
	}
	// A run at another N keeps the recorded row; one at the same N replaces it.
	merged := Merge(rec, []Result{{N: 50, OperatorSeconds: 6}, {N: 200, OperatorSeconds: 30}})
	if len(merged) != 2 || merged[0].N != 50 || merged[1].OperatorSeconds != 30 {
		t.Errorf("merged = %+v", merged)
	}
	if _, err := ReplaceSection("no markers", sec); err == nil {
		t.Error("ReplaceSection of a document without the markers succeeded")
	}
}
