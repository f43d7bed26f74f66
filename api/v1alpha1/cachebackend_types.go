package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackendType is the kind of L3 store.
// +kubebuilder:validation:Enum=Mooncake
type BackendType string

// BackendMooncake is a Mooncake distributed store.
const BackendMooncake BackendType = "Mooncake"

// CacheBackendSpec is the desired state of a CacheBackend.
// +kubebuilder:validation:XValidation:rule="self.type != 'Mooncake' || has(self.mooncake)",message="spec.mooncake is required when spec.type is Mooncake"
type CacheBackendSpec struct {
	// type is the kind of store.
	// +kubebuilder:default=Mooncake
	// +optional
	Type BackendType `json:"type,omitempty"`

	// mooncake configures a Mooncake store.
	// +optional
	Mooncake *MooncakeSpec `json:"mooncake,omitempty"`

	// placement says where the pods the operator runs for this backend are scheduled: the
	// managed master and store pods, and the Jobs that flush one of the store's namespaces (for
	// an external master too). Empty means wherever the scheduler puts them.
	// +optional
	Placement *BackendPlacement `json:"placement,omitempty"`
}

// BackendPlacement is the scheduling of a backend's pods (not of the SGLang ranks that use it).
type BackendPlacement struct {
	// nodeSelector of the master, store and flush pods.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the master, store and flush pods.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// MooncakeSpec is a Mooncake store: one the operator runs (managed) or one that exists (external).
// +kubebuilder:validation:XValidation:rule="has(self.managed) != has(self.external)",message="spec.mooncake: set exactly one of managed (the operator runs the master) or external (an existing master)"
// +kubebuilder:validation:XValidation:rule="!has(self.multiTenant) || !self.multiTenant || !has(self.managed)",message="spec.mooncake.multiTenant is only supported with an external master: a multi-tenant mooncake_master also needs a tenant quota policy (--tenant_quota_connector_uri), which the operator does not render yet"
type MooncakeSpec struct {
	// managed makes the operator run the Mooncake master (and optionally store pods).
	// +optional
	Managed *ManagedMooncake `json:"managed,omitempty"`

	// external points at an existing Mooncake master.
	// +optional
	External *ExternalMooncake `json:"external,omitempty"`

	// multiTenant says the (external) master runs with --enable_multi_tenants, so that a flush
	// may target one tenant. Without it, the operator refuses tenant flushes: such a master
	// ignores the tenant and would remove every object.
	// +optional
	MultiTenant bool `json:"multiTenant,omitempty"`

	// metadataServer is the transfer-engine metadata server clients use.
	// +kubebuilder:default=P2PHANDSHAKE
	// +kubebuilder:validation:MaxLength=256
	// +optional
	MetadataServer string `json:"metadataServer,omitempty"`
}

// ManagedMooncake is a Mooncake master the operator runs.
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || self.replicas == 1 || has(self.ha)",message="spec.mooncake.managed.replicas above 1 needs spec.mooncake.managed.ha: without leader election every master would serve on its own and clients would see different stores"
type ManagedMooncake struct {
	// image runs mooncake_master (and mooncake_store_service for store pods).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// version is the Mooncake version the image carries, for display and compatibility checks.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Version string `json:"version,omitempty"`

	// rpcPort is the master's RPC port (--rpc_port).
	// +kubebuilder:default=50051
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	RPCPort int32 `json:"rpcPort,omitempty"`

	// adminPort is the master's admin and metrics HTTP port (--metrics_port).
	// +kubebuilder:default=9003
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	AdminPort int32 `json:"adminPort,omitempty"`

	// evictionHighWatermarkRatio is the used fraction of the store that starts eviction.
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?)$`
	// +kubebuilder:validation:MaxLength=8
	// +optional
	EvictionHighWatermarkRatio string `json:"evictionHighWatermarkRatio,omitempty"`

	// evictionRatio is the fraction of the store one eviction frees.
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]+)?|1(\.0+)?)$`
	// +kubebuilder:validation:MaxLength=8
	// +optional
	EvictionRatio string `json:"evictionRatio,omitempty"`

	// leaseTTLMillis is how long a read object is protected from removal (--default_kv_lease_ttl).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600000
	// +optional
	LeaseTTLMillis int64 `json:"leaseTTLMillis,omitempty"`

	// resources of the master pod.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// store runs dedicated store pods that lend memory to the store, so that serving pods can be
	// pure clients.
	// +optional
	Store *StorePods `json:"store,omitempty"`

	// replicas is the number of masters. One master serves at a time; more than one needs ha,
	// and the others are standbys that take over when the leader fails.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=7
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// ha elects the serving master through etcd (mooncake_master --enable_ha). Clients then reach
	// the leader through an etcd:// address.
	// +optional
	HA *MasterHA `json:"ha,omitempty"`
}

