package hicachedeployment

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

func TestGroupBroken(t *testing.T) {
	leader := makePod("g0", 0).UID("a").Ready()
	follower := makePod("g0", 1).UID("b").Ready()
	formed := "0=a,1=b"
	cases := map[string]struct {
		grp *group
		// wantWhy is "" for a healthy group, else a phrase of the reason.
		wantWhy string
	}{
		"a formed, healthy group": {grp: groupOf(0, "h", formed, leader.Obj(), follower.Obj())},
		"a failed pod": {
			grp: groupOf(0, "h", formed, leader.Obj(), makePod("g0", 1).UID("b").Failed().Obj()), wantWhy: "pod g0-1 failed",
		},
		"a restarted container": {
			grp: groupOf(0, "h", formed, leader.Obj(), makePod("g0", 1).UID("b").Running().Restarted(1).Obj()), wantWhy: "container sglang of pod g0-1 restarted",
		},
		"a member replaced by a new pod": {
			grp: groupOf(0, "h", formed, leader.Obj(), makePod("g0", 1).UID("c").Obj()), wantWhy: "pod g0-1 was replaced",
		},
		"a replaced leader": {
			grp: groupOf(0, "h", formed, makePod("g0", 0).UID("z").Ready().Obj(), follower.Obj()), wantWhy: "pod g0-0 was replaced",
		},
		"a member still missing is no replacement": {grp: groupOf(0, "h", formed, leader.Obj())},
		"a fresh group without members":            {grp: groupOf(0, "h", "", makePod("g0", 0).UID("x").Obj(), makePod("g0", 1).UID("y").Obj())},
		"an ordinal the record does not know":      {grp: groupOf(0, "h", "0=a", leader.Obj(), makePod("g0", 1).UID("new").Obj())},
		"a malformed record is ignored":            {grp: groupOf(0, "h", ",,garbage,", leader.Obj(), follower.Obj())},
		"an empty group":                           {grp: groupOf(0, "h", formed)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			broken, why := groupBroken(tc.grp)
			if broken != (tc.wantWhy != "") {
				t.Fatalf("groupBroken = %v (%q), want %v", broken, why, tc.wantWhy != "")
			}
			if !strings.Contains(why, tc.wantWhy) {
				t.Errorf("why = %q, want it to say %q", why, tc.wantWhy)
			}
		})
	}
}

