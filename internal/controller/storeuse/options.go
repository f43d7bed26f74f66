package storeuse

import (
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// Defaults for images a spec may leave empty.
const (
	// DefaultSGLangImage is the upstream image of the SGLang release the rendered command lines
	// are checked against.
	DefaultSGLangImage = images.SGLang
	// DefaultMooncakeImage carries mooncake_master, mooncake_store_service and the Python client
	// at the release the admin client is tested against: the image `make images` builds
	// (images/mooncake/Dockerfile builds the same with Docker).
	DefaultMooncakeImage = images.Mooncake
	// DefaultRouterImage is the router (smg) release the rendered router command lines are
	// checked against: the image `make images` builds.
	DefaultRouterImage = images.Router
	// DefaultEtcdImage is the etcd of the local control plane's release, which the operator runs
	// for backends whose HA masters ask for a managed etcd: the image `make images` builds
	// (images/etcd/Dockerfile builds the same with Docker).
	DefaultEtcdImage = images.Etcd
	// DefaultGuardImage is the operator's own image, whose binary runs the proxy in front of
	// SGLang's HTTP server (`manager guard`); the chart passes the image it installs.
	DefaultGuardImage = images.Operator
)

// Defaults of the CacheBackend probes.
const (
	// DefaultBackendPollInterval is how often a backend's admin API is asked.
	DefaultBackendPollInterval = 15 * time.Second
	// DefaultProbeTimeout bounds one whole probe (health and metrics): a master on a cluster
	// network answers both in milliseconds.
	DefaultProbeTimeout = 3 * time.Second
	// DefaultBackendWorkers is how many backends are reconciled (and probed) at once.
	DefaultBackendWorkers = 4
	// DefaultDeploymentWorkers is how many HiCacheDeployments are reconciled at once. A
	// reconcile waits mostly on the API server's round trips (the manager used 13 % of a core
	// while creating 1,000 deployments with one worker); four overlap them: 1,000 deployments
	// were Ready in 173 s instead of 269 s on two quiet cores.
	DefaultDeploymentWorkers = 4
)

// FieldOwner is the server-side apply field manager of everything the operator writes.
const FieldOwner = "hicache-operator"

// Options configure the controllers.
type Options struct {
	// BackendPollInterval is how often a CacheBackend's master is probed.
	BackendPollInterval time.Duration
	// ProbeTimeout bounds one probe of a master's admin API, every request of it together.
	ProbeTimeout time.Duration
	// BackendWorkers is how many CacheBackends are reconciled at once.
	BackendWorkers int
	// DeploymentWorkers is how many HiCacheDeployments are reconciled at once.
	DeploymentWorkers int
	// DefaultSGLangImage is used when a HiCacheDeployment names no image.
	DefaultSGLangImage string
	// DefaultMooncakeImage is used when a managed CacheBackend names no image.
	DefaultMooncakeImage string
	// DefaultRouterImage is used when a HiCacheDeployment's router names no image.
	DefaultRouterImage string
	// DefaultEtcdImage is used when a managed etcd names no image.
	DefaultEtcdImage string
	// GuardImage runs the proxy in front of SGLang's HTTP server in every rank pod (`manager
	// guard`): the operator's own image.
	GuardImage string
	// HTTPClient talks to Mooncake masters' admin APIs; nil means newAdminHTTPClient().
	HTTPClient *http.Client
	// Admin talks to stores' admin APIs; nil means the Mooncake admin client over HTTPClient.
	Admin StoreAdmin
	// Flusher removes one namespace of a store; nil means a Kubernetes Job per flush.
	Flusher NamespaceFlusher
	// Identity names this operator process in the claims of the flushes it runs; it must differ
	// between processes that run at the same time. Empty means DefaultIdentity.
	Identity string
	// OperatorNamespace is the namespace the operator's pods run in: the NetworkPolicies admit
	// the operator to the masters' admin ports from there only. Empty admits pods labelled as the
	// operator in any namespace.
	OperatorNamespace string
	// StoreGrants are a cluster administrator's grants of stores the rules of store.Authorize
	// cannot prove a backend's own (another namespace's master, IP literals, the masters of an
	// etcd:// address); the operator calls no other admin URL of an external backend.
	StoreGrants []store.Grant
	// NoClusterScopedReads is for a manager whose roles grant no reads of cluster-scoped kinds
	// (the chart with watchNamespaces): the ClusterCacheStoreGrant objects are not read (only
	// StoreGrants count), and the admission policy of spec.allowInUse is looked up only when a
	// flush asks, not from the start.
	NoClusterScopedReads bool
	// FlushAttemptTimeout is the deadline of one flush attempt (0: 3 minutes).
	FlushAttemptTimeout time.Duration
	// FlushMaxAttempts is how many attempts a flush gets before it is Failed for good (0: 5).
	FlushMaxAttempts int32
	// FlushBackoff is the wait after a flush's first failed attempt, doubled after each next
	// one up to FlushBackoffMax (0: 10 seconds and 5 minutes).
	FlushBackoff, FlushBackoffMax time.Duration
	// FlushDurabilityWindow is how long after a flush's removal on masters with HA the flush
	// checks that the leader that ran it still serves before it completes (0: 5 seconds).
	FlushDurabilityWindow time.Duration
}

// Authority is the store authority of a controller that reads through c.
func (o Options) Authority(c client.Reader) *storeAuthority {
	return &storeAuthority{reader: c, flagGrants: o.StoreGrants, objects: !o.NoClusterScopedReads}
}

// DefaultIdentity is $POD_NAME, else the host name and the process id.
func DefaultIdentity() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "hicache-operator"
	}
	return host + "_" + strconv.Itoa(os.Getpid())
}

func (o Options) WithDefaults() Options {
	if o.BackendPollInterval <= 0 {
		o.BackendPollInterval = DefaultBackendPollInterval
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.BackendWorkers <= 0 {
		o.BackendWorkers = DefaultBackendWorkers
	}
	if o.DeploymentWorkers <= 0 {
		o.DeploymentWorkers = DefaultDeploymentWorkers
	}
	if o.DefaultSGLangImage == "" {
		o.DefaultSGLangImage = DefaultSGLangImage
	}
	if o.DefaultMooncakeImage == "" {
		o.DefaultMooncakeImage = DefaultMooncakeImage
	}
	if o.DefaultRouterImage == "" {
		o.DefaultRouterImage = DefaultRouterImage
	}
	if o.DefaultEtcdImage == "" {
		o.DefaultEtcdImage = DefaultEtcdImage
	}
	if o.GuardImage == "" {
		o.GuardImage = DefaultGuardImage
	}
	if o.HTTPClient == nil {
		o.HTTPClient = NewAdminHTTPClient()
	}
	if o.Admin == nil {
		o.Admin = mooncakeAdmin{HTTP: o.HTTPClient}
	}
	if o.Identity == "" {
		o.Identity = DefaultIdentity()
	}
	return o
}

// NewAdminHTTPClient is the client of masters' admin APIs. Each call also has its own deadline
// (the probe's, or the admin client's per request); these bound what a deadline-less caller
// could wait for: connecting, the TLS handshake, the answer's headers and their size.
func NewAdminHTTPClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:                  http.ProxyFromEnvironment,
			DialContext:            (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:    3 * time.Second,
			ResponseHeaderTimeout:  10 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
			MaxIdleConnsPerHost:    2,
			IdleConnTimeout:        90 * time.Second,
		},
	}
}
