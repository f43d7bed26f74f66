package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FlushScope is what a flush removes.
// +kubebuilder:validation:Enum=All;Namespace;Tenant
type FlushScope string

// The flush scopes.
const (
	// FlushScopeAll removes every object of the store.
	FlushScopeAll FlushScope = "All"
	// FlushScopeNamespace removes the objects under one key prefix.
	FlushScopeNamespace FlushScope = "Namespace"
	// FlushScopeTenant removes the objects of one tenant of a multi-tenant master.
	FlushScopeTenant FlushScope = "Tenant"
)

// CacheFlushSpec is a request to remove objects from a store. It is immutable.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="CacheFlush spec is immutable: create a new CacheFlush instead"
// +kubebuilder:validation:XValidation:rule="self.scope != 'Namespace' || has(self.namespace)",message="spec.namespace (the key prefix to remove) is required when scope is Namespace"
// +kubebuilder:validation:XValidation:rule="self.scope != 'Tenant' || has(self.tenant)",message="spec.tenant is required when scope is Tenant"
// +kubebuilder:validation:XValidation:rule="self.scope == 'Namespace' || !has(self.namespace)",message="spec.namespace is only used with scope Namespace"
// +kubebuilder:validation:XValidation:rule="self.scope == 'Tenant' || !has(self.tenant)",message="spec.tenant is only used with scope Tenant"
type CacheFlushSpec struct {
	// backendRef names the CacheBackend to flush, in this namespace.
	// +required
	BackendRef LocalObjectReference `json:"backendRef"`

	// scope is what to remove: All objects, one Namespace (key prefix) or one Tenant.
	// +required
	Scope FlushScope `json:"scope"`

	// namespace is the key prefix (extra_backend_tag) to remove, with scope Namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// tenant is the tenant to remove, with scope Tenant.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Tenant string `json:"tenant,omitempty"`

	// force removes objects even if they were read within the lease TTL or are being written.
	// A flush without force leaves recently used objects behind.
	// +kubebuilder:default=true
	// +optional
	Force *bool `json:"force,omitempty"`

	// reason says why, in words, for the record.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
}

// CacheFlush condition types and reasons.
const (
	// ConditionComplete is True when the flush ran and was verified.
	ConditionComplete = "Complete"
	// ConditionFailed is True when the flush failed; it may be retried.
	ConditionFailed = "Failed"

	ReasonFlushed            = "Flushed"
	ReasonPending            = "Pending"
	ReasonRunning            = "Running"
	ReasonWaitingForBackend  = "WaitingForBackend"
	ReasonWaitingForTurn     = "WaitingForTurn"
	ReasonNamespaceInUse     = "NamespaceInUse"
	ReasonKeysLeft           = "KeysLeft"
	ReasonBackendUnreachable = "BackendUnreachable"
	ReasonJobFailed          = "JobFailed"
	ReasonInvalidScope       = "InvalidScope"
)

// CacheFlushStatus is the observed state of a CacheFlush.
type CacheFlushStatus struct {
	// conditions: Complete, Failed.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// removed is the number of objects removed.
	// +optional
	Removed int64 `json:"removed,omitempty"`

	// keysLeft is the number of objects of the scope found after the flush.
	// +optional
	KeysLeft int64 `json:"keysLeft,omitempty"`

	// attempts is how many times the flush was tried.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// startTime is when the first attempt started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the flush completed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// method is how the flush ran: AdminAPI or Job.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Method string `json:"method,omitempty"`
}

// CacheFlush removes objects from a CacheBackend: the whole store, one namespace (key prefix) or
// one tenant, and records what was removed.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cflush,categories=hicache
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backendRef.name`
// +kubebuilder:printcolumn:name="Scope",type=string,JSONPath=`.spec.scope`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`,priority=1
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Removed",type=integer,JSONPath=`.status.removed`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CacheFlush struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	// +required
	Spec CacheFlushSpec `json:"spec"`

	// status is the outcome.
	// +optional
	Status CacheFlushStatus `json:"status,omitempty"`
}

// CacheFlushList is a list of CacheFlushes.
// +kubebuilder:object:root=true
type CacheFlushList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheFlush `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CacheFlush{}, &CacheFlushList{})
}
