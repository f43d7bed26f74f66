package controllers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
