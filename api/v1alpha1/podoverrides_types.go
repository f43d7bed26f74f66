package v1alpha1

// RoleOverrides are the parts of the pods of one role of a serving group (the leader, node rank
// 0, or the followers) a user may set beside spec.template. Every pod of a group comes from one
// template, so the operator sets them on each pod as soon as it exists: what must be on a pod
// when it is created (what admission webhooks or schedulers read) belongs in spec.template.
type RoleOverrides struct {
	// labels added to the pods of this role, beside spec.template.labels (these win on a shared
	// key). Keys under hicache.io/, apps.kubernetes.io/ and statefulset.kubernetes.io/ are the
	// operator's and the StatefulSet controller's.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('hicache.io/') && !k.startsWith('apps.kubernetes.io/') && !k.startsWith('statefulset.kubernetes.io/') && k != 'controller-revision-hash')",message="spec.template.leader.labels and spec.template.follower.labels: keys under hicache.io/, apps.kubernetes.io/ and statefulset.kubernetes.io/ and controller-revision-hash are set by the operator and the StatefulSet controller, which find the rank pods by them: choose another key"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the pods of this role, beside spec.template.annotations (these win
	// on a shared key). Keys under hicache.io/ are the operator's.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('hicache.io/'))",message="spec.template.leader.annotations and spec.template.follower.annotations: keys under hicache.io/ are set by the operator: choose another key"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// GangScheduler is a scheduler that places a serving group's pods together.
// +kubebuilder:validation:Enum=Volcano;Kueue
type GangScheduler string

// The gang schedulers.
const (
	// GangVolcano: rank pods run with schedulerName volcano, and each group's StatefulSet carries
	// scheduling.volcano.sh/group-min-member (the group's node count), from which Volcano's
	// controller makes one PodGroup per group.
	GangVolcano GangScheduler = "Volcano"
	// GangKueue: each group's StatefulSet carries kueue.x-k8s.io/queue-name, from which Kueue
	// admits the group's pods as one pod group (its StatefulSet integration).
	GangKueue GangScheduler = "Kueue"
)

// GangScheduling puts every serving group into one gang.
// +kubebuilder:validation:XValidation:rule="self.scheduler != 'Kueue' || has(self.queue)",message="spec.template.gangScheduling.queue is required with Kueue: name the LocalQueue of this namespace that admits the serving groups"
type GangScheduling struct {
	// scheduler is Volcano or Kueue.
	// +required
	Scheduler GangScheduler `json:"scheduler"`

	// queue is the Volcano queue (the pods' scheduling.volcano.sh/queue-name; Volcano's default
	// queue when empty) or the Kueue LocalQueue (required).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Queue string `json:"queue,omitempty"`
}
