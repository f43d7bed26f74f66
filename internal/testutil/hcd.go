package testutil

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// HCDBuilder builds test HiCacheDeployments fluently, with the values the API server defaults
// already filled in: testutil.HCD("n").TP(8).Profile("DeepSeekV4").Draft("DSPARK").Obj().
type HCDBuilder struct {
	h hicachev1alpha1.HiCacheDeployment
}

// ModelCommit is the hub commit the builder's models are pinned to: a hub model must name a commit.
const ModelCommit = "0123456789abcdef0123456789abcdef01234567"

// HCD starts a Qwen3 TP=1 deployment named name in namespace default, of the hub model org/<name>
// at ModelCommit.
func HCD(name string) *HCDBuilder {
	b := &HCDBuilder{}
	b.h.Name, b.h.Namespace, b.h.UID, b.h.Generation = name, "default", types.UID(name+"-uid"), 1
	b.h.Spec.Model.Path = "org/" + name
	b.h.Spec.Model.Revision = ModelCommit
	b.h.Spec.Profile = "Qwen3"
	b.h.Default()
	return b
}

// Profile sets the built-in profile ("" for none).
func (b *HCDBuilder) Profile(p string) *HCDBuilder {
	b.h.Spec.Profile = hicachev1alpha1.Profile(p)
	return b
}

// TP, PP, DP and GPUsPerNode set the topology's sizes.
func (b *HCDBuilder) TP(n int32) *HCDBuilder { b.h.Spec.Topology.TensorParallel = n; return b }

// PP sets the pipeline-parallel size.
func (b *HCDBuilder) PP(n int32) *HCDBuilder { b.h.Spec.Topology.PipelineParallel = n; return b }

// DP sets the data-parallel size.
func (b *HCDBuilder) DP(n int32) *HCDBuilder { b.h.Spec.Topology.DataParallel = n; return b }

// DPAttention turns on data-parallel attention.
func (b *HCDBuilder) DPAttention() *HCDBuilder { b.h.Spec.Topology.DPAttention = true; return b }

// GPUsPerNode sets the GPUs of each rank pod.
func (b *HCDBuilder) GPUsPerNode(n int32) *HCDBuilder { b.h.Spec.Topology.GPUsPerNode = n; return b }

// Replicas sets the number of serving groups.
func (b *HCDBuilder) Replicas(n int32) *HCDBuilder { b.h.Spec.Replicas = ptr.To(n); return b }

// Generation sets metadata.generation.
func (b *HCDBuilder) Generation(g int64) *HCDBuilder { b.h.Generation = g; return b }

// Served sets the served model name.
func (b *HCDBuilder) Served(name string) *HCDBuilder { b.h.Spec.Model.ServedName = name; return b }

// Image sets the SGLang image.
func (b *HCDBuilder) Image(img string) *HCDBuilder { b.h.Spec.SGLang.Image = img; return b }

// Ratio sets the host pool ratio.
func (b *HCDBuilder) Ratio(r string) *HCDBuilder { b.h.Spec.HiCache.Ratio = r; return b }

// PageSize sets the page size in tokens.
func (b *HCDBuilder) PageSize(n int32) *HCDBuilder { b.h.Spec.HiCache.PageSize = n; return b }

// KVDType sets the KV cache dtype.
func (b *HCDBuilder) KVDType(d string) *HCDBuilder {
	b.h.Spec.HiCache.KVCacheDType = hicachev1alpha1.KVCacheDType(d)
	return b
}

// Draft sets a speculative algorithm with a draft checkpoint (NGRAM gets none).
func (b *HCDBuilder) Draft(alg string) *HCDBuilder {
	d := &hicachev1alpha1.DraftSpec{Algorithm: hicachev1alpha1.DraftAlgorithm(alg)}
	if alg != "NGRAM" {
		// A hub checkpoint, which names its commit as the model does.
		d.ModelPath, d.Revision = "org/"+strings.ToLower(alg)+"-draft", ModelCommit
	}
	b.h.Spec.Topology.Draft = d
	return b
}

// Packed overrides the profile's packed layer count (0: the draft keeps its own pools).
func (b *HCDBuilder) Packed(n int32) *HCDBuilder {
	b.h.Spec.Topology.Draft.PackedLayers = ptr.To(n)
	return b
}

// Storage writes to CacheBackend backend with the LayoutHash strategy.
func (b *HCDBuilder) Storage(backend string) *HCDBuilder {
	b.h.Spec.Storage = &hicachev1alpha1.StorageSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: backend}}
	b.h.Default()
	return b
}

// Fixed switches the storage to the Fixed strategy under namespace ns.
func (b *HCDBuilder) Fixed(ns string) *HCDBuilder {
	b.h.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	b.h.Spec.Storage.Namespace = ns
	return b
}

// Protocol sets the transfer protocol.
func (b *HCDBuilder) Protocol(p string) *HCDBuilder {
	b.h.Spec.Storage.Protocol = hicachev1alpha1.TransferProtocol(p)
	return b
}

