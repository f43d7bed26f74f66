package hicachedeployment

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// Two operators in one process, each on a namespace of its own, on a real API server. Each
// deployment waits for a backend that does not exist: its status is written once and nothing
// reconciles it again (a status change wakes no reconcile). What an operator remembers of its
// status writes must not outlive the cache catching up with them, nor the object, and one
// operator must not hold the other's.
func TestClusterStatusWritesAreForgottenOnceTheCacheHoldsThem(t *testing.T) {
	cfg := startAPIServer(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, hicachev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	type operator struct {
		ns  string
		r   *HiCacheDeploymentReconciler
		key types.NamespacedName
	}
	ops := []*operator{{ns: "op-a"}, {ns: "op-b"}}
	for _, op := range ops {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: op.ns}}); err != nil {
			t.Fatal(err)
		}
		op.r = startDeploymentReconciler(t, cfg, scheme, op.ns)
		h := testutil.DeepSeekV4(op.ns, "waits")
		h.Spec.Storage.BackendRef.Name = "missing"
		if err := k8s.Create(ctx, h); err != nil {
			t.Fatal(err)
		}
		op.key = client.ObjectKeyFromObject(h)
	}
	for i, op := range ops {
		other := ops[1-i]
		var h hicachev1alpha1.HiCacheDeployment
		testutil.Eventually(t, 30*time.Second, op.ns+": the deployment reports its missing backend", func() (bool, string) {
			if err := k8s.Get(ctx, op.key, &h); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionReady)
			return c != nil && c.Reason == hicachev1alpha1.ReasonBackendNotFound, fmt.Sprintf("Ready %+v", c)
		})
		if remembers(other.r, op.key) {
			t.Errorf("the operator of %s remembers the status write of the operator of %s", other.ns, op.ns)
		}
		testutil.Eventually(t, 10*time.Second, op.ns+": the status write forgotten once the cache holds it", func() (bool, string) {
			return !remembers(op.r, op.key), fmt.Sprintf("still remembered; the API server holds resource version %s", h.ResourceVersion)
		})
	}

	// An object written again and deleted before the cache caught up is forgotten with it.
	op := ops[0]
	h := testutil.DeepSeekV4(op.ns, "goes")
	h.Spec.Storage.BackendRef.Name = "missing"
	if err := k8s.Create(ctx, h); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the second deployment reports its missing backend", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(h), h); err != nil {
			return false, err.Error()
		}
		return h.Status.ObservedGeneration == h.Generation, fmt.Sprintf("observed generation %d", h.Status.ObservedGeneration)
	})
	if err := k8s.Delete(ctx, h); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the deleted deployment's status write forgotten", func() (bool, string) {
		return !remembers(op.r, client.ObjectKeyFromObject(h)), "still remembered"
	})
}

// remembers tells whether r holds a status write of the deployment key.
func remembers(r *HiCacheDeploymentReconciler, key types.NamespacedName) bool {
	r.writes.Mu.Lock()
	defer r.writes.Mu.Unlock()
	_, ok := r.writes.M[key]
	return ok
}

// startAPIServer starts a kube-apiserver and etcd (bin/, or $KUBEBUILDER_ASSETS) with the
// operator's CRDs until the test ends.
func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join("..", "..", "..", "bin"),
		CRDDirectoryPaths:     []string{testutil.CRDDir()},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}

// startDeploymentReconciler runs a manager with the HiCacheDeployment controller on namespace ns
// until the test ends, and returns its reconciler.
func startDeploymentReconciler(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, ns string) *HiCacheDeploymentReconciler {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  reconcile.CacheOptions(cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}),
		// Both managers run the same controllers in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := storeuse.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	r := &HiCacheDeploymentReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("hicachedeployment-controller"), Options: storeuse.Options{}.WithDefaults()}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager of %s: %v", ns, err)
		}
	})
	return r
}
