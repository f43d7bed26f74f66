package hicachedeployment

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// computeStatus is the status of a HiCacheDeployment given what one reconcile observed. It is
// pure: the same observation gives the same status, and conditions keep their transition time
// while their status holds.
func computeStatus(hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) *hicachev1alpha1.HiCacheDeploymentStatus {
	st := hcd.Status.DeepCopy()
	st.ObservedGeneration = hcd.Generation
	set := reconcile.ConditionsOf(&st.Conditions, hcd.Generation, obs.now.Time).Set

	var desiredGroups int32
	for _, n := range specReplicas(hcd) {
		desiredGroups += n
	}

	if obs.resolveErr != nil {
		reason := hicachev1alpha1.ReasonInvalidSpec
		var up *resolve.UnknownProfileError
		if errors.As(obs.resolveErr, &up) {
			reason = hicachev1alpha1.ReasonUnknownProfile
		}
		msg := obs.resolveErr.Error() + "; nothing is created until the spec is fixed"
		set(hicachev1alpha1.ConditionReady, false, reason, msg)
		set(hicachev1alpha1.ConditionProgressing, false, reason, msg)
		countGroups(hcd, st, obs, desiredGroups)
		return st
	}
	res := obs.resolved
	st.Attention = hicachev1alpha1.AttentionKind(res.Topology.Attention)
	st.Draft = res.DraftSummary()
	st.Selector = hicachev1alpha1.LabelDeployment + "=" + hcd.Name
	st.Plan = planStatus(res)
	if hcd.Spec.Storage == nil {
		st.Plan.Writers = 0
		st.Plan.Summary = "No L3 store: the cache stops at host memory and no rank writes to L3"
	}
	st.Cache = obs.cache

	countGroups(hcd, st, obs, desiredGroups)
	st.FormedGroups = formedGroups(hcd, obs)

	// BackendReady mirrors the CacheBackend.
	switch {
	case hcd.Spec.Storage == nil:
		set(hicachev1alpha1.ConditionBackendReady, true, hicachev1alpha1.ReasonNoStorage,
			"No L3 store is configured; the cache stops at host memory")
	case obs.backendErr != nil:
		set(hicachev1alpha1.ConditionBackendReady, false, obs.backendErr.reason, obs.backendErr.message)
	default:
		set(hicachev1alpha1.ConditionBackendReady, true, hicachev1alpha1.ReasonBackendReady,
			fmt.Sprintf("CacheBackend %q is ready at %s", obs.backend.Name, obs.backend.RPCAddress))
	}

	// Ready and Progressing from the groups.
	switch {
	case obs.backendErr != nil && len(obs.groups) == 0:
		set(hicachev1alpha1.ConditionReady, false, obs.backendErr.reason, obs.backendErr.message)
		set(hicachev1alpha1.ConditionProgressing, false, obs.backendErr.reason, "Waiting for the cache backend before creating serving groups")
	case obs.backendErr != nil:
		// Running groups keep serving; nothing is changed until the backend is back.
		setReady(set, st, desiredGroups, groupsProblem(st, obs))
		set(hicachev1alpha1.ConditionProgressing, false, obs.backendErr.reason,
			"The cache backend is not ready: running serving groups keep serving, and changes wait until it is")
	case obs.failed != nil:
		reason := hicachev1alpha1.ReasonReconcileError
		var ce *conditionError
		if errors.As(obs.failed, &ce) {
			reason = ce.reason
		}
		msg := storeuse.Truncate(obs.failed.Error(), 32768)
		set(hicachev1alpha1.ConditionProgressing, false, reason, msg)
		if ce != nil && len(obs.groups) == 0 {
			set(hicachev1alpha1.ConditionReady, false, reason, msg)
		} else {
			setReady(set, st, desiredGroups, groupsProblem(st, obs))
		}
	case desiredGroups == 0:
		set(hicachev1alpha1.ConditionReady, true, hicachev1alpha1.ReasonScaledToZero, "Scaled to zero serving groups")
		set(hicachev1alpha1.ConditionProgressing, false, hicachev1alpha1.ReasonUpToDate, "No serving groups")
	default:
		setReady(set, st, desiredGroups, groupsProblem(st, obs))
		if st.UpdatedReplicas == desiredGroups && st.ReadyReplicas == desiredGroups && st.Replicas == desiredGroups {
			set(hicachev1alpha1.ConditionProgressing, false, hicachev1alpha1.ReasonUpToDate,
				fmt.Sprintf("All %d serving groups run the current spec", desiredGroups))
		} else {
			set(hicachev1alpha1.ConditionProgressing, true, hicachev1alpha1.ReasonRollingOut, storeuse.Truncate(
				fmt.Sprintf("%d of %d serving groups run the current spec, %d ready", st.UpdatedReplicas, desiredGroups, st.ReadyReplicas)+rolesProgress(st.Roles, obs.inStep), 1024))
		}
	}

	// CacheLayoutCurrent: every group writes under the current namespace.
	if hcd.Spec.Storage != nil {
		stale := groupsOffLayout(obs, res)
		switch {
		case obs.conflict != nil:
			msg := conflictMessage(hcd, obs.conflict)
			set(hicachev1alpha1.ConditionCacheLayoutCurrent, false, hicachev1alpha1.ReasonNamespaceConflict, msg)
			set(hicachev1alpha1.ConditionProgressing, false, hicachev1alpha1.ReasonNamespaceConflict, msg)
			if len(obs.groups) == 0 {
				set(hicachev1alpha1.ConditionReady, false, hicachev1alpha1.ReasonNamespaceConflict, msg)
			}
		case obs.takeover != nil:
			msg := "The " + obs.takeover.message(hcd.Namespace)
			set(hicachev1alpha1.ConditionCacheLayoutCurrent, false, hicachev1alpha1.ReasonWaitingForFlush, msg)
			set(hicachev1alpha1.ConditionProgressing, true, hicachev1alpha1.ReasonWaitingForFlush, msg)
		case obs.drain != nil:
			msg := obs.drain.message(hcd.Namespace)
			set(hicachev1alpha1.ConditionCacheLayoutCurrent, false, hicachev1alpha1.ReasonWaitingForFlush,
				"The layout changed under a fixed namespace: "+msg)
			set(hicachev1alpha1.ConditionProgressing, true, hicachev1alpha1.ReasonWaitingForFlush,
				"Stopping writers and flushing before the new layout starts: "+msg)
		case pendingFixedChange(hcd, obs):
			// The drain waits for the backend (it is not Ready): the old layout stays recorded.
			set(hicachev1alpha1.ConditionCacheLayoutCurrent, false, hicachev1alpha1.ReasonWaitingForFlush, fmt.Sprintf(
				"The layout changed (%s → %s) under the fixed namespace %s: its writers stop and it is flushed once CacheBackend %s is ready, then the new layout starts",
				obs.cache.ShortHash, res.ShortHash, res.Namespace, hcd.Spec.Storage.BackendRef.Name))
		case len(stale) > 0:
			set(hicachev1alpha1.ConditionCacheLayoutCurrent, false, hicachev1alpha1.ReasonLayoutChanging,
				fmt.Sprintf("Serving groups %s still write under an older layout; they are replaced one at a time", joinKeys(stale)))
		default:
			set(hicachev1alpha1.ConditionCacheLayoutCurrent, true, hicachev1alpha1.ReasonLayoutCurrent,
				fmt.Sprintf("Every serving group writes under namespace %s (layout %s)", res.Namespace, res.ShortHash))
		}
	} else {
		meta.RemoveStatusCondition(&st.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
	}
	return st
}

// formedGroups is the record of the members of every observed group: the one this reconcile
// made, else the stored one while it holds for the group's revision; none for a group whose pods
// were just replaced.
func formedGroups(hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) []hicachev1alpha1.FormedGroup {
	var out []hicachev1alpha1.FormedGroup
	for k, grp := range obs.groups {
		if f, ok := obs.formed[k]; ok {
			out = append(out, f)
			continue
		}
		if slices.Contains(obs.rolling, k) || slices.Contains(obs.recreated, k) {
			continue
		}
		for _, f := range hcd.Status.FormedGroups {
			if f.Name == grp.sts.Name && f.Revision == groupRevision(grp.sts) {
				out = append(out, f)
			}
		}
	}
	slices.SortFunc(out, func(a, b hicachev1alpha1.FormedGroup) int { return strings.Compare(a.Name, b.Name) })
	if len(out) > hicachev1alpha1.MaxFormedGroups {
		out = out[:hicachev1alpha1.MaxFormedGroups]
	}
	return out
}

// pendingFixedChange tells whether the cache status this reconcile records still names an older
// layout of the Fixed namespace: the new layout has not started (its drain did not run, because
// the backend is not Ready).
func pendingFixedChange(hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) bool {
	cs, res := obs.cache, obs.resolved
	return hcd.Spec.Storage != nil && hcd.Spec.Storage.NamespaceStrategy == hicachev1alpha1.NamespaceFixed && res != nil &&
		cs != nil && cs.LayoutHash != "" && cs.LayoutHash != res.Fingerprint && cs.Namespace == res.Namespace
}

// drainWait is what the drain of a Fixed namespace waits for.
type drainWait int

const (
	// drainShared: another deployment of the store writes the fixed namespace too, so stopping
	// this one's writers could never empty it; nothing is stopped.
	drainShared drainWait = iota + 1
	// drainStopping: rank pods that write the namespace are still there.
	drainStopping
	// drainFlushing: the namespace's flush has not completed.
	drainFlushing
	// drainLeader: the flush completed on masters with HA, and no serving leader has confirmed
	// the view it ran under yet.
	drainLeader
)

// drainState is where the drain of a Fixed namespace stands: what it waits for and the facts of
// it. Its sentence is made by the status computation, from these facts.
type drainState struct {
	wait      drainWait
	namespace string
	// users (drainShared) are the other users of the namespace.
	users storeuse.StoreUse
	// pods (drainStopping) is how many rank pods were still there.
	pods int
	// flush (drainFlushing, drainLeader) is the CacheFlush, namespace/name, and failure why its
	// last attempt failed, when it did (drainLeader: why the leader did not confirm its view).
	flush, failure string
}

// message says what the drain waits for, naming objects as seen from namespace from.
func (d *drainState) message(from string) string {
	switch d.wait {
	case drainShared:
		return storeuse.Truncate(fmt.Sprintf("the fixed namespace %s is also written by %s, so it cannot be flushed; give each deployment its own spec.storage.namespace",
			d.namespace, d.users.Describe(from)), 900)
	case drainStopping:
		return fmt.Sprintf("stopping %d rank pods that write namespace %s", d.pods, d.namespace)
	case drainLeader:
		return storeuse.Truncate(fmt.Sprintf("namespace %s is flushed; %s", d.namespace, d.failure), 900)
	}
	msg := fmt.Sprintf("waiting for CacheFlush %s of namespace %s", storeuse.RelativeName(d.flush, from), d.namespace)
	if d.failure != "" {
		msg += ": " + d.failure
	}
	return msg
}

// takeoverState is what a deployment waits for before it writes a namespace that another
// deployment wrote under another layout: that the other stops using it (users), then that what
// it wrote is flushed (flush).
type takeoverState struct {
	namespace string
	// previous (namespace/name) wrote the namespace under layout.
	previous, layout string
	users            *storeuse.StoreUse
	flush            string
	// leader is why the new layout waits for the masters to confirm the flush's view, once the
	// flush completed.
	leader string
}

// message says what the takeover waits for, naming objects as seen from namespace from.
func (t *takeoverState) message(from string) string {
	held := fmt.Sprintf("namespace %s holds what %s wrote under layout %s", t.namespace, storeuse.RelativeName(t.previous, from), t.layout)
	if t.users != nil {
		return fmt.Sprintf("%s: waiting for %s to stop writing it, then for its flush", held, t.users.Describe(from))
	}
	if t.leader != "" {
		return storeuse.Truncate(fmt.Sprintf("%s, and is flushed; %s", held, t.leader), 1024)
	}
	return fmt.Sprintf("%s: waiting for CacheFlush %s to remove it before writing it", held, storeuse.RelativeName(t.flush, from))
}

// conflictMessage says why a deployment is held and what ends it.
func conflictMessage(hcd *hicachev1alpha1.HiCacheDeployment, c *hicachev1alpha1.NamespaceConflict) string {
	return storeuse.Truncate(fmt.Sprintf("L3 namespace %s of this store is written by HiCacheDeployment %s under another layout (%s): two layouts must never share a namespace, "+
		"so no serving group of %s writes it until %s leaves it; give this deployment its own spec.storage.namespace, or the same layout",
		c.Namespace, storeuse.RelativeName(c.Deployment, hcd.Namespace), c.LayoutHash, hcd.Name, storeuse.RelativeName(c.Deployment, hcd.Namespace)), 1024)
}

// setReady sets Ready from the group counters; problem, when there is one, says why a rank pod
// is stuck (rankPodProblem).
func setReady(set func(string, bool, string, string), st *hicachev1alpha1.HiCacheDeploymentStatus, desired int32, problem string) {
	if st.ReadyReplicas >= desired && st.Replicas == desired {
		set(hicachev1alpha1.ConditionReady, true, hicachev1alpha1.ReasonAllGroupsReady,
			fmt.Sprintf("All %d serving groups are ready", desired))
		return
	}
	msg := fmt.Sprintf("%d of %d serving groups are ready", st.ReadyReplicas, desired)
	if problem != "" {
		msg += "; " + problem
	}
	set(hicachev1alpha1.ConditionReady, false, hicachev1alpha1.ReasonGroupsNotReady, storeuse.Truncate(msg, 1024))
}

// countGroups fills the group counters from the observed groups: those below their role's
// replicas count.
func countGroups(hcd *hicachev1alpha1.HiCacheDeployment, st *hicachev1alpha1.HiCacheDeploymentStatus, obs *observed, desired int32) {
	var existing, ready, updated int32
	var perRole map[hicachev1alpha1.Role]hicachev1alpha1.RoleStatus
	if hcd.Spec.Roles != nil {
		perRole = map[hicachev1alpha1.Role]hicachev1alpha1.RoleStatus{}
	}
	count := func(r hicachev1alpha1.Role, f func(*hicachev1alpha1.RoleStatus)) {
		if perRole != nil {
			rs := perRole[r]
			f(&rs)
			perRole[r] = rs
		}
	}
	replicas := map[hicachev1alpha1.Role]int{}
	nodes := map[hicachev1alpha1.Role]int{}
	if obs.served != nil {
		for _, sr := range obs.served {
			replicas[sr.role], nodes[sr.role] = sr.res.Replicas, sr.res.Nodes
		}
	} else {
		replicas[""] = int(desired) // the spec cannot be resolved: a deployment without roles, as it was
	}
	for k, grp := range obs.groups {
		if n, ok := replicas[k.role]; !ok || k.index >= n {
			continue
		}
		existing++
		count(k.role, func(rs *hicachev1alpha1.RoleStatus) { rs.Replicas++ })
		if slices.Contains(obs.rolling, k) || slices.Contains(obs.recreated, k) {
			continue
		}
		if groupReady(grp, grp.size()) {
			ready++
			count(k.role, func(rs *hicachev1alpha1.RoleStatus) { rs.ReadyReplicas++ })
		}
		if hash, ok := obs.desired[k]; ok && groupCurrent(grp, hash) && len(grp.pods) == nodes[k.role] {
			updated++
			count(k.role, func(rs *hicachev1alpha1.RoleStatus) { rs.UpdatedReplicas++ })
		}
	}
	st.Replicas, st.ReadyReplicas, st.UpdatedReplicas = existing, ready, updated
	st.Ready = fmt.Sprintf("%d/%d", ready, desired)
	st.Roles = nil
	if len(perRole) > 0 {
		want := specReplicas(hcd)
		of := func(r hicachev1alpha1.Role) hicachev1alpha1.RoleStatus {
			rs := perRole[r]
			rs.DesiredReplicas = want[r]
			rs.Ready = fmt.Sprintf("%d/%d", rs.ReadyReplicas, rs.DesiredReplicas)
			return rs
		}
		st.Roles = &hicachev1alpha1.RolesStatus{Prefill: of(hicachev1alpha1.RolePrefill), Decode: of(hicachev1alpha1.RoleDecode)}
	}
}

// groupsProblem says why serving groups are not ready: the roles that are not, then the first
// rank pod that is stuck.
func groupsProblem(st *hicachev1alpha1.HiCacheDeploymentStatus, obs *observed) string {
	var parts []string
	if rs := st.Roles; rs != nil {
		for _, r := range []struct {
			name string
			s    hicachev1alpha1.RoleStatus
		}{{"prefill", rs.Prefill}, {"decode", rs.Decode}} {
			if r.s.ReadyReplicas < r.s.DesiredReplicas {
				parts = append(parts, fmt.Sprintf("the %s role has %d of %d groups ready", r.name, r.s.ReadyReplicas, r.s.DesiredReplicas))
			}
		}
	}
	if p := rankPodProblem(obs.groups); p != "" {
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// rolesProgress is, for a deployment with roles, how far each role's rollout is, and which
// groups wait for the other role (inStep).
func rolesProgress(rs *hicachev1alpha1.RolesStatus, inStep []GroupKey) string {
	if rs == nil {
		return ""
	}
	msg := fmt.Sprintf(" (prefill %d of %d, decode %d of %d)", rs.Prefill.UpdatedReplicas, rs.Prefill.DesiredReplicas, rs.Decode.UpdatedReplicas, rs.Decode.DesiredReplicas)
	byRole := map[hicachev1alpha1.Role][]string{}
	for _, k := range inStep {
		byRole[k.role] = append(byRole[k.role], strconv.Itoa(k.index))
	}
	for _, r := range []hicachev1alpha1.Role{hicachev1alpha1.RolePrefill, hicachev1alpha1.RoleDecode} {
		other := hicachev1alpha1.RoleDecode
		if r == hicachev1alpha1.RoleDecode {
			other = hicachev1alpha1.RolePrefill
		}
		switch g := byRole[r]; len(g) {
		case 0:
		case 1:
			msg += fmt.Sprintf("; %s group %s waits for the %s role: the roles roll in step", r, g[0], other)
		default:
			msg += fmt.Sprintf("; %s groups %s wait for the %s role: the roles roll in step", r, strings.Join(g, ", "), other)
		}
	}
	return msg
}

// groupsOffLayout lists the groups whose pods write under another namespace or layout; a group
// of a role that does not write L3 writes under none.
func groupsOffLayout(obs *observed, res *resolve.Resolved) []GroupKey {
	var out []GroupKey
	for k, grp := range obs.groups {
		if sr := obs.servedRole(k.role); sr != nil && !sr.writesL3() {
			continue
		}
		for i := range grp.pods {
			p := &grp.pods[i]
			if p.Labels[hicachev1alpha1.LabelCacheNamespace] != res.Namespace || p.Annotations[hicachev1alpha1.AnnotationLayoutHash] != res.ShortHash {
				out = append(out, k)
				break
			}
		}
	}
	slices.SortFunc(out, compareKeys)
	return out
}

func planStatus(res *resolve.Resolved) *hicachev1alpha1.PlanStatus {
	p := &hicachev1alpha1.PlanStatus{
		Ranks:   int32(res.Plan.NumRanks()),
		Nodes:   int32(res.Nodes),
		Writers: int32(res.Writers()),
		Summary: storeuse.Truncate(res.Plan.Summary(), 1024),
	}
	if res.SegmentPerRank > 0 {
		p.StoreMemoryPerRank = resource.NewQuantity(res.SegmentPerRank, resource.BinarySI)
		p.StoreMemoryPerGroup = resource.NewQuantity(res.SegmentPerGroup(), resource.BinarySI)
	}
	for i, w := range res.Plan.Warnings {
		if i == 16 {
			break
		}
		p.Warnings = append(p.Warnings, storeuse.Truncate(w.Message, 512))
	}
	return p
}

// cacheStatus records the layout the current spec writes under and keeps the namespaces older
// layouts left behind, the newest MaxStaleNamespaces of them; it returns those it dropped.
func cacheStatus(hcd *hicachev1alpha1.HiCacheDeployment, obs *observed) (*hicachev1alpha1.CacheStatus, []hicachev1alpha1.StaleNamespace) {
	res := obs.resolved
	old := hcd.Status.Cache
	if fixedLayoutChange(hcd, res) {
		// The running layout stays in status until its namespace was flushed.
		return old.DeepCopy(), nil
	}
	cs := &hicachev1alpha1.CacheStatus{LayoutHash: res.Fingerprint, ShortHash: res.ShortHash, Namespace: res.Namespace}
	if hcd.Spec.Storage == nil {
		cs.Namespace = ""
	} else {
		cs.Backend = hcd.Spec.Storage.BackendRef.Name
	}
	setFacts(cs, res)
	// since: when this namespace, layout and backend were first recorded.
	if cs.Namespace != "" {
		cs.Since = &obs.now
		if old != nil && old.Since != nil && old.Namespace == cs.Namespace && old.LayoutHash == cs.LayoutHash && old.Backend == cs.Backend {
			cs.Since = old.Since
		}
	}
	if old != nil {
		cs.StaleNamespaces = append(cs.StaleNamespaces, old.StaleNamespaces...)
		cs.LastFlush = old.LastFlush
		cs.DroppedStaleNamespaces = old.DroppedStaleNamespaces
		oldBackend := old.Backend
		if oldBackend == "" {
			oldBackend = cs.Backend
		}
		// The old namespace is stale when the layout moved away from it, or when the writers
		// moved to another backend (the old one keeps the objects).
		if old.Namespace != "" && (old.Namespace != cs.Namespace || oldBackend != cs.Backend) && !hasStale(cs.StaleNamespaces, old.Namespace, oldBackend) {
			cs.StaleNamespaces = append(cs.StaleNamespaces, hicachev1alpha1.StaleNamespace{
				Namespace: old.Namespace, Backend: oldBackend, LayoutHash: old.ShortHash, Since: obs.now, WrittenSince: old.Since})
		}
	}
	// A namespace the current layout writes again is not stale.
	cs.StaleNamespaces = filterStale(cs.StaleNamespaces, func(s hicachev1alpha1.StaleNamespace) bool {
		return s.Namespace != cs.Namespace || (s.Backend != "" && s.Backend != cs.Backend)
	})
	var dropped []hicachev1alpha1.StaleNamespace
	if n := len(cs.StaleNamespaces) - hicachev1alpha1.MaxStaleNamespaces; n > 0 {
		dropped = cs.StaleNamespaces[:n:n]
		cs.StaleNamespaces = cs.StaleNamespaces[n:]
		cs.DroppedStaleNamespaces += int32(n)
	}
	if len(cs.StaleNamespaces) == 0 {
		cs.StaleNamespaces = nil
	}
	return cs, dropped
}

// droppedStaleMessage tells a person that a stale namespace is no longer tracked and how to
// remove what it holds.
func droppedStaleMessage(hcd *hicachev1alpha1.HiCacheDeployment, s hicachev1alpha1.StaleNamespace) string {
	backend := s.Backend
	if backend == "" && hcd.Spec.Storage != nil {
		backend = hcd.Spec.Storage.BackendRef.Name
	}
	msg := fmt.Sprintf("Stale L3 namespace %s (layout %s) was dropped from status.cache.staleNamespaces, which holds the newest %d: "+
		"the operator no longer flushes it", s.Namespace, s.LayoutHash, hicachev1alpha1.MaxStaleNamespaces)
	if s.Flush != "" {
		msg += fmt.Sprintf(" beyond CacheFlush %s, already requested", s.Flush)
	} else {
		msg += fmt.Sprintf("; remove what it holds with kubectl hicache flush %s --prefix %s -n %s once nothing uses it", backend, s.Namespace, hcd.Namespace)
	}
	return msg
}

func hasStale(list []hicachev1alpha1.StaleNamespace, ns, backend string) bool {
	for _, s := range list {
		if s.Namespace == ns && (s.Backend == "" || s.Backend == backend) {
			return true
		}
	}
	return false
}

func filterStale(list []hicachev1alpha1.StaleNamespace, keep func(hicachev1alpha1.StaleNamespace) bool) []hicachev1alpha1.StaleNamespace {
	out := list[:0:0]
	for _, s := range list {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

func joinKeys(keys []GroupKey) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.String()
	}
	return strings.Join(parts, ", ")
}

// maxFactLength is the schema's bound of one listed fact (status.cache.facts items).
const maxFactLength = 256

// setFacts records the layout facts of res in cs as the schema bounds them: their count, and the
// first MaxListedFacts of them, each cut to maxFactLength. Every write of the facts goes through
// it: one fact list the API server refuses would get every status write of the deployment
// refused.
func setFacts(cs *hicachev1alpha1.CacheStatus, res *resolve.Resolved) {
	facts := res.FactList()
	cs.FactCount = int32(len(facts))
	if len(facts) > hicachev1alpha1.MaxListedFacts {
		facts = facts[:hicachev1alpha1.MaxListedFacts]
	}
	for i := range facts {
		facts[i] = storeuse.Truncate(facts[i], maxFactLength)
	}
	cs.Facts = facts
}
