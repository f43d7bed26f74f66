package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// namespaceWithBackend is a namespace for one test with a CacheBackend "mooncake" pointing at a
// real master of its own, Ready.
func namespaceWithBackend(t *testing.T) (string, *master) {
	t.Helper()
	ns := newNamespace(t)
	m := startMaster(t)
	externalBackend(t, ns, "mooncake", m.RPCAddr, m.AdminURL)
	return ns, m
}

// externalBackend creates a CacheBackend pointing at a master (testutil.ExternalBackend, with
// opts) and waits until it is Ready.
func externalBackend(t *testing.T, ns, name, rpcAddr, adminURL string, opts ...testutil.BackendOption) {
	t.Helper()
	if err := k8s.Create(context.Background(), testutil.ExternalBackend(ns, name, rpcAddr, adminURL, opts...)); err != nil {
		t.Fatalf("creating CacheBackend %s: %v", name, err)
	}
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, ns, name, hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 30*time.Second)
}

// hcd decodes a HiCacheDeployment from YAML, in namespace ns.
func hcd(t *testing.T, ns, doc string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	obj := &hicachev1alpha1.HiCacheDeployment{}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("decoding: %v", err)
	}
	obj.Namespace = ns
	return obj
}

// sampleHCD is a HiCacheDeployment sample of config/samples as shipped, in namespace ns: what a
// user applies with kubectl apply -n ns -f.
func sampleHCD(t *testing.T, ns, file string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.SamplesDir(), file))
	if err != nil {
		t.Fatal(err)
	}
	return hcd(t, ns, string(b))
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

// update reads obj, changes it and writes it back, retrying on conflicts.
func update[T client.Object](t *testing.T, obj T, change func(T)) {
	t.Helper()
	for i := 0; ; i++ {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		change(obj)
		err := k8s.Update(context.Background(), obj)
		if err == nil {
			return
		}
		if i > 5 {
			t.Fatalf("updating %s: %v", obj.GetName(), err)
		}
	}
}

func conditionsOf(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *hicachev1alpha1.HiCacheDeployment:
		return o.Status.Conditions
	case *hicachev1alpha1.CacheBackend:
		return o.Status.Conditions
	case *hicachev1alpha1.CacheFlush:
		return o.Status.Conditions
	}
	return nil
}

// waitCondition waits until obj's condition typ has status want (for the current generation).
func waitCondition(t *testing.T, obj client.Object, ns, name, typ string, want metav1.ConditionStatus, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%s %s/%s %s=%s", fmt.Sprintf("%T", obj), ns, name, typ, want), func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(conditionsOf(obj), typ)
		if c == nil {
			return false, "no condition " + typ
		}
		return c.Status == want && c.ObservedGeneration == obj.GetGeneration(), fmt.Sprintf("%s %s: %s (generation %d, observed %d)", c.Status, c.Reason, c.Message, obj.GetGeneration(), c.ObservedGeneration)
	})
}

// getHCD reads a HiCacheDeployment.
func getHCD(t *testing.T, ns, name string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	var h hicachev1alpha1.HiCacheDeployment
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &h); err != nil {
		t.Fatal(err)
	}
	return &h
}

// rankPods lists a deployment's pods by group, sorted by name.
func rankPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: name}); err != nil {
		t.Fatal(err)
	}
	out := pods.Items[:0]
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func groups(t *testing.T, ns, name string) []appsv1.StatefulSet {
	t.Helper()
	var list appsv1.StatefulSetList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: name}); err != nil {
		t.Fatal(err)
	}
	out := list.Items[:0]
	for _, s := range list.Items {
		if s.DeletionTimestamp == nil {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// flagValue is the value of a flag in a container's args ("" and false when absent).
func flagValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				return args[i+1], true
			}
			return "", true
		}
		if strings.HasPrefix(a, flag+"=") {
			return strings.TrimPrefix(a, flag+"="), true
		}
	}
	return "", false
}

// extraConfig decodes the rank's --hicache-storage-backend-extra-config.
func extraConfig(t *testing.T, args []string) map[string]any {
	t.Helper()
	v, ok := flagValue(args, "--hicache-storage-backend-extra-config")
	if !ok {
		t.Fatalf("no --hicache-storage-backend-extra-config in %q", args)
	}
	m := map[string]any{}
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		t.Fatalf("extra config %q: %v", v, err)
	}
	return m
}

func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				return "fieldRef:" + e.ValueFrom.FieldRef.FieldPath, true
			}
			return e.Value, true
		}
	}
	return "", false
}

// decodeInto decodes YAML strictly into obj.
func decodeInto(doc string, obj any) error {
	return yaml.UnmarshalStrict([]byte(doc), obj)
}
