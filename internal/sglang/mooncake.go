package sglang

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Mooncake client defaults, as the pinned release and Mooncake define them.
const (
	// DefaultMooncakeMetadataServer lets transfer engines find each other
	// by handshake, without a metadata service.
	DefaultMooncakeMetadataServer = "P2PHANDSHAKE"
	// DefaultMooncakeMetricsPort is the master's admin/metrics HTTP port.
	DefaultMooncakeMetricsPort = 9003
	// DefaultMooncakeProtocol is the renderer's choice; the release itself
	// falls back to rdma, which fails on nodes without RDMA devices.
	DefaultMooncakeProtocol = "tcp"

	gib = int64(1) << 30
)

// MooncakeProtocols are the transports the renderer accepts.
var mooncakeProtocols = []string{"rdma", "tcp"}

// MooncakeConfig is how one SGLang rank reaches the Mooncake store.
type MooncakeConfig struct {
	// MasterServerAddress is the master's RPC host:port (required), such
	// as "mooncake-master:50051".
	MasterServerAddress string
	// MetadataServer defaults to DefaultMooncakeMetadataServer.
	MetadataServer string
	// GlobalSegmentSize is the value of global_segment_size: the DRAM in
	// bytes of all the ranks of one server together. The release divides it
	// by tp_size × pp_size and each rank mounts its share (see
	// GlobalSegmentSize); 0 makes every rank a pure client of dedicated
	// store pods.
	GlobalSegmentSize int64
	// Protocol is tcp (default) or rdma.
	Protocol string
	// DeviceName lists the RDMA devices, such as "mlx5_0,mlx5_1".
	DeviceName string
	// TenantID isolates keys of different tenants on one master.
	TenantID string
	// ExtraBackendTag is passed through as extra_backend_tag.
	ExtraBackendTag string
	// MasterMetricsPort defaults to DefaultMooncakeMetricsPort.
	MasterMetricsPort int
	// ClusterID is the HA masters' --cluster_id, which the native client reads from
	// MC_STORE_CLUSTER_ID to find the leader of an etcd:// MasterServerAddress. It is rendered
	// as an environment variable only (the release has no extra-config key for it).
	ClusterID string
	// LocalHostname is the address other transfer engines reach this rank
	// at, usually "$(POD_IP)". It is rendered as an environment variable
	// only: the release prefers MOONCAKE_LOCAL_HOSTNAME over the extra config,
	// so a per-pod value belongs in the environment.
	LocalHostname string

	// PrefetchThreshold is SGLang's minimum number of tokens worth a
	// prefetch from storage; 0 leaves the release default (256).
	PrefetchThreshold int
	// TPLCMSize is SGLang's least common multiple of the TP sizes sharing
	// one store, for heterogeneous TP; 0 leaves it unset.
	TPLCMSize int
}

func (m MooncakeConfig) withDefaults() MooncakeConfig {
	if m.MetadataServer == "" {
		m.MetadataServer = DefaultMooncakeMetadataServer
	}
	if m.Protocol == "" {
		m.Protocol = DefaultMooncakeProtocol
	}
	if m.MasterMetricsPort == 0 {
		m.MasterMetricsPort = DefaultMooncakeMetricsPort
	}
	return m
}

func (m MooncakeConfig) validate() error {
	var errs []error
	if m.MasterServerAddress == "" {
		errs = append(errs, errors.New("the Mooncake MasterServerAddress is empty: set the master's host:port, such as mooncake-master:50051"))
	} else if err := validMasterAddress(m.MasterServerAddress); err != nil {
		errs = append(errs, err)
	}
	if m.GlobalSegmentSize < 0 {
		errs = append(errs, fmt.Errorf("the Mooncake GlobalSegmentSize is %d; use 0 for a pure client or a size in bytes", m.GlobalSegmentSize))
	}
	if !slices.Contains(mooncakeProtocols, m.Protocol) {
		errs = append(errs, fmt.Errorf("the Mooncake Protocol %q is not supported; use one of %s", m.Protocol, strings.Join(mooncakeProtocols, ", ")))
	}
	if m.MasterMetricsPort < 1 || m.MasterMetricsPort > 65535 {
		errs = append(errs, fmt.Errorf("the Mooncake MasterMetricsPort %d is outside 1-65535", m.MasterMetricsPort))
	}
	if m.PrefetchThreshold < 0 {
		errs = append(errs, fmt.Errorf("PrefetchThreshold is %d; use 0 for the default or a number of tokens", m.PrefetchThreshold))
	}
	if m.TPLCMSize < 0 {
		errs = append(errs, fmt.Errorf("TPLCMSize is %d; use 0 to leave it unset", m.TPLCMSize))
	}
	return errors.Join(errs...)
}

