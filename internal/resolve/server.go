package resolve

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// SGLangPort is the port the leader's HTTP API listens on.
const SGLangPort = 30000

// Backend is what rank pods need of the CacheBackend they write to.
type Backend struct {
	Name           string
	RPCAddress     string
	MetadataServer string
	MetricsPort    int
	// ClusterID is the HA masters' cluster id, for an etcd:// RPCAddress ("" otherwise).
	ClusterID string
	// EtcdProxy is, for a backend whose masters elect their leader in an etcd the operator
	// runs, the proxy the rank pods run beside SGLang to reach it with the client certificate;
	// RPCAddress is then the proxy's loopback address. Nil otherwise.
	EtcdProxy *EtcdProxy
}

// EtcdProxy is a sidecar container and the volume of the certificate it presents.
type EtcdProxy struct {
	Container corev1.Container
	Volume    corev1.Volume
}

// ServerConfig is the SGLang server configuration every rank of one serving group runs.
// distInitAddr is the group leader's rendezvous address (host:port), used when the group spans
// several nodes. be is nil when the deployment has no L3 store (or its backend is not known
// yet); the Mooncake config is then nil too.
func ServerConfig(hcd *hicachev1alpha1.HiCacheDeployment, r *Resolved, be *Backend, distInitAddr string) (sglang.ServerConfig, *sglang.MooncakeConfig, error) {
	spec := &hcd.Spec
	t := spec.Topology
	model, err := Model(spec)
	if err != nil {
		return sglang.ServerConfig{}, nil, err
	}
	cfg := sglang.ServerConfig{
		Release:           r.SGLang.ArgsRelease,
		ModelPath:         model.Path,
		ServedModelName:   ServedModelName(spec),
		Revision:          model.Revision,
		TP:                int(t.TensorParallel),
		PP:                int(t.PipelineParallel),
		EnableDPAttention: t.DPAttention,
		// SGLang listens on loopback only; the proxy in front of it serves the pod IP at the same
		// port (GuardContainer).
		Host:          sglang.LoopbackHost,
		Port:          SGLangPort,
		PageSize:      int(spec.HiCache.PageSize),
		KVCacheDType:  string(spec.HiCache.KVCacheDType),
		MambaSSMDType: spec.HiCache.MambaSSMDType,
		Quantization:  string(spec.Model.Quantization),
		ExtraArgs:     spec.Template.ExtraArgs,
		// The server's own keys (not the clients'), references the kubelet expands from
		// secretKeyRef variables.
		AdminAPIKey: "$(" + ServerAdminKeyEnv + ")",
	}
	if APIKeySecret(hcd) != nil {
		cfg.APIKey = "$(" + ServerAPIKeyEnv + ")"
	}
	if t.DataParallel > 1 {
		cfg.DP = int(t.DataParallel)
	}
	if r.Nodes > 1 {
		if distInitAddr == "" {
			return cfg, nil, fmt.Errorf("a serving group of %d nodes needs the leader's rendezvous address", r.Nodes)
		}
		cfg.NNodes = r.Nodes
		cfg.NodeRankEnv = "$(NODE_RANK)"
		cfg.DistInitAddr = distInitAddr
	}
	if d := t.Draft; d != nil {
		cfg.Speculative = &sglang.Speculative{
			Algorithm:         string(d.Algorithm),
			DraftModelPath:    d.ModelPath,
			DraftRevision:     d.Revision,
			NumSteps:          int(d.NumSteps),
			EagleTopK:         int(d.EagleTopK),
			NumDraftTokens:    int(d.NumDraftTokens),
			DraftKVCacheDType: string(d.KVCacheDType),
			DSparkBlockSize:   int(d.DSparkBlockSize),
		}
	}
	h := spec.HiCache
	cfg.HiCache = &sglang.HiCache{
		HostMemoryMode: string(h.HostMemoryMode),
		Ratio:          r.Settings.HiCacheRatio,
		SizeGB:         int(h.SizeGB),
		WritePolicy:    string(h.WritePolicy),
		IOBackend:      string(h.IOBackend),
		MemLayout:      string(h.MemLayout),
		PrefetchPolicy: string(h.PrefetchPolicy),
	}
	if spec.Storage == nil || be == nil {
		return cfg, nil, nil
	}
	mc := &sglang.MooncakeConfig{
		MasterServerAddress: be.RPCAddress,
		MetadataServer:      be.MetadataServer,
		Protocol:            string(spec.Storage.Protocol),
		ExtraBackendTag:     r.Namespace,
		MasterMetricsPort:   be.MetricsPort,
		ClusterID:           be.ClusterID,
		LocalHostname:       "$(POD_IP)",
		// spec.storage.globalSegmentSize is per rank; SGLang divides this by tp × pp.
		GlobalSegmentSize: r.GlobalSegmentSize,
	}
	extra, err := sglang.MooncakeExtraConfig(*mc)
	if err != nil {
		return cfg, nil, err
	}
	cfg.HiCache.StorageBackend = "mooncake"
	cfg.HiCache.ExtraConfig = extra
	return cfg, mc, nil
}

