package resolve_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// hcdBuilder builds test HiCacheDeployments fluently, with the values the API server defaults
// already filled in: makeHCD("n").TP(8).Profile("DeepSeekV4").Draft("DSPARK").Obj().
type hcdBuilder struct {
	h hicachev1alpha1.HiCacheDeployment
}

func makeHCD(name string) *hcdBuilder {
	b := &hcdBuilder{}
	b.h.Name, b.h.Namespace = name, "default"
	b.h.Spec.Model.Path = "org/" + name
	b.h.Spec.Profile = "Qwen3"
	b.h.Spec.Topology = hicachev1alpha1.TopologySpec{TensorParallel: 1, PipelineParallel: 1, DataParallel: 1, GPUsPerNode: 8}
	b.h.Spec.Replicas = ptr.To(int32(1))
	b.h.Spec.Rollout.MaxUnavailable = 1
	return b
}

func (b *hcdBuilder) Profile(p string) *hcdBuilder {
	b.h.Spec.Profile = hicachev1alpha1.Profile(p)
	return b
}
func (b *hcdBuilder) TP(n int32) *hcdBuilder { b.h.Spec.Topology.TensorParallel = n; return b }
func (b *hcdBuilder) PP(n int32) *hcdBuilder { b.h.Spec.Topology.PipelineParallel = n; return b }
func (b *hcdBuilder) DP(n int32) *hcdBuilder { b.h.Spec.Topology.DataParallel = n; return b }
func (b *hcdBuilder) DPAttention() *hcdBuilder {
	b.h.Spec.Topology.DPAttention = true
	return b
}
func (b *hcdBuilder) GPUsPerNode(n int32) *hcdBuilder { b.h.Spec.Topology.GPUsPerNode = n; return b }
func (b *hcdBuilder) Replicas(n int32) *hcdBuilder    { b.h.Spec.Replicas = ptr.To(n); return b }
func (b *hcdBuilder) Served(name string) *hcdBuilder  { b.h.Spec.Model.ServedName = name; return b }
func (b *hcdBuilder) Image(img string) *hcdBuilder    { b.h.Spec.SGLang.Image = img; return b }
func (b *hcdBuilder) Ratio(r string) *hcdBuilder      { b.h.Spec.HiCache.Ratio = r; return b }
func (b *hcdBuilder) KVDType(d string) *hcdBuilder {
	b.h.Spec.HiCache.KVCacheDType = hicachev1alpha1.KVCacheDType(d)
	return b
}

// Draft sets a speculative algorithm with a draft checkpoint (NGRAM gets none).
func (b *hcdBuilder) Draft(alg string) *hcdBuilder {
	d := &hicachev1alpha1.DraftSpec{Algorithm: hicachev1alpha1.DraftAlgorithm(alg)}
	if alg != "NGRAM" {
		d.ModelPath = "org/" + strings.ToLower(alg) + "-draft"
	}
	b.h.Spec.Topology.Draft = d
	return b
}

// Packed overrides the profile's packed layer count (0: the draft keeps its own pools).
func (b *hcdBuilder) Packed(n int32) *hcdBuilder {
	b.h.Spec.Topology.Draft.PackedLayers = ptr.To(n)
	return b
}

// Storage writes to a CacheBackend with the LayoutHash strategy.
func (b *hcdBuilder) Storage(backend string) *hcdBuilder {
	b.h.Spec.Storage = &hicachev1alpha1.StorageSpec{
		BackendRef:        hicachev1alpha1.LocalObjectReference{Name: backend},
		NamespaceStrategy: hicachev1alpha1.NamespaceLayoutHash,
		FlushPolicy:       hicachev1alpha1.FlushAuto,
		Protocol:          "tcp",
	}
	return b
}

// Fixed switches the storage to the Fixed strategy under namespace ns.
func (b *hcdBuilder) Fixed(ns string) *hcdBuilder {
	b.h.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	b.h.Spec.Storage.Namespace = ns
	return b
}

func (b *hcdBuilder) Protocol(p string) *hcdBuilder {
	b.h.Spec.Storage.Protocol = hicachev1alpha1.TransferProtocol(p)
	return b
}

func (b *hcdBuilder) Segment(q string) *hcdBuilder {
	b.h.Spec.Storage.GlobalSegmentSize = ptr.To(resource.MustParse(q))
	return b
}

func (b *hcdBuilder) Obj() *hicachev1alpha1.HiCacheDeployment { return b.h.DeepCopy() }

// samplesDir holds the shipped example resources.
const samplesDir = "../../config/samples"

// loadSample decodes a HiCacheDeployment sample strictly, so a sample with a field the API does
// not have fails here rather than at kubectl apply.
func loadSample(t *testing.T, file string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(samplesDir, file))
	if err != nil {
		t.Fatalf("reading sample: %v", err)
	}
	h := &hicachev1alpha1.HiCacheDeployment{}
	if err := yaml.UnmarshalStrict(b, h); err != nil {
		t.Fatalf("decoding sample %s: %v", file, err)
	}
	h.Namespace = "default"
	return h
}

// hcdSamples lists the HiCacheDeployment samples on disk.
func hcdSamples(t *testing.T) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(samplesDir, "hicachedeployment_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(matches) == 0 {
		t.Fatalf("no HiCacheDeployment sample under %s", samplesDir)
	}
	out := make([]string, len(matches))
	for i, m := range matches {
		out[i] = filepath.Base(m)
	}
	return out
}