// MasterHA is leader election of the managed masters through etcd.
type MasterHA struct {
	// etcd is the etcd the masters elect their leader in and keep their metadata log in.
	// +required
	Etcd EtcdEndpoints `json:"etcd"`

	// replicateMetadata replicates the objects' metadata to the standbys (--enable_oplog), so
	// that a new leader restores it. With the pinned Mooncake release, objects held by store pods
	// were still unreadable after a failover (a cold cache; docs/compatibility.md says what was
	// seen). Without it a new leader starts empty. Either way nothing stale is read. It costs
	// etcd writes for every batch of puts and removals.
	// +kubebuilder:default=true
	// +optional
	ReplicateMetadata *bool `json:"replicateMetadata,omitempty"`
}

// EtcdEndpoints is the etcd of HA masters: an existing etcd cluster, or one the operator runs
// for the backend.
// +kubebuilder:validation:XValidation:rule="has(self.endpoints) != has(self.managed)",message="spec.mooncake.managed.ha.etcd: set exactly one of endpoints (an existing etcd) or managed (an etcd the operator runs for this backend)"
type EtcdEndpoints struct {
	// endpoints are the client addresses of an existing etcd, host:port. The pinned Mooncake
	// release speaks plain gRPC to them: it has no setting for a CA or a client certificate.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$`
	// +listType=atomic
	// +optional
	Endpoints []string `json:"endpoints,omitempty"`

	// managed makes the operator run an etcd for this backend alone: a StatefulSet of etcd
	// members, reachable by the backend's masters and clients only.
	// +optional
	Managed *ManagedEtcd `json:"managed,omitempty"`

	// clusterID names this store in etcd (--cluster_id; clients read it as MC_STORE_CLUSTER_ID):
	// stores that share one etcd need different ones. Empty means the backend's namespace and
	// name.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+$`
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
}