func TestGroupReady(t *testing.T) {
	ready := func(i int) corev1.Pod { return makePod("g0", i).Ready().Obj() }
	noCondition := makePod("g0", 1).Obj()
	noCondition.Status.Phase = corev1.PodRunning
	cases := map[string]struct {
		grp  *group
		want bool
	}{
		"no group":                  {grp: nil},
		"every rank ready":          {grp: groupOf(0, "h", "", ready(0), ready(1)), want: true},
		"a rank missing":            {grp: groupOf(0, "h", "", ready(0))},
		"a rank too many":           {grp: groupOf(0, "h", "", ready(0), ready(1), ready(2))},
		"a rank running, not ready": {grp: groupOf(0, "h", "", ready(0), makePod("g0", 1).Running().Obj())},
		"a rank without conditions": {grp: groupOf(0, "h", "", ready(0), noCondition)},
		"a rank pending":            {grp: groupOf(0, "h", "", ready(0), makePod("g0", 1).Obj())},
		"ready but failed phase": {grp: func() *group {
			p := ready(1)
			p.Status.Phase = corev1.PodFailed
			return groupOf(0, "h", "", ready(0), p)
		}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := groupReady(tc.grp, 2); got != tc.want {
				t.Errorf("groupReady = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGroupCurrent(t *testing.T) {
	pod := func(i int, hash string) corev1.Pod { return makePod("g0", i).Ready().Hash(hash).Obj() }
	cases := map[string]struct {
		grp  *group
		want bool
	}{
		"no group":                          {grp: nil},
		"every pod and the StatefulSet":     {grp: groupOf(0, "new", "", pod(0, "new"), pod(1, "new")), want: true},
		"a StatefulSet of the old template": {grp: groupOf(0, "old", "", pod(0, "new"), pod(1, "new"))},
		"a pod of the old template":         {grp: groupOf(0, "new", "", pod(0, "new"), pod(1, "old"))},
		"a pod without a hash":              {grp: groupOf(0, "new", "", pod(0, "new"), makePod("g0", 1).Obj())},
		"no pods yet":                       {grp: groupOf(0, "new", ""), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := groupCurrent(tc.grp, "new"); got != tc.want {
				t.Errorf("groupCurrent = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSplitNonEmpty(t *testing.T) {
	cases := map[string]struct {
		in   string
		want []string
	}{
		"empty":            {in: "", want: nil},
		"one":              {in: "a", want: []string{"a"}},
		"several":          {in: "a,b,c", want: []string{"a", "b", "c"}},
		"empty parts drop": {in: ",a,,b,", want: []string{"a", "b"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := splitNonEmpty(tc.in, ',')
			if len(got) != len(tc.want) {
				t.Fatalf("splitNonEmpty(%q) = %q, want %q", tc.in, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("splitNonEmpty(%q) = %q, want %q", tc.in, got, tc.want)
				}
			}
		})
	}
}

func TestRecreateBackoff(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sts := func(count string, ago time.Duration) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if count != "" {
			s.Annotations[hicachev1alpha1.AnnotationRecreations] = count
			s.Annotations[hicachev1alpha1.AnnotationRecreatedAt] = now.Add(-ago).Format(time.RFC3339)
		}
		return s
	}
	cases := map[string]struct {
		sts       *appsv1.StatefulSet
		wantCount int
		wantWait  time.Duration
	}{
		"never recreated: at once":                  {sts: sts("", 0), wantCount: 0, wantWait: 0},
		"recreated once, 4 s ago: 6 s more":         {sts: sts("1", 4*time.Second), wantCount: 1, wantWait: 6 * time.Second},
		"recreated once, long ago: at once":         {sts: sts("1", time.Hour), wantCount: 1, wantWait: 0},
		"recreated three times, just now: 40 s":     {sts: sts("3", 0), wantCount: 3, wantWait: 40 * time.Second},
		"recreated many times: capped at 5 minutes": {sts: sts("30", 0), wantCount: 30, wantWait: 5 * time.Minute},
		"an unreadable time counts as long ago": {sts: func() *appsv1.StatefulSet {
			s := sts("2", 0)
			s.Annotations[hicachev1alpha1.AnnotationRecreatedAt] = "yesterday"
			return s
		}(), wantCount: 2, wantWait: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			count, wait := recreateBackoff(tc.sts, now)
			if count != tc.wantCount || wait != tc.wantWait {
				t.Errorf("recreateBackoff = %d, %s; want %d, %s", count, wait, tc.wantCount, tc.wantWait)
			}
		})
	}
}

func TestFormedGroupMembers(t *testing.T) {
	sts := func(uid, hash, recreations, annotation string) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "d-0", UID: types.UID(uid),
			Annotations: map[string]string{hicachev1alpha1.AnnotationTemplateHash: hash}}}
		if recreations != "" {
			s.Annotations[hicachev1alpha1.AnnotationRecreations] = recreations
		}
		if annotation != "" {
			s.Annotations[hicachev1alpha1.AnnotationMembers] = annotation
		}
		return s
	}
	formedUnder := func(s *appsv1.StatefulSet, pods string) []hicachev1alpha1.FormedGroup {
		return []hicachev1alpha1.FormedGroup{{Name: "other", Revision: "r", Pods: "0=x"}, {Name: s.Name, Revision: groupRevision(s), Pods: pods}}
	}
	cur := sts("u1", "h1", "", "")
	cases := map[string]struct {
		formed []hicachev1alpha1.FormedGroup
		sts    *appsv1.StatefulSet
		want   string
	}{
		"recorded under the current revision":                             {formed: formedUnder(cur, "0=a,1=b"), sts: cur, want: "0=a,1=b"},
		"no record":                                                       {sts: cur},
		"another group's record only":                                     {formed: formedUnder(sts("u1", "h1", "", ""), "0=a")[:1], sts: cur},
		"a StatefulSet made again under the same name":                    {formed: formedUnder(cur, "0=a,1=b"), sts: sts("u2", "h1", "", "")},
		"a template rolled since":                                         {formed: formedUnder(cur, "0=a,1=b"), sts: sts("u1", "h2", "", "")},
		"a recreation since":                                              {formed: formedUnder(cur, "0=a,1=b"), sts: sts("u1", "h1", "1", "")},
		"recorded after a recreation, its count cleared":                  {formed: formedUnder(sts("u1", "h1", "", ""), "0=c,1=d"), sts: sts("u1", "h1", "", ""), want: "0=c,1=d"},
		"the annotation of a group formed before the status held records": {sts: sts("u1", "h1", "", "0=a,1=b"), want: "0=a,1=b"},
		"a record in the status is newer than the annotation":             {formed: formedUnder(sts("u1", "h1", "", "0=a,1=b"), "0=c,1=d"), sts: sts("u1", "h1", "", "0=a,1=b"), want: "0=c,1=d"},
		"a void record in the status voids the annotation too":            {formed: formedUnder(cur, "0=c,1=d"), sts: sts("u1", "h2", "", "0=a,1=b")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := formedGroupMembers(tc.formed, tc.sts); got != tc.want {
				t.Errorf("formedGroupMembers = %q, want %q", got, tc.want)
			}
		})
	}
}
