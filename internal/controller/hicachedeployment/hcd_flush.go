package hicachedeployment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// fixedLayoutChange tells whether a Fixed-namespace deployment's layout changed under its
// namespace: the groups must stop and the namespace be flushed before the new layout starts.
func fixedLayoutChange(hcd *hicachev1alpha1.HiCacheDeployment, res *resolve.Resolved) bool {
	old := hcd.Status.Cache
	return hcd.Spec.Storage != nil && hcd.Spec.Storage.NamespaceStrategy == hicachev1alpha1.NamespaceFixed &&
		old != nil && old.LayoutHash != "" && old.LayoutHash != res.Fingerprint && old.Namespace == res.Namespace
}

// FlushName is the CacheFlush of one layout generation of an L3 namespace of a store: the same
// for every deployment that left it, so a repeated or concurrent request never creates a second
// one, and new for every later generation (seq), so a namespace that goes stale again is flushed
// again.
func FlushName(l3, layout, storeID string, seq int) string {
	if layout == "" {
		layout = "0"
	}
	return storeuse.BoundedName(fmt.Sprintf("%s-%s-%s-%d", l3, layout, storeuse.StoreHash(storeID)[:8], seq), 253)
}

// flushRequest is a flush of one layout generation of an L3 namespace of a store.
type flushRequest struct {
	storeID, namespace, layout string
	// since is when the requester started writing the namespace under layout: a flush created
	// since then removes what it wrote (one that executes checks first that nothing writes).
	// nil: only a flush that has not finished yet counts.
	since *metav1.Time
	// home is the backend the flush runs through: the store's oldest, so that requests from
	// deployments in different Kubernetes namespaces meet on one object.
	home   *hicachev1alpha1.CacheBackend
	reason string
	// drainedFor is set when the requester stopped its writers for this flush.
	drainedFor *hicachev1alpha1.HiCacheDeployment
	requester  string
	// view is the masters' leader view now, when the requester is about to write the namespace
	// under another layout: a flush completed under an older view does not cover it, since a
	// failover after a removal can bring the objects back (0: any completed flush covers).
	view int64
	// event is the deployment that an Event about a flush run again after a failover goes to.
	event *hicachev1alpha1.HiCacheDeployment
	// askedAt is the admin URL of the master that answered view, when the operator asked the
	// masters (checkLeader) because the backend's status named an older one, statusView.
	askedAt    string
	statusView int64
}

// pickFlush is the flush among those of one namespace, store and layout that removes what a
// deployment wrote since since (completed first, then running, then failed), and the sequence
// number a new one gets. With view set, a flush completed under an older leader view covers
// nothing: outdated is the last such one, whose namespace is counted and flushed again.
func pickFlush(existing []hicachev1alpha1.CacheFlush, since *metav1.Time, view int64) (best *hicachev1alpha1.CacheFlush, next int, outdated *hicachev1alpha1.CacheFlush) {
	next = 1
	rank := func(cf *hicachev1alpha1.CacheFlush) int {
		switch {
		case meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete):
			return 3
		case !storeuse.Finished(cf):
			return 2
		}
		return 1
	}
	for i := range existing {
		cf := &existing[i]
		if n, err := strconv.Atoi(cf.Annotations[hicachev1alpha1.AnnotationFlushSequence]); err == nil && n >= next {
			next = n + 1
		}
		if !cf.DeletionTimestamp.IsZero() {
			continue
		}
		// Creation times have a resolution of a second: one created in the second writing started
		// counts, since a flush executes only once nothing writes.
		covers := (since != nil && !cf.CreationTimestamp.Time.Before(since.Time)) || (since == nil && !storeuse.Finished(cf))
		if !covers {
			continue
		}
		if done := meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete); done && olderView(cf, view) {
			if outdated == nil || cf.Status.CompletionTime != nil && outdated.Status.CompletionTime != nil && outdated.Status.CompletionTime.Before(cf.Status.CompletionTime) {
				outdated = cf
			}
			continue
		}
		// Of two completed ones, the one of the newer view: the recount after a failover.
		if best == nil || rank(cf) > rank(best) || (rank(cf) == rank(best) && (cf.Status.ViewVersion > best.Status.ViewVersion ||
			cf.Status.ViewVersion == best.Status.ViewVersion && cf.Name < best.Name)) {
			best = cf
		}
	}
	return best, next, outdated
}

