package controllers

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// t0 is the fixed time of the tests' observations.
var t0 = metav1.NewTime(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))

// hcdBuilder builds test HiCacheDeployments fluently, with the values the API server defaults
// already filled in: makeHCD("n").TP(8).Profile("DeepSeekV4").Draft("DSPARK").Obj().
type hcdBuilder struct {
	h hicachev1alpha1.HiCacheDeployment
}

func makeHCD(name string) *hcdBuilder {
	b := &hcdBuilder{}
	b.h.Name, b.h.Namespace, b.h.UID, b.h.Generation = name, "default", types.UID(name+"-uid"), 1
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
func (b *hcdBuilder) TP(n int32) *hcdBuilder          { b.h.Spec.Topology.TensorParallel = n; return b }
func (b *hcdBuilder) GPUsPerNode(n int32) *hcdBuilder { b.h.Spec.Topology.GPUsPerNode = n; return b }
func (b *hcdBuilder) Replicas(n int32) *hcdBuilder    { b.h.Spec.Replicas = ptr.To(n); return b }
func (b *hcdBuilder) Generation(g int64) *hcdBuilder  { b.h.Generation = g; return b }
func (b *hcdBuilder) Image(img string) *hcdBuilder    { b.h.Spec.SGLang.Image = img; return b }
func (b *hcdBuilder) KVDType(d string) *hcdBuilder {
	b.h.Spec.HiCache.KVCacheDType = hicachev1alpha1.KVCacheDType(d)
	return b
}

// Draft sets a speculative algorithm with a draft checkpoint.
func (b *hcdBuilder) Draft(alg string) *hcdBuilder {
	b.h.Spec.Topology.Draft = &hicachev1alpha1.DraftSpec{
		Algorithm: hicachev1alpha1.DraftAlgorithm(alg), ModelPath: "org/" + strings.ToLower(alg) + "-draft"}
	return b
}

// Storage writes to CacheBackend backend with the LayoutHash strategy.
func (b *hcdBuilder) Storage(backend string) *hcdBuilder {
	b.h.Spec.Storage = &hicachev1alpha1.StorageSpec{
		BackendRef:        hicachev1alpha1.LocalObjectReference{Name: backend},
		NamespaceStrategy: hicachev1alpha1.NamespaceLayoutHash, FlushPolicy: hicachev1alpha1.FlushAuto, Protocol: "tcp",
	}
	return b
}

func (b *hcdBuilder) Fixed(ns string) *hcdBuilder {
	b.h.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	b.h.Spec.Storage.Namespace = ns
	return b
}

func (b *hcdBuilder) RDMA() *hcdBuilder { b.h.Spec.Storage.Protocol = "rdma"; return b }

func (b *hcdBuilder) Labels(kv ...string) *hcdBuilder {
	b.h.Spec.Template.Labels = pairs(kv)
	return b
}

func (b *hcdBuilder) Annotations(kv ...string) *hcdBuilder {
	b.h.Spec.Template.Annotations = pairs(kv)
	return b
}

func (b *hcdBuilder) Env(kv ...string) *hcdBuilder {
	for k, v := range pairs(kv) {
		b.h.Spec.Template.Env = append(b.h.Spec.Template.Env, corev1.EnvVar{Name: k, Value: v})
	}
	return b
}

func (b *hcdBuilder) Resources(cpu, memory string) *hcdBuilder {
	b.h.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}}
	return b
}

// Cache sets the status' cache record, as an earlier reconcile wrote it.
func (b *hcdBuilder) Cache(cs *hicachev1alpha1.CacheStatus) *hcdBuilder {
	b.h.Status.Cache = cs
	return b
}

func (b *hcdBuilder) Obj() *hicachev1alpha1.HiCacheDeployment { return b.h.DeepCopy() }

