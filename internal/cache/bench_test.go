package cache

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time this process has used (every thread: the garbage collector's work
// counts). On a machine shared with other work the wall time of an operation grows with the load
// average; its CPU time much less.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports, as cpu-ns/op, the CPU time per operation from start to the end of the
// benchmark's loop.
func reportCPU(b *testing.B, start time.Duration) {
	b.Helper()
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// benchTopologies are TP=64, PP=4 (256 ranks) topologies: a replicated
// target with an MHA sidecar draft (mixed duties) and a fully sharded hybrid.
func benchTopologies(b testing.TB) map[string]Topology {
	return map[string]Topology{
		"DeepSeekV4-EAGLE3": mk("DeepSeekV4").TP(64).PP(4).Draft(DraftEAGLE3).Obj(b),
		"Qwen3Next":         mk("Qwen3Next").TP(64).PP(4).Obj(b),
	}
}

var benchSettings = Settings{ModelPath: "deepseek-ai/DeepSeek-V4", KVCacheDType: "fp8_e4m3", SGLangVersion: "0.5.20", PageSize: 64}

func BenchmarkPlan(b *testing.B) {
	for name, topo := range benchTopologies(b) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				if _, err := Plan(topo); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, start)
		})
	}
}

func BenchmarkFingerprint(b *testing.B) {
	for name, topo := range benchTopologies(b) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ns := Namespace(Facts(topo, benchSettings)); len(ns) != len(NamespacePrefixTag)+ShortFingerprintLen {
					b.Fatal(ns)
				}
			}
		})
	}
}

func BenchmarkPlanAndFingerprint(b *testing.B) {
	for name, topo := range benchTopologies(b) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				p, err := Plan(topo)
				if err != nil {
					b.Fatal(err)
				}
				_ = p.Summary()
				_ = Namespace(Facts(topo, benchSettings))
			}
			reportCPU(b, start)
		})
	}
}

// BenchmarkPlanRender is what a reconcile makes of a plan for the deployment's ConfigMap
// (plan.json and plan.txt): "uncached" renders it, "cached" is Render of a plan rendered before
// (every reconcile after the first of a topology), "JSONAndTable" is json.MarshalIndent and
// String, what a reconcile did before Render.
func BenchmarkPlanRender(b *testing.B) {
	for name, topo := range benchTopologies(b) {
		p, err := Plan(topo)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name   string
			render func() (int, error)
		}{
			{"uncached", func() (int, error) { r, err := p.render(); return len(r.JSON) + len(r.Table), err }},
			{"cached", func() (int, error) { r, err := p.Render(); return len(r.JSON) + len(r.Table), err }},
			{"JSONAndTable", func() (int, error) { j, err := json.MarshalIndent(p, "", "  "); return len(j) + len(p.String()), err }},
		} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				start := cpuTime(b)
				size := 0
				for b.Loop() {
					if size, err = c.render(); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
				b.ReportMetric(float64(size), "bytes")
			})
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	old := Config{Topology: mk("DeepSeekV4").TP(64).PP(4).Draft(DraftNEXTN).Obj(b), Settings: benchSettings}
	next := Config{Topology: mk("DeepSeekV4").TP(64).PP(4).Draft(DraftDSPARK).Obj(b), Settings: benchSettings}
	b.ReportAllocs()
	for b.Loop() {
		if c := Classify(old, next); c.Kind != Breaking {
			b.Fatal(c)
		}
	}
}