// olderView tells whether a flush ran under a leader view older than view: the masters failed
// over since.
func olderView(cf *hicachev1alpha1.CacheFlush, view int64) bool {
	return view > 0 && cf.Status.ViewVersion > 0 && cf.Status.ViewVersion < view
}

// buildFlush is the flush of a request, numbered seq, beside its home backend and owned by it
// (an owner must be in the same namespace; the flush goes with the backend).
func buildFlush(req flushRequest, seq int) *hicachev1alpha1.CacheFlush {
	cf := &hicachev1alpha1.CacheFlush{
		TypeMeta: metav1.TypeMeta{APIVersion: hicachev1alpha1.GroupVersion.String(), Kind: "CacheFlush"},
		ObjectMeta: metav1.ObjectMeta{
			Name: FlushName(req.namespace, req.layout, req.storeID, seq), Namespace: req.home.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/managed-by":      storeuse.FieldOwner,
				hicachev1alpha1.LabelStore:          storeuse.StoreHash(req.storeID),
				hicachev1alpha1.LabelCacheNamespace: req.namespace,
				hicachev1alpha1.LabelLayout:         req.layout,
			},
			Annotations: map[string]string{
				hicachev1alpha1.AnnotationFlushSequence: strconv.Itoa(seq),
				hicachev1alpha1.AnnotationRequestedBy:   req.requester,
			},
			OwnerReferences: storeuse.BackendOwner(req.home),
		},
		Spec: hicachev1alpha1.CacheFlushSpec{
			BackendRef: hicachev1alpha1.LocalObjectReference{Name: req.home.Name},
			Scope:      hicachev1alpha1.FlushScopeNamespace,
			Namespace:  req.namespace,
			Force:      ptr.To(true),
			Reason:     storeuse.Truncate(req.reason, 1024),
		},
	}
	if req.drainedFor != nil {
		cf.Annotations[hicachev1alpha1.AnnotationDrainedFor] = string(req.drainedFor.UID)
	}
	return cf
}

// requestFlush returns the flush that removes a layout generation of a namespace: one that
// exists (asked for by this or another deployment, in any Kubernetes namespace), or a new one.
// A new one created because the one that had completed ran under an older leader view says so
// in an Event on the requester (drainedFor).
func (r *HiCacheDeploymentReconciler) requestFlush(ctx context.Context, req flushRequest) (*hicachev1alpha1.CacheFlush, bool, error) {
	var list hicachev1alpha1.CacheFlushList
	if err := r.List(ctx, &list, client.MatchingLabels{
		hicachev1alpha1.LabelStore: storeuse.StoreHash(req.storeID), hicachev1alpha1.LabelCacheNamespace: req.namespace, hicachev1alpha1.LabelLayout: req.layout}); err != nil {
		return nil, false, fmt.Errorf("listing the flushes of namespace %s: %w", req.namespace, err)
	}
	cover, seq, outdated := pickFlush(list.Items, req.since, req.view)
	if cover != nil {
		return cover, false, nil
	}
	if outdated != nil {
		req.reason = fmt.Sprintf("Counted and flushed again: the masters elected a new leader (view %d) after CacheFlush %s emptied the namespace under view %d. %s",
			req.view, outdated.Name, outdated.Status.ViewVersion, req.reason)
	}
	if backends, err := storeuse.StoreBackends(ctx, r.Client, req.storeID); err != nil {
		return nil, false, err
	} else if len(backends) > 0 {
		req.home = &backends[0]
	}
	cf := buildFlush(req, seq)
	if err := r.Create(ctx, cf); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("creating CacheFlush %s/%s: %w", cf.Namespace, cf.Name, err)
		}
		var cur hicachev1alpha1.CacheFlush
		if err := r.Get(ctx, client.ObjectKeyFromObject(cf), &cur); err != nil {
			return nil, false, fmt.Errorf("reading CacheFlush %s/%s: %w", cf.Namespace, cf.Name, err)
		}
		return &cur, false, nil
	}
	if outdated != nil && req.event != nil {
		seen := ""
		if req.askedAt != "" && req.statusView < req.view {
			seen = fmt.Sprintf(" (the master at %s answered view %d while the CacheBackend's status still names view %d: its next probe had not run)",
				req.askedAt, req.view, req.statusView)
		}
		r.Recorder.Eventf(req.event, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonRecountAfterFailover, "Flush",
			"The masters elected a new leader (view %d) after CacheFlush %s emptied namespace %s under view %d%s: a removal the old leader had not written to etcd comes back on the new one, so CacheFlush %s counts the namespace and flushes it again before the new layout writes it",
			req.view, storeuse.RelativeName(outdated.Namespace+"/"+outdated.Name, req.event.Namespace), req.namespace, outdated.Status.ViewVersion, seen, storeuse.RelativeName(cf.Namespace+"/"+cf.Name, req.event.Namespace))
	}
	return cf, true, nil
}

