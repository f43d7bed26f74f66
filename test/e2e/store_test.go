package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// Tests of the store as one thing: two CacheBackends, in any namespaces, naming one master are
// one store; nothing in use on it is flushed, whichever backend a flush goes through; a namespace
// of it is never written under two layouts.

// sameMasterBackend creates, in a namespace of its own, a CacheBackend "same-master" that names
// the master m by another spelling of its address (the IPv4-mapped IPv6 [::ffff:127.0.0.1] for
// 127.0.0.1; the name localhost is refused by the store rule, which resolves no names).
func sameMasterBackend(t *testing.T, m *master) string {
	t.Helper()
	ns := newNamespace(t)
	externalBackend(t, ns, "same-master", strings.Replace(m.RPCAddr, "127.0.0.1", "[::ffff:127.0.0.1]", 1), strings.Replace(m.AdminURL, "127.0.0.1", "[::ffff:127.0.0.1]", 1))
	return ns
}

func manualFlush(ns, name, backend string, scope hicachev1alpha1.FlushScope, change func(*hicachev1alpha1.CacheFlush)) *hicachev1alpha1.CacheFlush {
	cf := &hicachev1alpha1.CacheFlush{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: backend}, Scope: scope,
			Force: ptr.To(true), Reason: "test"},
	}
	if change != nil {
		change(cf)
	}
	return cf
}

// waitHeldInUse waits until a flush is held because what it removes is in use, by a user whose
// name its message carries.
func waitHeldInUse(t *testing.T, ns, name, user string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("CacheFlush %s/%s held: in use by %s", ns, name, user), func() (bool, string) {
		var cf hicachev1alpha1.CacheFlush
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cf); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete)
		if c == nil {
			return false, "no Complete condition"
		}
		return c.Status == metav1.ConditionFalse && c.Reason == "InUse" && strings.Contains(c.Message, user),
			fmt.Sprintf("%s %s: %s (removed %d)", c.Status, c.Reason, c.Message, cf.Status.Removed)
	})
}

// keysStay checks, a few seconds on, that n keys are still under a namespace.
func keysStay(t *testing.T, m *master, namespace string, n int) {
	t.Helper()
	time.Sleep(3 * time.Second)
	if got := countPrefix(t, m, namespace); got != int64(n) {
		t.Fatalf("%d of %d keys left under %s, which a running deployment uses", got, n, namespace)
	}
}

// A CacheFlush in another Kubernetes namespace, through a CacheBackend of its own that names the
// same master, waits while a deployment elsewhere uses the namespace; nothing is removed.
func TestFlushThroughAnotherBackendOfTheStoreWaitsWhileInUse(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	create(t, dsv4(ns))
	waitReadyGroups(t, ns, "dsv4", 1)
	nsA := getHCD(t, ns, "dsv4").Status.Cache.Namespace
	keys := pageKeys(t, ns, "dsv4", 6)
	m.putKeys(t, keys, 4096)

	other := sameMasterBackend(t, m)
	create(t, manualFlush(other, "theirs", "same-master", hicachev1alpha1.FlushScopeNamespace, func(cf *hicachev1alpha1.CacheFlush) { cf.Spec.Namespace = nsA }))
	waitHeldInUse(t, other, "theirs", ns+"/dsv4")
	keysStay(t, m, nsA, len(keys))
}

// Flushes of the whole store and of a tenant wait while deployments write to the store: the
// operator cannot tell which tenant a deployment writes, so every writer counts.
func TestStoreWideFlushesWaitWhileDeploymentsWrite(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	create(t, dsv4(ns))
	waitReadyGroups(t, ns, "dsv4", 1)
	nsA := getHCD(t, ns, "dsv4").Status.Cache.Namespace
	keys := pageKeys(t, ns, "dsv4", 6)
	m.putKeys(t, keys, 4096)

	create(t, manualFlush(ns, "everything", "mooncake", hicachev1alpha1.FlushScopeAll, nil))
	waitHeldInUse(t, ns, "everything", "dsv4")
	keysStay(t, m, nsA, len(keys))

	// A backend that says its master is multi-tenant (this one is not: it would ignore the
	// tenant and remove every object).
	externalBackend(t, ns, "tenants", m.RPCAddr, m.AdminURL, testutil.MultiTenant())
	create(t, manualFlush(ns, "one-tenant", "tenants", hicachev1alpha1.FlushScopeTenant, func(cf *hicachev1alpha1.CacheFlush) { cf.Spec.Tenant = "team-a" }))
	waitHeldInUse(t, ns, "one-tenant", "dsv4")
	keysStay(t, m, nsA, len(keys))
}