// MinSegmentPerRank is the smallest segment Mooncake mounts: a client with
// less fails its setup ("Total size must be at least 16777216").
const MinSegmentPerRank = int64(16) << 20

// GlobalSegmentSize returns the global_segment_size that makes every rank of
// a server mount perRank bytes. The release's MooncakeStore mounts
// global_segment_size // (tp_size × pp_size) per rank, where tp_size is the
// attention-TP size (tp / dp with DP attention), as its storage config counts
// it. It refuses a product that does not fit in 64 bits.
func GlobalSegmentSize(perRank int64, attentionTP, pp int) (int64, error) {
	if perRank < 0 || attentionTP < 1 || pp < 1 {
		return 0, fmt.Errorf("a segment of %d bytes per rank at attention-TP %d × PP %d is not a size", perRank, attentionTP, pp)
	}
	if int64(pp) > math.MaxInt64/int64(attentionTP) {
		return 0, fmt.Errorf("attention-TP %d × PP %d ranks do not fit in 64 bits", attentionTP, pp)
	}
	ranks := int64(attentionTP) * int64(pp)
	if perRank > math.MaxInt64/ranks {
		return 0, fmt.Errorf("a segment of %d bytes per rank times %d ranks does not fit in 64 bits", perRank, ranks)
	}
	return perRank * ranks, nil
}

// MooncakeExtraConfig builds the value of HiCache.ExtraConfig for the
// mooncake storage backend. With master_server_address present the release
// reads the whole client configuration from it, so every setting is written
// out, defaults included.
func MooncakeExtraConfig(m MooncakeConfig) (map[string]any, error) {
	m = m.withDefaults()
	if err := m.validate(); err != nil {
		return nil, err
	}
	out := map[string]any{
		"master_server_address": m.MasterServerAddress,
		"metadata_server":       m.MetadataServer,
		"global_segment_size":   m.GlobalSegmentSize,
		"protocol":              m.Protocol,
		"device_name":           m.DeviceName,
		"master_metrics_port":   m.MasterMetricsPort,
	}
	if m.TenantID != "" {
		out["tenant_id"] = m.TenantID
	}
	if m.ExtraBackendTag != "" {
		out["extra_backend_tag"] = m.ExtraBackendTag
	}
	if m.PrefetchThreshold > 0 {
		out["prefetch_threshold"] = m.PrefetchThreshold
	}
	if m.TPLCMSize > 0 {
		out["tp_lcm_size"] = m.TPLCMSize
	}
	return out, nil
}

