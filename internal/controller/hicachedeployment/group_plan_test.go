package hicachedeployment

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
)

// Groups at every stage of a rollout, for the planner's tables.

// formedGroup: n ready pods of template hash, members recorded.
func formedGroup(g, n int, hash string) *group {
	pods := make([]corev1.Pod, n)
	for i := range pods {
		pods[i] = makePod("g"+strconv.Itoa(g), i).Ready().Hash(hash).Obj()
	}
	return groupOf(g, hash, membersAnnotation(pods), pods...)
}

// legacyFormedGroup: a formed group of n ready pods recorded as an earlier release recorded it,
// by its StatefulSet's members annotation alone (groupsFrom reads it as its members).
func legacyFormedGroup(g, n int, hash string) *group {
	grp := formedGroup(g, n, hash)
	grp.sts.Annotations[hicachev1alpha1.AnnotationMembers] = grp.members
	return grp
}

// startingGroup: a StatefulSet of n ranks whose pods run the template but are not ready yet.
func startingGroup(g, n int, hash string) *group {
	pods := make([]corev1.Pod, n)
	for i := range pods {
		pods[i] = makePod("g"+strconv.Itoa(g), i).Running().Hash(hash).Obj()
	}
	return groupOf(g, hash, "", pods...)
}

// emptyGroup: a StatefulSet of n ranks whose pods are gone (just replaced).
func emptyGroup(g, n int, hash string) *group {
	grp := groupOf(g, hash, "")
	grp.sts.Spec.Replicas = ptr.To(int32(n))
	return grp
}

// interruptedGroup: the StatefulSet runs the new template, its ready pods the old one (a roll
// whose pod deletes failed, or whose deletes the cache has not seen yet).
func interruptedGroup(g, n int, oldHash, newHash string) *group {
	grp := formedGroup(g, n, oldHash)
	grp.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] = newHash
	return grp
}

// recreatedGroup: a group recreated count times, the last one ago before t0, whose pods are
// broken again (the leader failed).
func recreatedGroup(g int, hash string, count int, ago time.Duration) *group {
	grp := formedGroup(g, 2, hash)
	grp.pods[0].Status.Phase = corev1.PodFailed
	grp.sts.Annotations[hicachev1alpha1.AnnotationRecreations] = strconv.Itoa(count)
	grp.sts.Annotations[hicachev1alpha1.AnnotationRecreatedAt] = testsupport.T0.Add(-ago).UTC().Format(time.RFC3339)
	return grp
}

// writing makes a group's pods write the L3 namespace ns.
func writing(grp *group, ns string) *group {
	grp.sts.Spec.Template.Labels = map[string]string{hicachev1alpha1.LabelCacheNamespace: ns}
	return grp
}

func groupsOf(gs ...*group) map[GroupKey]*group {
	m := map[GroupKey]*group{}
	for _, g := range gs {
		m[g.key] = g
	}
	return m
}

func hashes(n int, hash string) map[int]string {
	m := map[int]string{}
	for g := range n {
		m[g] = hash
	}
	return m
}

// describe writes a plan as "Kind group, ..." for the tables.
func describe(p groupPlan) string {
	parts := make([]string, 0, len(p.actions))
	for _, a := range p.actions {
		parts = append(parts, fmt.Sprintf("%s %s", a.kind, a.group))
	}
	return strings.Join(parts, ", ")
}