// specFields names, in the renderer's messages, the spec fields its settings come from: the
// renderer speaks of its own configuration (HiCache.MemLayout), a user writes the spec
// (spec.hicache.memLayout). The rendered Mooncake extra config (HiCache.ExtraConfig) comes from
// the CacheBackend and the layout, not from a field.
var specFields = strings.NewReplacer(
	"HiCache.Ratio", "spec.hicache.ratio",
	"HiCache.SizeGB", "spec.hicache.sizeGB",
	"HiCache.MemLayout", "spec.hicache.memLayout",
	"HiCache.HostMemoryMode", "spec.hicache.hostMemoryMode",
	"HiCache.WritePolicy", "spec.hicache.writePolicy",
	"HiCache.ExtraConfig", "the rendered Mooncake extra config",
	"needs IOBackend", "needs spec.hicache.ioBackend",
	"needs a StorageBackend", "needs an L3 store (spec.storage)",
	"without a StorageBackend", "without an L3 store (spec.storage)",
	"Speculative.Algorithm", "spec.topology.draft.algorithm",
	"Speculative.DSparkBlockSize", "spec.topology.draft.dsparkBlockSize",
	"Speculative.NumSteps", "spec.topology.draft.numSteps",
	"Speculative.EagleTopK", "spec.topology.draft.eagleTopK",
	"Speculative.NumDraftTokens", "spec.topology.draft.numDraftTokens",
	"ModelPath is empty", "spec.model.path is empty",
	"EnableDPAttention needs DP", "spec.topology.dpAttention needs spec.topology.dataParallel",
	"with EnableDPAttention, TP", "with spec.topology.dpAttention, spec.topology.tensorParallel",
	"must be a multiple of DP", "must be a multiple of spec.topology.dataParallel",
)

// SpecError rewrites an error of the SGLang renderer (sglang.Args) so that it names the spec
// fields a user writes instead of the renderer's settings.
// A command line the pinned release refuses is named by the spec fields of its refused flags,
// when they come from one (a flag of spec.template.extraArgs is refused before rendering).
func SpecError(err error) error {
	if err == nil {
		return nil
	}
	msg := specFields.Replace(err.Error())
	if v, ok := errors.AsType[*argspec.ValidationError](err); ok {
		var fields []string
		for _, p := range v.Problems {
			if f, ok := flagFields[p.Flag]; ok && !slices.Contains(fields, f) {
				fields = append(fields, f)
			}
		}
		if len(fields) > 0 {
			msg = strings.Join(fields, ", ") + ": " + msg
		}
	}
	return errors.New(msg)
}

// flagFields are the spec fields whose text the renderer passes to a flag as written; the
// CRD's schema bounds them, a spec read from a file has not been through it.
var flagFields = map[string]string{
	"--kv-cache-dtype":                   "spec.hicache.kvCacheDType",
	"--mamba-ssm-dtype":                  "spec.hicache.mambaSSMDType",
	"--quantization":                     "spec.model.quantization",
	"--speculative-algorithm":            "spec.topology.draft.algorithm",
	"--speculative-draft-kv-cache-dtype": "spec.topology.draft.kvCacheDType",
	"--hicache-host-memory-mode":         "spec.hicache.hostMemoryMode",
	"--hicache-write-policy":             "spec.hicache.writePolicy",
	"--hicache-io-backend":               "spec.hicache.ioBackend",
	"--hicache-mem-layout":               "spec.hicache.memLayout",
	"--hicache-storage-prefetch-policy":  "spec.hicache.prefetchPolicy",
	"--revision":                         "spec.model.revision",
	"--served-model-name":                "spec.model.servedName",
}
