package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// pageKeys are the keys a deployment's current plan writes for n pages, as SGLang names them.
func pageKeys(t *testing.T, ns, name string, n int) []string {
	t.Helper()
	h := getHCD(t, ns, name)
	res, err := resolve.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	prefix := cache.NamespacePrefix(h.Status.Cache.Namespace, resolve.ServedModelName(&h.Spec))
	var keys []string
	for i := range n {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/page/%d", name, i)))
		keys = append(keys, cache.KeysForPage(res.Plan, prefix, hex.EncodeToString(sum[:]))...)
	}
	return keys
}

// countPrefix counts the master's keys under a namespace.
func countPrefix(t *testing.T, m *master, namespace string) int64 {
	t.Helper()
	n, err := m.countKeys(namespace + "_")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func flushesOf(t *testing.T, ns string) []hicachev1alpha1.CacheFlush {
	t.Helper()
	var list hicachev1alpha1.CacheFlushList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func waitFlushComplete(t *testing.T, ns, name string) *hicachev1alpha1.CacheFlush {
	t.Helper()
	cf := &hicachev1alpha1.CacheFlush{}
	waitCondition(t, cf, ns, name, hicachev1alpha1.ConditionComplete, metav1.ConditionTrue, 90*time.Second)
	return cf
}

func dspark(h *hicachev1alpha1.HiCacheDeployment) {
	h.Spec.Topology.Draft = &hicachev1alpha1.DraftSpec{Algorithm: "DSPARK", ModelPath: "/models/deepseek-ai/DeepSeek-V4-DSpark"}
}

// The whole promise: a DeepSeek-V4 deployment moves from no draft to DSpark; its new groups
// write namespace B; namespace A is flushed once nothing uses it; other namespaces stay.
func TestLayoutChangeFlushesTheOldNamespaceOnly(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	create(t, dsv4(ns))
	waitReadyGroups(t, ns, "dsv4", 1)
	nsA := getHCD(t, ns, "dsv4").Status.Cache.Namespace
	keysA := pageKeys(t, ns, "dsv4", 8)
	other := []string{"hc-0000000000_deepseek-v4_" + strings.Repeat("ab", 32) + "__k", "unrelated-key"}
	m.putKeys(t, append(append([]string{}, keysA...), other...), 4096)
	if got := countPrefix(t, m, nsA); got != int64(len(keysA)) {
		t.Fatalf("%d keys under %s before the change, want %d", got, nsA, len(keysA))
	}

	h := getHCD(t, ns, "dsv4")
	update(t, h, dspark)
	waitReadyGroups(t, ns, "dsv4", 1)
	var flushName string
	eventually(t, 90*time.Second, "the old namespace flushed and forgotten", func() (bool, string) {
		h := getHCD(t, ns, "dsv4")
		if h.Status.Cache.LastFlush == nil || h.Status.Cache.LastFlush.Namespace != nsA {
			return false, fmt.Sprintf("cache status %+v", h.Status.Cache)
		}
		flushName = h.Status.Cache.LastFlush.Name
		return len(h.Status.Cache.StaleNamespaces) == 0, fmt.Sprintf("stale %+v", h.Status.Cache.StaleNamespaces)
	})
	nsB := getHCD(t, ns, "dsv4").Status.Cache.Namespace
	if nsB == nsA {
		t.Fatalf("namespace stayed %s", nsA)
	}
	cf := waitFlushComplete(t, ns, flushName)
	if cf.Spec.Namespace != nsA || cf.Status.Removed != int64(len(keysA)) || cf.Status.KeysLeft != 0 {
		t.Errorf("CacheFlush %s: namespace %s removed %d left %d; want %s, %d, 0", cf.Name, cf.Spec.Namespace, cf.Status.Removed, cf.Status.KeysLeft, nsA, len(keysA))
	}
	if got := countPrefix(t, m, nsA); got != 0 {
		t.Errorf("%d keys left under the stale namespace %s", got, nsA)
	}
	for _, k := range other {
		if n, _ := m.countKeys(k); n != 1 {
			t.Errorf("key %s of another namespace was removed", k)
		}
	}
	if len(flushesOf(t, ns)) != 1 {
		t.Errorf("%d CacheFlushes, want exactly 1", len(flushesOf(t, ns)))
	}
}

// Two deployments share a namespace (same layout); when one moves, the namespace waits for the
// other.
func TestSharedNamespaceWaitsForEveryUser(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	first := dsv4(ns)
	first.Name = "first"
	second := dsv4(ns)
	second.Name = "second"
	create(t, first)
	create(t, second)
	waitReadyGroups(t, ns, "first", 1)
	waitReadyGroups(t, ns, "second", 1)
	nsA := getHCD(t, ns, "first").Status.Cache.Namespace
	if got := getHCD(t, ns, "second").Status.Cache.Namespace; got != nsA {
		t.Fatalf("same layout, different namespaces %s and %s", nsA, got)
	}
	keys := pageKeys(t, ns, "first", 4)
	m.putKeys(t, keys, 4096)

	update(t, first, dspark)
	waitReadyGroups(t, ns, "first", 1)
	eventually(t, 30*time.Second, "first's stale namespace blocked by second", func() (bool, string) {
		h := getHCD(t, ns, "first")
		s := h.Status.Cache.StaleNamespaces
		return len(s) == 1 && s[0].Namespace == nsA && strings.Contains(s[0].BlockedBy, "second"), fmt.Sprintf("%+v", s)
	})
	time.Sleep(2 * time.Second)
	if got := countPrefix(t, m, nsA); got != int64(len(keys)) {
		t.Fatalf("namespace %s lost keys (%d of %d) while second still uses it", nsA, got, len(keys))
	}
	if n := len(flushesOf(t, ns)); n != 0 {
		t.Fatalf("%d CacheFlushes created while the namespace is in use", n)
	}

	update(t, second, dspark)
	eventually(t, 90*time.Second, "namespace flushed after both moved", func() (bool, string) {
		n := countPrefix(t, m, nsA)
		return n == 0, fmt.Sprintf("%d keys left", n)
	})
	eventually(t, 30*time.Second, "both deployments forget the stale namespace", func() (bool, string) {
		a, b := getHCD(t, ns, "first"), getHCD(t, ns, "second")
		return len(a.Status.Cache.StaleNamespaces) == 0 && len(b.Status.Cache.StaleNamespaces) == 0,
			fmt.Sprintf("%+v / %+v", a.Status.Cache.StaleNamespaces, b.Status.Cache.StaleNamespaces)
	})
	// One flush per namespace and layout generation: the second deployment records the flush the
	// first asked for, or the other way round, rather than flushing an empty namespace again.
	time.Sleep(2 * time.Second)
	a, b := getHCD(t, ns, "first").Status.Cache.LastFlush, getHCD(t, ns, "second").Status.Cache.LastFlush
	if fl := flushesOf(t, ns); len(fl) != 1 || a == nil || b == nil || a.Name != b.Name {
		t.Errorf("%d CacheFlushes for one stale namespace; the deployments record %+v and %+v", len(fl), a, b)
	}
}

// With the Fixed strategy a breaking change stops the writers, empties the namespace, then
// starts the new layout.
func TestFixedNamespaceStopsFlushesThenStarts(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	h := dsv4(ns)
	h.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	h.Spec.Storage.Namespace = "dsv4-fixed"
	create(t, h)
	waitReadyGroups(t, ns, "dsv4", 1)
	keys := pageKeys(t, ns, "dsv4", 6)
	m.putKeys(t, keys, 4096)
	oldPods := rankPods(t, ns, "dsv4")

	update(t, h, dspark)
	cf := &hicachev1alpha1.CacheFlush{}
	eventually(t, 90*time.Second, "a completed flush of the fixed namespace", func() (bool, string) {
		fl := flushesOf(t, ns)
		if len(fl) != 1 {
			return false, fmt.Sprintf("%d flushes", len(fl))
		}
		*cf = fl[0]
		return meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete), fmt.Sprintf("%+v", cf.Status.Conditions)
	})
	if cf.Spec.Namespace != "dsv4-fixed" || cf.Status.Removed != int64(len(keys)) {
		t.Errorf("flush of %s removed %d, want dsv4-fixed and %d", cf.Spec.Namespace, cf.Status.Removed, len(keys))
	}
	if got := countPrefix(t, m, "dsv4-fixed"); got != 0 {
		t.Errorf("%d keys left in the fixed namespace", got)
	}
	waitReadyGroups(t, ns, "dsv4", 1)
	for _, p := range rankPods(t, ns, "dsv4") {
		for _, o := range oldPods {
			if p.UID == o.UID {
				t.Errorf("pod %s survived the recreate", p.Name)
			}
		}
		// The new writers started only after the namespace was empty.
		if !p.CreationTimestamp.After(cf.Status.CompletionTime.Time) && !p.CreationTimestamp.Equal(cf.Status.CompletionTime) {
			t.Errorf("pod %s was created at %s, before the flush completed at %s", p.Name, p.CreationTimestamp, cf.Status.CompletionTime)
		}
	}
	if got := getHCD(t, ns, "dsv4").Status.Cache.Namespace; got != "dsv4-fixed" {
		t.Errorf("namespace %s, want dsv4-fixed", got)
	}

	// Back to the first layout and forward again: every change flushes anew, even one that
	// repeats an earlier change exactly.
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Topology.Draft = nil })
	eventually(t, 90*time.Second, "a second flush, for the change back", func() (bool, string) {
		fl := flushesOf(t, ns)
		done := 0
		for i := range fl {
			if meta.IsStatusConditionTrue(fl[i].Status.Conditions, hicachev1alpha1.ConditionComplete) {
				done++
			}
		}
		return done == 2, fmt.Sprintf("%d flushes, %d complete", len(fl), done)
	})
	waitReadyGroups(t, ns, "dsv4", 1)
	again := pageKeys(t, ns, "dsv4", 3)
	m.putKeys(t, again, 4096)
	update(t, h, dspark)
	eventually(t, 90*time.Second, "a third flush empties the namespace again", func() (bool, string) {
		fl := flushesOf(t, ns)
		return len(fl) == 3 && countPrefix(t, m, "dsv4-fixed") == 0, fmt.Sprintf("%d flushes, %d keys", len(fl), countPrefix(t, m, "dsv4-fixed"))
	})
	waitReadyGroups(t, ns, "dsv4", 1)
}

