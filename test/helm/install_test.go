package helm

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// leaderElectionID is cmd/manager's LeaderElectionID.
const leaderElectionID = "hicache-operator.hicache.io"

// TestInstall installs the chart into a local control plane (real kube-apiserver, etcd,
// controller-manager, scheduler; kwok nodes), runs the operator in this process as the chart's
// ServiceAccount, brings a sample HiCacheDeployment to Ready, and uninstalls the release.
//
// kwok runs no containers, so the chart's own pod cannot run the operator; impersonating its
// ServiceAccount instead proves that the chart's RBAC is all the operator needs: any request the
// API server refuses fails the test.
func TestInstall(t *testing.T) {
	helmBinary(t)
	if testing.Short() {
		t.Skip("starts a local control plane; skipped with -short")
	}
	ctx := context.Background()
	start := time.Now()
	cluster, admin, kubeconfig := startAuditedCluster(t)
	t.Logf("local cluster ready in %s", time.Since(start).Round(time.Millisecond))

	// The release namespace enforces the restricted Pod Security profile: the API server's own
	// admission refuses the operator pod if the chart's security context falls short of it.
	createNamespace(t, admin, namespace, map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	})

	step := time.Now()
	helm(t, "install", release, chartDir(), "--namespace", namespace, "--kubeconfig", kubeconfig, "--wait=false")
	t.Logf("helm install in %s", time.Since(step).Round(time.Millisecond))
	step = time.Now()
	out := helm(t, "get", "manifest", release, "--namespace", namespace, "--kubeconfig", kubeconfig)
	created, err := decodeManifest(out)
	if err != nil {
		t.Fatalf("decoding the release manifest: %v", err)
	}
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"} {
		if len(created.ofKind(kind)) == 0 {
			t.Errorf("the release created no %s; it created %v", kind, created.names())
		}
	}
	for _, u := range created {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(u), u.DeepCopy()); err != nil {
			t.Errorf("%s %s of the release: %v", u.GetKind(), u.GetName(), err)
		}
	}
	crds := checkCRDsEstablished(t, admin)

	sas := created.ofKind("ServiceAccount")
	if len(sas) != 1 {
		t.Fatalf("the release has %d ServiceAccounts, want 1", len(sas))
	}
	serviceAccount := sas[0].GetName()
	operatorPodAdmitted(t, admin, created)
	t.Logf("operator pod admitted under the restricted profile in %s", time.Since(step).Round(time.Millisecond))
	step = time.Now()

	// The operator, in this process, as the ServiceAccount.
	operatorUser := "system:serviceaccount:" + namespace + ":" + serviceAccount
	op := startOperator(t, cluster.Config(), operatorUser, nil)
	select {
	case <-op.elected:
	case <-op.done:
		t.Fatalf("the operator stopped before it was elected: %v", op.err)
	case <-time.After(60 * time.Second):
		t.Fatalf("the operator was not elected leader within 60s; refused requests: %v", op.denied())
	}
	t.Logf("operator elected leader in %s", time.Since(step).Round(time.Millisecond))
	var lease coordinationv1.Lease
	if err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leaderElectionID}, &lease); err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("leader-election Lease %s/%s: %v, holder %v", namespace, leaderElectionID, err, lease.Spec.HolderIdentity)
	}
	eventually(t, 30*time.Second, "a LeaderElection event in "+namespace, func() (bool, string) {
		var events corev1.EventList
		if err := admin.List(ctx, &events, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Reason == "LeaderElection" && e.InvolvedObject.Name == leaderElectionID {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none about the Lease", len(events.Items))
	})

	// The Qwen3 sample, its L3 store an external CacheBackend on a real Mooncake master.
	serving := "serving"
	createNamespace(t, admin, serving, nil)
	master := mooncaketest.Start(t)
	hcd := sampleHCD(t, serving)
	backend := &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: hcd.Spec.Storage.BackendRef.Name, Namespace: serving},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: master.RPCAddr, AdminURL: master.AdminURL},
		}},
	}
	step = time.Now()
	if err := admin.Create(ctx, backend); err != nil {
		t.Fatalf("creating CacheBackend %s: %v", backend.Name, err)
	}
	waitReady(t, admin, op, serviceAccount, backend, 60*time.Second)
	t.Logf("CacheBackend Ready in %s", time.Since(step).Round(time.Millisecond))
	step = time.Now()
	if err := admin.Create(ctx, hcd); err != nil {
		t.Fatalf("creating HiCacheDeployment %s: %v", hcd.Name, err)
	}
	waitReady(t, admin, op, serviceAccount, hcd, 120*time.Second)
	t.Logf("HiCacheDeployment Ready in %s", time.Since(step).Round(time.Millisecond))
	if d := op.denied(); len(d) > 0 {
		t.Errorf("the API server refused the operator, running as %s: %v", serviceAccount, d)
	}
	children := childrenOf(t, admin, serving, hcd.Name)
	if len(children["StatefulSet"]) == 0 {
		t.Fatalf("the Ready HiCacheDeployment has no StatefulSet; children %v", children)
	}
	// Ready means every rank pod is: one pod for TP=4 on a node of four GPUs.
	var pods corev1.PodList
	if err := admin.List(ctx, &pods, client.InNamespace(serving), client.MatchingLabels{hicachev1alpha1.LabelDeployment: hcd.Name}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Errorf("the Ready HiCacheDeployment has %d rank pods, want 1", len(pods.Items))
	}
	for _, p := range pods.Items {
		if !kubeutil.PodReady(&p) || p.Spec.NodeName == "" {
			t.Errorf("rank pod %s is not Ready on a node (node %q, phase %s)", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
	}
	op.stop(t)
	// The API server's audit log: every verb the chart grants was requested, or is explained.
	checkEveryGrantRequested(t, cluster.AuditLogPath(), operatorUser)

	// Uninstall: everything the release created goes; the CRDs, which Helm installs from crds/
	// and never deletes, stay, and so do the objects of their kinds.
	step = time.Now()
	helm(t, "uninstall", release, "--namespace", namespace, "--kubeconfig", kubeconfig)
	t.Logf("helm uninstall in %s", time.Since(step).Round(time.Millisecond))
	for _, u := range created {
		eventually(t, 30*time.Second, u.GetKind()+" "+u.GetName()+" deleted", func() (bool, string) {
			err := admin.Get(ctx, client.ObjectKeyFromObject(u), u.DeepCopy())
			return apierrors.IsNotFound(err), fmt.Sprintf("still there (%v)", err)
		})
	}
	t.Logf("the release's objects gone in %s", time.Since(step).Round(time.Millisecond))
	eventually(t, 60*time.Second, "the operator's pods garbage-collected", func() (bool, string) {
		pods := releasePods(t, admin, created)
		return len(pods) == 0, fmt.Sprintf("%d pods left", len(pods))
	})
	var secrets corev1.SecretList
	if err := admin.List(ctx, &secrets, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm", "name": release}); err != nil || len(secrets.Items) != 0 {
		t.Errorf("the release's records are still there: %d Secrets (%v)", len(secrets.Items), err)
	}
	for _, name := range crds {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Errorf("CRD %s is gone after uninstall (Helm keeps crds/): %v", name, err)
		}
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(hcd), &hicachev1alpha1.HiCacheDeployment{}); err != nil {
		t.Errorf("the HiCacheDeployment is gone after uninstall: %v", err)
	}

	// With the operator gone, deleting the sample leaves its children to the garbage collector,
	// through their owner references.
	step = time.Now()
	if err := admin.Delete(ctx, hcd); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the sample's children garbage-collected", func() (bool, string) {
		left := childrenOf(t, admin, serving, hcd.Name)
		n := 0
		for _, names := range left {
			n += len(names)
		}
		return n == 0, fmt.Sprintf("left: %v", left)
	})
	t.Logf("the sample's children garbage-collected in %s", time.Since(step).Round(time.Millisecond))
	t.Logf("install test done in %s", time.Since(start).Round(time.Millisecond))
}