func TestPlanGroups(t *testing.T) {
	want := func(replicas, maxUnavailable int) groupWant {
		return groupWant{roles: []roleWant{{replicas: replicas, hashes: hashes(replicas, "new")}}, maxUnavailable: maxUnavailable}
	}
	cases := map[string]struct {
		groups  map[GroupKey]*group
		want    groupWant
		plan    string
		requeue time.Duration
	}{
		"nothing exists: every group is created at once": {
			groups: groupsOf(), want: want(3, 1), plan: "Create 0, Create 1, Create 2",
		},
		"converged: every group is kept": {
			groups: groupsOf(formedGroup(0, 2, "new"), formedGroup(1, 2, "new")), want: want(2, 1), plan: "Keep 0, Keep 1",
		},
		"a new template rolls one ready group at a time": {
			groups: groupsOf(formedGroup(0, 2, "old"), formedGroup(1, 2, "old"), formedGroup(2, 2, "old")), want: want(3, 1),
			plan: "Roll 0, Hold 1, Hold 2",
		},
		"maxUnavailable 2 rolls two at a time": {
			groups: groupsOf(formedGroup(0, 2, "old"), formedGroup(1, 2, "old"), formedGroup(2, 2, "old")), want: want(3, 2),
			plan: "Roll 0, Roll 1, Hold 2",
		},
		"maxUnavailable 0 still rolls one": {
			groups: groupsOf(formedGroup(0, 2, "old"), formedGroup(1, 2, "old")), want: want(2, 0),
			plan: "Roll 0, Hold 1",
		},
		"groups at every stage: a group replaced and one starting take the budget": {
			groups: groupsOf(formedGroup(0, 2, "new"), emptyGroup(1, 2, "new"), startingGroup(2, 2, "new"),
				formedGroup(3, 2, "old"), formedGroup(4, 2, "old")),
			want: want(5, 2), plan: "Keep 0, Keep 1, Keep 2, Hold 3, Hold 4",
		},
		"groups at every stage: the budget left is spent": {
			groups: groupsOf(formedGroup(0, 2, "new"), startingGroup(1, 2, "new"), formedGroup(2, 2, "old"), formedGroup(3, 2, "old")),
			want:   want(4, 2), plan: "Keep 0, Keep 1, Roll 2, Hold 3",
		},
		"an outdated group that is down rolls at once, whatever the budget": {
			groups: groupsOf(startingGroup(0, 2, "new"), startingGroup(1, 2, "old"), formedGroup(2, 2, "old")), want: want(3, 1),
			plan: "Keep 0, Roll 1, Hold 2",
		},
		"an interrupted roll of a group that is down finishes at once": {
			groups: groupsOf(startingGroup(0, 2, "new"), func() *group {
				g := interruptedGroup(1, 2, "old", "new")
				g.pods = g.pods[:1]
				return g
			}(), formedGroup(2, 2, "old")),
			want: want(3, 1), plan: "Keep 0, Replace 1, Hold 2",
		},
		// A ready group whose pods are replaced takes the budget like a roll: before, the rest of
		// an interrupted roll took none, and a second group rolled beside it. The cache shows the
		// same when it has seen a roll's StatefulSet write but not yet its pod deletes.
		"the rest of an interrupted roll takes the budget": {
			groups: groupsOf(interruptedGroup(0, 2, "old", "new"), formedGroup(1, 2, "old")), want: want(2, 1),
			plan: "Replace 0, Hold 1",
		},
		"a shape change rolls the groups of the old shape within the budget": {
			// The new shape has 4 ranks per group; the groups of 2 are ready as they are.
			groups: groupsOf(formedGroup(0, 2, "old"), formedGroup(1, 2, "old"), formedGroup(2, 2, "old")), want: want(3, 1),
			plan: "Roll 0, Hold 1, Hold 2",
		},
		"a shape change: a group of the new shape counts as down until all its ranks are": {
			groups: groupsOf(func() *group {
				g := formedGroup(0, 2, "new")
				g.sts.Spec.Replicas = ptr.To(int32(4))
				return g
			}(), formedGroup(1, 2, "old")), want: want(2, 1),
			plan: "Keep 0, Hold 1",
		},
		"a lost rank: a failed pod recreates the group": {
			groups: groupsOf(func() *group {
				g := formedGroup(0, 2, "new")
				g.pods[1].Status.Phase = corev1.PodFailed
				return g
			}(), formedGroup(1, 2, "new")), want: want(2, 1),
			plan: "Recreate 0, Keep 1",
		},
		"a lost rank: a member replaced by a new pod recreates the group, even with the budget spent": {
			groups: groupsOf(func() *group {
				g := formedGroup(0, 2, "new")
				g.pods[1].UID = types.UID("someone-else")
				return g
			}(), emptyGroup(1, 2, "new")), want: want(2, 1),
			plan: "Recreate 0, Keep 1",
		},
		"a group that keeps failing waits out its backoff": {
			groups: groupsOf(recreatedGroup(0, "new", 3, 5*time.Second), formedGroup(1, 2, "new")), want: want(2, 1),
			plan: "Wait 0, Keep 1", requeue: 35 * time.Second,
		},
		"a group that keeps failing is recreated when its backoff ended": {
			groups: groupsOf(recreatedGroup(0, "new", 1, 20*time.Second)), want: want(1, 1),
			plan: "Recreate 0",
		},
		"the backoff stops growing at 5 minutes": {
			groups: groupsOf(recreatedGroup(0, "new", 30, time.Minute)), want: want(1, 1),
			plan: "Wait 0", requeue: 4 * time.Minute,
		},
		"the nearest end of several backoffs brings the reconcile back": {
			groups: groupsOf(recreatedGroup(0, "new", 2, 5*time.Second), recreatedGroup(1, "new", 1, 8*time.Second)), want: want(2, 1),
			plan: "Wait 0, Wait 1", requeue: 2 * time.Second,
		},
		"a formed group's members are recorded and its failures forgotten": {
			groups: groupsOf(func() *group {
				g := formedGroup(0, 2, "new")
				g.members = ""
				g.sts.Annotations[hicachev1alpha1.AnnotationRecreations] = "2"
				return g
			}()), want: want(1, 1),
			plan: "Remember 0",
		},
		"a group formed under an earlier release, recorded by its StatefulSet's annotation, is recorded in the status": {
			groups: groupsOf(formedGroup(0, 2, "new"), legacyFormedGroup(1, 2, "new")), want: want(2, 1),
			plan: "Keep 0, Remember 1",
		},
		"a group whose StatefulSet keeps the annotation beside the status's record loses it": {
			groups: groupsOf(func() *group {
				g := legacyFormedGroup(0, 2, "new")
				g.members = membersAnnotation(g.pods)
				return g
			}()), want: want(1, 1),
			plan: "Remember 0",
		},
		"a group an earlier release recorded is recreated, not recorded, when a rank was replaced": {
			groups: groupsOf(func() *group {
				g := legacyFormedGroup(0, 2, "new")
				g.pods[1].UID = "replaced"
				return g
			}()), want: want(1, 1),
			plan: "Recreate 0",
		},
		"scale up during a rollout: new groups take no budget": {
			groups: groupsOf(formedGroup(0, 2, "old"), formedGroup(1, 2, "old")), want: want(4, 1),
			plan: "Roll 0, Hold 1, Create 2, Create 3",
		},
		"scale down during a rollout: the groups that go free no budget and take none": {
			groups: groupsOf(formedGroup(0, 2, "old"), formedGroup(1, 2, "old"), emptyGroup(2, 2, "new"), startingGroup(3, 2, "new")),
			want:   want(2, 1), plan: "ScaleDown 3, ScaleDown 2, Roll 0, Hold 1",
		},
		"scale to zero": {
			groups: groupsOf(formedGroup(0, 2, "new"), formedGroup(1, 2, "new")), want: want(0, 1),
			plan: "ScaleDown 1, ScaleDown 0",
		},
		"a Fixed-namespace drain stops every group and starts none": {
			groups: groupsOf(formedGroup(0, 2, "old"), startingGroup(1, 2, "new"), recreatedGroup(2, "old", 3, 0)),
			want:   groupWant{roles: []roleWant{{replicas: 4, hashes: hashes(4, "new")}}, maxUnavailable: 1, stop: true},
			plan:   "Stop 2, Stop 1, Stop 0",
		},
		"a Fixed-namespace drain does not delete a group twice": {
			groups: groupsOf(formedGroup(0, 2, "old"), func() *group {
				g := formedGroup(1, 2, "old")
				g.sts.DeletionTimestamp = ptr.To(testsupport.T0)
				return g
			}()),
			want: groupWant{roles: []roleWant{{replicas: 2, hashes: hashes(2, "new")}}, stop: true},
			plan: "Stop 0",
		},
		"a namespace another layout holds stops only the groups writing it": {
			groups: groupsOf(writing(formedGroup(0, 2, "old"), "ns-a"), writing(formedGroup(1, 2, "new"), "ns-b"),
				writing(startingGroup(2, 2, "new"), "ns-b")),
			want: groupWant{roles: []roleWant{{replicas: 3, hashes: hashes(3, "new")}}, stop: true, stopNamespace: "ns-b"},
			plan: "Stop 2, Stop 1",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := planGroups(tc.groups, tc.want, testsupport.T0.Time)
			if got := describe(plan); got != tc.plan {
				t.Errorf("plan = %q, want %q", got, tc.plan)
			}
			if plan.requeueAfter != tc.requeue {
				t.Errorf("requeueAfter = %s, want %s", plan.requeueAfter, tc.requeue)
			}
		})
	}
}