// Two deployments in two Kubernetes namespaces, through two backends naming one master, share a
// layout and so an L3 namespace. While one still writes it, the other's move leaves it alone;
// when both moved, exactly one CacheFlush removes it, and both record it.
func TestStaleNamespaceOfTwoNamespacesIsFlushedOnce(t *testing.T) {
	ns1, m := namespaceWithBackend(t)
	ns2 := sameMasterBackend(t, m)
	first := dsv4(ns1)
	second := dsv4(ns2)
	second.Spec.Storage.BackendRef.Name = "same-master"
	create(t, first)
	create(t, second)
	waitReadyGroups(t, ns1, "dsv4", 1)
	waitReadyGroups(t, ns2, "dsv4", 1)
	nsA := getHCD(t, ns1, "dsv4").Status.Cache.Namespace
	if got := getHCD(t, ns2, "dsv4").Status.Cache.Namespace; got != nsA {
		t.Fatalf("one layout, two namespaces %s and %s", nsA, got)
	}
	keys := pageKeys(t, ns1, "dsv4", 5)
	m.putKeys(t, keys, 4096)

	update(t, first, dspark)
	waitReadyGroups(t, ns1, "dsv4", 1)
	eventually(t, 30*time.Second, "first's stale namespace waits for the deployment of the other namespace", func() (bool, string) {
		s := getHCD(t, ns1, "dsv4").Status.Cache.StaleNamespaces
		return len(s) == 1 && s[0].Namespace == nsA && strings.Contains(s[0].BlockedBy, ns2+"/dsv4"), fmt.Sprintf("%+v", s)
	})
	keysStay(t, m, nsA, len(keys))

	update(t, second, dspark)
	eventually(t, 90*time.Second, "the namespace flushed after both moved", func() (bool, string) {
		n := countPrefix(t, m, nsA)
		return n == 0, fmt.Sprintf("%d keys left", n)
	})
	eventually(t, 30*time.Second, "both deployments record the one flush", func() (bool, string) {
		a, b := getHCD(t, ns1, "dsv4").Status.Cache, getHCD(t, ns2, "dsv4").Status.Cache
		return len(a.StaleNamespaces) == 0 && len(b.StaleNamespaces) == 0 && a.LastFlush != nil && b.LastFlush != nil && a.LastFlush.Name == b.LastFlush.Name,
			fmt.Sprintf("%+v / %+v", a, b)
	})
	time.Sleep(2 * time.Second)
	if n := len(flushesOf(t, ns1)) + len(flushesOf(t, ns2)); n != 1 {
		t.Errorf("%d CacheFlushes for one stale namespace, want 1", n)
	}
}

