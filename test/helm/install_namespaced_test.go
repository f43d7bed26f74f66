package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

// TestInstallWatchingNamespaces installs the chart with watchNamespaces: the manager's rules come
// as a Role and a RoleBinding in the watched namespace, with no cluster-wide grant of them. The
// operator, running as the chart's ServiceAccount with the cache the chart's --watch-namespaces
// sets, brings the sample to Ready there with those grants alone (the API server refuses nothing),
// requests every verb they grant or the reason is known, and requests nothing cluster-scoped nor
// outside the watched namespace and its own (the leader-election Lease); a CacheBackend in a
// namespace it does not watch is left alone.
func TestInstallWatchingNamespaces(t *testing.T) {
	helmBinary(t)
	if testing.Short() {
		t.Skip("starts a local control plane; skipped with -short")
	}
	ctx := context.Background()
	start := time.Now()
	cluster, admin, kubeconfig := startAuditedCluster(t)
	t.Logf("local cluster ready in %s", time.Since(start).Round(time.Millisecond))
	const watched, unwatched = "serving", "elsewhere"
	for _, ns := range []string{namespace, watched, unwatched} {
		createNamespace(t, admin, ns, nil)
	}
	helm(t, "install", release, chartDir(), "--namespace", namespace, "--kubeconfig", kubeconfig, "--wait=false",
		"--set", "watchNamespaces={"+watched+"}")
	created, err := decodeManifest(helm(t, "get", "manifest", release, "--namespace", namespace, "--kubeconfig", kubeconfig))
	if err != nil {
		t.Fatalf("decoding the release manifest: %v", err)
	}
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
		if created.find(kind, release+"-manager") != nil {
			t.Errorf("with watchNamespaces the release created %s %s-manager", kind, release)
		}
	}
	for _, kind := range []string{"Role", "RoleBinding"} {
		found := false
		for _, u := range created.ofKind(kind) {
			found = found || (u.GetName() == release+"-manager" && u.GetNamespace() == watched)
		}
		if !found {
			t.Errorf("the release created no %s %s-manager in %s; it created %v", kind, release, watched, created.names())
		}
	}
	checkCRDsEstablished(t, admin)
	sas := created.ofKind("ServiceAccount")
	if len(sas) != 1 {
		t.Fatalf("the release has %d ServiceAccounts, want 1", len(sas))
	}
	serviceAccount := sas[0].GetName()
	var watch []string
	for _, u := range created.ofKind("Deployment") {
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
			t.Fatal(err)
		}
		if v, ok := args(t, manager(&d))["watch-namespaces"]; ok {
			watch = strings.Split(v, ",")
		}
	}
	if len(watch) != 1 || watch[0] != watched {
		t.Fatalf("the release's Deployment passes --watch-namespaces=%v, want %s", watch, watched)
	}

	operatorUser := "system:serviceaccount:" + namespace + ":" + serviceAccount
	step := time.Now()
	op := startOperator(t, cluster.Config(), operatorUser, watch)
	select {
	case <-op.elected:
	case <-op.done:
		t.Fatalf("the operator stopped before it was elected: %v", op.err)
	case <-time.After(60 * time.Second):
		t.Fatalf("the operator was not elected leader within 60s; refused requests: %v", op.denied())
	}
	t.Logf("operator elected leader in %s", time.Since(step).Round(time.Millisecond))

	master := mooncaketest.Start(t)
	backendIn := func(ns, name string) *hicachev1alpha1.CacheBackend {
		return &hicachev1alpha1.CacheBackend{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
				External: &hicachev1alpha1.ExternalMooncake{RPCAddress: master.RPCAddr, AdminURL: master.AdminURL},
			}},
		}
	}
	ignored := backendIn(unwatched, "mooncake")
	if err := admin.Create(ctx, ignored); err != nil {
		t.Fatal(err)
	}
	hcd := sampleHCD(t, watched)
	backend := backendIn(watched, hcd.Spec.Storage.BackendRef.Name)
	step = time.Now()
	if err := admin.Create(ctx, backend); err != nil {
		t.Fatal(err)
	}
	waitReady(t, admin, op, serviceAccount, backend, 60*time.Second)
	if err := admin.Create(ctx, hcd); err != nil {
		t.Fatal(err)
	}
	waitReady(t, admin, op, serviceAccount, hcd, 120*time.Second)
	t.Logf("CacheBackend and HiCacheDeployment Ready in %s with the Roles of %s", time.Since(step).Round(time.Millisecond), watched)
	if d := op.denied(); len(d) > 0 {
		t.Errorf("the API server refused the operator, running as %s with Roles in %s: %v", serviceAccount, watched, d)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(ignored), ignored); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(ignored.Status.Conditions, hicachev1alpha1.ConditionReady); c != nil || ignored.Status.ObservedGeneration != 0 {
		t.Errorf("the CacheBackend in %s, which the operator does not watch, has a status: %+v", unwatched, ignored.Status)
	}
	op.stop(t)
	checkEveryGrantRequested(t, cluster.AuditLogPath(), operatorUser)
	checkRequestsIn(t, cluster.AuditLogPath(), operatorUser, watched, namespace)
}
