package controllers

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
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
	grp.sts.Annotations[hicachev1alpha1.AnnotationRecreatedAt] = t0.Add(-ago).UTC().Format(time.RFC3339)
	return grp
}

// writing makes a group's pods write the L3 namespace ns.
func writing(grp *group, ns string) *group {
	grp.sts.Spec.Template.Labels = map[string]string{hicachev1alpha1.LabelCacheNamespace: ns}
	return grp
}

func groupsOf(gs ...*group) map[int]*group {
	m := map[int]*group{}
	for _, g := range gs {
		m[g.index] = g
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
		parts = append(parts, fmt.Sprintf("%s %d", a.kind, a.group))
	}
	return strings.Join(parts, ", ")
}

func TestPlanGroups(t *testing.T) {
	want := func(replicas, maxUnavailable int) groupWant {
		return groupWant{replicas: replicas, hashes: hashes(replicas, "new"), maxUnavailable: maxUnavailable}
	}
	cases := map[string]struct {
		groups  map[int]*group
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
				g.sts.Annotations[hicachev1alpha1.AnnotationMembers] = ""
				g.sts.Annotations[hicachev1alpha1.AnnotationRecreations] = "2"
				return g
			}()), want: want(1, 1),
			plan: "Remember 0",
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
			want:   groupWant{replicas: 4, hashes: hashes(4, "new"), maxUnavailable: 1, stop: true},
			plan:   "Stop 2, Stop 1, Stop 0",
		},
		"a Fixed-namespace drain does not delete a group twice": {
			groups: groupsOf(formedGroup(0, 2, "old"), func() *group {
				g := formedGroup(1, 2, "old")
				g.sts.DeletionTimestamp = ptr.To(t0)
				return g
			}()),
			want: groupWant{replicas: 2, hashes: hashes(2, "new"), stop: true},
			plan: "Stop 0",
		},
		"a namespace another layout holds stops only the groups writing it": {
			groups: groupsOf(writing(formedGroup(0, 2, "old"), "ns-a"), writing(formedGroup(1, 2, "new"), "ns-b"),
				writing(startingGroup(2, 2, "new"), "ns-b")),
			want: groupWant{replicas: 3, hashes: hashes(3, "new"), stop: true, stopNamespace: "ns-b"},
			plan: "Stop 2, Stop 1",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := planGroups(tc.groups, tc.want, t0.Time)
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
// attempt at the time now, a formed group records its members and forgets its failures.
func TestPlanGroupsHistory(t *testing.T) {
	failing := recreatedGroup(0, "new", 2, time.Hour)
	formed := formedGroup(1, 2, "new")
	formed.sts.Annotations[hicachev1alpha1.AnnotationMembers] = ""
	formed.sts.Annotations[hicachev1alpha1.AnnotationRecreations] = "2"
	plan := planGroups(groupsOf(failing, formed, formedGroup(2, 2, "old")),
		groupWant{replicas: 3, hashes: hashes(3, "new"), maxUnavailable: 2}, t0.Time)
	want := map[int]map[string]string{
		0: {hicachev1alpha1.AnnotationMembers: "", hicachev1alpha1.AnnotationRecreations: "3", hicachev1alpha1.AnnotationRecreatedAt: t0.UTC().Format(time.RFC3339)},
		1: {hicachev1alpha1.AnnotationMembers: membersAnnotation(formed.pods), hicachev1alpha1.AnnotationRecreations: "", hicachev1alpha1.AnnotationRecreatedAt: ""},
		2: {hicachev1alpha1.AnnotationMembers: ""},
	}
	if got := describe(plan); got != "Recreate 0, Remember 1, Roll 2" {
		t.Fatalf("plan = %q", got)
	}
	for _, a := range plan.actions {
		if fmt.Sprint(a.annotations) != fmt.Sprint(want[a.group]) {
			t.Errorf("%s %d writes %v, want %v", a.kind, a.group, a.annotations, want[a.group])
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
			type world struct {
				sts  *group       // the StatefulSet as the API holds it
				pods []corev1.Pod // the pods as the API holds them
				age  int          // rounds the pods have existed
			}
			w := make([]*world, tc.groups)
			lagged := make([][]corev1.Pod, tc.groups)
			for g := range w {
				f := formedGroup(g, tc.ranks, "old")
				w[g] = &world{sts: f, pods: f.pods, age: 9}
				lagged[g] = f.pods
			}
			uid := 0
			want := groupWant{replicas: tc.groups, hashes: hashes(tc.groups, "new"), maxUnavailable: tc.maxUnavailable}
			for round := range 40 {
				// What the cache shows: today's StatefulSets, last round's pods.
				seen := map[int]*group{}
				for g := range w {
					sts := w[g].sts.sts.DeepCopy()
					seen[g] = &group{index: g, sts: sts, pods: lagged[g]}
				}
				plan := planGroups(seen, want, t0.Time)
				for g := range w {
					lagged[g] = w[g].pods
				}
				done := true
				for _, a := range plan.actions {
					ws := w[a.group]
					switch a.kind {
					case actRoll:
						ws.sts.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] = "new"
						ws.pods = nil
					case actReplace, actRecreate:
						ws.pods = nil
					case actKeep, actRemember:
					default:
						done = false
					}
					for k, v := range a.annotations {
						ws.sts.sts.Annotations[k] = v
					}
					if a.kind != actKeep {
						done = false
					}
				}
				down := 0
				for g := range w {
					if !groupReady(&group{sts: w[g].sts.sts, pods: w[g].pods}, tc.ranks) {
						down++
					}
				}
				if down > max(tc.maxUnavailable, 1) {
					t.Fatalf("round %d: %d groups down after %q, spec.rollout.maxUnavailable is %d", round, down, describe(plan), tc.maxUnavailable)
				}
				if done && down == 0 {
					for g := range w {
						if !groupCurrent(&group{sts: w[g].sts.sts, pods: w[g].pods}, "new") {
							t.Fatalf("round %d: nothing left to do, but group %d is not current", round, g)
						}
					}
					return
				}
				// The StatefulSets recreate missing pods; pods become ready a round after they start.
				for g := range w {
					ws := w[g]
					if ws.pods == nil {
						ws.age = 0
						for i := range tc.ranks {
							uid++
							ws.pods = append(ws.pods, makePod("g"+strconv.Itoa(g), i).UID(strconv.Itoa(uid)).Running().
								Hash(ws.sts.sts.Annotations[hicachev1alpha1.AnnotationTemplateHash]).Obj())
						}
						continue
					}
					ws.age++
					if ws.age == 1 {
						ready := make([]corev1.Pod, len(ws.pods))
						for i, p := range ws.pods {
							b := &podBuilder{p: *p.DeepCopy()}
							ready[i] = b.Ready().Obj()
						}
						ws.pods = ready
					}
				}
			}
			t.Fatal("the rollout did not finish in 40 rounds")
		})
	}
}