// A flush due while the master is down waits, fails, is retried, and completes once the master
// is back; an operator restart afterwards runs nothing twice.
func TestFlushWaitsForTheMasterAndRunsOnce(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	h := dsv4(ns)
	h.Spec.Storage.FlushPolicy = hicachev1alpha1.FlushManual
	create(t, h)
	waitReadyGroups(t, ns, "dsv4", 1)
	nsA := getHCD(t, ns, "dsv4").Status.Cache.Namespace
	update(t, h, dspark)
	waitReadyGroups(t, ns, "dsv4", 1)
	eventually(t, 30*time.Second, "the old namespace is stale and held by the Manual policy", func() (bool, string) {
		s := getHCD(t, ns, "dsv4").Status.Cache.StaleNamespaces
		return len(s) == 1 && strings.Contains(s[0].BlockedBy, "Manual"), fmt.Sprintf("%+v", s)
	})

	m.stop(t)
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Storage.FlushPolicy = hicachev1alpha1.FlushAuto })
	var name string
	eventually(t, 60*time.Second, "the flush fails while the master is down", func() (bool, string) {
		fl := flushesOf(t, ns)
		if len(fl) != 1 {
			return false, fmt.Sprintf("%d flushes", len(fl))
		}
		name = fl[0].Name
		c := meta.FindStatusCondition(fl[0].Status.Conditions, hicachev1alpha1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", fl[0].Status.Conditions)
	})
	m.restart(t)
	cf := waitFlushComplete(t, ns, name)
	if cf.Spec.Namespace != nsA || cf.Status.Attempts < 2 {
		t.Errorf("flush of %s took %d attempts, want the namespace %s and at least 2", cf.Spec.Namespace, cf.Status.Attempts, nsA)
	}
	attempts := cf.Status.Attempts

	// A restarted operator reconciles everything again, from what the API server holds.
	restartManager(t)
	time.Sleep(3 * time.Second)
	if fl := flushesOf(t, ns); len(fl) != 1 || fl[0].Status.Attempts != attempts {
		t.Errorf("after an operator restart: %d flushes, attempts %d → %d; want the one flush, untouched", len(fl), attempts, fl[0].Status.Attempts)
	}
}

