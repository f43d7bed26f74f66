// Command manager runs the hicache-operator: the HiCacheDeployment, CacheBackend and CacheFlush
// controllers, with leader election, health probes and secure metrics.
//
// `manager guard --listen-host POD_IP --port PORT ...` runs instead the reverse proxy that stands in
// front of SGLang's HTTP server and takes the keys out of its /server_info answers
// (internal/guard), from the same image.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller"
	"github.com/hicache-io/hicache-operator/internal/controller/cacheflush"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/guard"
	"github.com/hicache-io/hicache-operator/internal/store"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "guard" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := guard.Command(ctx, os.Args[2:], os.Getenv, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "guard:", err)
			stop()
			os.Exit(2)
		}
		return
	}
	var (
		metricsAddr     string
		secureMetrics   bool
		probeAddr       string
		leaderElect     bool
		leaderElectNS   string
		watchNamespaces string
		flushRunner     string
		flushPython     string
		shutdownTimeout time.Duration
		pprofAddr       string
		apiQPS          float64
		apiBurst        int
		opts            storeuse.Options
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address the metrics endpoint binds to (0 disables it)")
	flag.BoolVar(&secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, authenticated and authorized by the API server")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader, so that only one replica reconciles at a time")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "Namespace of the leader-election lease (default: the pod's own namespace; required outside a cluster)")
	flag.StringVar(&watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces to watch (empty: all)")
	flag.DurationVar(&opts.BackendPollInterval, "backend-poll-interval", storeuse.DefaultBackendPollInterval, "How often a CacheBackend's master is probed for health and capacity")
	flag.DurationVar(&opts.ProbeTimeout, "backend-probe-timeout", storeuse.DefaultProbeTimeout, "How long one probe of a CacheBackend's admin API (health and metrics together) may take")
	flag.IntVar(&opts.DeploymentWorkers, "deployment-workers", storeuse.DefaultDeploymentWorkers, "How many HiCacheDeployments are reconciled at once")
	flag.Float64Var(&apiQPS, "kube-api-qps", -1, "Requests per second the manager sends to the API server at most, in the long run (negative: no client-side limit; the API server's priority and fairness limits it)")
	flag.IntVar(&apiBurst, "kube-api-burst", 0, "Requests the manager may send at once above --kube-api-qps (with a positive --kube-api-qps; 0: twice it)")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "Address Go's profiling endpoints (/debug/pprof/) bind to (empty disables them; they show the process's memory and stacks, so bind a local address only)")
	flag.IntVar(&opts.BackendWorkers, "backend-workers", storeuse.DefaultBackendWorkers, "How many CacheBackends are reconciled and probed at once")
	flag.DurationVar(&shutdownTimeout, "shutdown-timeout", 8*time.Second, "How long the controllers may take to stop after SIGTERM; past it the process exits without releasing the leader lease (keep it below the pod's terminationGracePeriodSeconds)")
	flag.StringVar(&opts.DefaultSGLangImage, "default-sglang-image", storeuse.DefaultSGLangImage, "SGLang image for deployments that name none")
	flag.StringVar(&opts.DefaultMooncakeImage, "default-mooncake-image", storeuse.DefaultMooncakeImage, "Mooncake image for managed backends that name none")
	flag.StringVar(&opts.DefaultRouterImage, "default-router-image", storeuse.DefaultRouterImage, "Router (smg) image for deployments whose router names none")
	flag.StringVar(&opts.DefaultEtcdImage, "default-etcd-image", storeuse.DefaultEtcdImage, "etcd image for the managed etcd of backends with HA masters that name none")
	flag.StringVar(&opts.GuardImage, "guard-image", storeuse.DefaultGuardImage, "Image of the proxy in front of SGLang's HTTP server in every rank pod (it runs `manager guard`): this operator's own image")
	flag.StringVar(&opts.OperatorNamespace, "operator-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the operator's own pods, from which alone the NetworkPolicies admit it to the Mooncake masters' admin ports (default: $POD_NAMESPACE; empty admits pods labelled as the operator in any namespace)")
	flag.StringVar(&flushRunner, "flush-runner", "job", "How namespace flushes run the Mooncake client: job (a Kubernetes Job in the backend's image) or local (this process's host, with --flush-python; for local clusters whose nodes run no containers)")
	flag.StringVar(&flushPython, "flush-python", "python3", "With --flush-runner=local: a Python that has the Mooncake client installed")
	flag.StringVar(&opts.Identity, "identity", storeuse.DefaultIdentity(), "This process's name in the claims of the flushes it runs; unique among the operator's processes (default: $POD_NAME, else host name and process id)")
	flag.DurationVar(&opts.FlushAttemptTimeout, "flush-attempt-timeout", 3*time.Minute, "Deadline of one flush attempt (the flush Job's activeDeadlineSeconds)")
	var maxAttempts int
	flag.IntVar(&maxAttempts, "flush-max-attempts", 5, "Attempts a flush gets before it is Failed for good")
	flag.DurationVar(&opts.FlushBackoff, "flush-backoff", 10*time.Second, "Wait after a flush's first failed attempt; doubled after each next one")
	flag.DurationVar(&opts.FlushBackoffMax, "flush-backoff-max", 5*time.Minute, "Longest wait between two attempts of a flush")
	zapOpts := zap.Options{Development: false}
	var clusterReads bool
	flag.BoolVar(&clusterReads, "cluster-scoped-reads", true, "Read cluster-scoped kinds: the ClusterCacheStoreGrants (store grants) and, from the start, the admission policy of spec.allowInUse; false for a manager whose roles are namespaced (--watch-namespaces): only --store-grant counts then, and the policy is looked up only when a flush asks")
	flag.Func("store-grant", "A store backends may use although the operator cannot prove it theirs (another namespace's master, an IP literal, the masters of an etcd:// address): name=<name>;rpc=<address>;admin=<url>[,<url>...];namespaces=<ns>[,<ns>...][;override=true] (\"*\": every namespace; override=true: allowCrossNamespaceOverride); repeatable. A ClusterCacheStoreGrant object says the same and can be changed without restarting the manager; this flag is for managers that cannot read cluster-scoped objects. Only whoever configures the manager grants one", func(v string) error {
		g, err := store.ParseGrant(v)
		if err == nil {
			opts.StoreGrants = append(opts.StoreGrants, g)
		}
		return err
	})
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	if maxAttempts < 1 || maxAttempts > 100 {
		log.Error(nil, "--flush-max-attempts must be between 1 and 100", "flush-max-attempts", maxAttempts)
		os.Exit(2)
	}
	opts.FlushMaxAttempts = int32(maxAttempts)
	opts.NoClusterScopedReads = !clusterReads
	if opts.DeploymentWorkers < 1 || opts.DeploymentWorkers > 64 {
		log.Error(nil, "--deployment-workers must be between 1 and 64", "deployment-workers", opts.DeploymentWorkers)
		os.Exit(2)
	}
	if apiBurst < 0 {
		log.Error(nil, "--kube-api-burst must not be negative", "kube-api-burst", apiBurst)
		os.Exit(2)
	}

	switch flushRunner {
	case "job":
	case "local":
		opts.Flusher = cacheflush.LocalFlusher{Python: flushPython}
	default:
		log.Error(nil, "Unknown --flush-runner: use job or local", "flush-runner", flushRunner)
		os.Exit(2)
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(hicachev1alpha1.AddToScheme(scheme))

	metricsOpts := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		// HTTP/2 stays off: it is exposed to the rapid-reset and stream-cancellation attacks.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	cacheOpts := reconcile.CacheOptions(cache.Options{})
	if watchNamespaces != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(watchNamespaces, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				cacheOpts.DefaultNamespaces[ns] = cache.Config{}
			}
		}
	}

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(apiQPS), apiBurst
	if apiQPS > 0 && apiBurst == 0 {
		cfg.Burst = int(2 * apiQPS)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "hicache-operator.hicache.io",
		LeaderElectionNamespace: leaderElectNS,
		// Give the lease up on a clean stop, so that the next leader starts at once instead of
		// waiting for it to expire. This is safe because the manager releases it only after every
		// controller has returned (GracefulShutdownTimeout -1: no grace period cuts that wait
		// short; --shutdown-timeout ends a stop that hangs, without releasing) and this process
		// does nothing after Start returns.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       ptr.To(time.Duration(-1)),
		Cache:                         cacheOpts,
	})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		os.Exit(1)
	}
	if err := controller.Setup(mgr, opts); err != nil {
		log.Error(err, "Unable to set up the controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up the readiness check")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	go func() {
		// A controller that does not stop must not keep the process (and the lease) forever:
		// exit without releasing the lease, which then expires as if the process had been killed.
		<-ctx.Done()
		time.Sleep(shutdownTimeout)
		log.Error(nil, "The controllers did not stop in time; exiting without releasing the leader lease", "shutdown-timeout", shutdownTimeout)
		os.Exit(1)
	}()
	log.Info("Starting the manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "The manager stopped with an error")
		os.Exit(1)
	}
	log.Info("The manager stopped")
}