// drainAndFlush stops every writer of a Fixed namespace, flushes it, and lets the new layout
// start once the flush completed.
func (r *HiCacheDeploymentReconciler) drainAndFlush(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	old := hcd.Status.Cache
	ns := old.Namespace
	if cond := meta.FindStatusCondition(hcd.Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent); cond == nil || cond.Reason != hicachev1alpha1.ReasonWaitingForFlush {
		r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonWaitingForFlush, "Recreate",
			"The cache layout changed (%s → %s) under the fixed namespace %s: stopping every serving group, flushing the namespace, then starting the new layout",
			old.ShortHash, obs.resolved.ShortHash, ns)
	}
	id := storeuse.StoreIDOf(obs.backendObj)
	// 0. A Fixed namespace belongs to one deployment: stopping this one's writers could never
	// empty a namespace another deployment of the store keeps writing, so nothing is stopped.
	others, err := storeuse.StoreUsers(ctx, r.Client, storeuse.StoreScope{Store: id, Namespace: ns, Ignore: hcd.Namespace + "/" + hcd.Name})
	if err != nil {
		return fmt.Errorf("finding who else writes the fixed namespace %s: %w", ns, err)
	}
	if others.InUse() {
		obs.drain = &drainState{wait: drainShared, namespace: ns, users: others}
		return nil
	}
	// 1. Stop the writers: every group goes, and every pod of the deployment with it (also one a
	// StatefulSet created while it was being deleted, which the garbage collector would only
	// remove later).
	stopped, err := r.stopGroups(ctx, hcd, obs, "")
	if err != nil {
		return fmt.Errorf("stopping the writers of the fixed namespace %s: %w", ns, err)
	}
	if stopped > 0 {
		obs.drain = &drainState{wait: drainStopping, namespace: ns, pods: stopped}
		return nil
	}
	// 2. Flush the namespace, once; once flushed, under the leader that serves now.
	req := flushRequest{
		storeID: id, namespace: ns, layout: old.ShortHash, since: old.Since, home: obs.backendObj, drainedFor: hcd,
		requester: hcd.Namespace + "/" + hcd.Name, view: obs.backendObj.Status.ViewVersion, event: hcd,
		reason: fmt.Sprintf("Layout of %s changed from %s to %s under the fixed namespace %s", hcd.Name, old.ShortHash, obs.resolved.ShortHash, ns),
	}
	cf, _, err := r.requestFlush(ctx, req)
	if err != nil {
		return fmt.Errorf("requesting the flush of the fixed namespace %s: %w", ns, err)
	}
	cf, why, err := r.checkLeader(ctx, obs.backendObj, req, cf)
	if err != nil {
		return fmt.Errorf("requesting the flush of the fixed namespace %s again after a failover: %w", ns, err)
	}
	if why != "" {
		obs.drain = &drainState{wait: drainLeader, namespace: ns, flush: cf.Namespace + "/" + cf.Name, failure: why}
		return nil
	}
	if !meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete) {
		obs.drain = &drainState{wait: drainFlushing, namespace: ns, flush: cf.Namespace + "/" + cf.Name}
		if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
			obs.drain.failure = c.Message
		}
		return nil
	}
	// 3. The namespace is empty: the new layout starts on the next reconcile.
	obs.cache.LayoutHash, obs.cache.ShortHash = obs.resolved.Fingerprint, obs.resolved.ShortHash
	setFacts(obs.cache, obs.resolved)
	obs.cache.Since = &obs.now
	obs.cache.LastFlush = flushRecord(cf)
	return nil
}