// The history a plan writes: a roll and a replacement forget the members, a recreate counts the
// attempt at the time now, a formed group records its members (for the status) and forgets its
// failures; the StatefulSets lose the annotation that recorded members before the status did, and
// a group an earlier release recorded by that annotation alone is recorded in the status.
func TestPlanGroupsHistory(t *testing.T) {
	failing := recreatedGroup(0, "new", 2, time.Hour)
	formed := formedGroup(1, 2, "new")
	formed.members = ""
	formed.sts.Annotations[hicachev1alpha1.AnnotationRecreations] = "2"
	legacy := legacyFormedGroup(3, 2, "new")
	plan := planGroups(groupsOf(failing, formed, formedGroup(2, 2, "old"), legacy),
		groupWant{roles: []roleWant{{replicas: 4, hashes: hashes(4, "new")}}, maxUnavailable: 2}, testsupport.T0.Time)
	remembered := map[string]string{hicachev1alpha1.AnnotationMembers: "", hicachev1alpha1.AnnotationRecreations: "", hicachev1alpha1.AnnotationRecreatedAt: ""}
	want := map[GroupKey]map[string]string{
		{index: 0}: {hicachev1alpha1.AnnotationMembers: "", hicachev1alpha1.AnnotationRecreations: "3", hicachev1alpha1.AnnotationRecreatedAt: testsupport.T0.UTC().Format(time.RFC3339)},
		{index: 1}: remembered,
		{index: 2}: {hicachev1alpha1.AnnotationMembers: ""},
		{index: 3}: remembered,
	}
	if got := describe(plan); got != "Recreate 0, Remember 1, Roll 2, Remember 3" {
		t.Fatalf("plan = %q", got)
	}
	for _, a := range plan.actions {
		if fmt.Sprint(a.annotations) != fmt.Sprint(want[a.group]) {
			t.Errorf("%s %s writes %v, want %v", a.kind, a.group, a.annotations, want[a.group])
		}
		if wantMembers := map[GroupKey]string{{index: 1}: membersAnnotation(formed.pods), {index: 3}: membersAnnotation(legacy.pods)}[a.group]; a.members != wantMembers {
			t.Errorf("%s %s records members %q, want %q", a.kind, a.group, a.members, wantMembers)
		}
	}
	if why := plan.actions[0].why; !strings.Contains(why, "failed") {
		t.Errorf("the recreate says %q, want the failed pod named", why)
	}
}

