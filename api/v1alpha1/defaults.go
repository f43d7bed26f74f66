package v1alpha1

import "k8s.io/utils/ptr"

// The API's defaults: the values the CRDs' +kubebuilder:default markers fill in, for code that
// meets an object the API server has not defaulted (a decoded file, a test object, an object read
// from an older CRD). Default fills them in the same way; a test holds the two equal.
const (
	DefaultReplicas          int32             = 1
	DefaultTensorParallel    int32             = 1
	DefaultPipelineParallel  int32             = 1
	DefaultDataParallel      int32             = 1
	DefaultGPUsPerNode       int32             = 8
	DefaultMaxUnavailable    int32             = 1
	DefaultNamespaceStrategy NamespaceStrategy = NamespaceLayoutHash
	DefaultFlushPolicy       FlushPolicy       = FlushAuto
	DefaultProtocol          TransferProtocol  = "tcp"
	DefaultTransferBackend   TransferBackend   = TransferMooncake
	DefaultBootstrapPort     int32             = 8998
	DefaultDecodeL3          DecodeL3          = DecodeL3None
	DefaultRouterReplicas    int32             = 1
	DefaultRoutingPolicy     RoutingPolicy     = "cache_aware"

	DefaultMetadataServer            = "P2PHANDSHAKE"
	DefaultRPCPort             int32 = 50051
	DefaultAdminPort           int32 = 9003
	DefaultMasterReplicas      int32 = 1
	DefaultStoreReplicas       int32 = 1
	DefaultDrainTimeoutSeconds int32 = 300
	DefaultEtcdReplicas        int32 = 1
)

// Default fills in what the API server defaults in a HiCacheDeployment's spec.
func (h *HiCacheDeployment) Default() {
	s := &h.Spec
	if s.Replicas == nil {
		s.Replicas = ptr.To(DefaultReplicas)
	}
	t := &s.Topology
	t.TensorParallel = orInt32(t.TensorParallel, DefaultTensorParallel)
	t.PipelineParallel = orInt32(t.PipelineParallel, DefaultPipelineParallel)
	t.DataParallel = orInt32(t.DataParallel, DefaultDataParallel)
	t.GPUsPerNode = orInt32(t.GPUsPerNode, DefaultGPUsPerNode)
	s.Rollout.MaxUnavailable = orInt32(s.Rollout.MaxUnavailable, DefaultMaxUnavailable)
	if st := s.Storage; st != nil {
		st.NamespaceStrategy = or(st.NamespaceStrategy, DefaultNamespaceStrategy)
		st.FlushPolicy = or(st.FlushPolicy, DefaultFlushPolicy)
		st.Protocol = or(st.Protocol, DefaultProtocol)
	}
	if r := s.Roles; r != nil {
		for _, role := range []*RoleSpec{&r.Prefill.RoleSpec, &r.Decode.RoleSpec} {
			if role.Replicas == nil {
				role.Replicas = ptr.To(DefaultReplicas)
			}
		}
		r.Decode.L3 = or(r.Decode.L3, DefaultDecodeL3)
		r.Transfer.Backend = or(r.Transfer.Backend, DefaultTransferBackend)
		r.Transfer.BootstrapPort = orInt32(r.Transfer.BootstrapPort, DefaultBootstrapPort)
	}
	if r := s.Router; r != nil {
		r.Replicas = orInt32(r.Replicas, DefaultRouterReplicas)
		r.Policy = or(r.Policy, DefaultRoutingPolicy)
	}
}

// Default fills in what the API server defaults in a CacheBackend's spec.
func (cb *CacheBackend) Default() {
	s := &cb.Spec
	s.Type = or(s.Type, BackendMooncake)
	m := s.Mooncake
	if m == nil {
		return
	}
	m.MetadataServer = or(m.MetadataServer, DefaultMetadataServer)
	if mm := m.Managed; mm != nil {
		mm.RPCPort = orInt32(mm.RPCPort, DefaultRPCPort)
		mm.AdminPort = orInt32(mm.AdminPort, DefaultAdminPort)
		if mm.Replicas == nil {
			mm.Replicas = ptr.To(DefaultMasterReplicas)
		}
		if ha := mm.HA; ha != nil && ha.ReplicateMetadata == nil {
			ha.ReplicateMetadata = ptr.To(true)
		}
		if ha := mm.HA; ha != nil && ha.Etcd.Managed != nil && ha.Etcd.Managed.Replicas == nil {
			ha.Etcd.Managed.Replicas = ptr.To(DefaultEtcdReplicas)
		}
		if st := mm.Store; st != nil {
			if st.Replicas == nil {
				st.Replicas = ptr.To(DefaultStoreReplicas)
			}
			st.Protocol = or(st.Protocol, DefaultProtocol)
			st.DrainTimeoutSeconds = orInt32(st.DrainTimeoutSeconds, DefaultDrainTimeoutSeconds)
		}
	}
}

// Default fills in what the API server defaults in a CacheFlush's spec.
func (cf *CacheFlush) Default() {
	if cf.Spec.Force == nil {
		cf.Spec.Force = ptr.To(true)
	}
}

func orInt32(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

func or[T ~string](v, def T) T {
	if v == "" {
		return def
	}
	return v
}
