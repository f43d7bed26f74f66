package hicachedeployment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	recon "github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/etcdtls"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// HiCacheDeploymentReconciler runs SGLang serving groups with HiCache and keeps their L3 layout
// correct.
type HiCacheDeploymentReconciler struct {
	client.Client
	// APIReader reads what the operator does not cache: the Secrets of SGLang's keys.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Options   storeuse.Options
	Clock     clock.PassiveClock

	// writes remembers this reconciler's status writes until its cache holds them.
	writes *recon.StatusWrites
	// ProbeBackend has a CacheBackend probed at once, without waiting for its next poll (nil:
	// none is).
	ProbeBackend func(client.ObjectKey)
}

// +kubebuilder:rbac:groups=hicache.io,resources=hicachedeployments,verbs=get;list;watch
// +kubebuilder:rbac:groups=hicache.io,resources=hicachedeployments/status,verbs=patch
// +kubebuilder:rbac:groups=hicache.io,resources=cacheflushes,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=hicache.io,resources=cachebackends,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const backendRefIndex = "spec.storage.backendRef.name"

// group is what was observed of one serving group.
type group struct {
	key  GroupKey
	sts  *appsv1.StatefulSet
	pods []corev1.Pod
	// members is the record of the pods the group formed with ("0=<uid>,1=<uid>"), "" while it
	// has not formed under its StatefulSet's current revision.
	members string
}

// observed is what one reconcile saw and did, from which status is computed.
type observed struct {
	// resolved is the deployment's layout and, without roles, its groups' shape; with roles the
	// prefill's (whose namespace both roles share).
	resolved *resolve.Resolved
	// served are the kinds of serving group the spec runs: the deployment without roles, or its
	// prefill and decode roles.
	served     []*servingRole
	resolveErr error
	backend    *resolve.Backend
	backendObj *hicachev1alpha1.CacheBackend
	backendErr *conditionError
	groups     map[GroupKey]*group
	desired    map[GroupKey]string // group → desired template hash
	rolling    []GroupKey          // groups whose pods were replaced this reconcile
	recreated  []GroupKey
	inStep     []GroupKey // outdated groups held for the other role to roll in step
	// failed is the error a phase stopped on, reported in Progressing.
	failed error
	now    metav1.Time
	// cache is the L3 status: the layout the groups write and the namespaces left behind.
	cache *hicachev1alpha1.CacheStatus
	// drain is set while a Fixed-namespace deployment stops its writers and flushes before
	// starting a new layout: what the drain waits for.
	drain *drainState
	// conflict is set while another deployment of the store writes the namespace under another
	// layout: this one is held.
	conflict *hicachev1alpha1.NamespaceConflict
	// droppedStale are stale namespaces dropped from a full status.cache.staleNamespaces.
	droppedStale []hicachev1alpha1.StaleNamespace
	// takeover is what a deployment waits for before writing a namespace another layout wrote.
	takeover *takeoverState
	// recreateWait is how long until a failing group may be recreated again.
	recreateWait time.Duration
	// formed are the groups that formed this reconcile, with the record of their members.
	formed map[GroupKey]hicachev1alpha1.FormedGroup
}

// held tells whether the deployment may not write its namespace yet: no serving group is
// applied.
func (o *observed) held() bool { return o.conflict != nil || o.takeover != nil }

// conditionError is a problem a user must act on, with the condition reason that names it.
type conditionError struct {
	reason, message string
}

func (e *conditionError) Error() string { return e.message }

// hcdScope is one reconcile of a HiCacheDeployment.
type hcdScope = recon.Scope[*hicachev1alpha1.HiCacheDeployment, *observed]

// waitPoll is how often a deployment that waits looks again: on pods to go, a flush to finish
// or a namespace to be freed the watches bring it back, and this covers what they do not see
// (another deployment's pods).
const waitPoll = 10 * time.Second