// EnvVar is one environment variable of the server container.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Env returns the MOONCAKE_* variables for a rank, sorted by name. They
// mirror MooncakeExtraConfig, so a process that reads the environment
// instead (tools, or a release without extra-config support) sees the same
// store; MOONCAKE_LOCAL_HOSTNAME is only set here.
func Env(m MooncakeConfig) ([]EnvVar, error) {
	m = m.withDefaults()
	if err := m.validate(); err != nil {
		return nil, err
	}
	env := []EnvVar{
		{Name: "MOONCAKE_MASTER", Value: m.MasterServerAddress},
		{Name: "MOONCAKE_TE_META_DATA_SERVER", Value: m.MetadataServer},
		{Name: "MOONCAKE_GLOBAL_SEGMENT_SIZE", Value: segmentSize(m.GlobalSegmentSize)},
		{Name: "MOONCAKE_PROTOCOL", Value: m.Protocol},
		{Name: "MOONCAKE_MASTER_METRICS_PORT", Value: strconv.Itoa(m.MasterMetricsPort)},
	}
	if m.DeviceName != "" {
		env = append(env, EnvVar{Name: "MOONCAKE_DEVICE", Value: m.DeviceName})
	}
	if m.TenantID != "" {
		env = append(env, EnvVar{Name: "MOONCAKE_TENANT_ID", Value: m.TenantID})
	}
	if m.LocalHostname != "" {
		env = append(env, EnvVar{Name: "MOONCAKE_LOCAL_HOSTNAME", Value: m.LocalHostname})
	}
	if m.ClusterID != "" {
		env = append(env, EnvVar{Name: EnvClusterID, Value: m.ClusterID})
	}
	if isEtcdAddress(m.MasterServerAddress) {
		env = append(env, FailoverRPCEnv()...)
	}
	slices.SortFunc(env, func(a, b EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return env, nil
}

// segmentSize writes a size the way the release parses it: "<n>gb" (GiB)
// for whole GiB, plain bytes otherwise.
func segmentSize(bytes int64) string {
	if bytes > 0 && bytes%gib == 0 {
		return strconv.FormatInt(bytes/gib, 10) + "gb"
	}
	return strconv.FormatInt(bytes, 10)
}

// EnvClusterID is the environment variable the native Mooncake client reads the HA masters'
// --cluster_id from.
const EnvClusterID = "MC_STORE_CLUSTER_ID"

// The native Mooncake client's deadlines for its requests to the master: MC_RPC_TIMEOUT_MS per
// request, MC_RPC_CONNECT_TIMEOUT_MS per connection, both read from the environment when the
// client is created (MasterClient's RPC pool, ApplyRpcTimeoutEnvOverrides in the release's
// include/master_client.h). Ranks (SGLang's MooncakeStore) and store pods
// (mooncake_store_service) build that same client through store.so's MooncakeDistributedStore.
const (
	EnvRPCTimeout        = "MC_RPC_TIMEOUT_MS"
	EnvRPCConnectTimeout = "MC_RPC_CONNECT_TIMEOUT_MS"
)

// After a failover of HA masters a client re-mounts its segment on the new leader only once
// its heartbeat's ping to the dead leader failed, and a dead pod's address refuses nothing: the
// ping waits out the release's defaults, 30 s each (the store pods' objects were readable again
// 55-60 s after the kill with them, 18 s with these). A client's own requests to the master
// carry metadata only (mount, ping, re-mount, put and get of replica lists, removals), which a
// serving master answers in milliseconds.
const (
	failoverRPCTimeoutMillis        = "10000"
	failoverRPCConnectTimeoutMillis = "3000"
)

// FailoverRPCEnv is what bounds a native Mooncake client's requests to HA masters, for every
// client the operator configures (ranks and store pods): the request's deadline, then the
// connection's. (Store pods list them in this order; a change of it would roll them.)
func FailoverRPCEnv() []EnvVar {
	return []EnvVar{
		{Name: EnvRPCTimeout, Value: failoverRPCTimeoutMillis},
		{Name: EnvRPCConnectTimeout, Value: failoverRPCConnectTimeoutMillis},
	}
}

// isEtcdAddress tells whether a master address names HA masters through their etcd.
func isEtcdAddress(addr string) bool {
	return len(addr) > len(etcdScheme) && strings.EqualFold(addr[:len(etcdScheme)], etcdScheme)
}

// etcdScheme starts an HA master address: the etcd the masters elect their leader in.
const etcdScheme = "etcd://"

// validMasterAddress accepts host:port, or etcd://host:port[;host:port...] for masters with HA
// (the client then finds the leader in etcd).
func validMasterAddress(addr string) error {
	if isEtcdAddress(addr) {
		for _, e := range strings.FieldsFunc(addr[len(etcdScheme):], func(r rune) bool { return r == ';' || r == ',' }) {
			if host, port, err := net.SplitHostPort(e); err != nil || host == "" || port == "" {
				return fmt.Errorf("the Mooncake MasterServerAddress %q names the etcd endpoint %q, which is not host:port", addr, e)
			}
		}
		return nil
	}
	if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
		return fmt.Errorf("the Mooncake MasterServerAddress %q is not host:port or etcd://host:port", addr)
	}
	return nil
}