// checkLeader asks the masters which leader view serves, at the moment a new layout would start
// on a namespace that flush cf emptied on masters with HA (one request to the backend's admin
// URL, within the probe deadline), and decides with planLayoutStart. It returns the flush that
// covers the namespace now: cf, or the flush that counts it again under the newer view; why is
// set when the new layout waits for a serving leader to answer. Whenever the masters did not
// confirm the status's view, the backend is probed again at once, so that its status (and the
// flush's admin URL) follows the new leader without waiting for the next poll.
func (r *HiCacheDeploymentReconciler) checkLeader(ctx context.Context, backend *hicachev1alpha1.CacheBackend, req flushRequest, cf *hicachev1alpha1.CacheFlush) (*hicachev1alpha1.CacheFlush, string, error) {
	if !meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete) || cf.Status.ViewVersion == 0 {
		return cf, "", nil
	}
	o := layoutStartObservation{FlushView: cf.Status.ViewVersion}
	if ep := backend.Status.Endpoints; ep != nil {
		o.AdminURL = ep.AdminURL
	}
	if a := r.Options.Authority(r.Client).Authorize(ctx, backend, o.AdminURL); o.AdminURL != "" && !a.Allowed {
		o.AskErr = errors.New("the operator does not call the backend's admin URL: " + a.Message)
	} else if r.Options.Admin == nil {
		o.AskErr = errors.New("the operator has no admin client")
	} else if o.AdminURL != "" {
		actx, cancel := context.WithTimeout(ctx, r.Options.ProbeTimeout)
		h, err := r.Options.Admin.MasterHealth(actx, o.AdminURL)
		cancel()
		if err == nil {
			o.Leader = &h
		} else {
			o.AskErr = err
		}
	}
	plan := planLayoutStart(o)
	if plan.Verdict == layoutStart {
		return cf, "", nil
	}
	if r.ProbeBackend != nil {
		r.ProbeBackend(client.ObjectKeyFromObject(backend))
	}
	if plan.Verdict == layoutWaitLeader {
		return cf, fmt.Sprintf("CacheFlush %s emptied it under the masters' view %d, and the new layout starts once the leader of that view answers that it still serves: %s",
			storeuse.RelativeName(cf.Namespace+"/"+cf.Name, req.requesterNamespace()), cf.Status.ViewVersion, plan.Why), nil
	}
	req.view, req.askedAt, req.statusView = plan.View, o.AdminURL, backend.Status.ViewVersion
	again, _, err := r.requestFlush(ctx, req)
	return again, "", err
}

// requesterNamespace is the Kubernetes namespace of the deployment that asks.
func (req flushRequest) requesterNamespace() string {
	ns, _, _ := strings.Cut(req.requester, "/")
	return ns
}

// stopGroups deletes the deployment's serving groups and their pods: every group, or those whose
// pods write L3 namespace only. It returns how many pods are still there.
func (r *HiCacheDeploymentReconciler) stopGroups(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed, only string) (int, error) {
	if err := r.executeGroupPlan(ctx, hcd, obs, planGroups(obs.groups, groupWant{stop: true, stopNamespace: only}, obs.now.Time), nil); err != nil {
		return 0, err
	}
	maps.DeleteFunc(obs.groups, func(_ GroupKey, grp *group) bool { return grp.writes(only) })
	labels := client.MatchingLabels{hicachev1alpha1.LabelDeployment: hcd.Name}
	if only != "" {
		labels[hicachev1alpha1.LabelCacheNamespace] = only
	}
	var left corev1.PodList
	if err := r.List(ctx, &left, client.InNamespace(hcd.Namespace), labels); err != nil {
		return 0, fmt.Errorf("listing the pods left: %w", err)
	}
	if len(left.Items) > 0 {
		if err := r.deletePods(ctx, left.Items); err != nil {
			return 0, fmt.Errorf("deleting the pods left: %w", err)
		}
	}
	return len(left.Items), nil
}

func flushRecord(cf *hicachev1alpha1.CacheFlush) *hicachev1alpha1.FlushRecord {
	return &hicachev1alpha1.FlushRecord{Name: cf.Name, Namespace: cf.Spec.Namespace, Removed: cf.Status.Removed, CompletionTime: cf.Status.CompletionTime}
}