// startAuditedCluster starts a local control plane with one simulated GPU node and an audit log,
// stopped when the test ends; it returns a client and a kubeconfig file of its administrator.
func startAuditedCluster(t *testing.T) (*localcluster.Cluster, client.Client, string) {
	t.Helper()
	cluster, err := localcluster.Start(context.Background(), localcluster.Options{Nodes: localcluster.GPUNodes(1, 8), Audit: true})
	if err != nil {
		t.Fatalf("starting the local cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stopping the local cluster: %v", err)
		}
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, hicachev1alpha1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := client.New(cluster.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cluster, admin, kubeconfig
}

// helm runs bin/helm and fails the test with its error output when it fails.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

func createNamespace(t *testing.T, c client.Client, name string, labels map[string]string) {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// checkCRDsEstablished waits until the chart's CRDs (crds/*.yaml) are served, and returns their names.
func checkCRDsEstablished(t *testing.T, c client.Client) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(), "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the chart has no crds/*.yaml: %v", err)
	}
	var names []string
	for _, f := range files {
		var crd apiextensionsv1.CustomResourceDefinition
		readYAML(t, filepath.Join("charts", "hicache-operator", "crds", filepath.Base(f)), &crd)
		names = append(names, crd.Name)
		eventually(t, 30*time.Second, "CRD "+crd.Name+" established", func() (bool, string) {
			var got apiextensionsv1.CustomResourceDefinition
			if err := c.Get(context.Background(), client.ObjectKey{Name: crd.Name}, &got); err != nil {
				return false, err.Error()
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, ""
				}
			}
			return false, fmt.Sprintf("conditions %v", got.Status.Conditions)
		})
	}
	return names
}

