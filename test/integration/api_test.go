package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/crdvalidation"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files from what the API server answers")

// decode turns one YAML document into an object.
func decode(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
		t.Fatalf("decoding %q: %v", doc, err)
	}
	return obj
}

func TestSamplesAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join(repoRoot(), "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			obj := decode(t, doc)
			obj.SetNamespace(ns)
			if err := k8sClient.Create(context.Background(), obj); err != nil {
				t.Errorf("%s: %s %s was refused: %v", filepath.Base(f), obj.GetKind(), obj.GetName(), err)
			}
			seen++
		}
	}
	if seen < 6 {
		t.Fatalf("found %d sample objects in config/samples, want at least 6", seen)
	}
}

const validHCD = `
apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: x}
spec:
  model: {path: deepseek-ai/DeepSeek-V4, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: DeepSeekV4
  topology: {tensorParallel: 16, gpusPerNode: 8}
  storage: {backendRef: {name: mooncake}}
`

// hcdWith returns validHCD with the fields of spec replaced by the given YAML (merged at the top
// level of spec).
func hcdWith(t *testing.T, spec string) *unstructured.Unstructured {
	t.Helper()
	obj := decode(t, validHCD)
	patch := map[string]any{}
	if err := yaml.Unmarshal([]byte(spec), &patch); err != nil {
		t.Fatalf("decoding %q: %v", spec, err)
	}
	s := obj.Object["spec"].(map[string]any)
	for k, v := range patch {
		if v == nil {
			delete(s, k)
			continue
		}
		s[k] = v
	}
	return obj
}

// TestBadObjectsAreRefusedWithAReadableMessage sends every object of the shared table of refused
// objects to the API server and checks that it is refused with a message saying what to fix. The
// server's full messages are the reference the kubectl plugin is held to (its own test reads
// them); -update rewrites them from what the server answered.
func TestBadObjectsAreRefusedWithAReadableMessage(t *testing.T) {
	ns := newNamespace(t)
	got := map[string]string{}
	for _, tc := range testutil.RefusedObjects() {
		t.Run(tc.Name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: tc.Object(t)}
			obj.SetNamespace(ns)
			err := k8sClient.Create(context.Background(), obj, client.DryRunAll)
			if err == nil {
				t.Fatalf("the API server accepted it; want a refusal saying %q", tc.Want)
			}
			if !strings.Contains(err.Error(), tc.Want) {
				t.Fatalf("refused with\n  %v\nwant the message to contain\n  %q", err, tc.Want)
			}
			prefix := fmt.Sprintf("%s.%s %q is invalid: ", obj.GetKind(), hicachev1alpha1.GroupVersion.Group, obj.GetName())
			msg, ok := strings.CutPrefix(err.Error(), prefix)
			if !ok || !apierrors.IsInvalid(err) {
				t.Fatalf("refused with %v; want an Invalid error starting with %q", err, prefix)
			}
			got[tc.Name] = msg
		})
	}
	if t.Failed() {
		return
	}
	testutil.CompareGolden(t, testutil.RefusedMessagesFile(), testutil.EncodeRefusedMessages(t, got), *update)
}

func TestCacheFlushSpecIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	obj := decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: f}
spec: {backendRef: {name: mooncake}, scope: Namespace, namespace: hc-1}`)
	obj.SetNamespace(ns)
	ctx := context.Background()
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(obj.Object, "hc-2", "spec", "namespace"); err != nil {
		t.Fatal(err)
	}
	err := k8sClient.Update(ctx, obj)
	if err == nil || !strings.Contains(err.Error(), "CacheFlush spec is immutable: create a new CacheFlush instead") {
		t.Fatalf("changing a CacheFlush's namespace: got %v, want a refusal naming immutability", err)
	}
}

func TestDefaultsAreFilledIn(t *testing.T) {
	ns := newNamespace(t)
	obj := decode(t, `
apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: defaults}
spec:
  model: {path: Qwen/Qwen3-8B, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
  storage: {backendRef: {name: mooncake}}`)
	obj.SetNamespace(ns)
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{
		"spec.replicas":                  int64(1),
		"spec.topology.tensorParallel":   int64(1),
		"spec.topology.pipelineParallel": int64(1),
		"spec.topology.gpusPerNode":      int64(8),
		"spec.storage.namespaceStrategy": "LayoutHash",
		"spec.storage.flushPolicy":       "Auto",
		"spec.storage.protocol":          "tcp",
		"spec.rollout.maxUnavailable":    int64(1),
	} {
		got, found, err := unstructured.NestedFieldNoCopy(obj.Object, strings.Split(path, ".")...)
		if err != nil || !found || got != want {
			t.Errorf("%s = %v (found %v, err %v), want %v", path, got, found, err, want)
		}
	}
}

func TestHiCacheDeploymentScalesThroughTheScaleSubresource(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	obj := hcdWith(t, `replicas: 1`)
	obj.SetNamespace(ns)
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	typed := &hicachev1alpha1.HiCacheDeployment{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), typed); err != nil {
		t.Fatal(err)
	}
	scale := &autoscalingv1.Scale{}
	if err := k8sClient.SubResource("scale").Get(ctx, typed, scale); err != nil {
		t.Fatalf("reading the scale subresource: %v", err)
	}
	if scale.Spec.Replicas != 1 {
		t.Fatalf("scale.spec.replicas = %d, want 1", scale.Spec.Replicas)
	}
	scale.Spec.Replicas = 3
	if err := k8sClient.SubResource("scale").Update(ctx, typed, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("kubectl scale's request was refused: %v", err)
	}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas"); got != 3 {
		t.Errorf("spec.replicas = %d after scaling to 3", got)
	}
}

// TestNearMissesAreAccepted creates the shared table's accepted objects (dry run): the kubectl
// plugin plans each of them too.
func TestNearMissesAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	for _, tc := range testutil.AcceptedObjects() {
		t.Run(tc.Name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: tc.Object(t)}
			obj.SetNamespace(ns)
			if err := k8sClient.Create(context.Background(), obj, client.DryRunAll); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

// TestOfflineAdmissionDefaultsLikeTheServer creates every sample (dry run) and checks that the
// kubectl plugin's offline admission (crdvalidation, the CRD's own defaults) fills in the same
// spec as the API server.
func TestOfflineAdmissionDefaultsLikeTheServer(t *testing.T) {
	ns := newNamespace(t)
	v, err := crdvalidation.Default()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(repoRoot(), "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			offline, errs, err := v.Admit(context.Background(), decode(t, doc).Object, ns)
			if err != nil || len(errs) > 0 {
				t.Fatalf("%s: offline admission: %v %v", filepath.Base(f), err, errs)
			}
			obj := decode(t, doc)
			obj.SetNamespace(ns)
			if err := k8sClient.Create(context.Background(), obj, client.DryRunAll); err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
			if diff := cmp.Diff(obj.Object["spec"], offline["spec"]); diff != "" {
				t.Errorf("%s %s: spec defaulted differently (-server +offline):\n%s", filepath.Base(f), obj.GetName(), diff)
			}
		}
	}
}