// Reconcile brings one HiCacheDeployment to its desired state.
func (r *HiCacheDeploymentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var hcd hicachev1alpha1.HiCacheDeployment
	if ok, err := recon.Load(ctx, r.Client, r.writes, req, &hcd, nil); !ok {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	s := recon.NewScope(r.Client, r.writes, &hcd, &observed{now: metav1.NewTime(now), desired: map[GroupKey]string{}}, now)
	return recon.KindSteps[*hicachev1alpha1.HiCacheDeployment, *observed]{
		Phases: []recon.Phase[*hcdScope]{
			{Name: "observe", Run: r.observe},
			{Name: "hold the layout", Run: r.holdLayout},
			{Name: "apply the serving groups", Run: r.applyGroups},
			{Name: "flush stale namespaces", Run: r.flushStale},
		},
		Status: func(s *hcdScope, failed error) {
			s.Obs.failed = failed
			s.Obj.Status = *computeStatus(s.Obj, s.Obs)
		},
		Announce: r.emitEvents,
	}.Run(ctx, s)
}

// observe resolves the spec (topology, plan, layout, group shape) and reads the serving groups,
// their pods and the backend the ranks write to.
func (r *HiCacheDeploymentReconciler) observe(ctx context.Context, s *hcdScope) (recon.Step, error) {
	hcd, obs := s.Obj, s.Obs
	obs.resolved, obs.served, obs.resolveErr = resolveServing(hcd)
	if err := r.observeGroups(ctx, hcd, obs); err != nil {
		return recon.Proceed, recon.StatusUnknown(fmt.Errorf("reading the serving groups: %w", err))
	}
	if obs.resolveErr != nil {
		return recon.StopFor(0), nil // nothing is created until the spec is fixed
	}
	obs.backend, obs.backendObj, obs.backendErr = r.backendEndpoints(ctx, hcd)
	obs.cache, obs.droppedStale = cacheStatus(hcd, obs)
	return recon.Proceed, nil
}

// holdLayout keeps writers off what they must not write: with the Fixed strategy a breaking
// change first stops every writer and flushes the namespace; a namespace written by two layouts
// is never served. Nothing changes while the backend is not ready.
func (r *HiCacheDeploymentReconciler) holdLayout(ctx context.Context, s *hcdScope) (recon.Step, error) {
	hcd, obs := s.Obj, s.Obs
	if obs.backendErr != nil {
		return recon.Proceed, nil
	}
	if fixedLayoutChange(hcd, obs.resolved) {
		if err := r.drainAndFlush(ctx, hcd, obs); err != nil {
			return recon.Proceed, err
		}
		if obs.drain != nil {
			return recon.StopFor(waitPoll), nil
		}
		return recon.Proceed, nil // flushed: the new layout starts now
	}
	if err := r.holdForConflict(ctx, hcd, obs); err != nil {
		return recon.Proceed, err
	}
	if obs.held() {
		return recon.ProceedWithin(waitPoll), nil
	}
	return recon.Proceed, nil
}

// applyGroups applies the children of a deployment that may write its namespace.
func (r *HiCacheDeploymentReconciler) applyGroups(ctx context.Context, s *hcdScope) (recon.Step, error) {
	if s.Obs.backendErr != nil || s.Obs.held() {
		return recon.Proceed, nil
	}
	if err := r.reconcileChildren(ctx, s.Obj, s.Obs); err != nil {
		return recon.Proceed, err
	}
	return recon.ProceedWithin(s.Obs.recreateWait), nil
}

// flushStale asks for the flush of the namespaces older layouts left behind, once nothing uses
// them.
func (r *HiCacheDeploymentReconciler) flushStale(ctx context.Context, s *hcdScope) (recon.Step, error) {
	if err := r.reconcileStaleNamespaces(ctx, s.Obj, s.Obs); err != nil {
		return recon.Proceed, err
	}
	if hasBlockedStale(s.Obs.cache) {
		return recon.ProceedWithin(waitPoll), nil
	}
	return recon.Proceed, nil
}

// observeGroups lists the deployment's StatefulSets and their pods.
func (r *HiCacheDeploymentReconciler) observeGroups(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	var stsList appsv1.StatefulSetList
	if err := r.List(ctx, &stsList, client.InNamespace(hcd.Namespace), client.MatchingLabels{hicachev1alpha1.LabelDeployment: hcd.Name}); err != nil {
		return fmt.Errorf("listing StatefulSets: %w", err)
	}
	var podList corev1.PodList
	if err := r.List(ctx, &podList, client.InNamespace(hcd.Namespace), client.MatchingLabels{hicachev1alpha1.LabelDeployment: hcd.Name}); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	obs.groups = groupsFrom(hcd, stsList.Items, podList.Items)
	return nil
}

// groupsFrom sorts a deployment's StatefulSets and pods into serving groups, by the role and
// group labels the operator sets, each with the record of its members (formedGroupMembers); a
// StatefulSet the deployment does not control, and pods being deleted, are not part of any group.
func groupsFrom(hcd *hicachev1alpha1.HiCacheDeployment, sets []appsv1.StatefulSet, pods []corev1.Pod) map[GroupKey]*group {
	groups := map[GroupKey]*group{}
	for i := range sets {
		sts := &sets[i]
		if !metav1.IsControlledBy(sts, hcd) {
			continue
		}
		k, ok := groupKeyOf(sts.Labels)
		if !ok {
			continue
		}
		groups[k] = &group{key: k, sts: sts, members: formedGroupMembers(hcd.Status.FormedGroups, sts)}
	}
	for i := range pods {
		p := pods[i]
		k, ok := groupKeyOf(p.Labels)
		if !ok || groups[k] == nil || p.DeletionTimestamp != nil {
			continue
		}
		groups[k].pods = append(groups[k].pods, p)
	}
	return groups
}

// groupKeyOf reads the group of an object from its labels.
func groupKeyOf(labels map[string]string) (GroupKey, bool) {
	g, err := strconv.Atoi(labels[hicachev1alpha1.LabelGroup])
	if err != nil || g < 0 {
		return GroupKey{}, false
	}
	k := GroupKey{role: hicachev1alpha1.Role(labels[hicachev1alpha1.LabelRole]), index: g}
	switch k.role {
	case "", hicachev1alpha1.RolePrefill, hicachev1alpha1.RoleDecode:
		return k, true
	}
	return GroupKey{}, false
}

// groupRevision identifies what a group's record of members holds for: its StatefulSet (a new
// one of the same name runs new pods), its template (a roll replaces every pod) and its
// recreations (a recreation too). A record is void once any of them changed, even when the write
// that should have removed it did not happen.
func groupRevision(sts *appsv1.StatefulSet) string {
	sum := sha256.Sum256([]byte(string(sts.UID) + "/" + sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] + "/" + sts.Annotations[hicachev1alpha1.AnnotationRecreations]))
	return hex.EncodeToString(sum[:8])
}