// A whole rollout, round after round, through a cache that has seen each StatefulSet write at
// once but each pod change only one round later (the informer's lag): at no round are more
// groups down than spec.rollout.maxUnavailable, and the rollout finishes.
func TestPlanGroupsRolloutUnderCacheLag(t *testing.T) {
	for _, tc := range []struct{ groups, maxUnavailable, ranks int }{{4, 1, 2}, {5, 2, 2}, {3, 1, 1}} {
		t.Run(fmt.Sprintf("%d groups of %d, maxUnavailable %d", tc.groups, tc.ranks, tc.maxUnavailable), func(t *testing.T) {
			simulateRollout(t, []simRole{{groups: tc.groups, ranks: tc.ranks, from: "old", to: "new"}}, tc.maxUnavailable, nil)
		})
	}
}

// simRole is one role of a simulated rollout: its groups of ranks each move from template from
// to template to.
type simRole struct {
	role     hicachev1alpha1.Role
	groups   int
	ranks    int
	from, to string
	// startRounds is how many rounds a group's new pods take to become ready (at least 1).
	startRounds int
}

// simGroup is one group of a simulated rollout as the API holds it.
type simGroup struct {
	sts  *group       // the StatefulSet
	pods []corev1.Pod // the pods
	age  int          // rounds the pods have existed
}

