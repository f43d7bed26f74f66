package hicachedeployment

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
)

// The rollout rules of the serving groups live here, in one pure function: planGroups reads what
// was observed of the groups and what the spec asks of them and returns what to do;
// executeGroupPlan does it, and decides nothing.
//
// The rules, for each role (a deployment without roles has one, ""; one with spec.roles has
// prefill and decode, each with its own replicas, templates and budget):
//   - a missing group is created; it takes no budget, since nothing of it runs yet;
//   - groups at or above the role's replicas go, whole (scale down), and so do groups of a role
//     the spec no longer has (roles added or removed);
//   - a ready group whose pods are replaced (a roll to a new template, or the rest of an
//     interrupted roll) takes one of spec.rollout.maxUnavailable of its role; a group that is
//     already down is replaced at once, since replacing it costs no availability;
//   - a group that lost a rank is recreated whole whatever the budget (its process group cannot
//     take a rank back), after a delay that grows with each attempt since it last formed;
//   - a formed group's members are recorded (in the status, with the write that reports it
//     Ready), so that a rank replaced later is noticed; a ready group an earlier release recorded
//     in its StatefulSet's annotation is recorded in the status, and the annotation removed;
//   - a Fixed-namespace drain stops every group and starts none; a deployment held off a
//     namespace another layout writes stops the groups writing it.
//
// Roles roll in step. A change that alters the templates of both roles (the model, the image,
// the layout and its namespace, the draft, anything spec.roles does not override) must not leave
// prefill servers of the new release beside only decode servers of the old one, or the reverse,
// for longer than a step: while both roles have groups on an older template, a role's groups
// move to the new template (a roll) only as long as the count of its groups on the new template
// leads the other role's by at most the skew bound S = max(1, spec.rollout.maxUnavailable).
// Each role counts against the other's count before this round, so the bound holds after the
// round whatever both do in it. A role all of whose groups are on the new template holds the
// other back no more (the bound is then met for good), so roles of different sizes finish. A
// change that alters one role's template only (its topology, replicas, resources or pod
// overrides under spec.roles) rolls that role alone, under its own budget. Groups created by a
// scale up are created at once, on the new template, and count as rolled.

// skewBound is the in-step skew bound S of a rollout budget: how many more groups of one role
// may run the new template than of the other while both still have groups on an older one.
func skewBound(maxUnavailable int) int { return max(maxUnavailable, 1) }

// groupWant is what the spec asks of the serving groups.
type groupWant struct {
	// roles is what the spec asks of each kind of serving group: one entry of role "" for a
	// deployment without roles, prefill then decode for one with spec.roles.
	roles []roleWant
	// maxUnavailable is how many ready groups of each role may be taken down at once (at least
	// 1); it is also the skew bound of roles rolling in step.
	maxUnavailable int
	// stop: the writers must go (a Fixed-namespace drain, or a namespace another layout holds);
	// nothing is created or applied.
	stop bool
	// stopNamespace limits stop to the groups writing this L3 namespace; "" stops every group.
	stopNamespace string
}

// roleWant is what the spec asks of the groups of one role.
type roleWant struct {
	role hicachev1alpha1.Role
	// replicas is the number of groups of the role.
	replicas int
	// hashes is the desired template hash of each group of the role below replicas.
	hashes map[int]string
}

// groupActionKind is one thing the executor does to one group.
type groupActionKind string

const (
	// actCreate applies the StatefulSet of a group that does not exist.
	actCreate groupActionKind = "Create"
	// actKeep applies a current group's StatefulSet (no write when it already holds every value).
	actKeep groupActionKind = "Keep"
	// actRoll applies the new template and replaces every pod of the group together.
	actRoll groupActionKind = "Roll"
	// actReplace replaces every pod of a current group left with pods of an older template.
	actReplace groupActionKind = "Replace"
	// actHold leaves an outdated group as it is until the budget allows its replacement.
	actHold groupActionKind = "Hold"
	// actRecreate replaces every pod of a group that lost a rank and records the attempt.
	actRecreate groupActionKind = "Recreate"
	// actWait leaves a group that lost a rank until its recreate backoff ends.
	actWait groupActionKind = "Wait"
	// actRemember records a formed group's members and forgets its earlier failures.
	actRemember groupActionKind = "Remember"
	// actScaleDown deletes a group above its role's replicas and its Service.
	actScaleDown groupActionKind = "ScaleDown"
	// actStop deletes a group's StatefulSet to stop its writers (a Fixed-namespace drain).
	actStop groupActionKind = "Stop"
)