// formedGroupMembers is the record of the members of sts's group: the one in the deployment's
// status.formedGroups for its current revision, else the annotation of a group recorded before
// the status held the record.
func formedGroupMembers(formed []hicachev1alpha1.FormedGroup, sts *appsv1.StatefulSet) string {
	for i := range formed {
		if formed[i].Name == sts.Name {
			if formed[i].Revision == groupRevision(sts) {
				return formed[i].Pods
			}
			return ""
		}
	}
	return sts.Annotations[hicachev1alpha1.AnnotationMembers]
}

// backendEndpoints reads the referenced CacheBackend; it must exist and be Ready.
func (r *HiCacheDeploymentReconciler) backendEndpoints(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment) (*resolve.Backend, *hicachev1alpha1.CacheBackend, *conditionError) {
	if hcd.Spec.Storage == nil {
		return nil, nil, nil
	}
	name := hcd.Spec.Storage.BackendRef.Name
	var cb hicachev1alpha1.CacheBackend
	if err := r.Get(ctx, types.NamespacedName{Namespace: hcd.Namespace, Name: name}, &cb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &conditionError{hicachev1alpha1.ReasonBackendNotFound,
				fmt.Sprintf("CacheBackend %q does not exist in namespace %s: create it, or fix spec.storage.backendRef.name", name, hcd.Namespace)}
		}
		return nil, nil, &conditionError{hicachev1alpha1.ReasonBackendNotReady, fmt.Sprintf("reading CacheBackend %q: %v", name, err)}
	}
	ready := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || cb.Status.Endpoints == nil || cb.Status.Endpoints.RPCAddress == "" {
		msg := fmt.Sprintf("CacheBackend %q is not ready", name)
		if ready != nil && ready.Message != "" {
			msg += ": " + ready.Message
		}
		return nil, nil, &conditionError{hicachev1alpha1.ReasonBackendNotReady, msg + "; serving groups start once it is"}
	}
	return BackendOf(&cb, cb.Status.Endpoints, r.Options.DefaultEtcdImage), &cb, nil
}