// A Fixed namespace set to one another deployment of the store writes under another layout is
// held: no pod, the condition and an Event naming the other; once the other is gone, what it
// wrote is flushed and the held deployment starts.
func TestFixedNamespaceOfAnotherLayoutIsHeld(t *testing.T) {
	ns1, m := namespaceWithBackend(t)
	ns2 := sameMasterBackend(t, m)
	first := dsv4(ns1)
	first.Name = "first"
	first.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	first.Spec.Storage.Namespace = "shared"
	create(t, first)
	waitReadyGroups(t, ns1, "first", 1)
	keys := pageKeys(t, ns1, "first", 4)
	m.putKeys(t, keys, 4096)

	second := dsv4(ns2)
	second.Name = "second"
	second.Spec.Storage.BackendRef.Name = "same-master"
	second.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	second.Spec.Storage.Namespace = "shared"
	dspark(second)
	create(t, second)
	eventually(t, 30*time.Second, "second held with the reason", func() (bool, string) {
		c := meta.FindStatusCondition(getHCD(t, ns2, "second").Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "NamespaceConflict" && strings.Contains(c.Message, ns1+"/first"), fmt.Sprintf("%+v", c)
	})
	eventually(t, 10*time.Second, "a NamespaceConflict event", func() (bool, string) {
		return countEvents(t, ns2, "second", "NamespaceConflict") > 0, "no event"
	})
	time.Sleep(3 * time.Second)
	if pods := rankPods(t, ns2, "second"); len(pods) != 0 {
		t.Fatalf("%d pods of second write namespace shared, which first writes under another layout", len(pods))
	}
	if c := meta.FindStatusCondition(getHCD(t, ns2, "second").Status.Conditions, hicachev1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Ready = %+v while held", c)
	}
	if got := getHCD(t, ns1, "first"); got.Status.ReadyReplicas != 1 {
		t.Errorf("first, which keeps the namespace, does not serve: %d ready groups", got.Status.ReadyReplicas)
	}
	if got := countPrefix(t, m, "shared"); got != int64(len(keys)) {
		t.Errorf("%d of first's %d keys left", got, len(keys))
	}

	// first goes: what it wrote is removed before second writes the namespace.
	if err := k8s.Delete(context.Background(), getHCD(t, ns1, "first")); err != nil {
		t.Fatal(err)
	}
	waitReadyGroups(t, ns2, "second", 1)
	if got := countPrefix(t, m, "shared"); got != 0 {
		t.Errorf("second writes namespace shared over %d objects of first's layout", got)
	}
	c := meta.FindStatusCondition(getHCD(t, ns2, "second").Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
	if c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("CacheLayoutCurrent = %+v once first is gone", c)
	}
}

// Two CacheBackends naming one master by different spellings, in different namespaces, are one
// store: they publish one status.storeID, and each lists the namespaces every deployment of the
// store writes.
func TestTwoSpellingsOfOneMasterAreOneStore(t *testing.T) {
	ns1, m := namespaceWithBackend(t)
	ns2 := sameMasterBackend(t, m)
	other := newNamespace(t)
	externalBackend(t, other, "another-master", startMaster(t).RPCAddr, m.AdminURL)
	h := hcd(t, ns2, qwen3)
	h.Spec.Storage.BackendRef.Name = "same-master"
	create(t, h)
	waitReadyGroups(t, ns2, "qwen3", 1)
	l3 := getHCD(t, ns2, "qwen3").Status.Cache.Namespace
	eventually(t, 30*time.Second, "one store ID, and the use listed by both backends", func() (bool, string) {
		a, b, c := getCB(t, ns1, "mooncake").Status, getCB(t, ns2, "same-master").Status, getCB(t, other, "another-master").Status
		ok := a.StoreID != "" && a.StoreID == b.StoreID && c.StoreID != a.StoreID &&
			len(a.Namespaces) == 1 && a.Namespaces[0].Namespace == l3 && slices.Equal(a.Namespaces[0].Deployments, []string{ns2 + "/qwen3"}) &&
			len(b.Namespaces) == 1 && slices.Equal(b.Namespaces[0].Deployments, []string{"qwen3"}) && len(c.Namespaces) == 0
		return ok, fmt.Sprintf("%s %+v / %s %+v / %s %+v", a.StoreID, a.Namespaces, b.StoreID, b.Namespaces, c.StoreID, c.Namespaces)
	})
}

// A user who holds the override verb flushes what is in use, with spec.allowInUse; one who only
// may create CacheFlushes is refused at admission.
func TestOverrideFlushesWhatIsInUse(t *testing.T) {
	installOverridePolicy(t)
	ns, m := namespaceWithBackend(t)
	create(t, dsv4(ns))
	waitReadyGroups(t, ns, "dsv4", 1)
	nsA := getHCD(t, ns, "dsv4").Status.Cache.Namespace
	keys := pageKeys(t, ns, "dsv4", 6)
	m.putKeys(t, keys, 4096)

	create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "flusher", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"hicache.io"}, Resources: []string{"cacheflushes"}, Verbs: []string{"create", "get"}}}})
	for _, b := range []struct{ user, kind, role string }{
		{"flusher", "Role", "flusher"}, {"overrider", "Role", "flusher"}, {"overrider", "ClusterRole", "flush-override"},
	} {
		create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: b.user + "-", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: b.kind, Name: b.role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: b.user}}})
	}
	flush := func(name, l3 string) *hicachev1alpha1.CacheFlush {
		return manualFlush(ns, name, "mooncake", hicachev1alpha1.FlushScopeNamespace, func(cf *hicachev1alpha1.CacheFlush) {
			cf.Spec.Namespace, cf.Spec.AllowInUse = l3, true
		})
	}
	// The policy takes effect once the API server has compiled it: probe with a namespace
	// nothing holds, so that a flush admitted before removes nothing.
	eventually(t, 30*time.Second, "flusher refused spec.allowInUse at admission", func() (bool, string) {
		probe := flush("", "nothing-here")
		probe.GenerateName = "probe-"
		err := as(t, "flusher").Create(context.Background(), probe)
		return err != nil && strings.Contains(err.Error(), `needs the verb "override"`), fmt.Sprintf("%v", err)
	})
	if err := as(t, "flusher").Create(context.Background(), flush("by-flusher", nsA)); err == nil || !strings.Contains(err.Error(), "flusher does not have") {
		t.Fatalf("flusher, who may only create CacheFlushes, set spec.allowInUse: %v", err)
	}
	keysStay(t, m, nsA, len(keys))

	if err := as(t, "overrider").Create(context.Background(), flush("by-overrider", nsA)); err != nil {
		t.Fatalf("overrider, bound to the override ClusterRole, is refused: %v", err)
	}
	cf := waitFlushComplete(t, ns, "by-overrider")
	if cf.Status.Removed != int64(len(keys)) || countPrefix(t, m, nsA) != 0 {
		t.Errorf("the override removed %d of %d objects; %d left", cf.Status.Removed, len(keys), countPrefix(t, m, nsA))
	}
	if n := countEvents(t, ns, "by-overrider", hicachev1alpha1.ReasonInUse); n == 0 {
		t.Error("no InUse event says that the override flushed what was in use")
	}
}

