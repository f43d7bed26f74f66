package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

// The upgrade from the release that recorded a formed group's members in its StatefulSet's
// annotation hicache.io/members to this one, which records them in status.formedGroups.
//
// What that release left is made as it made it: it wrote the annotation, "<rank>=<pod UID>,..."
// by pod index, in a JSON merge patch of its own under the field owner hicache-operator-members
// (its setGroupAnnotations), and its status had no formedGroups; it rendered the same
// StatefulSets, Services and status otherwise. So this release creates a Ready deployment of two
// groups, is stopped, and the test writes the annotations that way and removes formedGroups from
// the status before this release starts again.
//
// It must take the groups over as they are: no pod replaced or restarted; every group recorded
// in status.formedGroups with the pods it formed with, the annotation then removed (the status is
// the one record, as for a group formed under this release); and a rank replaced afterwards has
// its whole group recreated, as on a deployment made by this release.
func TestUpgradeFromMembersAnnotationsRecordsEveryGroupAndRestartsNone(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	h := dsv4(ns)
	h.Spec.Replicas = ptr.To(int32(2))
	create(t, h)
	waitReadyGroups(t, ns, "dsv4", 2)
	sets := groups(t, ns, "dsv4")
	if len(sets) != 2 {
		t.Fatalf("%d StatefulSets, want 2", len(sets))
	}
	before := map[string][]corev1.Pod{}
	for _, p := range rankPods(t, ns, "dsv4") {
		sts := "dsv4-" + p.Labels[hicachev1alpha1.LabelGroup]
		before[sts] = append(before[sts], p)
	}
	for _, s := range sets {
		if len(before[s.Name]) != 2 {
			t.Fatalf("group %s has %d pods, want 2", s.Name, len(before[s.Name]))
		}
	}

	whileManagerStopped(t, func() {
		ctx := context.Background()
		for i := range sets {
			s := &sets[i]
			base := s.DeepCopy()
			s.Annotations[hicachev1alpha1.AnnotationMembers] = membersOf(before[s.Name])
			if err := k8s.Patch(ctx, s, client.MergeFrom(base), client.FieldOwner(storeuse.FieldOwner+"-members")); err != nil {
				t.Fatalf("writing the members annotation of %s: %v", s.Name, err)
			}
		}
		if err := k8s.Status().Patch(ctx, getHCD(t, ns, "dsv4"), client.RawPatch(types.MergePatchType, []byte(`{"status":{"formedGroups":null}}`))); err != nil {
			t.Fatalf("removing status.formedGroups: %v", err)
		}
		if got := getHCD(t, ns, "dsv4"); len(got.Status.FormedGroups) != 0 || got.Status.ReadyReplicas != 2 {
			t.Fatalf("the status the earlier release left has %d formedGroups and %d ready groups, want 0 and 2", len(got.Status.FormedGroups), got.Status.ReadyReplicas)
		}
	})
	mark, started := len(operatorWritesIn(ns)), time.Now()
	stsWrites := map[string]int{}
	for _, s := range sets {
		stsWrites[s.Name] = len(operatorWritesTo(ns, "statefulsets/"+s.Name))
	}

	eventually(t, 30*time.Second, "every group recorded in status.formedGroups with the pods it formed with", func() (bool, string) {
		h := getHCD(t, ns, "dsv4")
		for _, s := range sets {
			if ok, msg := formedWith(h, s.Name, before[s.Name]); !ok {
				return false, msg
			}
		}
		return len(h.Status.FormedGroups) == len(sets), fmt.Sprintf("%d records", len(h.Status.FormedGroups))
	})
	t.Logf("every group recorded in the status %v after the start", time.Since(started).Round(10*time.Millisecond))
	eventually(t, 30*time.Second, "the members annotations removed", func() (bool, string) {
		for _, s := range groups(t, ns, "dsv4") {
			if v, ok := s.Annotations[hicachev1alpha1.AnnotationMembers]; ok {
				return false, fmt.Sprintf("%s still has %s=%s", s.Name, hicachev1alpha1.AnnotationMembers, v)
			}
		}
		return true, ""
	})

	// A few seconds on, nothing was replaced, restarted or rolled.
	time.Sleep(3 * time.Second)
	waitReadyGroups(t, ns, "dsv4", 2)
	now := groups(t, ns, "dsv4")
	for i, s := range sets {
		if now[i].UID != s.UID || now[i].Generation != s.Generation ||
			now[i].Annotations[hicachev1alpha1.AnnotationTemplateHash] != s.Annotations[hicachev1alpha1.AnnotationTemplateHash] {
			t.Errorf("StatefulSet %s changed across the upgrade: uid %s generation %d template %s, before %s %d %s", s.Name,
				now[i].UID, now[i].Generation, now[i].Annotations[hicachev1alpha1.AnnotationTemplateHash],
				s.UID, s.Generation, s.Annotations[hicachev1alpha1.AnnotationTemplateHash])
		}
		checkSamePods(t, ns, before[s.Name])
	}
	if n := countEvents(t, ns, "dsv4", hicachev1alpha1.ReasonGroupRecreated); n != 0 {
		t.Errorf("%d GroupRecreated events across the upgrade, want none", n)
	}
	writes := operatorWritesIn(ns)[mark:]
	for _, s := range sets {
		if n := len(operatorWritesTo(ns, "statefulsets/"+s.Name)) - stsWrites[s.Name]; n != 1 {
			t.Errorf("StatefulSet %s written %d times since the start, want once (to remove the annotation)", s.Name, n)
		}
	}
	for _, w := range writes {
		if strings.HasPrefix(w, "DELETE ") || strings.Contains(w, "/pods/") {
			t.Errorf("the operator wrote %s across the upgrade", w)
		}
	}
	t.Logf("the operator's writes to the namespace since the start: %v", writes)

	// Rank 1 of group 0 is replaced: group 0 is recreated whole, from the record in the status;
	// group 1 is not touched.
	replaceRankAndWaitRecreated(t, ns, "dsv4", 2, before["dsv4-0"])
	checkSamePods(t, ns, before["dsv4-1"])
	if ok, msg := formedWith(getHCD(t, ns, "dsv4"), "dsv4-1", before["dsv4-1"]); !ok {
		t.Errorf("group 1, untouched: %s", msg)
	}
}

// checkSamePods checks that the group of pods before still runs those very pods, none restarted.
func checkSamePods(t *testing.T, ns string, before []corev1.Pod) {
	t.Helper()
	now := groupPods(t, ns, before[0])
	if membersOf(now) != membersOf(before) {
		t.Errorf("the pods of group %s are %s, were %s", before[0].Labels[hicachev1alpha1.LabelGroup], membersOf(now), membersOf(before))
	}
	for _, p := range now {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("container %s of pod %s restarted %d times", cs.Name, p.Name, cs.RestartCount)
			}
		}
	}
}
