package resolve_test

import (
	"errors"
	"strings"
	"testing"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// Resolve also serves the kubectl plugin, which plans files without the API server's CEL rules,
// so it must refuse what the server would.
func TestSettingsRefuseRatiosThatAreNotNumbers(t *testing.T) {
	for _, ratio := range []string{"NaN", "Inf", "+Inf", "infinity"} {
		t.Run(ratio, func(t *testing.T) {
			h := makeHCD("a").Ratio(ratio).Obj()
			s, err := resolve.Settings(&h.Spec)
			var fe *resolve.FieldError
			if !errors.As(err, &fe) || fe.Field != "spec.hicache.ratio" {
				t.Errorf("Settings accepted ratio %q as %v; want a FieldError on spec.hicache.ratio as the API pattern ^[0-9]+(\\.[0-9]+)?$ does", ratio, s.HiCacheRatio)
			}
		})
	}
}

// With DP attention dataParallel does not multiply the GPUs, so the message must not say it does.
func TestPartNodeMessageWithDPAttentionShowsTheRealProduct(t *testing.T) {
	_, err := resolve.Resolve(makeHCD("a").TP(16).DP(2).DPAttention().GPUsPerNode(6).Obj())
	if err == nil {
		t.Fatal("16 GPUs on 6-GPU nodes resolved")
	}
	if strings.Contains(err.Error(), "x dataParallel 2") {
		t.Errorf("message %q multiplies by dataParallel, which DP attention does not do (16 x 1 x 2 is not 16)", err.Error())
	}
}

// A sidecar draft on a model without a profile (spec.topology.attention and pools) is
// impossible to write: the API has no field for the draft's pools, and the error names fields
// (topology.draft.placement, topology.draft.pools) the API does not have.
func TestSidecarDraftWithoutProfile(t *testing.T) {
	h := makeHCD("a").Profile("").TP(4).Draft("EAGLE3").Packed(0).Obj()
	h.Spec.Topology.Attention = hicachev1alpha1.AttentionMHA
	h.Spec.Topology.Pools = []hicachev1alpha1.PoolName{"kv"}
	h.Spec.Topology.Draft.HostPool = "MHA"
	if _, err := resolve.Resolve(h); err != nil {
		t.Errorf("an explicit MHA model with a sidecar EAGLE3 draft (packedLayers 0, hostPool MHA) does not resolve: %v", err)
	}
}

// packedLayers: 0 is documented as "the draft keeps its own pools"; on a profile whose layout for
// the algorithm is packed it must give a sidecar draft, not an error about fields the API lacks.
func TestPackedLayersZeroMakesASidecar(t *testing.T) {
	h := makeHCD("a").Profile("DeepSeekV3").TP(8).Draft("NEXTN").Packed(0).Obj()
	h.Spec.Topology.Draft.HostPool = "MHA"
	_, err := resolve.Resolve(h)
	if err != nil && (strings.Contains(err.Error(), "topology.draft.pools") || strings.Contains(err.Error(), "hostPoolKind")) {
		t.Errorf("error names fields the API does not have: %v", err)
	}
}

// The Fixed strategy without a namespace writes bare keys shared by every deployment on the
// store; CEL refuses it, the plugin path does not.
func TestFixedWithoutNamespaceIsRefused(t *testing.T) {
	h := makeHCD("a").Storage("mc").Obj()
	h.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	r, err := resolve.Resolve(h)
	if err == nil {
		t.Errorf("Fixed strategy without spec.storage.namespace resolved to namespace %q; want a FieldError on spec.storage.namespace", r.Namespace)
	}
}
