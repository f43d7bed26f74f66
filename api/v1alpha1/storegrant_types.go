package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterCacheStoreGrantSpec is a cluster administrator's word about one store: the admin URLs of
// its masters, and the Kubernetes namespaces whose CacheBackends may use it.
type ClusterCacheStoreGrantSpec struct {
	// rpcAddress is the store's master RPC address (host:port, or etcd://host:port[;host:port]
	// for masters with HA), written fully qualified: a Service as
	// <service>.<namespace>[.svc[.<cluster domain>]], since a cluster-scoped object has no
	// namespace of its own to complete a short name with.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	RPCAddress string `json:"rpcAddress"`

	// adminURLs are the admin URLs (http[s]://host:port) of the store's masters: the only ones
	// the operator calls for a backend this grant covers, beyond what the backend's own
	// namespace provably holds.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:Pattern=`^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@%\\ ]+/?$`
	// +listType=set
	// +required
	AdminURLs []string `json:"adminURLs"`

	// namespaces are the Kubernetes namespaces whose CacheBackends may use the store; "*" is
	// every namespace.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +listType=set
	// +required
	Namespaces []string `json:"namespaces"`

	// allowCrossNamespaceOverride lets a CacheFlush with spec.allowInUse, in one of namespaces,
	// empty what users in other namespaces of this grant use. Without it an override counts only
	// over users in the flush's own namespace, where alone its creator's override verb was
	// checked: a cluster-wide override needs a cluster-scoped grant.
	// +optional
	AllowCrossNamespaceOverride bool `json:"allowCrossNamespaceOverride,omitempty"`
}

// ClusterCacheStoreGrant grants the CacheBackends of some namespaces the use of a store whose
// masters the operator cannot prove theirs (another namespace's master, an IP literal, the
// masters of an etcd:// address). It is cluster-scoped: only who may create cluster-scoped
// objects of hicache.io (a cluster administrator) grants one; no role of a namespace can.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ccsg,categories=hicache
// +kubebuilder:printcolumn:name="RPC",type=string,JSONPath=`.spec.rpcAddress`
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`
// +kubebuilder:printcolumn:name="Override",type=boolean,JSONPath=`.spec.allowCrossNamespaceOverride`
// +kubebuilder:printcolumn:name="Admin",type=string,JSONPath=`.spec.adminURLs`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterCacheStoreGrant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the grant.
	// +required
	Spec ClusterCacheStoreGrantSpec `json:"spec"`
}

// ClusterCacheStoreGrantList is a list of ClusterCacheStoreGrants.
// +kubebuilder:object:root=true
type ClusterCacheStoreGrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterCacheStoreGrant `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ClusterCacheStoreGrant{}, &ClusterCacheStoreGrantList{})
}