// as is a client that impersonates user.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(cluster.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A deployment that changes its Fixed namespace onto one another deployment writes under another
// layout is held too: no pod of it writes that namespace, and its groups on its own namespace are
// not rolled onto it.
func TestFixedNamespaceChangedOntoAnotherLayoutIsHeld(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	for _, d := range []struct{ name, l3 string }{{"first", "shared"}, {"second", "own"}} {
		h := dsv4(ns)
		h.Name = d.name
		h.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
		h.Spec.Storage.Namespace = d.l3
		if d.name == "second" {
			dspark(h)
		}
		create(t, h)
		waitReadyGroups(t, ns, d.name, 1)
	}
	keys := pageKeys(t, ns, "first", 3)
	m.putKeys(t, keys, 4096)
	update(t, getHCD(t, ns, "second"), func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Storage.Namespace = "shared" })
	eventually(t, 30*time.Second, "second held with the reason", func() (bool, string) {
		c := meta.FindStatusCondition(getHCD(t, ns, "second").Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == hicachev1alpha1.ReasonNamespaceConflict && strings.Contains(c.Message, "HiCacheDeployment first"),
			fmt.Sprintf("%+v", c)
	})
	time.Sleep(3 * time.Second)
	for _, p := range rankPods(t, ns, "second") {
		if l := p.Labels[hicachev1alpha1.LabelCacheNamespace]; l != "own" {
			t.Errorf("pod %s of second writes namespace %s", p.Name, l)
		}
	}
	if got := getHCD(t, ns, "second").Status.Cache; got.Namespace != "own" || got.Conflict == nil || got.Conflict.Deployment != ns+"/first" {
		t.Errorf("second's cache status %+v: want it still on own, with the conflict recorded", got)
	}
	if got := countPrefix(t, m, "shared"); got != int64(len(keys)) {
		t.Errorf("%d of first's %d keys left", got, len(keys))
	}
}