// releasePods lists the pods of the release's Deployment.
func releasePods(t *testing.T, c client.Client, created manifest) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	for _, u := range created.ofKind("Deployment") {
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
			t.Fatal(err)
		}
		var list corev1.PodList
		if err := c.List(context.Background(), &list, client.InNamespace(namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			t.Fatal(err)
		}
		pods.Items = append(pods.Items, list.Items...)
	}
	return pods.Items
}

// operatorPodAdmitted waits until the ReplicaSet of the chart's Deployment has created its pod,
// which the restricted Pod Security profile of the namespace would refuse otherwise.
func operatorPodAdmitted(t *testing.T, c client.Client, created manifest) {
	t.Helper()
	eventually(t, 60*time.Second, "the operator pod admitted under the restricted profile", func() (bool, string) {
		if pods := releasePods(t, c, created); len(pods) > 0 {
			return true, ""
		}
		var rs appsv1.ReplicaSetList
		if err := c.List(context.Background(), &rs, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		var why []string
		for _, r := range rs.Items {
			for _, cond := range r.Status.Conditions {
				if cond.Type == appsv1.ReplicaSetReplicaFailure && cond.Status == corev1.ConditionTrue {
					t.Fatalf("the API server refused the operator pod: %s", cond.Message)
				}
				why = append(why, fmt.Sprintf("ReplicaSet %s %s: %s", r.Name, cond.Reason, cond.Message))
			}
		}
		return false, fmt.Sprintf("no pod yet; %d ReplicaSets %v", len(rs.Items), why)
	})
}

// waitReady waits until obj's Ready condition is True for its current generation, and fails the
// test at once if the API server refuses any request of the operator.
func waitReady(t *testing.T, c client.Client, op *operator, serviceAccount string, obj client.Object, timeout time.Duration) {
	t.Helper()
	kind := fmt.Sprintf("%T", obj)[len("*v1alpha1."):]
	eventually(t, timeout, kind+" "+obj.GetName()+" Ready", func() (bool, string) {
		if d := op.denied(); len(d) > 0 {
			t.Fatalf("the API server refused the operator, running as ServiceAccount %s with the chart's RBAC: %v; "+
				"the chart's ClusterRole is generated from config/rbac/role.yaml: add the missing +kubebuilder:rbac marker and run make generate", serviceAccount, d)
		}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		var conditions []metav1.Condition
		switch o := obj.(type) {
		case *hicachev1alpha1.HiCacheDeployment:
			conditions = o.Status.Conditions
		case *hicachev1alpha1.CacheBackend:
			conditions = o.Status.Conditions
		}
		cond := meta.FindStatusCondition(conditions, hicachev1alpha1.ConditionReady)
		if cond == nil {
			return false, "no Ready condition"
		}
		return cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == obj.GetGeneration(),
			fmt.Sprintf("Ready=%s %s: %s (generation %d, observed %d)", cond.Status, cond.Reason, cond.Message, obj.GetGeneration(), cond.ObservedGeneration)
	})
}

// sampleHCD is config/samples/hicachedeployment_qwen3.yaml: Qwen3, TP=4 on one node, with a
// Mooncake L3 store.
func sampleHCD(t *testing.T, ns string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "config", "samples", "hicachedeployment_qwen3.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	h := &hicachev1alpha1.HiCacheDeployment{}
	if err := yaml.UnmarshalStrict(b, h); err != nil {
		t.Fatalf("decoding the Qwen3 sample: %v", err)
	}
	h.Namespace = ns
	if h.Spec.Storage == nil || h.Spec.Storage.BackendRef.Name == "" {
		t.Fatal("the Qwen3 sample no longer names a CacheBackend in spec.storage.backendRef")
	}
	return h
}

// childrenOf lists, by kind, the names of the objects the operator made for a HiCacheDeployment.
func childrenOf(t *testing.T, c client.Client, ns, name string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for kind, list := range map[string]client.ObjectList{
		"StatefulSet": &appsv1.StatefulSetList{},
		"Service":     &corev1.ServiceList{},
		"ConfigMap":   &corev1.ConfigMapList{},
		"Pod":         &corev1.PodList{},
	} {
		if err := c.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: name}); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range items {
			if m, ok := o.(metav1.Object); ok {
				out[kind] = append(out[kind], m.GetName())
			}
		}
		slices.Sort(out[kind])
		if len(out[kind]) == 0 {
			delete(out, kind)
		}
	}
	return out
}

