package resolve_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// FuzzResolveUserInput feeds what a user writes as text or numbers (the profile, the topology,
// the host pool's ratio and size, the segment size each rank lends, the page size, the KV dtype
// and the extra arguments, NUL-separated) through Resolve and ServerConfig to the command line:
// nothing panics, every refusal names the spec field a person writes, and what is accepted says
// what was written (the ratio as parsed, the global segment size as the size per rank times the
// ranks that share it).
func FuzzResolveUserInput(f *testing.F) {
	f.Add("Qwen3", int32(1), int32(1), int32(1), "2", int32(0), "1Gi", int32(64), "", "--mem-fraction-static\x000.8")
	f.Add("DeepSeekV4", int32(8), int32(2), int32(1), "", int32(40), "16Mi", int32(0), "fp8_e4m3", "")
	f.Add("Qwen3", int32(4), int32(1), int32(2), "1.0000001", int32(0), "0", int32(1), "bf16", "--kv-cache-dtype\x00fp8_e4m3")
	f.Add("nope", int32(0), int32(-1), int32(0), "NaN", int32(-3), "-1", int32(-1), "x", "--")
	f.Add("Qwen3", int32(1), int32(1), int32(1), "1e308", int32(1), "8Ei", int32(64), "", "--dtype=half")
	f.Add("Qwen3", int32(2), int32(1), int32(1), "Inf", int32(0), "15Mi", int32(64), "", "")
	f.Fuzz(func(t *testing.T, profile string, tp, pp, dp int32, ratio string, sizeGB int32, segment string, pageSize int32, kvDType, extra string) {
		b := makeHCD("fuzz").Profile(profile).TP(tp).PP(pp).DP(dp).Ratio(ratio).PageSize(pageSize).KVDType(kvDType).Storage("mc")
		if extra != "" {
			b = b.ExtraArgs(strings.Split(extra, "\x00")...)
		}
		h := b.Obj()
		h.Spec.HiCache.SizeGB = sizeGB
		if q, err := resource.ParseQuantity(segment); err == nil {
			h.Spec.Storage.GlobalSegmentSize = ptr.To(q)
		}
		r, err := resolve.Resolve(h)
		if err != nil {
			requireFieldNamed(t, err)
			return
		}
		if ratio != "" {
			want, perr := strconv.ParseFloat(ratio, 64)
			if perr != nil || math.IsNaN(want) || want <= 1 || r.Settings.HiCacheRatio != want {
				t.Fatalf("spec.hicache.ratio %q was accepted as %v", ratio, r.Settings.HiCacheRatio)
			}
		}
		if q := h.Spec.Storage.GlobalSegmentSize; q != nil {
			per := q.Value()
			if r.SegmentPerRank != per {
				t.Fatalf("spec.storage.globalSegmentSize %s gave %d bytes per rank", q, r.SegmentPerRank)
			}
			if want, err := sglang.GlobalSegmentSize(per, r.Plan.AttentionTP, r.Plan.PipelineParallel); err != nil || r.GlobalSegmentSize != want {
				t.Fatalf("spec.storage.globalSegmentSize %s at attention-TP %d × PP %d gave a global segment of %d bytes (%v)", q, r.Plan.AttentionTP, r.Plan.PipelineParallel, r.GlobalSegmentSize, err)
			}
		}
		var addr string
		if r.Nodes > 1 {
			addr = "leader.default.svc:20102"
		}
		cfg, _, err := resolve.ServerConfig(h, r, testBackend(), addr)
		if err != nil {
			requireFieldNamed(t, err)
			return
		}
		if _, err := sglang.Args(cfg); err != nil {
			requireFieldNamed(t, resolve.SpecError(err))
		}
	})
}

// requireFieldNamed fails unless err's message starts with a field a user writes.
func requireFieldNamed(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, "spec.") && !strings.HasPrefix(msg, "metadata.") {
		t.Fatalf("the refusal %q does not start with the field it is about", msg)
	}
}