// RDMA sets the rdma transfer protocol.
func (b *HCDBuilder) RDMA() *HCDBuilder { return b.Protocol("rdma") }

// Segment sets the memory each rank lends to the store.
func (b *HCDBuilder) Segment(q string) *HCDBuilder {
	b.h.Spec.Storage.GlobalSegmentSize = ptr.To(resource.MustParse(q))
	return b
}

// Labels sets the pod template's labels from key, value pairs.
func (b *HCDBuilder) Labels(kv ...string) *HCDBuilder {
	b.h.Spec.Template.Labels = pairs(kv)
	return b
}

// Annotations sets the pod template's annotations from key, value pairs.
func (b *HCDBuilder) Annotations(kv ...string) *HCDBuilder {
	b.h.Spec.Template.Annotations = pairs(kv)
	return b
}

// Env adds container variables from name, value pairs.
func (b *HCDBuilder) Env(kv ...string) *HCDBuilder {
	for k, v := range pairs(kv) {
		b.h.Spec.Template.Env = append(b.h.Spec.Template.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return b
}

// ExtraArgs sets the flags appended to the SGLang command line (spec.template.extraArgs).
func (b *HCDBuilder) ExtraArgs(args ...string) *HCDBuilder {
	b.h.Spec.Template.ExtraArgs = args
	return b
}

// Resources sets the CPU and memory requests of each rank pod.
func (b *HCDBuilder) Resources(cpu, memory string) *HCDBuilder {
	b.h.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}}
	return b
}

// Revision sets the model's revision.
func (b *HCDBuilder) Revision(rev string) *HCDBuilder { b.h.Spec.Model.Revision = rev; return b }

// FromClaim takes the weights from directory sub of claim (spec.model.source.pvc) instead of
// spec.model.path; the served name stays what the path was, unless one is set.
func (b *HCDBuilder) FromClaim(claim, sub string) *HCDBuilder {
	b.source(&hicachev1alpha1.ModelSource{PVC: &hicachev1alpha1.ClaimModelSource{ClaimName: claim}, SubPath: sub})
	return b
}

// FromHostPath takes the weights from a directory on every node (spec.model.source.hostPath).
func (b *HCDBuilder) FromHostPath(dir, sub string) *HCDBuilder {
	b.source(&hicachev1alpha1.ModelSource{HostPath: &hicachev1alpha1.HostPathModelSource{Path: dir}, SubPath: sub})
	return b
}

// FromHub downloads the weights of repo at revision rev at start (spec.model.source.hub), with
// the token in key of Secret secret ("" for none).
func (b *HCDBuilder) FromHub(repo, rev, secret, key string) *HCDBuilder {
	hub := &hicachev1alpha1.HubModelSource{Repo: repo}
	if secret != "" {
		hub.TokenSecretRef = &hicachev1alpha1.SecretKeyRef{Name: secret, Key: key}
	}
	b.source(&hicachev1alpha1.ModelSource{Hub: hub})
	b.h.Spec.Model.Revision = rev
	return b
}

func (b *HCDBuilder) source(src *hicachev1alpha1.ModelSource) {
	m := &b.h.Spec.Model
	if m.ServedName == "" && src.Hub == nil {
		m.ServedName = m.Path
	}
	m.Path, m.Source = "", src
}

// WeightsSize sets the checkpoint's size.
func (b *HCDBuilder) WeightsSize(q string) *HCDBuilder {
	b.h.Spec.Model.WeightsSize = ptr.To(resource.MustParse(q))
	return b
}

// StartupSeconds sets the startup budget.
func (b *HCDBuilder) StartupSeconds(s int32) *HCDBuilder {
	b.h.Spec.Probes.StartupSeconds = s
	return b
}

// Cache sets the status' cache record, as an earlier reconcile wrote it.
func (b *HCDBuilder) Cache(cs *hicachev1alpha1.CacheStatus) *HCDBuilder {
	b.h.Status.Cache = cs
	return b
}

// Obj returns a copy of the deployment built so far.
func (b *HCDBuilder) Obj() *hicachev1alpha1.HiCacheDeployment { return b.h.DeepCopy() }

func pairs(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// SamplesDir is config/samples of the repository.
func SamplesDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "config", "samples")
}

// LoadSample decodes a HiCacheDeployment sample strictly, so a sample with a field the API does
// not have fails in tests rather than at kubectl apply.
func LoadSample(t testing.TB, file string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(SamplesDir(), file))
	if err != nil {
		t.Fatalf("reading sample: %v", err)
	}
	h := &hicachev1alpha1.HiCacheDeployment{}
	if err := yaml.UnmarshalStrict(b, h); err != nil {
		t.Fatalf("decoding sample %s: %v", file, err)
	}
	h.Namespace, h.UID, h.Generation = "default", types.UID(h.Name+"-uid"), 1
	return h
}