// reconcileStaleNamespaces asks for the flush of each namespace an older layout left behind,
// once no serving pod and no other deployment of the store uses it, and forgets it when the
// flush completed. Deployments that left one namespace of a store under one layout share one
// flush.
func (r *HiCacheDeploymentReconciler) reconcileStaleNamespaces(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	cs := obs.cache
	if cs == nil || len(cs.StaleNamespaces) == 0 {
		return nil
	}
	// A deployment whose storage was removed still flushes what it left on its old backend.
	policy := hicachev1alpha1.FlushAuto
	if hcd.Spec.Storage != nil {
		policy = hcd.Spec.Storage.FlushPolicy
	}
	keep := cs.StaleNamespaces[:0:0]
	for _, s := range cs.StaleNamespaces {
		s.Blocked, s.BlockedBy = "", ""
		backend := s.Backend
		if backend == "" && hcd.Spec.Storage != nil {
			backend = hcd.Spec.Storage.BackendRef.Name
		}
		if backend == "" {
			continue // written before backends were recorded, and no backend to flush it on
		}
		if s.Flush != "" {
			var cf hicachev1alpha1.CacheFlush
			key := client.ObjectKey{Namespace: hcd.Namespace, Name: s.Flush}
			if s.FlushNamespace != "" {
				key.Namespace = s.FlushNamespace
			}
			err := r.Get(ctx, key, &cf)
			switch {
			case apierrors.IsNotFound(err):
				s.Flush, s.FlushNamespace = "", "" // deleted: decide again
			case err != nil:
				return fmt.Errorf("reading CacheFlush %s of the stale namespace %s: %w", key, s.Namespace, err)
			case meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete):
				cs.LastFlush = flushRecord(&cf)
				continue // flushed: no longer stale
			default:
				if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
					s.Blocked, s.BlockedBy = hicachev1alpha1.StaleFlushFailed, storeuse.Truncate("flush failed: "+c.Message, 512)
				}
				keep = append(keep, s)
				continue
			}
		}
		if policy == hicachev1alpha1.FlushManual {
			s.Blocked = hicachev1alpha1.StaleManualPolicy
			s.BlockedBy = fmt.Sprintf("flushPolicy is Manual: run kubectl hicache flush %s --prefix %s", backend, s.Namespace)
			keep = append(keep, s)
			continue
		}
		var cb hicachev1alpha1.CacheBackend
		if err := r.Get(ctx, client.ObjectKey{Namespace: hcd.Namespace, Name: backend}, &cb); err != nil {
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("reading CacheBackend %s of the stale namespace %s: %w", backend, s.Namespace, err)
			}
			s.Blocked, s.BlockedBy = hicachev1alpha1.StaleBackendMissing, fmt.Sprintf("CacheBackend %s does not exist: nothing can flush the namespace there", backend)
			keep = append(keep, s)
			continue
		}
		id := storeuse.StoreIDOf(&cb)
		use, err := storeuse.StoreUsers(ctx, r.Client, storeuse.StoreScope{Store: id, Namespace: s.Namespace})
		if err != nil {
			return fmt.Errorf("finding who uses the stale namespace %s: %w", s.Namespace, err)
		}
		if use.InUse() {
			s.Blocked, s.BlockedBy = hicachev1alpha1.StaleInUse, storeuse.Truncate("still used by "+use.Describe(hcd.Namespace), 512)
			keep = append(keep, s)
			continue
		}
		since := s.WrittenSince
		cf, created, err := r.requestFlush(ctx, flushRequest{
			storeID: id, namespace: s.Namespace, layout: s.LayoutHash, since: since, home: &cb,
			requester: hcd.Namespace + "/" + hcd.Name,
			reason: fmt.Sprintf("%s moved from layout %s (namespace %s) to %s (namespace %s); nothing uses the old namespace any more",
				hcd.Name, s.LayoutHash, s.Namespace, obs.resolved.ShortHash, obs.resolved.Namespace),
		})
		if err != nil {
			return fmt.Errorf("requesting the flush of the stale namespace %s: %w", s.Namespace, err)
		}
		if meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete) {
			cs.LastFlush = flushRecord(cf)
			continue // another deployment's flush of the same generation removed it
		}
		name := storeuse.RelativeName(cf.Namespace+"/"+cf.Name, hcd.Namespace)
		if created {
			r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonFlushRequested, "Flush",
				"Namespace %s of the old layout %s is no longer used; CacheFlush %s removes it", s.Namespace, s.LayoutHash, name)
		} else if s.Flush == "" {
			r.Recorder.Eventf(hcd, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonFlushRequested, "Flush",
				"Namespace %s of the old layout %s is no longer used; CacheFlush %s, asked for by %s, removes it", s.Namespace, s.LayoutHash, name,
				storeuse.RelativeName(cf.Annotations[hicachev1alpha1.AnnotationRequestedBy], hcd.Namespace))
		}
		s.Flush, s.FlushNamespace = cf.Name, ""
		if cf.Namespace != hcd.Namespace {
			s.FlushNamespace = cf.Namespace
		}
		keep = append(keep, s)
	}
	if len(keep) == 0 {
		keep = nil
	}
	cs.StaleNamespaces = keep
	return nil
}