// simulateRollout plays a rollout of the roles round after round through a cache that has seen
// each StatefulSet write at once but each pod change only one round later (the informer's
// lag); the StatefulSets recreate missing pods, which become ready a round after they start.
// At no round are more groups of a role down than spec.rollout.maxUnavailable, and the rollout
// finishes; check, when set, sees the API's groups after each round. It returns the rounds.
func simulateRollout(t *testing.T, roles []simRole, maxUnavailable int, check func(round int, plan groupPlan, w map[GroupKey]*simGroup)) int {
	t.Helper()
	w := map[GroupKey]*simGroup{}
	lagged := map[GroupKey][]corev1.Pod{}
	want := groupWant{maxUnavailable: maxUnavailable}
	ranks := map[hicachev1alpha1.Role]int{}
	start := map[hicachev1alpha1.Role]int{}
	for _, r := range roles {
		ranks[r.role], start[r.role] = r.ranks, max(r.startRounds, 1)
		hs := map[int]string{}
		for g := range r.groups {
			k := GroupKey{role: r.role, index: g}
			f := formedGroup(g, r.ranks, r.from)
			f.key = k
			for i := range f.pods {
				f.pods[i].Name = "g" + k.String() + "-" + strconv.Itoa(i)
				f.pods[i].UID = types.UID(f.pods[i].Name)
			}
			f.members = membersAnnotation(f.pods)
			w[k] = &simGroup{sts: f, pods: f.pods, age: 9}
			lagged[k] = f.pods
			hs[g] = r.to
		}
		want.roles = append(want.roles, roleWant{role: r.role, replicas: r.groups, hashes: hs})
	}
	uid := 0
	for round := range 60 {
		// What the cache shows: today's StatefulSets, last round's pods.
		seen := map[GroupKey]*group{}
		for k, ws := range w {
			seen[k] = &group{key: k, sts: ws.sts.sts.DeepCopy(), pods: lagged[k], members: ws.sts.members}
		}
		plan := planGroups(seen, want, testsupport.T0.Time)
		for k := range w {
			lagged[k] = w[k].pods
		}
		done := true
		for _, a := range plan.actions {
			ws := w[a.group]
			switch a.kind {
			case actRoll:
				ws.sts.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] = want.roles[slices.IndexFunc(want.roles, func(rw roleWant) bool { return rw.role == a.group.role })].hashes[a.group.index]
				ws.pods, ws.sts.members = nil, ""
			case actReplace, actRecreate:
				ws.pods, ws.sts.members = nil, ""
			case actRemember:
				ws.sts.members = a.members // the status written at the round's end
			}
			for k, v := range a.annotations {
				ws.sts.sts.Annotations[k] = v
			}
			if a.kind != actKeep {
				done = false
			}
		}
		down := map[hicachev1alpha1.Role]int{}
		for k, ws := range w {
			if !groupReady(&group{sts: ws.sts.sts, pods: ws.pods}, ranks[k.role]) {
				down[k.role]++
			}
		}
		for role, n := range down {
			if n > max(maxUnavailable, 1) {
				t.Fatalf("round %d: %d groups of role %q down after %q, spec.rollout.maxUnavailable is %d", round, n, role, describe(plan), maxUnavailable)
			}
		}
		if check != nil {
			check(round, plan, w)
		}
		if done && len(down) == 0 {
			for _, rw := range want.roles {
				for g := range rw.replicas {
					k := GroupKey{role: rw.role, index: g}
					if !groupCurrent(&group{sts: w[k].sts.sts, pods: w[k].pods}, rw.hashes[g]) {
						t.Fatalf("round %d: nothing left to do, but group %s is not current", round, k)
					}
				}
			}
			return round
		}
		for k, ws := range w {
			if ws.pods == nil {
				ws.age = 0
				for i := range ranks[k.role] {
					uid++
					ws.pods = append(ws.pods, makePod("g"+k.String(), i).UID(strconv.Itoa(uid)).Running().
						Hash(ws.sts.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash]).Obj())
				}
				continue
			}
			ws.age++
			if ws.age == start[k.role] {
				ready := make([]corev1.Pod, len(ws.pods))
				for i, p := range ws.pods {
					b := &podBuilder{p: *p.DeepCopy()}
					ready[i] = b.Ready().Obj()
				}
				ws.pods = ready
			}
		}
	}
	t.Fatal("the rollout did not finish in 60 rounds")
	return 0
}