// ManagedEtcd is an etcd the operator runs for one backend's HA masters. It serves clients and
// peers with mutual TLS only, on certificates the operator issues and renews in Secret
// <backend>-etcd-tls; the masters and clients, whose pinned Mooncake release speaks plaintext to
// etcd, reach it through etcd's gRPC proxy beside them. A NetworkPolicy admits only the
// backend's pods to its client port and only its members to its peer port.
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || self.replicas % 2 == 1",message="spec.mooncake.managed.ha.etcd.managed.replicas must be odd (1, 3 or 5): an even number of members survives no more failures than one member fewer"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || self.replicas == 1 || has(self.storage.size)",message="spec.mooncake.managed.ha.etcd.managed.storage.emptyDir holds a 1-member etcd only: a member of several whose pod is replaced comes back without its data and cannot rejoin; set storage.size (a PersistentVolumeClaim per member) or replicas 1"
type ManagedEtcd struct {
	// replicas is the number of etcd members: 1 (no failure tolerated) or 3 (one member may
	// fail) or 5 (two may). It cannot change once the etcd runs: the operator does not add or
	// remove members.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.mooncake.managed.ha.etcd.managed.replicas cannot change: the operator does not add or remove etcd members; create another backend for another size"
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// storage is where each member keeps its data. It cannot change once the etcd runs.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.mooncake.managed.ha.etcd.managed.storage cannot change: the members' volumes are fixed when the etcd is created; create another backend for other storage"
	// +required
	Storage EtcdStorage `json:"storage"`

	// image runs the etcd server (at /usr/local/bin/etcd, as in the upstream etcd images);
	// empty means the operator's default, the etcd release it is tested with.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// resources of each etcd member. Empty requests 100m CPU and 128Mi of memory.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// EtcdStorage is the data volume of each etcd member: a PersistentVolumeClaim, or an emptyDir.
// +kubebuilder:validation:XValidation:rule="has(self.size) != has(self.emptyDir)",message="spec.mooncake.managed.ha.etcd.managed.storage: set exactly one of size (a PersistentVolumeClaim per member, kept when a pod is replaced) or emptyDir (the data goes with the pod)"
// +kubebuilder:validation:XValidation:rule="!has(self.storageClassName) || has(self.size)",message="spec.mooncake.managed.ha.etcd.managed.storage.storageClassName is only used with size"
type EtcdStorage struct {
	// size of each member's PersistentVolumeClaim (ReadWriteOnce). The claims are deleted with
	// the backend.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName of the claims; empty means the cluster's default StorageClass.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`

	// emptyDir keeps each member's data in its pod: when the pod is replaced (a new image, a
	// node drained), the etcd starts empty and the masters elect a leader again, with a cold
	// cache. Only for a 1-member etcd.
	// +optional
	EmptyDir *corev1.EmptyDirVolumeSource `json:"emptyDir,omitempty"`
}

// StorePods are dedicated Mooncake store pods.
// +kubebuilder:validation:XValidation:rule="!has(self.rdmaDevices) || size(self.rdmaDevices) == 0 || (has(self.protocol) && self.protocol == 'rdma')",message="spec.mooncake.managed.store.rdmaDevices is only used with protocol rdma: set spec.mooncake.managed.store.protocol to rdma, or remove rdmaDevices"
type StorePods struct {
	// image runs mooncake_store_service in the store pods; empty means spec.mooncake.managed.image.
	// A store image of its own lets the store pods roll (one at a time, drained first) without
	// the master, whose restart forgets every object unless it runs with HA.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// replicas is the number of store pods.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=256
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// segmentSize is the memory each store pod lends to the store.
	// +required
	SegmentSize resource.Quantity `json:"segmentSize"`

	// localBufferSize is the memory each store pod's Mooncake client registers for its own
	// transfers (MOONCAKE_LOCAL_BUFFER_SIZE), besides the segment. Mooncake's default is 1Gi.
	// +optional
	LocalBufferSize *resource.Quantity `json:"localBufferSize,omitempty"`

	// protocol is the transfer protocol of the store pods (MOONCAKE_PROTOCOL). With rdma the
	// pods get the IPC_LOCK capability and the node's /dev/infiniband, which only the privileged
	// Pod Security level admits; the RDMA network devices themselves come from
	// resources (a device plugin's resource) or the node.
	// +kubebuilder:default=tcp
	// +optional
	Protocol TransferProtocol `json:"protocol,omitempty"`

	// rdmaDevices are the RDMA devices the store pods use, such as mlx5_0 (MOONCAKE_DEVICE,
	// joined with commas). Empty lets Mooncake discover them. Only with protocol rdma.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`
	// +listType=atomic
	// +optional
	RDMADevices []string `json:"rdmaDevices,omitempty"`

	// drainTimeoutSeconds bounds how long the operator waits for the master to move a store
	// pod's objects to the other store pods before it replaces the pod anyway (a roll to a new
	// image or template, or a scale down). What is left on the pod then is lost: objects read
	// without pause (each read renews a lease that holds the object where it is) and objects no
	// other segment has room for.
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	// +optional
	DrainTimeoutSeconds int32 `json:"drainTimeoutSeconds,omitempty"`

	// resources of each store pod, for the store process itself: the operator adds segmentSize
	// and localBufferSize to the memory request (256Mi for the process when no memory request is
	// set), and to the memory limit when one is set.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// ExternalMooncake is an existing Mooncake master.
type ExternalMooncake struct {
	// rpcAddress is the master's RPC address, host:port; or, for masters with HA, the etcd they
	// elect their leader in, etcd://host:port[;host:port...], through which clients find the
	// leader.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}|etcd://[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}([;,][A-Za-z0-9.\-\[\]:]+:[0-9]{1,5})*)$`
	// +required
	RPCAddress string `json:"rpcAddress"`

	// adminURL is the master's admin HTTP base URL, e.g. http://mooncake-master:9003. With an
	// etcd:// rpcAddress it may name any of the masters: when it answers as a standby, the
	// operator asks it for the leader and probes the leader's host at the same port.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://[^\s/]+(/.*)?$`
	// +required
	AdminURL string `json:"adminURL"`

	// clusterID is the masters' --cluster_id, which clients need (as MC_STORE_CLUSTER_ID) to
	// find the leader of an etcd:// rpcAddress. Empty means Mooncake's default,
	// mooncake_cluster.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+$`
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
}

// CacheBackend condition types and reasons.
const (
	// ConditionMasterReachable is True when the master's admin API answers.
	ConditionMasterReachable = "MasterReachable"
	// ConditionServiceReady is True when the master reports service_ready.
	ConditionServiceReady = "ServiceReady"
	// ConditionStandbyAvailable is True when a master with HA has a standby ready to take over;
	// False when the backend runs without one (a failure of its master then stops the store).
	ConditionStandbyAvailable = "StandbyAvailable"
	// ConditionStoreAuthorized is True when the operator may call the backend's admin URL: a
	// managed master, an admin URL on the host the RPC address names (a Service of the backend's
	// own namespace, or loopback), or one a cluster administrator granted. False names the
	// field, why and what to do; nothing is called then.
	ConditionStoreAuthorized = "StoreAuthorized"
	// ReasonStoreRefused: the admin URL is not provably the store's; nothing is called.
	ReasonStoreRefused = "StoreRefused"

	// ReasonLeaderChanged is the Event of a failover: the masters elected another leader.
	ReasonLeaderChanged = "LeaderChanged"
	ReasonStandbyReady  = "StandbyReady"
	ReasonNoStandby     = "NoStandby"
	ReasonSingleMaster  = "SingleMaster"

	ReasonMasterReachable   = "MasterReachable"
	ReasonMasterUnreachable = "MasterUnreachable"
	ReasonMasterNotDeployed = "MasterNotDeployed"
	ReasonServiceReady      = "ServiceReady"
	ReasonServiceNotReady   = "ServiceNotReady"
	ReasonHealthy           = "Healthy"
	// ReasonListTruncated: a status list reached its bound; the rest is counted, not listed.
	ReasonListTruncated = "ListTruncated"
)

// Managed etcd condition type and reasons.
const (
	// ConditionEtcdReady is True when every member of the backend's managed etcd is Ready;
	// absent when the backend runs no etcd.
	ConditionEtcdReady = "EtcdReady"

	ReasonEtcdReady = "EtcdReady"
	// ReasonEtcdDegraded: a majority of the members is Ready, not all of them.
	ReasonEtcdDegraded = "EtcdDegraded"
	// ReasonEtcdNoQuorum: fewer than a majority of the members are Ready: the masters cannot
	// elect a leader.
	ReasonEtcdNoQuorum = "EtcdNoQuorum"
	// ReasonEtcdCertificates: the operator issued or renewed the managed etcd's certificates
	// (an Event).
	ReasonEtcdCertificates = "EtcdCertificates"
)

// Store pod condition type and reasons.
const (
	// ConditionStoresCurrent is True when every store pod runs the current template and the
	// store runs as many pods as spec.mooncake.managed.store.replicas asks.
	ConditionStoresCurrent = "StoresCurrent"

	ReasonStoresCurrent = "StoresCurrent"
	// ReasonStoreDraining: the master moves a store pod's objects to the others before the pod
	// is replaced or removed.
	ReasonStoreDraining = "StoreDraining"
	// ReasonStoreWaiting: the roll waits for store pods to be created or become Ready.
	ReasonStoreWaiting = "StoreWaiting"
	// ReasonStoreReplacing: a drained store pod is being deleted.
	ReasonStoreReplacing = "StoreReplacing"
)

// CacheBackendStatus is the observed state of a CacheBackend.
type CacheBackendStatus struct {
	// conditions: Ready, MasterReachable, ServiceReady.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// endpoints are the addresses serving pods use.
	// +optional
	Endpoints *BackendEndpoints `json:"endpoints,omitempty"`

	// storeID names the store this backend reaches: the master's RPC address in one normal form
	// (host lowercased, a Service name fully qualified relative to this namespace, an IP literal
	// canonical, the default port filled in). Backends with one storeID, in any namespace, are one
	// store: a flush through one removes what the others' deployments wrote, so the operator
	// checks every deployment of the store before it flushes.
	// +kubebuilder:validation:MaxLength=320
	// +optional
	StoreID string `json:"storeID,omitempty"`

	// capacityBytes is the memory the store has.
	// +optional
	CapacityBytes int64 `json:"capacityBytes,omitempty"`

	// usedBytes is the memory the store's objects use.
	// +optional
	UsedBytes int64 `json:"usedBytes,omitempty"`

	// usage is usedBytes of capacityBytes, for display.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Usage string `json:"usage,omitempty"`

	// keyCount is the number of objects in the store.
	// +optional
	KeyCount int64 `json:"keyCount"`

	// segmentCount is the number of memory segments mounted in the store (each serving rank or
	// store pod that lends memory mounts one).
	// +kubebuilder:validation:Minimum=0
	// +optional
	SegmentCount int64 `json:"segmentCount,omitempty"`

	// version is the Mooncake version the master reports.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Version string `json:"version,omitempty"`

	// lastProbeTime is when the master was last asked.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`

	// storePods counts the managed store pods, when the backend runs them.
	// +optional
	StorePods *StorePodsStatus `json:"storePods,omitempty"`

	// storeRollout is the store pod the master is draining before the operator replaces or
	// removes it, while there is one.
	// +optional
	StoreRollout *StoreRollout `json:"storeRollout,omitempty"`

	// etcd counts the members of the managed etcd, when the backend runs one.
	// +optional
	Etcd *EtcdStatus `json:"etcd,omitempty"`

	// masters are the managed masters the operator asked, with their HA roles; the leader
	// first. Empty for an external backend or a managed one without HA.
	// +kubebuilder:validation:MaxItems=7
	// +listType=map
	// +listMapKey=name
	// +optional
	Masters []MasterMember `json:"masters,omitempty"`

	// leader is the RPC address of the serving master of a backend with HA, as the masters
	// report it; while none serves (an election), the last one seen.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Leader string `json:"leader,omitempty"`

	// viewVersion is the masters' leader view (it changes only when the leader changes).
	// +optional
	ViewVersion int64 `json:"viewVersion,omitempty"`

	// namespaces are the key prefixes in use and the deployments that use each: at most 256 of
	// them, in name order; namespaceCount says how many there are.
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=namespace
	// +optional
	Namespaces []NamespaceUsage `json:"namespaces,omitempty"`

	// namespaceCount is the number of key prefixes in use, also those beyond the 256 that
	// namespaces lists.
	// +kubebuilder:validation:Minimum=0
	// +optional
	NamespaceCount int32 `json:"namespaceCount,omitempty"`
}

// Bounds of the CacheBackend's status lists: what lies beyond them is counted, not listed.
const (
	// MaxListedNamespaces bounds status.namespaces.
	MaxListedNamespaces = 256
	// MaxListedDeployments bounds status.namespaces[].deployments.
	MaxListedDeployments = 64
)

// StorePodsStatus counts the managed store pods.
type StorePodsStatus struct {
	// replicas is the number of store pods that exist, one more than asked for while a roll
	// runs.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas int32 `json:"replicas"`

	// ready is the number of store pods that are Ready (their segment is mounted and the master
	// answers them).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Ready int32 `json:"ready"`

	// updated is the number of store pods that run the current template.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Updated int32 `json:"updated"`
}

// EtcdStatus counts the members of a managed etcd.
type EtcdStatus struct {
	// endpoints are the etcd's client addresses the masters and clients are given.
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	// +optional
	Endpoints []string `json:"endpoints,omitempty"`

	// replicas is the number of members the etcd runs with.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas int32 `json:"replicas"`

	// ready is the number of members that are Ready (their /health answers: the member has a
	// leader and no alarm).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Ready int32 `json:"ready"`
}

// StoreRollout is a store pod being drained.
type StoreRollout struct {
	// pod is the store pod being drained.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Pod string `json:"pod"`

	// reason is why it goes: Roll (it runs an older template) or ScaleDown.
	// +kubebuilder:validation:Enum=Roll;ScaleDown
	// +required
	Reason string `json:"reason"`

	// jobID is the master's drain job, when the operator knows it.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	JobID string `json:"jobID,omitempty"`

	// startTime is when the drain began; the pod is replaced anyway drainTimeoutSeconds later.
	// +required
	StartTime metav1.Time `json:"startTime"`

	// movedObjects is how many objects the drain job has moved to other segments so far.
	// +optional
	MovedObjects int64 `json:"movedObjects,omitempty"`

	// movedBytes is how many bytes the drain job has moved to other segments so far.
	// +optional
	MovedBytes int64 `json:"movedBytes,omitempty"`

	// blockedObjects are objects the drain cannot move yet: under a read lease, being written,
	// or with no other segment to take them.
	// +optional
	BlockedObjects int64 `json:"blockedObjects,omitempty"`
}

// BackendEndpoints are the addresses of a store.
type BackendEndpoints struct {
	// rpcAddress is the master's RPC address, host:port (MOONCAKE_MASTER).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	RPCAddress string `json:"rpcAddress,omitempty"`

	// adminURL is the master's admin HTTP base URL.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	AdminURL string `json:"adminURL,omitempty"`

	// metricsPort is the master's admin and metrics HTTP port (its --metrics_port), which
	// serving ranks are given as master_metrics_port: the managed master's adminPort, or the port
	// an external adminURL names (unset when it names none).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	MetricsPort int32 `json:"metricsPort,omitempty"`

	// metadataServer is the transfer-engine metadata server.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	MetadataServer string `json:"metadataServer,omitempty"`

	// clusterID is the HA masters' --cluster_id, which clients of an etcd:// rpcAddress are given
	// as MC_STORE_CLUSTER_ID to find the leader. Empty for a single master.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
}

// MasterRole is what an HA master says it is.
// +kubebuilder:validation:Enum=Leader;Standby;Starting;Unreachable
type MasterRole string

// Master roles.
const (
	MasterLeader      MasterRole = "Leader"
	MasterStandby     MasterRole = "Standby"
	MasterStarting    MasterRole = "Starting"
	MasterUnreachable MasterRole = "Unreachable"
)

// MasterMember is one managed master pod.
type MasterMember struct {
	// name is the pod's name.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// address is the pod's RPC address, ip:port.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Address string `json:"address,omitempty"`

	// role is what the master answered (Leader, Standby, Starting: elected and warming up or not
	// yet a candidate), or Unreachable.
	// +required
	Role MasterRole `json:"role"`
}

// NamespaceUsage is one key prefix in a store and who writes or reads it.
type NamespaceUsage struct {
	// namespace is the key prefix (extra_backend_tag).
	// +kubebuilder:validation:MaxLength=63
	// +required
	Namespace string `json:"namespace"`

	// deployments are the HiCacheDeployments that use it, through any backend of the store: a name
	// alone in this namespace, namespace/name in another; at most 64 of them, in name order.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	Deployments []string `json:"deployments,omitempty"`

	// deploymentCount is the number of HiCacheDeployments that use it, also those beyond the 64
	// that deployments names.
	// +kubebuilder:validation:Minimum=0
	// +optional
	DeploymentCount int32 `json:"deploymentCount,omitempty"`
}

// CacheBackend is a shared L3 store for HiCache: a Mooncake master the operator runs, or one that
// exists.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cb,categories=hicache
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Keys",type=integer,JSONPath=`.status.keyCount`
// +kubebuilder:printcolumn:name="Used",type=string,JSONPath=`.status.usage`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,priority=1
// +kubebuilder:printcolumn:name="Master",type=string,JSONPath=`.status.endpoints.rpcAddress`,priority=1
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`,priority=1
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.status.storeID`,priority=1
// +kubebuilder:printcolumn:name="Store-Pods",type=integer,JSONPath=`.status.storePods.ready`,priority=1
// +kubebuilder:printcolumn:name="Etcd",type=integer,JSONPath=`.status.etcd.ready`,priority=1
// +kubebuilder:printcolumn:name="Stores-Current",type=string,JSONPath=`.status.conditions[?(@.type=="StoresCurrent")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CacheBackend struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec CacheBackendSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status CacheBackendStatus `json:"status,omitempty"`
}

// CacheBackendList is a list of CacheBackends.
// +kubebuilder:object:root=true
type CacheBackendList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheBackend `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CacheBackend{}, &CacheBackendList{})
}
