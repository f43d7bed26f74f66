package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// grantStore creates, as the cluster administrator, a ClusterCacheStoreGrant of the store at rpc
// with its masters' admin URLs for namespaces, removed when the test ends.
func grantStore(t *testing.T, rpc string, adminURLs []string, namespaces ...string) *hicachev1alpha1.ClusterCacheStoreGrant {
	t.Helper()
	g := &hicachev1alpha1.ClusterCacheStoreGrant{ObjectMeta: metav1.ObjectMeta{GenerateName: "grant-"},
		Spec: hicachev1alpha1.ClusterCacheStoreGrantSpec{RPCAddress: rpc, AdminURLs: adminURLs, Namespaces: namespaces}}
	create(t, g)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), g) })
	return g
}

// adminURLsOf are the admin URLs of every master with HA.
func adminURLsOf(ha *mooncaketest.HA) []string {
	var out []string
	for _, m := range ha.Masters {
		out = append(out, m.AdminURL)
	}
	return out
}

// tenantOf creates ServiceAccount "tenant" in ns with a Role there that gives it what a
// namespace's editor of the operator's kinds holds (every verb on CacheBackends, CacheFlushes,
// HiCacheDeployments, the override verb included, on Services, Endpoints and EndpointSlices,
// and, as a Role can only name it, on ClusterCacheStoreGrants), and returns a client that
// impersonates it: namespaced rights, nothing cluster-wide.
func tenantOf(t *testing.T, ns string) client.Client {
	t.Helper()
	create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}})
	create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"hicache.io"}, Resources: []string{"cachebackends", "cacheflushes", "hicachedeployments", "clustercachestoregrants"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"services", "endpoints"}, Verbs: []string{"*"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"*"}},
	}})
	create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant-edit"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: ns}}})
	cfg := rest.CopyConfig(cluster.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":tenant",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A tenant with only namespaced rights in namespace A (a ServiceAccount bound to a Role like a
// namespace's editor, the override verb included, impersonated) cannot reach the store of
// namespace B. B's backend is on a real master MB on which B's deployment runs and which holds
// keys the real Mooncake client put; a cluster administrator shares MB with A through a
// ClusterCacheStoreGrant that does not allow cross-namespace overrides. The tenant tries:
//
//   - creating a ClusterCacheStoreGrant of MB for A with allowCrossNamespaceOverride, and
//     patching the administrator's grant to set it: both forbidden by the API server;
//   - the nine admin-URL attacks of TestExternalAdminURLOffTheRPCHostIsRefused (an unused RPC
//     address on 127.0.0.2 with MB's admin URL, spelled plainly, as LOCALHOST, with a trailing
//     dot, as IPv4-mapped IPv6; a Service name against MB's IP; MB's host with an admin URL
//     carrying userinfo, a path, a query or a fragment), each a backend and a flush of the whole
//     store;
//   - a Service of A of type ExternalName as RPC and admin host;
//   - a Service of A without a selector, with a hand-written EndpointSlice;
//   - a Service of A with a selector, plus a hand-written EndpointSlice carrying its name (one
//     forged as the endpoint controller's is corrected by that controller, so it is checked in
//     TestServiceProof: its addresses must be the IPs of the pods of A it names);
//   - etcd:// addresses on loopback: the etcd on MB's own address, on another loopback address,
//     on two, as localhost, with MB's admin URL spelled plainly or IPv4-mapped;
//   - through its granted backend of MB, a flush of B's L3 namespace and one of the whole store,
//     both with spec.allowInUse (admitted: the tenant holds the override verb in A), over B's
//     running deployment.
//
// Every refused backend is Ready=False with StoreRefused and a message naming the field, every
// flush waits saying why, the grant's override flushes wait with InUse naming the cluster-scoped
// grant they lack, and MB holds as many keys after as before. Before the Service proof and the
// loopback rule for etcd://, the ExternalName and the etcd-on-loopback backends were accepted.
func TestStoreBoundaryAgainstANamespacedTenant(t *testing.T) {
	installOverridePolicy(t)
	nsB, mb := namespaceWithBackend(t)
	create(t, dsv4(nsB))
	waitReadyGroups(t, nsB, "dsv4", 1)
	l3B := getHCD(t, nsB, "dsv4").Status.Cache.Namespace
	keys := pageKeys(t, nsB, "dsv4", 4)
	for i := range 8 {
		keys = append(keys, fmt.Sprintf("tenant-b-key-%d", i))
	}
	keysKeptThroughout(t, mb, keys)

	nsA := newNamespace(t)
	tenant := tenantOf(t, nsA)
	ctx := context.Background()
	shared := grantStore(t, mb.RPCAddr, []string{mb.AdminURL}, nsA, nsB)

	// Cluster grants are the cluster administrator's.
	own := &hicachev1alpha1.ClusterCacheStoreGrant{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + nsA},
		Spec: hicachev1alpha1.ClusterCacheStoreGrantSpec{RPCAddress: mb.RPCAddr, AdminURLs: []string{mb.AdminURL}, Namespaces: []string{nsA}, AllowCrossNamespaceOverride: true}}
	if err := tenant.Create(ctx, own); !apierrors.IsForbidden(err) {
		t.Errorf("the tenant created a ClusterCacheStoreGrant: %v", err)
		_ = k8s.Delete(ctx, own)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"allowCrossNamespaceOverride":true}}`))
	if err := tenant.Patch(ctx, shared.DeepCopy(), patch); !apierrors.IsForbidden(err) {
		t.Errorf("the tenant patched the administrator's grant: %v", err)
	}

	port := mb.AdminURL[strings.LastIndex(mb.AdminURL, ":")+1:]
	mbHost := mb.RPCAddr[:strings.LastIndex(mb.RPCAddr, ":")]
	type attack struct{ name, rpc, admin, says string }
	attacks := []attack{
		{"unused-rpc", "127.0.0.2:1", mb.AdminURL, "adminURL"},
		{"localhost", "127.0.0.2:1", "http://LOCALHOST:" + port, "localhost"},
		{"trailing-dot", "127.0.0.2:1", "http://127.0.0.1.:" + port, "adminURL"},
		{"mapped-ipv6", "127.0.0.2:1", "http://[::ffff:127.0.0.1]:" + port, "adminURL"},
		{"service-name", "decoy:50051", mb.AdminURL, "adminURL"},
		{"userinfo", mbHost + ":1", "http://u:p@127.0.0.1:" + port, "adminURL"},
		{"path", mbHost + ":1", mb.AdminURL + "/x", "adminURL"},
		{"query", mbHost + ":1", mb.AdminURL + "/?a=1", "adminURL"},
		{"fragment", mbHost + ":1", mb.AdminURL + "/#f", "adminURL"},
		{"external-name", "ext:50051", "http://ext:" + port, "ExternalName"},
		{"no-selector", "manual:50051", "http://manual:" + port, "no selector"},
		{"hand-written-slice", "hijack:50051", "http://hijack:" + port, "not written by Kubernetes"},
		{"etcd-on-mb-address", "etcd://127.0.0.1:1", mb.AdminURL, "loopback"},
		{"etcd-other-loopback", "etcd://127.0.0.2:1", mb.AdminURL, "loopback"},
		{"etcd-two-loopbacks", "etcd://127.0.0.2:1;127.0.0.3:1", "http://[::ffff:127.0.0.1]:" + port, "loopback"},
		{"etcd-localhost", "etcd://localhost:1", mb.AdminURL, "loopback"},
	}
	servicePorts := []corev1.ServicePort{{Name: "admin", Port: 9003}, {Name: "rpc", Port: 50051}}
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: nsA}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName,
			ExternalName: "mooncake-master." + nsB + ".svc.cluster.local"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "manual", Namespace: nsA}, Spec: corev1.ServiceSpec{Ports: servicePorts}},
		{ObjectMeta: metav1.ObjectMeta{Name: "hijack", Namespace: nsA}, Spec: corev1.ServiceSpec{Ports: servicePorts, Selector: map[string]string{"app": "nothing"}}},
	} {
		if err := tenant.Create(ctx, s); err != nil {
			t.Fatalf("the tenant creating Service %s: %v", s.Name, err)
		}
	}
	// The addresses: pod IPs of another namespace's masters, as a tenant would find them.
	for _, s := range []struct{ name, service, by string }{
		{"manual-1", "manual", "tenant"}, {"hijack-1", "hijack", "tenant"},
	} {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: nsA,
			Labels: map[string]string{discoveryv1.LabelServiceName: s.service, discoveryv1.LabelManagedBy: s.by}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.7.7"}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("admin"), Port: ptr.To[int32](9003)}}}
		if err := tenant.Create(ctx, es); err != nil {
			t.Fatalf("the tenant creating EndpointSlice %s: %v", s.name, err)
		}
	}
	for _, a := range attacks {
		if err := tenant.Create(ctx, testutil.ExternalBackend(nsA, a.name, a.rpc, a.admin)); err != nil {
			t.Fatalf("the tenant creating CacheBackend %s: %v", a.name, err)
		}
		if err := tenant.Create(ctx, manualFlush(nsA, a.name, a.name, hicachev1alpha1.FlushScopeAll, func(cf *hicachev1alpha1.CacheFlush) { cf.Spec.AllowInUse = true })); err != nil {
			t.Fatalf("the tenant creating CacheFlush %s: %v", a.name, err)
		}
	}
	// The granted backend of MB, and the overrides through it.
	if err := tenant.Create(ctx, testutil.ExternalBackend(nsA, "granted", mb.RPCAddr, mb.AdminURL)); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, nsA, "granted", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 30*time.Second)
	overrides := []*hicachev1alpha1.CacheFlush{
		manualFlush(nsA, "override-b-namespace", "granted", hicachev1alpha1.FlushScopeNamespace, func(cf *hicachev1alpha1.CacheFlush) {
			cf.Spec.Namespace, cf.Spec.AllowInUse = l3B, true
		}),
		manualFlush(nsA, "override-everything", "granted", hicachev1alpha1.FlushScopeAll, func(cf *hicachev1alpha1.CacheFlush) { cf.Spec.AllowInUse = true }),
	}
	for _, cf := range overrides {
		// The admission policy compiles a moment after it is created.
		eventually(t, 30*time.Second, "the tenant's override flush admitted", func() (bool, string) {
			err := tenant.Create(ctx, cf.DeepCopy())
			return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprintf("%v", err)
		})
	}

	for _, a := range attacks {
		eventually(t, 30*time.Second, fmt.Sprintf("CacheBackend %s/%s Ready=False %s", nsA, a.name, hicachev1alpha1.ReasonStoreRefused), func() (bool, string) {
			var cb hicachev1alpha1.CacheBackend
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: nsA, Name: a.name}, &cb); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
			if c == nil {
				return false, "no Ready condition"
			}
			ok := c.Status == metav1.ConditionFalse && c.Reason == hicachev1alpha1.ReasonStoreRefused &&
				strings.Contains(c.Message, "spec.mooncake.external") && strings.Contains(c.Message, a.says)
			return ok, c.Reason + ": " + c.Message
		})
	}
	for _, cf := range overrides {
		waitHeldInUse(t, nsA, cf.Name, nsB+"/dsv4")
		got := getFlush(t, nsA, cf.Name)
		if c := meta.FindStatusCondition(got.Status.Conditions, hicachev1alpha1.ConditionComplete); c == nil || !strings.Contains(c.Message, "cluster-scoped grant") || !strings.Contains(c.Message, "allowCrossNamespaceOverride") {
			t.Errorf("CacheFlush %s/%s does not say it needs a cluster-scoped grant: %+v", nsA, cf.Name, c)
		}
	}
	var names []string
	for _, a := range attacks {
		names = append(names, a.name)
	}
	// Nothing completes, for long enough that each would have run many times.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, name := range append(names, "override-b-namespace", "override-everything") {
			if c := meta.FindStatusCondition(getFlush(t, nsA, name).Status.Conditions, hicachev1alpha1.ConditionComplete); c != nil && c.Status == metav1.ConditionTrue {
				t.Fatalf("CacheFlush %s/%s completed: %s", nsA, name, c.Message)
			}
		}
		time.Sleep(time.Second)
	}
	for _, name := range names {
		c := meta.FindStatusCondition(getFlush(t, nsA, name).Status.Conditions, hicachev1alpha1.ConditionComplete)
		if c == nil || c.Reason != hicachev1alpha1.ReasonStoreRefused || !strings.Contains(c.Message, "calls no admin URL") {
			t.Errorf("CacheFlush %s/%s does not say it waits for a store the operator may call: %+v", nsA, name, c)
		}
	}
	if got := countPrefix(t, mb, l3B); got != int64(len(keys)-8) {
		t.Errorf("%d keys left under B's namespace %s", got, l3B)
	}
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, nsB, "mooncake", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 10*time.Second)
}

// A flush with spec.allowInUse over users in another namespace runs only once a cluster
// administrator's ClusterCacheStoreGrant of the store sets allowCrossNamespaceOverride for both
// namespaces: before, it waits saying so; after, it removes what B's running deployment uses.
func TestCrossNamespaceOverrideNeedsAClusterGrant(t *testing.T) {
	installOverridePolicy(t)
	nsB, mb := namespaceWithBackend(t)
	create(t, dsv4(nsB))
	waitReadyGroups(t, nsB, "dsv4", 1)
	l3B := getHCD(t, nsB, "dsv4").Status.Cache.Namespace
	keys := pageKeys(t, nsB, "dsv4", 4)
	mb.putKeys(t, keys, 4096)

	nsA := newNamespace(t)
	tenant := tenantOf(t, nsA)
	// The API server refuses a grant whose admin URL carries more than a scheme, host and port.
	for _, bad := range []string{"http://u@" + strings.TrimPrefix(mb.AdminURL, "http://"), mb.AdminURL + "/api", "ftp://x:1"} {
		g := &hicachev1alpha1.ClusterCacheStoreGrant{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-"},
			Spec: hicachev1alpha1.ClusterCacheStoreGrantSpec{RPCAddress: mb.RPCAddr, AdminURLs: []string{bad}, Namespaces: []string{nsA}}}
		if err := k8s.Create(context.Background(), g, client.DryRunAll); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.adminURLs[0]") {
			t.Errorf("a grant with admin URL %q: %v; want it refused naming spec.adminURLs[0]", bad, err)
		}
	}
	g := grantStore(t, mb.RPCAddr, []string{mb.AdminURL}, nsA, nsB)
	if err := tenant.Create(context.Background(), testutil.ExternalBackend(nsA, "granted", mb.RPCAddr, mb.AdminURL)); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, nsA, "granted", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 30*time.Second)
	cf := manualFlush(nsA, "override", "granted", hicachev1alpha1.FlushScopeNamespace, func(cf *hicachev1alpha1.CacheFlush) {
		cf.Spec.Namespace, cf.Spec.AllowInUse = l3B, true
	})
	eventually(t, 30*time.Second, "the tenant's override flush admitted", func() (bool, string) {
		err := tenant.Create(context.Background(), cf.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprintf("%v", err)
	})
	waitHeldInUse(t, nsA, "override", nsB+"/dsv4")
	keysStay(t, mb, l3B, len(keys))

	update(t, g, func(g *hicachev1alpha1.ClusterCacheStoreGrant) { g.Spec.AllowCrossNamespaceOverride = true })
	done := waitFlushComplete(t, nsA, "override")
	if done.Status.Removed != int64(len(keys)) || countPrefix(t, mb, l3B) != 0 {
		t.Errorf("the granted override removed %d of %d objects; %d left", done.Status.Removed, len(keys), countPrefix(t, mb, l3B))
	}
}
