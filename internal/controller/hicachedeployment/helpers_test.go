package hicachedeployment

import (
	"flag"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// testBackend is a ready CacheBackend's endpoints.
// testGuardImage and testImages are the images the builder tests render rank pods with.
const testGuardImage = "guard:test"

var testImages = PodImages{SGLang: "sglang:test", Guard: testGuardImage}

func mustBuildGroup(t *testing.T, h *hicachev1alpha1.HiCacheDeployment, g int) *appsv1.StatefulSet {
	t.Helper()
	sts, err := BuildGroup(h, testsupport.MustResolve(t, h), testsupport.TestBackend(), g, testImages)
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
	b.p.Labels = map[string]string{appsv1.PodIndexLabel: strconv.Itoa(index)}
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
	b.p.Annotations[hicachev1alpha1.AnnotationTemplateHash] = h
	return b
}

// Layout labels the pod as writing namespace ns under layout shortHash.
func (b *podBuilder) Layout(ns, shortHash string) *podBuilder {
	b.p.Labels[hicachev1alpha1.LabelCacheNamespace] = ns
	b.p.Annotations[hicachev1alpha1.AnnotationLayoutHash] = shortHash
	return b
}

func (b *podBuilder) Obj() corev1.Pod { return *b.p.DeepCopy() }

// groupOf is an observed serving group: its StatefulSet (with template hash hash), the record of
// its members (members, "" for none) and its pods.
func groupOf(index int, hash, members string, pods ...corev1.Pod) *group {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{
		Name: "g" + strconv.Itoa(index), Namespace: "default", Annotations: map[string]string{hicachev1alpha1.AnnotationTemplateHash: hash}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(len(pods)))}}
	return &group{key: GroupKey{index: index}, sts: sts, pods: pods, members: members}
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

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	testutil.CompareGolden(t, path, got, *update)
}

// mooncakeOf is the Mooncake configuration of a deployment's ranks, nil without storage or
// when it cannot be rendered.
func mooncakeOf(hcd *hicachev1alpha1.HiCacheDeployment, res *resolve.Resolved, be *resolve.Backend) *sglang.MooncakeConfig {
	_, mc, err := ServerConfig(hcd, res, be, 0)
	if err != nil {
		return nil
	}
	return mc
}