func pairs(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func mustResolve(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *resolve.Resolved {
	t.Helper()
	r, err := resolve.Resolve(h)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return r
}

// testBackend is a ready CacheBackend's endpoints.
func testBackend() *resolve.Backend {
	return &resolve.Backend{Name: "mooncake", RPCAddress: "mooncake-master.default.svc:50051", MetadataServer: "P2PHANDSHAKE", MetricsPort: 9003}
}

func mustBuildGroup(t *testing.T, h *hicachev1alpha1.HiCacheDeployment, g int) *appsv1.StatefulSet {
	t.Helper()
	sts, err := buildGroup(h, mustResolve(t, h), testBackend(), g, "sglang:test")
	if err != nil {
		t.Fatalf("buildGroup: %v", err)
	}
	return sts
}

// podBuilder builds rank pods: makePod("q-0", 1).Ready().Obj().
type podBuilder struct{ p corev1.Pod }

func makePod(sts string, index int) *podBuilder {
	b := &podBuilder{}
	b.p.Name = sts + "-" + strconv.Itoa(index)
	b.p.Namespace = "default"
	b.p.UID = types.UID(b.p.Name + "-uid")
	b.p.Labels = map[string]string{LabelPodIndex: strconv.Itoa(index)}
	b.p.Annotations = map[string]string{}
	b.p.Status.Phase = corev1.PodPending
	return b
}

func (b *podBuilder) UID(uid string) *podBuilder { b.p.UID = types.UID(uid); return b }

func (b *podBuilder) Ready() *podBuilder {
	b.p.Status.Phase = corev1.PodRunning
	b.p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", Ready: true}}
	return b
}

func (b *podBuilder) Running() *podBuilder {
	b.p.Status.Phase = corev1.PodRunning
	b.p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	return b
}

func (b *podBuilder) Failed() *podBuilder { b.p.Status.Phase = corev1.PodFailed; return b }

func (b *podBuilder) Restarted(n int32) *podBuilder {
	b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang", RestartCount: n}}
	return b
}

func (b *podBuilder) Hash(h string) *podBuilder {
	b.p.Annotations[AnnotationTemplateHash] = h
	return b
}

// Layout labels the pod as writing namespace ns under layout shortHash.
func (b *podBuilder) Layout(ns, shortHash string) *podBuilder {
	b.p.Labels[LabelCacheNamespace] = ns
	b.p.Annotations[AnnotationLayoutHash] = shortHash
	return b
}

func (b *podBuilder) Obj() corev1.Pod { return *b.p.DeepCopy() }

// groupOf is an observed serving group: its StatefulSet (with template hash hash and members
// annotation members, if any) and its pods.
func groupOf(index int, hash, members string, pods ...corev1.Pod) *group {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{
		Name: "g" + strconv.Itoa(index), Namespace: "default", Annotations: map[string]string{AnnotationTemplateHash: hash}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(len(pods)))}}
	if members != "" {
		sts.Annotations[AnnotationMembers] = members
	}
	return &group{index: index, sts: sts, pods: pods}
}

// readyGroup is a formed, ready group of n pods running the template hash, whose pods write
// under the resolved layout.
func readyGroup(index, n int, hash string, r *resolve.Resolved) *group {
	pods := make([]corev1.Pod, n)
	for i := range pods {
		pods[i] = makePod("g"+strconv.Itoa(index), i).Ready().Hash(hash).Layout(r.Namespace, r.ShortHash).Obj()
	}
	return groupOf(index, hash, "", pods...)
}

// loadSample decodes a HiCacheDeployment sample strictly.
func loadSample(t *testing.T, file string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	h := &hicachev1alpha1.HiCacheDeployment{}
	if err := yaml.UnmarshalStrict(b, h); err != nil {
		t.Fatalf("decoding %s: %v", file, err)
	}
	h.Namespace, h.UID, h.Generation = "default", types.UID(h.Name+"-uid"), 1
	return h
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); run go test -update if the change is intended:\n%s", path, diff)
	}
}

func envValue(env []corev1.EnvVar, name string) (corev1.EnvVar, bool) {
	for _, e := range env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}
