package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// clusterFlags are kubectl's flags for reaching a cluster.
type clusterFlags struct {
	kubeconfig string
	context    string
	namespace  string
}

// addTo registers the flags on a command.
func (f *clusterFlags) addTo(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path of the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context to use (default: the current context)")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "Kubernetes namespace of the objects (default: the context's namespace, else default)")
}

// session is a client of one cluster and the Kubernetes namespace the command works in.
type session struct {
	client    client.Client
	namespace string
}

// newScheme knows the kinds the plugin reads and writes.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, hicachev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// connect reads the kubeconfig as kubectl does (--kubeconfig, else $KUBECONFIG, else
// ~/.kube/config; --context; -n, else the context's namespace, else "default") and returns a
// client. Warnings of the API server go to errOut, as kubectl prints them.
func (f *clusterFlags) connect(errOut io.Writer) (*session, error) {
	if f.kubeconfig != "" {
		if _, err := os.Stat(f.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: no such file", f.kubeconfig)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	overrides.Context.Namespace = f.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, kubeconfigError(err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, kubeconfigError(err)
	}
	cfg.UserAgent = "kubectl-hicache"
	cfg.WarningHandler = rest.NewWarningWriter(errOut, rest.WarningWriterOptions{Deduplicate: true})
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster at %s: %w", cfg.Host, err)
	}
	return &session{client: c, namespace: ns}, nil
}

func kubeconfigError(err error) error {
	if clientcmd.IsEmptyConfig(err) {
		return errors.New("no cluster to talk to: no kubeconfig found; set --kubeconfig or KUBECONFIG, or create ~/.kube/config")
	}
	return fmt.Errorf("reading the kubeconfig: %w", err)
}

// apiError explains an error of the API server about a kind of hicache.io.
func apiError(err error, doing string) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s: the cluster does not serve hicache.io/%s: install the CRDs of hicache-operator first (its Helm chart does)",
			doing, hicachev1alpha1.GroupVersion.Version)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// nameList names the objects that do exist, for a message about one that does not.
func nameList(names []string) string {
	if len(names) == 0 {
		return "there are none"
	}
	return "there are: " + strings.Join(names, ", ")
}
