package cache

import "testing"

// benchTopologies are TP=64, PP=4 (256 ranks) topologies: a replicated
// target with an MHA sidecar draft (mixed duties) and a fully sharded hybrid.
func benchTopologies(b *testing.B) map[string]Topology {
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
			for b.Loop() {
				if _, err := Plan(topo); err != nil {
					b.Fatal(err)
				}
			}
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
			for b.Loop() {
				p, err := Plan(topo)
				if err != nil {
					b.Fatal(err)
				}
				_ = p.Summary()
				_ = Namespace(Facts(topo, benchSettings))
			}
		})
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