// operator is the operator running in this process.
type operator struct {
	elected <-chan struct{}
	// done is closed when the manager has stopped; err is then its error.
	done    chan struct{}
	err     error
	cancel  context.CancelFunc
	refused *refusals
	log     *syncBuffer
}

func (o *operator) denied() []string { return o.refused.list() }
func (o *operator) logs() string     { return o.log.String() }

// stop stops the operator and fails the test if it stopped with an error.
func (o *operator) stop(t *testing.T) {
	t.Helper()
	o.cancel()
	select {
	case <-o.done:
		if o.err != nil {
			t.Errorf("the operator stopped with an error: %v", o.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the operator did not stop within 30s")
	}
}

// startOperator runs the manager as cmd/manager builds it (leader election on, the same
// controllers, its cache limited to watchNamespaces when there are any, as --watch-namespaces
// does), with every request impersonating user.
func startOperator(t *testing.T, admin *rest.Config, user string, watchNamespaces []string) *operator {
	t.Helper()
	o := &operator{done: make(chan struct{}), refused: &refusals{}, log: &syncBuffer{}}
	ctrl.SetLogger(zap.New(zap.WriteTo(o.log), zap.UseDevMode(true), zap.StacktraceLevel(zapcore.PanicLevel)))
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return refusalRecorder{next: rt, refused: o.refused} }
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, hicachev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cacheOpts := cache.Options{}
	if len(watchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range watchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       namespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOpts,
		// Each install test starts the same controllers again, in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("creating the manager: %v", err)
	}
	// As the chart's --cluster-scoped-reads=false with watchNamespaces.
	if err := controller.Setup(mgr, storeuse.Options{NoClusterScopedReads: len(watchNamespaces) > 0}); err != nil {
		t.Fatalf("setting up the controllers: %v", err)
	}
	o.elected = mgr.Elected()
	ctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go func() {
		o.err = mgr.Start(ctx)
		close(o.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-o.done:
		case <-time.After(30 * time.Second):
		}
		if t.Failed() {
			lines := strings.Split(o.logs(), "\n")
			t.Logf("operator log (last %d lines):\n%s", min(len(lines), 200), strings.Join(lines[max(0, len(lines)-200):], "\n"))
		}
	})
	return o
}

// refusals records the requests the API server refused (401, 403).
type refusals struct {
	mu   sync.Mutex
	seen []string
}

func (r *refusals) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.seen, s) {
		r.seen = append(r.seen, s)
	}
}

func (r *refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

type refusalRecorder struct {
	next    http.RoundTripper
	refused *refusals
}

func (rr refusalRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rr.next.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized) {
		rr.refused.add(fmt.Sprintf("%s %s: %d", req.Method, req.URL.Path, resp.StatusCode))
	}
	return resp, err
}

// syncBuffer is a bytes.Buffer safe for the manager's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually polls until a condition holds (see testutil.Eventually).
var eventually = testutil.Eventually