// inRole puts a test group in a role.
func inRole(role hicachev1alpha1.Role, grp *group) *group {
	grp.key.role = role
	return grp
}

// roleWants is what a spec with roles asks: prefill groups of template prefillHash, decode
// groups of decodeHash.
func roleWants(prefill int, prefillHash string, decode int, decodeHash string, maxUnavailable int) groupWant {
	return groupWant{roles: []roleWant{
		{role: hicachev1alpha1.RolePrefill, replicas: prefill, hashes: hashes(prefill, prefillHash)},
		{role: hicachev1alpha1.RoleDecode, replicas: decode, hashes: hashes(decode, decodeHash)},
	}, maxUnavailable: maxUnavailable}
}

func TestPlanGroupsRoles(t *testing.T) {
	const P, D = hicachev1alpha1.RolePrefill, hicachev1alpha1.RoleDecode
	pf := func(g int, hash string) *group { return inRole(P, formedGroup(g, 1, hash)) }
	dc := func(g int, hash string) *group { return inRole(D, formedGroup(g, 2, hash)) }
	cases := map[string]struct {
		groups map[GroupKey]*group
		want   groupWant
		plan   string
		why    map[string]string // why a group is held
	}{
		"nothing exists: both roles are created at once": {
			groups: groupsOf(), want: roleWants(2, "p", 1, "d", 1),
			plan: "Create prefill-0, Create prefill-1, Create decode-0",
		},
		"a change of both templates rolls one group of each role together": {
			groups: groupsOf(pf(0, "p1"), pf(1, "p1"), dc(0, "d1")), want: roleWants(2, "p2", 1, "d2", 1),
			plan: "Roll prefill-0, Hold prefill-1, Roll decode-0",
		},
		"in step: a role that leads by the bound waits for the other, even with budget left": {
			// Prefill has rolled one group, decode none: prefill may not take a second lead,
			// though its budget allows it; decode's budget goes to its group that is down.
			groups: groupsOf(pf(0, "p2"), pf(1, "p1"), pf(2, "p1"), dc(0, "d1"), inRole(D, startingGroup(1, 2, "d1"))),
			want:   roleWants(3, "p2", 2, "d2", 1),
			plan:   "Keep prefill-0, Hold prefill-1, Hold prefill-2, Hold decode-0, Roll decode-1",
			why:    map[string]string{"prefill-1": whyInStep, "decode-0": whyBudget},
		},
		"in step with maxUnavailable 2: the bound is 2": {
			groups: groupsOf(pf(0, "p1"), pf(1, "p1"), pf(2, "p1"), pf(3, "p1"), dc(0, "d1"), dc(1, "d1")),
			want:   roleWants(4, "p2", 2, "d2", 2),
			plan:   "Roll prefill-0, Roll prefill-1, Hold prefill-2, Hold prefill-3, Roll decode-0, Roll decode-1",
		},
		"a role all of whose groups rolled holds the other back no more": {
			groups: groupsOf(pf(0, "p2"), pf(1, "p1"), pf(2, "p1"), dc(0, "d2")),
			want:   roleWants(3, "p2", 1, "d2", 2),
			plan:   "Keep prefill-0, Roll prefill-1, Roll prefill-2, Keep decode-0",
		},
		"a decode-only change rolls decode alone": {
			groups: groupsOf(pf(0, "p1"), pf(1, "p1"), dc(0, "d1"), dc(1, "d1")), want: roleWants(2, "p1", 2, "d2", 1),
			plan: "Keep prefill-0, Keep prefill-1, Roll decode-0, Hold decode-1",
		},
		"a prefill-only change rolls prefill alone, under its own budget": {
			groups: groupsOf(pf(0, "p1"), pf(1, "p1"), pf(2, "p1"), dc(0, "d1")), want: roleWants(3, "p2", 1, "d1", 2),
			plan: "Roll prefill-0, Roll prefill-1, Hold prefill-2, Keep decode-0",
		},
		"each role has its own budget: a decode group down does not hold prefill": {
			groups: groupsOf(pf(0, "p1"), pf(1, "p1"), dc(0, "d1"), inRole(D, startingGroup(1, 2, "d1"))),
			want:   roleWants(2, "p2", 2, "d1", 1),
			plan:   "Roll prefill-0, Hold prefill-1, Keep decode-0, Keep decode-1",
		},
		"scaling one role up creates its groups and touches nothing else": {
			groups: groupsOf(pf(0, "p1"), dc(0, "d1")), want: roleWants(3, "p1", 1, "d1", 1),
			plan: "Keep prefill-0, Create prefill-1, Create prefill-2, Keep decode-0",
		},
		"scaling one role down removes its last groups only": {
			groups: groupsOf(pf(0, "p1"), pf(1, "p1"), pf(2, "p1"), dc(0, "d1")), want: roleWants(1, "p1", 1, "d1", 1),
			plan: "ScaleDown prefill-2, ScaleDown prefill-1, Keep prefill-0, Keep decode-0",
		},
		"scaled-up groups of a breaking change count as rolled": {
			// Two new prefill groups start on the new template: prefill leads decode by 2 > 1, so
			// its old group waits while decode catches up.
			groups: groupsOf(pf(0, "p1"), dc(0, "d1"), dc(1, "d1")), want: roleWants(3, "p2", 2, "d2", 1),
			plan: "Hold prefill-0, Create prefill-1, Create prefill-2, Roll decode-0, Hold decode-1",
		},
		"a broken group of one role is recreated whatever the other does": {
			groups: groupsOf(pf(0, "p1"), func() *group {
				g := dc(0, "d1")
				g.pods[1].Status.Phase = corev1.PodFailed
				return g
			}(), dc(1, "d1")),
			want: roleWants(1, "p1", 2, "d1", 1),
			plan: "Keep prefill-0, Recreate decode-0, Keep decode-1",
		},
		"a broken group of one role during an in-step roll rolls at once and costs no budget": {
			groups: groupsOf(pf(0, "p1"), pf(1, "p1"), func() *group {
				g := dc(0, "d1")
				g.pods[1].Status.Phase = corev1.PodFailed
				return g
			}(), dc(1, "d1")),
			want: roleWants(2, "p2", 2, "d2", 1),
			plan: "Roll prefill-0, Hold prefill-1, Roll decode-0, Hold decode-1",
		},
		"groups of a deployment that gained roles go, the roles' groups are created": {
			groups: groupsOf(formedGroup(0, 1, "x"), formedGroup(1, 1, "x")), want: roleWants(1, "p", 1, "d", 1),
			plan: "ScaleDown 1, ScaleDown 0, Create prefill-0, Create decode-0",
		},
		"groups of roles a deployment no longer has go": {
			groups: groupsOf(pf(0, "p"), dc(0, "d")),
			want:   groupWant{roles: []roleWant{{replicas: 1, hashes: hashes(1, "x")}}, maxUnavailable: 1},
			plan:   "ScaleDown prefill-0, ScaleDown decode-0, Create 0",
		},
		"a namespace another layout holds stops the groups writing it, not a decode role without L3": {
			groups: groupsOf(writing(pf(0, "p"), "ns-a"), writing(pf(1, "p"), "ns-a"), dc(0, "d")),
			want:   groupWant{roles: roleWants(2, "p", 1, "d", 1).roles, stop: true, stopNamespace: "ns-a"},
			plan:   "Stop prefill-1, Stop prefill-0",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := planGroups(tc.groups, tc.want, testsupport.T0.Time)
			if got := describe(plan); got != tc.plan {
				t.Errorf("plan = %q, want %q", got, tc.plan)
			}
			for _, a := range plan.actions {
				if a.kind == actHold && a.why == "" {
					t.Errorf("%s is held without a reason", a.group)
				}
				if want, ok := tc.why[a.group.String()]; ok && a.why != want {
					t.Errorf("%s is held because %q, want %q", a.group, a.why, want)
				}
			}
		})
	}
}