// Neutral (replicas) and compatible (page size) changes flush nothing.
func TestNeutralAndCompatibleChangesFlushNothing(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	create(t, hcd(t, ns, qwen3))
	waitReadyGroups(t, ns, "qwen3", 1)
	nsA := getHCD(t, ns, "qwen3").Status.Cache.Namespace
	keys := pageKeys(t, ns, "qwen3", 4)
	m.putKeys(t, keys, 4096)
	h := getHCD(t, ns, "qwen3")
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Replicas = ptr.To(int32(2)) })
	waitReadyGroups(t, ns, "qwen3", 2)
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.HiCache.PageSize = 128 })
	waitReadyGroups(t, ns, "qwen3", 2)
	eventually(t, 60*time.Second, "both groups on page size 128", func() (bool, string) {
		h := getHCD(t, ns, "qwen3")
		return h.Status.UpdatedReplicas == 2 && h.Status.ObservedGeneration == h.Generation, fmt.Sprintf("updated %d", h.Status.UpdatedReplicas)
	})
	time.Sleep(2 * time.Second)
	h = getHCD(t, ns, "qwen3")
	if h.Status.Cache.Namespace != nsA || len(h.Status.Cache.StaleNamespaces) != 0 {
		t.Errorf("namespace %s → %s, stale %+v; want unchanged and none stale", nsA, h.Status.Cache.Namespace, h.Status.Cache.StaleNamespaces)
	}
	if n := len(flushesOf(t, ns)); n != 0 {
		t.Errorf("%d CacheFlushes for neutral and compatible changes", n)
	}
	if got := countPrefix(t, m, nsA); got != int64(len(keys)) {
		t.Errorf("%d of %d keys left", got, len(keys))
	}
}