// groupAction is one step of a plan.
type groupAction struct {
	kind  groupActionKind
	group GroupKey
	// why says what the action answers: the rank a recreated group lost, what a held group
	// waits for.
	why string
	// annotations are written to the group's StatefulSet with the action ("" removes one).
	annotations map[string]string
	// members (actRemember) is the record of the group's pods, which the status keeps.
	members string
}

// groupPlan is what to do to the serving groups this round, and when to look again.
type groupPlan struct {
	actions []groupAction
	// requeueAfter is when a waiting group may be acted on; 0 when nothing waits on the clock.
	requeueAfter time.Duration
}

// Why a group is held.
const (
	whyBudget = "waiting for spec.rollout.maxUnavailable"
	whyInStep = "waiting for the other role to roll in step"
)

// planGroups decides what to do to the serving groups, from the observed groups (their
// StatefulSets, pods and recorded history), what the spec asks, and the time now.
func planGroups(groups map[GroupKey]*group, want groupWant, now time.Time) groupPlan {
	var plan groupPlan
	keys := make([]GroupKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	// Highest index first within a role: a scale down removes the last groups first.
	slices.SortFunc(keys, func(a, b GroupKey) int {
		if a.role != b.role {
			return compareKeys(a, b)
		}
		return cmp.Compare(b.index, a.index)
	})

	if want.stop {
		for _, k := range keys {
			if grp := groups[k]; grp.writes(want.stopNamespace) && grp.sts.DeletionTimestamp.IsZero() {
				plan.actions = append(plan.actions, groupAction{kind: actStop, group: k})
			}
		}
		return plan
	}

	wanted := map[hicachev1alpha1.Role]roleWant{}
	for _, rw := range want.roles {
		wanted[rw.role] = rw
	}
	// Scale down: whole groups, highest index first.
	for _, k := range keys {
		if rw, ok := wanted[k.role]; !ok || k.index >= rw.replicas {
			plan.actions = append(plan.actions, groupAction{kind: actScaleDown, group: k})
		}
	}

	limits := rollLimits(groups, want)
	for _, rw := range want.roles {
		limit, ok := limits[rw.role]
		if !ok {
			limit = -1
		}
		planRole(&plan, groups, rw, max(want.maxUnavailable, 1), limit, now)
	}
	return plan
}

// rollLimits is, per role, how many of its groups may move to the new template this round under
// the in-step rule; a role absent from the result is not limited (no other role rolls with it).
func rollLimits(groups map[GroupKey]*group, want groupWant) map[hicachev1alpha1.Role]int {
	if len(want.roles) != 2 {
		return nil
	}
	rolled := map[hicachev1alpha1.Role]int{}
	outdated := map[hicachev1alpha1.Role]bool{}
	for _, rw := range want.roles {
		for g := range rw.replicas {
			grp := groups[GroupKey{role: rw.role, index: g}]
			switch {
			case grp == nil:
				// Created at once on the new template.
				rolled[rw.role]++
			case grp.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] == rw.hashes[g]:
				rolled[rw.role]++
			default:
				outdated[rw.role] = true
			}
		}
	}
	a, b := want.roles[0].role, want.roles[1].role
	if !outdated[a] || !outdated[b] {
		return nil
	}
	s := skewBound(want.maxUnavailable)
	return map[hicachev1alpha1.Role]int{
		a: max(rolled[b]+s-rolled[a], 0),
		b: max(rolled[a]+s-rolled[b], 0),
	}
}