// hasBlockedStale tells whether a stale namespace waits for another deployment's pods, which do
// not wake this one: it polls while they hold it.
func hasBlockedStale(cs *hicachev1alpha1.CacheStatus) bool {
	if cs == nil {
		return false
	}
	for _, s := range cs.StaleNamespaces {
		if s.Blocked == hicachev1alpha1.StaleInUse {
			return true
		}
	}
	return false
}

// claim is a deployment's claim on an L3 namespace of a store, to decide which of two
// deployments that would write it under different layouts keeps it.
type claim struct {
	key string // namespace/name
	// recorded: the deployment's status records that it writes the namespace under its layout.
	recorded bool
	// since is when it recorded that; nil with recorded means before this was kept (earliest).
	since   *metav1.Time
	created metav1.Time
}

// keeps tells whether a keeps the namespace against b: the one that recorded it first in
// status, else the older deployment, then the smaller namespace/name. Every input is in the
// API objects, so every reconcile, in any process, decides the same.
func keeps(a, b claim) bool {
	if a.recorded != b.recorded {
		return a.recorded
	}
	if a.recorded {
		var as, bs metav1.Time
		if a.since != nil {
			as = *a.since
		}
		if b.since != nil {
			bs = *b.since
		}
		if !as.Equal(&bs) {
			return as.Before(&bs)
		}
	}
	if !a.created.Equal(&b.created) {
		return a.created.Before(&b.created)
	}
	return a.key < b.key
}

// claimOf is what a deployment's status claims of L3 namespace ns under layout fingerprint.
func claimOf(h *hicachev1alpha1.HiCacheDeployment, ns, fingerprint string) claim {
	c := claim{key: h.Namespace + "/" + h.Name, created: h.CreationTimestamp}
	if cs := h.Status.Cache; cs != nil && cs.Namespace == ns && cs.LayoutHash == fingerprint {
		c.recorded, c.since = true, cs.Since
	}
	return c
}

// conflictWith is the deployment that keeps L3 namespace ns of a store against self, which
// would write it under layout fingerprint: among the writers of ns with another layout, the one
// with the strongest claim, if it beats self's; nil when self may write ns.
func conflictWith(self *hicachev1alpha1.HiCacheDeployment, ns, fingerprint string, writers []hicachev1alpha1.HiCacheDeployment) *hicachev1alpha1.HiCacheDeployment {
	mine := claimOf(self, ns, fingerprint)
	var best *hicachev1alpha1.HiCacheDeployment
	var bestClaim claim
	for i := range writers {
		w := &writers[i]
		cs := w.Status.Cache
		if w.UID == self.UID || cs == nil || cs.Namespace != ns || cs.LayoutHash == "" || cs.LayoutHash == fingerprint {
			continue
		}
		c := claimOf(w, ns, cs.LayoutHash)
		if keeps(c, mine) && (best == nil || keeps(c, bestClaim)) {
			best, bestClaim = w, c
		}
	}
	return best
}

