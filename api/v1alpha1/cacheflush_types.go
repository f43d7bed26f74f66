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

	// allowInUse runs the flush even while deployments use what it removes (their cache starts
	// cold). Without it a flush waits until no serving pod and no HiCacheDeployment, in any
	// namespace, writes the scope on this backend's store. Setting it needs the custom verb
	// "override" on cacheflushes (group hicache.io) in this namespace, as the ClusterRole
	// hicache-operator-flush-override grants; an admission policy refuses it otherwise.
	// +optional
	AllowInUse bool `json:"allowInUse,omitempty"`

	// reason says why, in words, for the record.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
}

// CacheFlush condition types and reasons.
const (
	// ConditionComplete is True when the flush ran and was verified.
	ConditionComplete = "Complete"
	// ConditionFailed is True when an attempt failed: it is retried (after status.nextAttemptTime)
	// unless the reason is final (KeysLeft, InvalidScope, AttemptsExhausted).
	ConditionFailed = "Failed"

	// ReasonFlushed: the flush ran and removed what the scope held (Complete).
	ReasonFlushed = "Flushed"
	// ReasonAlreadyEmpty: the scope held no object when the flush ran; nothing was removed
	// (Complete).
	ReasonAlreadyEmpty      = "AlreadyEmpty"
	ReasonPending           = "Pending"
	ReasonRunning           = "Running"
	ReasonWaitingForBackend = "WaitingForBackend"
	ReasonWaitingForTurn    = "WaitingForTurn"
	// ReasonClaimedElsewhere: another operator process holds the flush's claim.
	ReasonClaimedElsewhere = "ClaimedElsewhere"
	// ReasonBackingOff: an attempt failed; the next starts at status.nextAttemptTime.
	ReasonBackingOff = "BackingOff"
	// ReasonInUse: deployments still use what the flush would remove; it waits.
	ReasonInUse    = "InUse"
	ReasonKeysLeft = "KeysLeft"
	// ReasonKeysLeftRetrying: a forced attempt left objects of the scope; it is tried once more.
	ReasonKeysLeftRetrying   = "KeysLeftRetrying"
	ReasonBackendUnreachable = "BackendUnreachable"
	ReasonJobFailed          = "JobFailed"
	// ReasonAttemptTimedOut: an attempt did not finish within its deadline and was stopped.
	ReasonAttemptTimedOut = "AttemptTimedOut"
	// ReasonAttemptInterrupted: the process that ran an attempt stopped before recording it.
	ReasonAttemptInterrupted = "AttemptInterrupted"
	// ReasonAttemptsExhausted: every allowed attempt failed; the flush is Failed for good.
	ReasonAttemptsExhausted = "AttemptsExhausted"
	ReasonInvalidScope      = "InvalidScope"
	// ReasonConfirmingRemoval: on masters with HA, the flush removed what the scope held and
	// waits until status.confirmAfter to see that the leader that ran the removal still serves
	// (a removal is written to etcd a moment after it returns; a leader that dies in between
	// takes it along, and the objects are back on the next leader).
	ReasonConfirmingRemoval = "ConfirmingRemoval"
	// ReasonFlushRepeatedAfterFailover: the masters elected another leader after the flush
	// removed objects and before it completed; it runs again against the new leader.
	ReasonFlushRepeatedAfterFailover = "FlushRepeatedAfterFailover"
)

// How a flush runs (status.method).
const (
	// MethodAdminAPI: the master's admin API (scopes All and Tenant).
	MethodAdminAPI = "AdminAPI"
	// MethodJob: flush.py in a Kubernetes Job, which outlives the operator process.
	MethodJob = "Job"
	// MethodLocal: flush.py on the operator's own host.
	MethodLocal = "Local"
)

// FlushClaim is an operator process's hold on one attempt of a flush. It is written, with the
// object's resourceVersion, before the attempt executes: of several processes, only the one
// whose write succeeds runs the attempt. It is removed when the attempt's result is recorded.
type FlushClaim struct {
	// holder is the identity of the operator process that runs the attempt (its --identity).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Holder string `json:"holder"`

	// attempt is the number of the attempt the claim is for.
	// +kubebuilder:validation:Minimum=1
	// +required
	Attempt int32 `json:"attempt"`

	// acquireTime is when the holder took the claim.
	// +required
	AcquireTime metav1.Time `json:"acquireTime"`

	// expiryTime is when the claim lapses: a holder that has not recorded the attempt by then
	// is presumed gone, and another process may take the flush over. It lies past the attempt's
	// deadline.
	// +required
	ExpiryTime metav1.Time `json:"expiryTime"`

	// keysBefore is how many objects of the scope the store held right before the attempt ran;
	// absent for scope Tenant, which cannot be counted. A process that takes over an attempt
	// whose holder stopped compares it with what is left, so the record says what was removed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	KeysBefore *int64 `json:"keysBefore,omitempty"`
}

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

	// attempts is how many attempts started, the one under way included. An attempt whose
	// process stopped before recording it counts once.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// claim is present while an attempt is under way: who runs it, until when.
	// +optional
	Claim *FlushClaim `json:"claim,omitempty"`

	// nextAttemptTime is when the next attempt may start, after a failed one (exponential
	// backoff). It is kept here so that an operator restart keeps it.
	// +optional
	NextAttemptTime *metav1.Time `json:"nextAttemptTime,omitempty"`

	// startTime is when the first attempt started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the flush completed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// method is how the flush runs: AdminAPI, Job or Local.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Method string `json:"method,omitempty"`

	// viewVersion is the masters' leader view (the view_version of the leader's /health) under
	// which the last attempt ran; 0 for a master without HA.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ViewVersion int64 `json:"viewVersion,omitempty"`

	// confirmAfter is set while the flush confirms its removal on masters with HA: it completes
	// once, at or after this time, the leader of viewVersion still serves and the scope counted
	// through it is empty. A removal reaches etcd a moment after it returns, and a leader that
	// dies in between takes it along: the objects are back on the next leader.
	// +optional
	ConfirmAfter *metav1.Time `json:"confirmAfter,omitempty"`

	// repeatedAfterFailover is how many times the flush ran again because the masters elected
	// another leader after it had removed objects and before it completed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RepeatedAfterFailover int32 `json:"repeatedAfterFailover,omitempty"`

	// removedAgain is what the attempts run after a failover removed: objects that came back
	// with the failover (which removed counts already), and any written since.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RemovedAgain int64 `json:"removedAgain,omitempty"`
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
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.status.attempts`,priority=1
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