// A Fixed namespace written by two deployments cannot be emptied by stopping one of them: the
// change waits, with the reason, and nothing is stopped.
func TestSharedFixedNamespaceIsNotDrained(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	for _, name := range []string{"first", "second"} {
		h := dsv4(ns)
		h.Name = name
		h.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
		h.Spec.Storage.Namespace = "shared"
		create(t, h)
		waitReadyGroups(t, ns, name, 1)
	}
	before := rankPods(t, ns, "first")
	update(t, getHCD(t, ns, "first"), dspark)
	eventually(t, 30*time.Second, "the change held with its reason", func() (bool, string) {
		c := meta.FindStatusCondition(getHCD(t, ns, "first").Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "also written by HiCacheDeployment second"), fmt.Sprintf("%+v", c)
	})
	time.Sleep(2 * time.Second)
	after := rankPods(t, ns, "first")
	if len(after) != len(before) || after[0].UID != before[0].UID {
		t.Errorf("the writers of first were stopped although the namespace cannot be flushed")
	}
	if n := len(flushesOf(t, ns)); n != 0 {
		t.Errorf("%d flushes of a namespace another deployment writes", n)
	}
}

// Removing the L3 store from a deployment flushes the namespace it wrote there.
func TestRemovingStorageFlushesWhatWasWritten(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	create(t, hcd(t, ns, qwen3))
	waitReadyGroups(t, ns, "qwen3", 1)
	nsA := getHCD(t, ns, "qwen3").Status.Cache.Namespace
	m.putKeys(t, pageKeys(t, ns, "qwen3", 3), 4096)
	update(t, getHCD(t, ns, "qwen3"), func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Storage = nil })
	eventually(t, 90*time.Second, "the old namespace flushed", func() (bool, string) {
		n := countPrefix(t, m, nsA)
		return n == 0, fmt.Sprintf("%d keys left under %s", n, nsA)
	})
	waitReadyGroups(t, ns, "qwen3", 1)
	eventually(t, 30*time.Second, "the flush recorded", func() (bool, string) {
		h := getHCD(t, ns, "qwen3")
		c := h.Status.Cache
		return c.Namespace == "" && c.LastFlush != nil && c.LastFlush.Namespace == nsA && len(c.StaleNamespaces) == 0, fmt.Sprintf("%+v", c)
	})
}
