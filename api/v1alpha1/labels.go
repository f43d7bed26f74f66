package v1alpha1

// LabelPrefix starts every label and annotation key the operator sets; users may not set labels
// under it on rank pods (spec.template.labels).
const LabelPrefix = "hicache.io/"

// Labels the operator sets on what it creates, for selection: the controllers select with them,
// and so may users and tools (kubectl hicache status reads a deployment's groups and pods by them).
const (
	// LabelDeployment is the HiCacheDeployment a serving group, its pods and Services belong to.
	LabelDeployment = LabelPrefix + "deployment"
	// LabelGroup is the index of the serving group of a StatefulSet and its pods (within its
	// role, for a deployment with spec.roles).
	LabelGroup = LabelPrefix + "group"
	// LabelRole is the role, prefill or decode, of a serving group of a deployment with
	// spec.roles: on its StatefulSet, its pods and its headless Service. Groups of a deployment
	// without roles do not carry it.
	LabelRole = LabelPrefix + "role"
	// LabelCacheNamespace is the L3 namespace (extra_backend_tag) a rank pod writes under.
	LabelCacheNamespace = LabelPrefix + "cache-namespace"
	// LabelBackend is the CacheBackend a pod uses (a rank pod, a store pod, a flush Job's pod).
	LabelBackend = LabelPrefix + "backend"
	// LabelStore is the short hash of the store a CacheFlush removes from.
	LabelStore = LabelPrefix + "store"
	// LabelLayout is the short fingerprint of the layout whose objects a CacheFlush removes.
	LabelLayout = LabelPrefix + "layout"
	// LabelFlush is the CacheFlush a flush Job and its pod run.
	LabelFlush = LabelPrefix + "flush"
	// LabelMasterRole marks the managed master pod that is the HA leader (value "leader"): the
	// operator sets it from what the masters answer, and the master Service selects it.
	LabelMasterRole = LabelPrefix + "master-role"
)

// Annotations the operator keeps on what it creates: its own records, not for selection.
const (
	// AnnotationTemplateHash is the hash of a serving group's rendered pod template.
	AnnotationTemplateHash = LabelPrefix + "template-hash"
	// AnnotationLayoutHash is the short layout fingerprint a rank pod writes under.
	AnnotationLayoutHash = LabelPrefix + "layout-hash"
	// AnnotationMembers recorded the pod UIDs of a formed serving group, by rank, on its
	// StatefulSet. The record is now status.formedGroups; the operator still reads the
	// annotation of a group formed before, moves its record to the status once the group is
	// ready (or recreates the group if a rank was replaced), and removes the annotation.
	AnnotationMembers = LabelPrefix + "members"
	// AnnotationRecreations counts a serving group's recreations since it last formed, for the
	// backoff of a group that keeps failing.
	AnnotationRecreations = LabelPrefix + "recreations"
	// AnnotationRecreatedAt is when a serving group was last recreated.
	AnnotationRecreatedAt = LabelPrefix + "recreated-at"
	// AnnotationAppliedHash is a hash of everything the operator applied to an object, so that
	// a value it stops setting is noticed as a change.
	AnnotationAppliedHash = LabelPrefix + "applied-hash"
	// AnnotationFlushSequence numbers the CacheFlushes of one namespace, store and layout: a later
	// return to a layout is a new layout generation, flushed by a new flush.
	AnnotationFlushSequence = LabelPrefix + "flush-sequence"
	// AnnotationRequestedBy is the deployment, namespace/name, that created a CacheFlush.
	AnnotationRequestedBy = LabelPrefix + "requested-by"
	// AnnotationDrainedFor marks a CacheFlush asked for by a deployment that stopped its writers
	// to flush its Fixed namespace: the UID of that deployment, whose status claim on the
	// namespace does not count as a use while it drains (its pods do).
	AnnotationDrainedFor = LabelPrefix + "drained-for"
	// AnnotationAttempt is the attempt of a CacheFlush a flush Job runs.
	AnnotationAttempt = LabelPrefix + "attempt"
	// AnnotationRankRoleHash records, on a rank pod, which labels and annotations of its role
	// (spec.template.leader or .follower) the operator set on it.
	AnnotationRankRoleHash = LabelPrefix + "rank-role-hash"
)