// BackendOf is what the ranks of a deployment are told of the backend cb that publishes ep;
// etcdImage is the operator's default etcd image, which runs the proxy to a managed etcd.
func BackendOf(cb *hicachev1alpha1.CacheBackend, ep *hicachev1alpha1.BackendEndpoints, etcdImage string) *resolve.Backend {
	// Ranks ask the master's admin port too (master_metrics_port), which the backend publishes
	// (none for an external admin URL that names no port: SGLang's default then).
	be := &resolve.Backend{Name: cb.Name, RPCAddress: storeuse.PodRPCAddress(cb, ep.RPCAddress), MetadataServer: ep.MetadataServer,
		ClusterID: ep.ClusterID, MetricsPort: int(ep.MetricsPort)}
	if be.RPCAddress != ep.RPCAddress {
		be.EtcdProxy = &resolve.EtcdProxy{
			Container: storeuse.EtcdProxyContainer(cb, storeuse.ManagedEtcdImage(cb, etcdImage)),
			Volume:    storeuse.EtcdSecretVolume(cb, "etcd-client-tls", etcdtls.KeyClientCert, etcdtls.KeyClientKey),
		}
	}
	return be
}

// reconcileChildren renders the deployment and applies its ConfigMap and client Service, then
// plans the serving groups (planGroups, in groupplan.go, holds the rollout rules) and carries the
// plan out.
func (r *HiCacheDeploymentReconciler) reconcileChildren(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	res := obs.resolved
	a := recon.Applier{Client: r.Client}
	image := PodImages{SGLang: hcd.Spec.SGLang.Image, Guard: r.Options.GuardImage}
	if image.SGLang == "" {
		image.SGLang = r.Options.DefaultSGLangImage
	}
	if image.Guard == "" {
		image.Guard = storeuse.DefaultGuardImage
	}

	// SGLang's keys: nothing runs without the admin key's Secret.
	if err := r.ensureKeys(ctx, hcd); err != nil {
		return err
	}
	rd, err := render(hcd, obs.served, res, obs.backend, image)
	if err != nil {
		return err
	}
	desired := rd.groups
	want := groupWant{maxUnavailable: int(hcd.Spec.Rollout.MaxUnavailable)}
	for _, sr := range obs.served {
		rw := roleWant{role: sr.role, replicas: sr.res.Replicas, hashes: map[int]string{}}
		for g := range sr.res.Replicas {
			k := GroupKey{role: sr.role, index: g}
			obs.desired[k] = desired[k].Annotations[hicachev1alpha1.AnnotationTemplateHash]
			rw.hashes[g] = obs.desired[k]
		}
		want.roles = append(want.roles, rw)
	}
	if _, err := a.ApplyIfChanged(ctx, rd.configMap, &corev1.ConfigMap{}); err != nil {
		return err
	}
	if _, err := a.ApplyIfChanged(ctx, rd.clientService, &corev1.Service{}); err != nil {
		return err
	}
	if err := r.reconcileRouter(ctx, hcd); err != nil {
		return err
	}
	if _, err := a.ApplyIfChanged(ctx, BuildDeploymentNetworkPolicy(hcd, res), &networkingv1.NetworkPolicy{}); err != nil {
		return err
	}

	plan := planGroups(obs.groups, want, obs.now.Time)
	obs.recreateWait = plan.requeueAfter
	if err := r.executeGroupPlan(ctx, hcd, obs, plan, desired); err != nil {
		return err
	}
	// Each pod's role (leader or follower) labels and annotations, once the pod exists.
	return r.applyRankRoles(ctx, hcd, obs)
}