// planRole adds the actions on the groups of one role below its replicas to plan. budget is the
// role's spec.rollout.maxUnavailable; limit is how many of its groups may roll under the in-step
// rule, -1 for no limit.
func planRole(plan *groupPlan, groups map[GroupKey]*group, rw roleWant, budget, limit int, now time.Time) {
	for k, grp := range groups {
		if k.role == rw.role && k.index < rw.replicas && !groupReady(grp, grp.size()) {
			budget--
		}
	}
	// takeDown spends budget on taking a group down; a group that is down already costs none.
	takeDown := func(grp *group) bool {
		if !groupReady(grp, grp.size()) {
			return true
		}
		if budget <= 0 {
			return false
		}
		budget--
		return true
	}

	for g := range rw.replicas {
		key := GroupKey{role: rw.role, index: g}
		grp, hash := groups[key], rw.hashes[g]
		act := groupAction{kind: actKeep, group: key}
		switch {
		case grp == nil:
			act.kind = actCreate
		case grp.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] != hash:
			switch {
			case limit == 0:
				act.kind, act.why = actHold, whyInStep
			case takeDown(grp):
				act.kind, act.annotations = actRoll, map[string]string{hicachev1alpha1.AnnotationMembers: ""}
				if limit > 0 {
					limit--
				}
			default:
				act.kind, act.why = actHold, whyBudget
			}
		case slices.ContainsFunc(grp.pods, func(p corev1.Pod) bool { return p.Annotations[hicachev1alpha1.AnnotationTemplateHash] != hash }):
			// Pods of an older template, left by an interrupted roll, go together. A ready group
			// takes the budget as a roll does: the cache shows one when it has seen a roll's
			// StatefulSet write but not yet its pod deletes, and a second group must not roll
			// beside it. Its StatefulSet already counts as rolled.
			if takeDown(grp) {
				act.kind, act.annotations = actReplace, map[string]string{hicachev1alpha1.AnnotationMembers: ""}
			} else {
				act.kind, act.why = actHold, whyBudget
			}
		default:
			if broken, why := groupBroken(grp); broken {
				count, wait := recreateBackoff(grp.sts, now)
				act.why = why
				if wait > 0 {
					act.kind = actWait
					plan.requeueAfter = reconcile.MinPositive(plan.requeueAfter, wait)
					break
				}
				act.kind, act.annotations = actRecreate, map[string]string{hicachev1alpha1.AnnotationMembers: "",
					hicachev1alpha1.AnnotationRecreations: strconv.Itoa(count + 1), hicachev1alpha1.AnnotationRecreatedAt: now.UTC().Format(time.RFC3339)}
				break
			}
			// A group recorded only by the annotation of an earlier release is recorded again too,
			// once ready: its record moves to the status, and the annotation goes.
			if members := membersAnnotation(grp.pods); groupReady(grp, grp.size()) &&
				(grp.members != members || grp.sts.Annotations[hicachev1alpha1.AnnotationMembers] != "") {
				// The record rides on the status write that reports the group Ready; the
				// StatefulSet loses the annotation of an older record and the failures it counted.
				act.kind, act.members, act.annotations = actRemember, members, map[string]string{
					hicachev1alpha1.AnnotationMembers: "", hicachev1alpha1.AnnotationRecreations: "", hicachev1alpha1.AnnotationRecreatedAt: ""}
			}
		}
		plan.actions = append(plan.actions, act)
	}
}

// writes tells whether the group's pods write the L3 namespace ns; every group matches "".
func (g *group) writes(ns string) bool {
	return ns == "" || g.sts.Spec.Template.Labels[hicachev1alpha1.LabelCacheNamespace] == ns
}

// recreateBackoff is how many times a group was recreated since it last formed, and how long to
// wait before recreating it again: nothing the first time, then 10 s doubling up to 5 minutes.
func recreateBackoff(sts *appsv1.StatefulSet, now time.Time) (int, time.Duration) {
	count, _ := strconv.Atoi(sts.Annotations[hicachev1alpha1.AnnotationRecreations])
	at, err := time.Parse(time.RFC3339, sts.Annotations[hicachev1alpha1.AnnotationRecreatedAt])
	if count == 0 || err != nil {
		return count, 0
	}
	delay := 10 * time.Second << min(count-1, 5)
	if delay > 5*time.Minute {
		delay = 5 * time.Minute
	}
	return count, max(at.Add(delay).Sub(now), 0)
}

