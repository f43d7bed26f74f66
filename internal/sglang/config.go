// Package sglang renders the command line and environment of an SGLang
// server with HiCache and a Mooncake L3 store. It is pure: no Kubernetes
// types, no I/O. Every rendered command line is checked against the
// arguments of the pinned sglang release (package argspec).
package sglang

// Defaults the renderer applies when a field is left empty. The HiCache
// defaults equal those of the pinned release; they are still written out,
// because the host layout decides the Mooncake keys and must not change if
// a later release changes its defaults.
const (
	// DefaultHost listens on every interface: the release's own default,
	// 127.0.0.1, cannot be reached by probes or other pods.
	DefaultHost = "0.0.0.0"
	// LoopbackHost is where the operator's rank pods run SGLang's HTTP server: behind the
	// operator's proxy (internal/guard), which owns the pod IP at the same port and takes the
	// keys out of /server_info; nothing outside the pod reaches SGLang itself.
	LoopbackHost = "127.0.0.1"
	// DefaultPort is the release's HTTP port.
	DefaultPort = 30000

	HostMemoryModeCache      = "cache"
	HostMemoryModeBufferOnly = "buffer_only"

	WritePolicyWriteBack             = "write_back"
	WritePolicyWriteThrough          = "write_through"
	WritePolicyWriteThroughSelective = "write_through_selective"

	IOBackendDirect = "direct"
	IOBackendKernel = "kernel"

	MemLayoutLayerFirst       = "layer_first"
	MemLayoutPageFirst        = "page_first"
	MemLayoutPageFirstDirect  = "page_first_direct"
	MemLayoutPageFirstKVSplit = "page_first_kv_split"
	MemLayoutPageHead         = "page_head"

	StorageBackendMooncake = "mooncake"

	PrefetchPolicyBestEffort   = "best_effort"
	PrefetchPolicyWaitComplete = "wait_complete"
	PrefetchPolicyTimeout      = "timeout"

	// SpeculativeDSpark is the only algorithm that takes a DSpark block size.
	SpeculativeDSpark = "DSPARK"
)

// ServerConfig is everything the renderer needs to build one server's
// command line. Zero values mean "leave the release's default", except
// where a field says otherwise.
type ServerConfig struct {
	// Release is the SGLang release whose arguments the command line is checked against (the
	// image's, or the checked release it is declared compatible with); "" is the pinned one.
	Release string

	// ModelPath is a local directory or a Hugging Face repository (required).
	ModelPath string
	// ServedModelName is the model name the API reports.
	ServedModelName string
	// Revision pins a branch, tag or commit of ModelPath.
	Revision string

	// TP is the tensor-parallel size; 0 leaves the release default (1).
	TP int
	// PP is the pipeline-parallel size.
	PP int
	// DP is the data-parallel size. With EnableDPAttention it is the number
	// of attention data-parallel groups inside the TP group instead.
	DP                int
	EnableDPAttention bool
	// EP is the expert-parallel size.
	EP int

	// NNodes is the number of nodes one server spans.
	NNodes int
	// NodeRankEnv is the --node-rank value, normally a reference the kubelet
	// expands, such as "$(NODE_RANK)"; required when NNodes > 1.
	NodeRankEnv string
	// DistInitAddr is the leader's host:port for torch.distributed, such as
	// "leader-dns:20102"; required when NNodes > 1.
	DistInitAddr string

	// Host defaults to DefaultHost, Port to DefaultPort.
	Host string
	Port int

	// AdminAPIKey and APIKey are --admin-api-key and --api-key, each a variable reference such
	// as $(HICACHE_ADMIN_API_KEY) that the kubelet expands: a key itself is refused, since the
	// command line is part of the pod spec. Empty leaves the flag out.
	AdminAPIKey string
	APIKey      string

	PageSize      int
	KVCacheDType  string
	MambaSSMDType string
	Quantization  string

	// Disaggregation makes the server one role of a prefill/decode pair when
	// not nil.
	Disaggregation *Disaggregation

	// Speculative enables speculative decoding when not nil.
	Speculative *Speculative
	// HiCache enables the hierarchical cache when not nil.
	HiCache *HiCache

	// ExtraArgs are appended last. They may not set a flag this
	// configuration owns (those are refused with the field to use instead).
	ExtraArgs []string
}

// Disaggregation modes, transfer backends and decode L3 modes of the pinned
// release.
const (
	DisaggregationPrefill = "prefill"
	DisaggregationDecode  = "decode"

	TransferMooncake = "mooncake"
	TransferFake     = "fake"

	// DecodeL3Offload writes a decode server's KV to the storage backend
	// (--disaggregation-decode-enable-offload-kvcache) without the
	// hierarchical cache; DecodeL3HiCache runs the hierarchical cache on the
	// decode radix cache (--disaggregation-decode-enable-radix-cache).
	DecodeL3Offload = "offload"
	DecodeL3HiCache = "hicache"

	// DefaultBootstrapPort is the release's --disaggregation-bootstrap-port.
	DefaultBootstrapPort = 8998
)

// Disaggregation configures one role of prefill/decode disaggregation.
type Disaggregation struct {
	// Mode is DisaggregationPrefill or DisaggregationDecode (required).
	Mode string
	// TransferBackend is --disaggregation-transfer-backend; empty leaves the
	// release's default (mooncake).
	TransferBackend string
	// BootstrapPort is --disaggregation-bootstrap-port: where a prefill
	// server's bootstrap server listens; 0 leaves the default.
	BootstrapPort int
	// IBDevice is --disaggregation-ib-device.
	IBDevice string
	// DecodeL3 is what a decode server does with L3: empty for nothing (then
	// HiCache must be nil), DecodeL3Offload or DecodeL3HiCache (HiCache set).
	DecodeL3 string
}

// Speculative configures speculative decoding.
type Speculative struct {
	// Algorithm is a name the release accepts at start (case-insensitive),
	// such as EAGLE, EAGLE3, NEXTN, DSPARK; required.
	Algorithm      string
	DraftModelPath string
	// DraftRevision is --speculative-draft-model-revision; with DraftModelPath only.
	DraftRevision     string
	NumSteps          int
	EagleTopK         int
	NumDraftTokens    int
	DraftKVCacheDType string
	// DSparkBlockSize is the DSpark draft block size; DSPARK only.
	DSparkBlockSize int
}

// HiCache configures the hierarchical KV cache and its L3 storage.
type HiCache struct {
	// HostMemoryMode is cache (default) or buffer_only.
	HostMemoryMode string
	// Ratio sizes the host pool relative to the device pool; SizeGB sizes it
	// in GB per rank. Set at most one; with neither the release picks a ratio.
	Ratio  float64
	SizeGB int
	// WritePolicy defaults to write_through, IOBackend to kernel, MemLayout
	// to page_first, PrefetchPolicy to timeout.
	WritePolicy    string
	IOBackend      string
	MemLayout      string
	StorageBackend string
	PrefetchPolicy string
	// ExtraConfig is passed as --hicache-storage-backend-extra-config, as
	// JSON with sorted keys; see MooncakeExtraConfig.
	ExtraConfig map[string]any
}
