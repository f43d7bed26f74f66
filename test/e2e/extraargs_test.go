package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// qwen3Named is the qwen3 deployment under another object name, with the same served name (so
// the same key prefix in the store) and the given extra args.
func qwen3Named(t *testing.T, ns, name string, extraArgs ...string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	h := hcd(t, ns, qwen3)
	h.Name = name
	h.Spec.Template.ExtraArgs = extraArgs
	return h
}

// Three deployments serve one model name against one master. --dtype float16 changes the bytes
// behind every key (the KV dtype follows the model dtype), so that deployment must write under
// its own namespace; --log-level changes nothing, so that one shares the plain one's namespace.
func TestExtraArgsThatChangeTheLayoutGetTheirOwnNamespace(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	create(t, qwen3Named(t, ns, "plain"))
	create(t, qwen3Named(t, ns, "half", "--dtype", "float16"))
	create(t, qwen3Named(t, ns, "chatty", "--log-level", "debug"))
	for _, name := range []string{"plain", "half", "chatty"} {
		waitReadyGroups(t, ns, name, 1)
	}
	plain, half, chatty := getHCD(t, ns, "plain"), getHCD(t, ns, "half"), getHCD(t, ns, "chatty")
	if half.Status.Cache.Namespace == plain.Status.Cache.Namespace {
		t.Errorf("--dtype float16 in extraArgs writes under %s, the namespace of the same model in its own dtype", half.Status.Cache.Namespace)
	}
	if chatty.Status.Cache.Namespace != plain.Status.Cache.Namespace {
		t.Errorf("--log-level moved the namespace %s → %s; it changes neither keys nor bytes", plain.Status.Cache.Namespace, chatty.Status.Cache.Namespace)
	}
	for _, name := range []string{"plain", "half", "chatty"} {
		checkRankFlags(t, ns, name, 1, m.RPCAddr)
	}
	for _, p := range rankPods(t, ns, "half") {
		if got, _ := flagValue(p.Spec.Containers[0].Args, "--dtype"); got != "float16" {
			t.Errorf("pod %s runs --dtype %q, want float16", p.Name, got)
		}
	}
	// The layout facts the ranks read say why.
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "half-hicache"}, &cm); err != nil {
		t.Fatal(err)
	}
	if facts := fmt.Sprint(cm.Data); !strings.Contains(facts, "extra_arg.--dtype=float16") {
		t.Errorf("the ConfigMap's layout facts lack extra_arg.--dtype=float16: %s", facts)
	}
}

// A refused flag is refused at apply in its exact spelling. An abbreviation gets past the API
// server's rule but not the controller: the deployment reports it (condition and Event, naming
// the spec field to use) and runs nothing until it is fixed.
func TestRefusedExtraArgIsReportedAndCreatesNoPods(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	err := k8s.Create(context.Background(), qwen3Named(t, ns, "fp8", "--kv-cache-dtype", "fp8_e4m3"))
	if err == nil || !strings.Contains(err.Error(), "spec.template.extraArgs sets --kv-cache-dtype: set spec.hicache.kvCacheDType instead") {
		t.Fatalf("creating a deployment with --kv-cache-dtype in extraArgs: %v; want a refusal naming the flag", err)
	}

	h := qwen3Named(t, ns, "fp8", "--kv-cache-dt", "fp8_e4m3")
	create(t, h)
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "fp8", hicachev1alpha1.ConditionReady, metav1.ConditionFalse, 30*time.Second)
	c := meta.FindStatusCondition(getHCD(t, ns, "fp8").Status.Conditions, hicachev1alpha1.ConditionReady)
	if c.Reason != hicachev1alpha1.ReasonInvalidSpec || !strings.Contains(c.Message, "spec.template.extraArgs sets --kv-cache-dt (--kv-cache-dtype)") ||
		!strings.Contains(c.Message, "set spec.hicache.kvCacheDType instead") {
		t.Errorf("Ready %s: %s; want InvalidSpec naming the flag and spec.hicache.kvCacheDType", c.Reason, c.Message)
	}
	eventually(t, 30*time.Second, "a Warning event InvalidSpec", func() (bool, string) {
		return countEvents(t, ns, "fp8", hicachev1alpha1.ReasonInvalidSpec) > 0, "no InvalidSpec event"
	})
	time.Sleep(time.Second)
	if g := groups(t, ns, "fp8"); len(g) != 0 {
		t.Fatalf("%d serving groups were created for a refused flag", len(g))
	}
	if p := rankPods(t, ns, "fp8"); len(p) != 0 {
		t.Fatalf("%d rank pods run a refused flag", len(p))
	}

	// The fix: the spec field instead of the flag.
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) {
		h.Spec.Template.ExtraArgs = nil
		h.Spec.HiCache.KVCacheDType = "fp8_e4m3"
	})
	waitReadyGroups(t, ns, "fp8", 1)
	for _, p := range rankPods(t, ns, "fp8") {
		if got, _ := flagValue(p.Spec.Containers[0].Args, "--kv-cache-dtype"); got != "fp8_e4m3" {
			t.Errorf("pod %s runs --kv-cache-dtype %q, want fp8_e4m3", p.Name, got)
		}
		if p.Labels[hicachev1alpha1.LabelCacheNamespace] != getHCD(t, ns, "fp8").Status.Cache.Namespace {
			t.Errorf("pod %s writes namespace %s", p.Name, p.Labels[hicachev1alpha1.LabelCacheNamespace])
		}
	}
}

// A Fixed namespace may not take the operator's hc- names: another deployment writes its own
// layout there.
func TestFixedNamespaceMayNotTakeALayoutHashName(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	create(t, qwen3Named(t, ns, "owner"))
	waitReadyGroups(t, ns, "owner", 1)
	taken := getHCD(t, ns, "owner").Status.Cache.Namespace

	h := qwen3Named(t, ns, "squatter", "--dtype", "float16")
	h.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	h.Spec.Storage.Namespace = taken
	err := k8s.Create(context.Background(), h)
	if err == nil || !strings.Contains(err.Error(), "spec.storage.namespace may not start with hc-") {
		t.Fatalf("creating a Fixed deployment on %s: %v; want a refusal saying hc- names are reserved", taken, err)
	}
}