// rolledCounts counts, per role, the groups whose StatefulSet runs the role's new template.
func rolledCounts(w map[GroupKey]*simGroup, to map[hicachev1alpha1.Role]string) map[hicachev1alpha1.Role]int {
	out := map[hicachev1alpha1.Role]int{}
	for k, ws := range w {
		if ws.sts.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] == to[k.role] {
			out[k.role]++
		}
	}
	return out
}

// A change of both roles' templates, played round after round through the informer's lag: after
// every round the count of rolled groups of one role leads the other's by at most the skew bound
// max(1, maxUnavailable) while both still have groups to roll, neither role has more groups
// down than its budget, and the rollout finishes.
func TestPlanGroupsRolesRollInStep(t *testing.T) {
	const P, D = hicachev1alpha1.RolePrefill, hicachev1alpha1.RoleDecode
	// Groups of one role may take longer to start than the other's: without the rule the faster
	// role runs ahead.
	for _, tc := range []struct{ prefill, decode, maxUnavailable, prefillStart, decodeStart int }{
		{2, 1, 1, 1, 1}, {4, 2, 1, 1, 8}, {6, 3, 2, 1, 8}, {1, 4, 1, 1, 1}, {8, 8, 3, 1, 6}, {3, 3, 0, 8, 1}, {4, 4, 1, 1, 8},
	} {
		t.Run(fmt.Sprintf("prefill %d (start %d) decode %d (start %d) maxUnavailable %d", tc.prefill, tc.prefillStart, tc.decode, tc.decodeStart, tc.maxUnavailable), func(t *testing.T) {
			to := map[hicachev1alpha1.Role]string{P: "p2", D: "d2"}
			n := map[hicachev1alpha1.Role]int{P: tc.prefill, D: tc.decode}
			bound := max(tc.maxUnavailable, 1)
			rounds := simulateRollout(t, []simRole{
				{role: P, groups: tc.prefill, ranks: 1, from: "p1", to: "p2", startRounds: tc.prefillStart},
				{role: D, groups: tc.decode, ranks: 2, from: "d1", to: "d2", startRounds: tc.decodeStart},
			}, tc.maxUnavailable, func(round int, plan groupPlan, w map[GroupKey]*simGroup) {
				c := rolledCounts(w, to)
				if c[P] == n[P] || c[D] == n[D] {
					return // one role is done: the other finishes under its own budget
				}
				if c[P]-c[D] > bound || c[D]-c[P] > bound {
					t.Fatalf("round %d: %q leaves %d prefill and %d decode groups rolled, more apart than the bound %d", round, describe(plan), c[P], c[D], bound)
				}
			})
			t.Logf("done in %d rounds", rounds)
		})
	}
}

// A change of one role's template rolls that role alone: the other's groups are only kept.
func TestPlanGroupsOneRoleRollsAlone(t *testing.T) {
	const P, D = hicachev1alpha1.RolePrefill, hicachev1alpha1.RoleDecode
	for name, roles := range map[string][]simRole{
		"decode only":  {{role: P, groups: 2, ranks: 1, from: "p1", to: "p1"}, {role: D, groups: 3, ranks: 2, from: "d1", to: "d2"}},
		"prefill only": {{role: P, groups: 3, ranks: 1, from: "p1", to: "p2"}, {role: D, groups: 1, ranks: 2, from: "d1", to: "d1"}},
	} {
		t.Run(name, func(t *testing.T) {
			still := roles[0].role
			if roles[0].from != roles[0].to {
				still = roles[1].role
			}
			simulateRollout(t, roles, 1, func(round int, plan groupPlan, _ map[GroupKey]*simGroup) {
				for _, a := range plan.actions {
					if a.group.role == still && a.kind != actKeep {
						t.Fatalf("round %d: %s of the unchanged %s role in %q", round, a.kind, still, describe(plan))
					}
				}
			})
		})
	}
}
