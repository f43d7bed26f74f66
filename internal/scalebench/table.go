package scalebench

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Result is what one run of the scale benchmark measured at one N.
type Result struct {
	// N deployments, each one serving group of Nodes rank pods.
	N     int `json:"n"`
	Nodes int `json:"nodesPerDeployment"`
	// Date and Commit say when and on what the run was made.
	Date   string `json:"date"`
	Commit string `json:"commit,omitempty"`
	// Flags are the manager's flags that differ from a default install's.
	Flags string `json:"flags,omitempty"`
	// RawSeconds and OperatorSeconds are from the first create to every deployment Ready.
	RawSeconds      float64 `json:"rawSeconds"`
	OperatorSeconds float64 `json:"operatorSeconds"`
	// Writes are the manager's mutating requests (POST, PATCH, DELETE) while the deployments
	// converged; LeaseWrites its PUTs (leader election's renewals, nothing else is updated).
	Writes       float64            `json:"writes"`
	WritesByVerb map[string]float64 `json:"writesByVerb,omitempty"`
	LeaseWrites  float64            `json:"leaseWrites"`
	// Throttled are the manager's requests the API server answered 429 (priority and fairness
	// turning it away) while the deployments converged.
	Throttled float64 `json:"throttled"`
	// Reconciles of the HiCacheDeployment controller while they converged.
	Reconciles float64 `json:"reconciles"`
	// LagP50 and LagP99: from a group's pods all Ready to its deployment showing Ready.
	LagP50 time.Duration `json:"lagP50"`
	LagP99 time.Duration `json:"lagP99"`
	// ReconcileP50 and ReconcileP99 of the HiCacheDeployment controller, from its histogram.
	ReconcileP50 time.Duration `json:"reconcileP50"`
	ReconcileP99 time.Duration `json:"reconcileP99"`
	// PeakRSSBytes is the manager's VmHWM; HeapBytes its heap in use after a GC, at rest.
	PeakRSSBytes float64 `json:"peakRSSBytes"`
	HeapBytes    float64 `json:"heapBytes"`
	// HeapIdleBytes is the heap after a GC before any deployment existed: what N does not change.
	HeapIdleBytes float64 `json:"heapIdleBytes"`
	// RestSeconds long after every deployment was Ready: the manager's writes (but the lease's)
	// and the HiCacheDeployment controller's reconciles.
	RestSeconds    float64 `json:"restSeconds"`
	RestWrites     float64 `json:"restWrites"`
	RestReconciles float64 `json:"restReconciles"`
	// Load is the 1-minute load average when the operator phase started and when it ended.
	LoadStart float64 `json:"loadStart"`
	LoadEnd   float64 `json:"loadEnd"`
	CPUs      int     `json:"cpus"`
}

func (r Result) per(v float64) float64 { return v / float64(r.N) }

// Targets are the goals at N = 1,000 (issue "At 1,000 deployments").
var Targets = []string{
	"operator/raw ≤ 1.3",
	"Ready-report lag p99 ≤ 2 s",
	"≤ 6 writes and ≤ 1.5 reconciles per deployment",
	"0 writes and ≤ 0.05 reconciles per deployment at rest",
	"heap ≤ 96 KiB per deployment",
}

// Markers delimit the generated section of docs/benchmarks.md.
const (
	BeginMarker = "<!-- bench-scale:begin (make bench-scale writes this section) -->"
	EndMarker   = "<!-- bench-scale:end -->"
	dataPrefix  = "<!-- bench-scale:data "
	dataSuffix  = " -->"
)

// Merge puts the results of a run in place of the recorded ones of the same N.
func Merge(recorded, run []Result) []Result {
	byN := map[int]Result{}
	for _, r := range recorded {
		byN[r.N] = r
	}
	for _, r := range run {
		byN[r.N] = r
	}
	out := make([]Result, 0, len(byN))
	for _, r := range byN {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N < out[j].N })
	return out
}

// Section renders the generated section: the table, the notes, and the results as data for the
// next run to merge with.
func Section(results []Result) (string, error) {
	var b strings.Builder
	b.WriteString(BeginMarker + "\n")
	b.WriteString("| N | raw s | operator s | operator / raw | pods Ready/s | writes / deployment | reconciles / deployment | Ready lag p50 / p99 | reconcile p50 / p99 | peak RSS | heap / deployment | at rest (60 s): writes, reconciles / deployment | load avg (start → end) |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %.1f | %.1f | %.2f | %.1f | %.2f | %.2f | %s / %s | %s / %s | %.0f MiB | %.0f KiB | %s, %.3f | %.1f → %.1f |\n",
			r.N, r.RawSeconds, r.OperatorSeconds, ratio(r.OperatorSeconds, r.RawSeconds),
			float64(r.N*r.Nodes)/r.OperatorSeconds, r.per(r.Writes), r.per(r.Reconciles),
			seconds(r.LagP50), seconds(r.LagP99), millis(r.ReconcileP50), millis(r.ReconcileP99),
			r.PeakRSSBytes/(1<<20), r.per(r.HeapBytes)/1024, trim(r.per(r.RestWrites)), r.per(r.RestReconciles),
			r.LoadStart, r.LoadEnd)
	}
	b.WriteString("\n")
	for _, r := range results {
		fmt.Fprintf(&b, "- N = %d: run %s", r.N, r.Date)
		if r.Commit != "" {
			fmt.Fprintf(&b, " at %s", r.Commit)
		}
		fmt.Fprintf(&b, " on %d CPUs; writes by verb %s; %.0f lease renewals (PUT) besides; %.0f requests answered 429; heap %.1f MiB with no deployment, so %.0f KiB per deployment above it",
			r.CPUs, verbs(r), r.LeaseWrites, r.Throttled, r.HeapIdleBytes/(1<<20), r.per(r.HeapBytes-r.HeapIdleBytes)/1024)
		if r.Flags != "" {
			fmt.Fprintf(&b, "; manager flags beyond a default install: `%s`", r.Flags)
		}
		b.WriteString(".\n")
	}
	data, err := json.Marshal(results)
	if err != nil {
		return "", err
	}
	b.WriteString("\n" + dataPrefix + string(data) + dataSuffix + "\n")
	b.WriteString(EndMarker)
	return b.String(), nil
}

// Recorded reads the results kept in a document's generated section (none without one).
func Recorded(doc string) ([]Result, error) {
	i := strings.Index(doc, dataPrefix)
	if i < 0 {
		return nil, nil
	}
	rest := doc[i+len(dataPrefix):]
	j := strings.Index(rest, dataSuffix)
	if j < 0 {
		return nil, fmt.Errorf("the recorded results have no end (%q)", dataSuffix)
	}
	var out []Result
	if err := json.Unmarshal([]byte(rest[:j]), &out); err != nil {
		return nil, fmt.Errorf("reading the recorded results: %w", err)
	}
	return out, nil
}

// ReplaceSection puts section in place of the one between the markers of doc.
func ReplaceSection(doc, section string) (string, error) {
	i := strings.Index(doc, BeginMarker)
	j := strings.Index(doc, EndMarker)
	if i < 0 || j < i {
		return "", fmt.Errorf("the document has no section between %q and %q", BeginMarker, EndMarker)
	}
	return doc[:i] + section + doc[j+len(EndMarker):], nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func millis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 10 {
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

func trim(v float64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%.3f", v)
}

func verbs(r Result) string {
	keys := make([]string, 0, len(r.WritesByVerb))
	for k := range r.WritesByVerb {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, r.per(r.WritesByVerb[k])))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ") + " per deployment"
}