// holdForConflict holds a deployment whose namespace another deployment of the store writes
// under another layout: no serving group writes it, and the status claims it no more, until the
// other is gone; then what the other wrote is flushed before this one writes the namespace. A
// held deployment has obs.conflict or obs.takeover set.
func (r *HiCacheDeploymentReconciler) holdForConflict(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) error {
	res := obs.resolved
	if hcd.Spec.Storage == nil || res.Namespace == "" || obs.backendObj == nil {
		return nil
	}
	id := storeuse.StoreIDOf(obs.backendObj)
	writers, err := storeuse.StoreWriters(ctx, r.Client, id, res.Namespace)
	if err != nil {
		return fmt.Errorf("finding the writers of namespace %s: %w", res.Namespace, err)
	}
	old := hcd.Status.Cache
	self := hcd.Namespace + "/" + hcd.Name
	if other := conflictWith(hcd, res.Namespace, res.Fingerprint, writers); other != nil {
		c := &hicachev1alpha1.NamespaceConflict{Namespace: res.Namespace, Deployment: other.Namespace + "/" + other.Name,
			LayoutHash: other.Status.Cache.ShortHash, Since: &obs.now}
		if old != nil && old.Conflict != nil && old.Conflict.Namespace == c.Namespace && old.Conflict.Since != nil {
			c.Since = old.Conflict.Since
		}
		obs.cache = heldCache(old, hcd, res.Namespace)
		obs.cache.Conflict = c
		obs.conflict = c
		if _, err := r.stopGroups(ctx, hcd, obs, res.Namespace); err != nil {
			return fmt.Errorf("stopping the writers of namespace %s, which %s writes under another layout: %w", res.Namespace, c.Deployment, err)
		}
		return nil
	}
	if old == nil || old.Conflict == nil || old.Conflict.Namespace != res.Namespace {
		return nil
	}
	// The other deployment is gone from the namespace: what it wrote there goes first, unless
	// deployments of this layout write it already (they share it). While its pods stop, wait.
	others, err := storeuse.StoreUsers(ctx, r.Client, storeuse.StoreScope{Store: id, Namespace: res.Namespace, Ignore: self})
	if err != nil {
		return fmt.Errorf("finding who else uses namespace %s: %w", res.Namespace, err)
	}
	wait := &takeoverState{namespace: res.Namespace, previous: old.Conflict.Deployment, layout: old.Conflict.LayoutHash}
	if others.InUse() {
		for i := range writers {
			if writers[i].Status.Cache.LayoutHash == res.Fingerprint {
				return nil // deployments of this layout write it already
			}
		}
		wait.users = &others
	} else {
		req := flushRequest{
			storeID: id, namespace: res.Namespace, layout: old.Conflict.LayoutHash, since: old.Conflict.Since, home: obs.backendObj, requester: self,
			view: obs.backendObj.Status.ViewVersion, event: hcd,
			reason: fmt.Sprintf("%s writes namespace %s, which %s wrote under layout %s", hcd.Name, res.Namespace, old.Conflict.Deployment, old.Conflict.LayoutHash),
		}
		cf, _, err := r.requestFlush(ctx, req)
		if err != nil {
			return fmt.Errorf("requesting the flush of what %s wrote in namespace %s: %w", old.Conflict.Deployment, res.Namespace, err)
		}
		cf, why, err := r.checkLeader(ctx, obs.backendObj, req, cf)
		if err != nil {
			return fmt.Errorf("requesting the flush of what %s wrote in namespace %s again after a failover: %w", old.Conflict.Deployment, res.Namespace, err)
		}
		if why == "" && meta.IsStatusConditionTrue(cf.Status.Conditions, hicachev1alpha1.ConditionComplete) {
			obs.cache.LastFlush = flushRecord(cf)
			return nil
		}
		wait.flush, wait.leader = cf.Namespace+"/"+cf.Name, why
	}
	obs.cache = heldCache(old, hcd, res.Namespace)
	obs.cache.Conflict = old.Conflict.DeepCopy()
	obs.takeover = wait
	return nil
}

// heldCache is the cache status of a held deployment: the one it had, without a claim on the
// contested namespace.
func heldCache(old *hicachev1alpha1.CacheStatus, hcd *hicachev1alpha1.HiCacheDeployment, contested string) *hicachev1alpha1.CacheStatus {
	cs := &hicachev1alpha1.CacheStatus{Backend: hcd.Spec.Storage.BackendRef.Name}
	if old != nil {
		cs = old.DeepCopy()
	}
	if cs.Namespace == contested {
		cs.Namespace, cs.LayoutHash, cs.ShortHash, cs.Facts, cs.Since = "", "", "", nil, nil
	}
	return cs
}
