// Package integration tests the operator's API and controllers against a real kube-apiserver
// and etcd (built by hack/tools.sh into bin/).
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

var (
	k8sClient client.Client
	// restConfig is the administrator's, for clients that impersonate other users.
	restConfig *rest.Config
	scheme     = runtime.NewScheme()
)

// repoRoot is the directory holding go.mod.
func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestMain(m *testing.M) {
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := hicachev1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	root := repoRoot()
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(root, "bin", bin)); err != nil {
			fmt.Fprintf(os.Stderr, "bin/%s is missing: run hack/tools.sh (or make test, which does)\n", bin)
			os.Exit(1)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: filepath.Join(root, "bin"),
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting kube-apiserver and etcd: %v\n", err)
		// A CRD the server refuses fails Start after etcd and kube-apiserver run: stop them.
		_ = env.Stop()
		os.Exit(1)
	}
	restConfig = cfg
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating a client: %v\n", err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
	}
	os.Exit(code)
}

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	return ns.Name
}