// deletePods deletes a group's pods together; the StatefulSet recreates them.
func (r *HiCacheDeploymentReconciler) deletePods(ctx context.Context, pods []corev1.Pod) error {
	var errs []error
	for i := range pods {
		if err := r.Delete(ctx, &pods[i], client.Preconditions{UID: &pods[i].UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setGroupAnnotations sets (or, for "", removes) annotations that record a group's history on
// its StatefulSet, under a field owner of their own so that applying the StatefulSet keeps them.
func (r *HiCacheDeploymentReconciler) setGroupAnnotations(ctx context.Context, sts *appsv1.StatefulSet, values map[string]string) error {
	changed := false
	for k, v := range values {
		if sts.Annotations[k] != v {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	patch := client.MergeFrom(sts.DeepCopy())
	if sts.Annotations == nil {
		sts.Annotations = map[string]string{}
	}
	for k, v := range values {
		if v == "" {
			delete(sts.Annotations, k)
		} else {
			sts.Annotations[k] = v
		}
	}
	return r.Patch(ctx, sts, patch, client.FieldOwner(storeuse.FieldOwner+"-members"))
}

// size is the number of ranks (pods) the group's StatefulSet runs: a group keeps the shape it was
// created with until it is replaced.
func (g *group) size() int {
	if g.sts.Spec.Replicas == nil {
		return 1
	}
	return int(*g.sts.Spec.Replicas)
}

// groupReady: every rank exists, runs and is ready.
func groupReady(g *group, nodes int) bool {
	if g == nil || len(g.pods) != nodes {
		return false
	}
	for i := range g.pods {
		if !kubeutil.PodReady(&g.pods[i]) {
			return false
		}
	}
	return true
}

// groupCurrent: the group's StatefulSet and every pod run the desired template.
func groupCurrent(g *group, hash string) bool {
	if g == nil || g.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] != hash {
		return false
	}
	for i := range g.pods {
		if g.pods[i].Annotations[hicachev1alpha1.AnnotationTemplateHash] != hash {
			return false
		}
	}
	return true
}

// groupBroken tells whether a group lost a rank: a pod failed, a container restarted, or a
// rank of a formed group was replaced by a new pod.
func groupBroken(g *group) (bool, string) {
	for i := range g.pods {
		p := &g.pods[i]
		if p.Status.Phase == corev1.PodFailed {
			return true, fmt.Sprintf("pod %s failed", p.Name)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				return true, fmt.Sprintf("container %s of pod %s restarted", cs.Name, p.Name)
			}
		}
	}
	recorded := g.members
	if recorded == "" {
		return false, ""
	}
	uids := map[string]string{}
	for _, part := range splitNonEmpty(recorded, ',') {
		for j := 0; j < len(part); j++ {
			if part[j] == '=' {
				uids[part[:j]] = part[j+1:]
				break
			}
		}
	}
	for i := range g.pods {
		p := &g.pods[i]
		if want, ok := uids[p.Labels[appsv1.PodIndexLabel]]; ok && want != string(p.UID) {
			return true, fmt.Sprintf("pod %s was replaced", p.Name)
		}
	}
	return false, ""
}

func splitNonEmpty(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == sep {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// emitEvents announces what a user should see happen: what changed from the stored status to
// the new one, and what this reconcile did.
func (r *HiCacheDeploymentReconciler) emitEvents(s *hcdScope) {
	hcd, obs, st := s.Stored, s.Obs, &s.Obj.Status
	if obs.resolveErr != nil {
		reason := hicachev1alpha1.ReasonInvalidSpec
		var up *resolve.UnknownProfileError
		if errors.As(obs.resolveErr, &up) {
			reason = hicachev1alpha1.ReasonUnknownProfile
		}
		if c := meta.FindStatusCondition(hcd.Status.Conditions, hicachev1alpha1.ConditionReady); c == nil || c.Reason != reason || c.ObservedGeneration != hcd.Generation {
			r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeWarning, reason, "Resolve", "%s", obs.resolveErr.Error())
		}
	}
	if obs.backendErr != nil {
		if c := meta.FindStatusCondition(hcd.Status.Conditions, hicachev1alpha1.ConditionBackendReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != obs.backendErr.reason {
			r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeWarning, obs.backendErr.reason, "WaitForBackend", "%s", obs.backendErr.message)
		}
	}
	if old, cur := hcd.Status.Cache, st.Cache; old != nil && cur != nil && old.Namespace != "" && cur.Namespace != "" && old.Namespace != cur.Namespace {
		r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonNamespaceRotated, "RotateNamespace",
			"The cache layout changed (%s → %s): new ranks write under L3 namespace %s; %s is stale and is flushed once nothing uses it",
			old.ShortHash, cur.ShortHash, cur.Namespace, old.Namespace)
	}
	if c := obs.conflict; c != nil {
		if prev := hcd.Status.Cache; prev == nil || prev.Conflict == nil || prev.Conflict.Deployment != c.Deployment || prev.Conflict.Namespace != c.Namespace {
			r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonNamespaceConflict, "Hold", "%s", conflictMessage(hcd, c))
		}
	}
	for _, d := range obs.droppedStale {
		r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonStaleNamespaceDropped, "TrackStaleNamespaces", "%s", droppedStaleMessage(hcd, d))
	}
	var ce *conditionError
	if errors.As(obs.failed, &ce) {
		if c := meta.FindStatusCondition(hcd.Status.Conditions, hicachev1alpha1.ConditionProgressing); c == nil || c.Reason != ce.reason || c.Message != ce.message {
			r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeWarning, ce.reason, "Reconcile", "%s", ce.message)
		}
	}
	for _, g := range obs.rolling {
		r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonRollingOut, "Roll",
			"Replacing all pods of %s together with the new template", g.describe())
	}
}