// executeGroupPlan carries out a plan: desired holds the rendered StatefulSet of each group below
// its role's replicas (nil for a plan that only stops groups). It records in obs which groups it
// replaced and which it removed.
func (r *HiCacheDeploymentReconciler) executeGroupPlan(ctx context.Context, hcd *hicachev1alpha1.HiCacheDeployment, obs *observed, plan groupPlan, desired map[GroupKey]*appsv1.StatefulSet) error {
	a := reconcile.Applier{Client: r.Client}
	for _, act := range plan.actions {
		g := act.group
		grp := obs.groups[g]
		switch act.kind {
		case actStop, actScaleDown:
			if err := r.Delete(ctx, grp.sts, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s: %w", g.describe(), err)
			}
			if act.kind == actScaleDown {
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: groupName(hcd.Name, g), Namespace: hcd.Namespace}}
				if err := r.Delete(ctx, svc); client.IgnoreNotFound(err) != nil {
					return fmt.Errorf("deleting the Service of %s: %w", g.describe(), err)
				}
				np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: groupName(hcd.Name, g), Namespace: hcd.Namespace}}
				if err := r.Delete(ctx, np); client.IgnoreNotFound(err) != nil {
					return fmt.Errorf("deleting the NetworkPolicy of %s: %w", g.describe(), err)
				}
			}
			delete(obs.groups, g)
			continue
		}
		// Every group below spec.replicas keeps its headless Service.
		if _, err := a.ApplyIfChanged(ctx, buildHeadlessService(hcd, g), &corev1.Service{}); err != nil {
			return err
		}
		if _, err := a.ApplyIfChanged(ctx, BuildGroupNetworkPolicy(hcd, g), &networkingv1.NetworkPolicy{}); err != nil {
			return err
		}
		switch act.kind {
		case actHold:
			if act.why == whyInStep {
				obs.inStep = append(obs.inStep, g)
			}
			continue
		case actCreate, actRoll:
			if _, err := a.ApplyIfChanged(ctx, desired[g], nil); err != nil {
				return err
			}
		default:
			if _, err := a.ApplyIfChanged(ctx, desired[g], &appsv1.StatefulSet{}); err != nil {
				return err
			}
		}
		if act.kind == actRecreate {
			ctrl.LoggerFrom(ctx).V(1).Info("Recreating a serving group that lost a rank", "group", g.String(), "why", act.why, "attempt", act.annotations[hicachev1alpha1.AnnotationRecreations])
			r.Recorder.Eventf(hcd, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonGroupRecreated, "Recreate",
				"%s lost a rank (%s); recreating all %d of its pods, since a process group cannot take a rank back", capitalize(g.describe()), act.why, len(grp.pods))
		}
		switch act.kind {
		case actRoll, actReplace, actRecreate:
			if err := r.deletePods(ctx, grp.pods); err != nil {
				return fmt.Errorf("replacing the pods of %s: %w", g.describe(), err)
			}
		}
		if len(act.annotations) > 0 {
			if err := r.setGroupAnnotations(ctx, grp.sts, act.annotations); err != nil {
				return fmt.Errorf("recording the history of %s: %w", g.describe(), err)
			}
		}
		switch act.kind {
		case actRoll, actReplace:
			obs.rolling = append(obs.rolling, g)
		case actRecreate:
			obs.recreated = append(obs.recreated, g)
		case actRemember:
			if obs.formed == nil {
				obs.formed = map[GroupKey]hicachev1alpha1.FormedGroup{}
			}
			obs.formed[g] = hicachev1alpha1.FormedGroup{Name: grp.sts.Name, Revision: groupRevision(grp.sts), Pods: act.members}
		}
	}
	return nil
}