// SetupWithManager registers the controller and what it watches.
func (r *HiCacheDeploymentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	var err error
	if r.writes, err = recon.NewStatusWrites(context.Background(), mgr.GetCache(), &hicachev1alpha1.HiCacheDeployment{}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hicachev1alpha1.HiCacheDeployment{}, backendRefIndex,
		func(o client.Object) []string {
			hcd := o.(*hicachev1alpha1.HiCacheDeployment)
			if hcd.Spec.Storage == nil {
				return nil
			}
			return []string{hcd.Spec.Storage.BackendRef.Name}
		}); err != nil {
		return err
	}
	log := mgr.GetLogger().WithValues("controller", "hicachedeployment")
	backendToHCD := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var list hicachev1alpha1.HiCacheDeploymentList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{backendRefIndex: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
			log.Error(err, "Listing the deployments of a CacheBackend failed: they are not woken by its change", "cacheBackend", klog.KObj(o))
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return reqs
	})
	// A flush wakes the deployment that asked for it and those whose stale namespaces wait for it,
	// in any namespace.
	flushToHCD := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		if ns, name, ok := strings.Cut(o.GetAnnotations()[hicachev1alpha1.AnnotationRequestedBy], "/"); ok {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
		}
		var list hicachev1alpha1.HiCacheDeploymentList
		if err := mgr.GetClient().List(ctx, &list, client.MatchingFields{storeuse.StaleFlushIndex: o.GetNamespace() + "/" + o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
			log.Error(err, "Listing the deployments that wait for a CacheFlush failed: they are not woken by its change", "cacheFlush", klog.KObj(o))
			return reqs
		}
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return reqs
	})
	// A deployment that starts or stops writing a namespace wakes the other writers of it on the
	// store, one of which may have to yield it.
	writersOfSame := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		h := o.(*hicachev1alpha1.HiCacheDeployment)
		if h.Status.Cache == nil || h.Status.Cache.Namespace == "" || h.Status.Cache.Backend == "" {
			return nil
		}
		var cb hicachev1alpha1.CacheBackend
		if err := mgr.GetClient().Get(ctx, types.NamespacedName{Namespace: h.Namespace, Name: h.Status.Cache.Backend}, &cb); err != nil {
			if !apierrors.IsNotFound(err) {
				log.Error(err, "Reading the CacheBackend of a deployment failed: the other writers of its namespace are not woken", "hiCacheDeployment", klog.KObj(o))
			}
			return nil // no backend, no store whose writers to wake
		}
		writers, err := storeuse.StoreWriters(ctx, mgr.GetClient(), storeuse.StoreIDOf(&cb), h.Status.Cache.Namespace)
		if err != nil {
			log.Error(err, "Listing the writers of a namespace failed: they are not woken by a deployment's change", "hiCacheDeployment", klog.KObj(o))
			return nil
		}
		var reqs []reconcile.Request
		for i := range writers {
			if wakesWriter(h, &writers[i]) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&writers[i])})
			}
		}
		return reqs
	})
	claimChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		a, b := e.ObjectOld.(*hicachev1alpha1.HiCacheDeployment).Status.Cache, e.ObjectNew.(*hicachev1alpha1.HiCacheDeployment).Status.Cache
		if a == nil || b == nil {
			return a != b
		}
		return a.Namespace != b.Namespace || a.LayoutHash != b.LayoutHash || a.Backend != b.Backend
	}}
	hasDeploymentLabel, err := predicate.LabelSelectorPredicate(metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: hicachev1alpha1.LabelDeployment, Operator: metav1.LabelSelectorOpExists}}})
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.DeploymentWorkers, RateLimiter: recon.RetryLimiter()}).
		For(&hicachev1alpha1.HiCacheDeployment{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.StatefulSet{}, builder.WithPredicates(childChanged())).
		Owns(&appsv1.Deployment{}, builder.WithPredicates(childChanged())).
		Owns(&corev1.Service{}, builder.WithPredicates(childChanged())).
		Owns(&corev1.ConfigMap{}, builder.WithPredicates(childChanged())).
		Owns(&networkingv1.NetworkPolicy{}, builder.WithPredicates(childChanged())).
		Owns(&hicachev1alpha1.CacheFlush{}).
		Watches(&corev1.Pod{}, podToDeployment(mgr.GetClient()), builder.WithPredicates(hasDeploymentLabel)).
		Watches(&hicachev1alpha1.CacheBackend{}, backendToHCD, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return backendInputsChanged(e.ObjectOld.(*hicachev1alpha1.CacheBackend), e.ObjectNew.(*hicachev1alpha1.CacheBackend))
			},
		})).
		Watches(&hicachev1alpha1.CacheFlush{}, flushToHCD).
		Watches(&hicachev1alpha1.HiCacheDeployment{}, writersOfSame, builder.WithPredicates(claimChanged)).
		Named("hicachedeployment").
		Complete(r)
}
