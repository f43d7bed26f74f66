package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

func TestReadYourStatusWrite(t *testing.T) {
	at := func(rv, ready string) *hicachev1alpha1.HiCacheDeployment {
		return &hicachev1alpha1.HiCacheDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "n", UID: "u1", ResourceVersion: rv},
			Status:     hicachev1alpha1.HiCacheDeploymentStatus{Ready: ready},
		}
	}
	tests := map[string]struct {
		writes []struct{ replaced, rv string }
		cached *hicachev1alpha1.HiCacheDeployment
		want   string // the status read
	}{
		"no write: the cache":                         {cached: at("1", "1/1"), want: "1/1"},
		"the cache still holds what was written over": {writes: []struct{ replaced, rv string }{{"1", "2"}}, cached: at("1", "1/1"), want: "0/1 written at 2"},
		"the cache caught up":                         {writes: []struct{ replaced, rv string }{{"1", "2"}}, cached: at("2", "0/1 written at 2"), want: "0/1 written at 2"},
		"someone wrote after us":                      {writes: []struct{ replaced, rv string }{{"1", "2"}}, cached: at("3", "theirs"), want: "theirs"},
		"two writes in one reconcile, cache at the first version": {
			writes: []struct{ replaced, rv string }{{"1", "2"}, {"2", "3"}}, cached: at("1", "1/1"), want: "0/1 written at 3"},
		"two writes, cache at the middle version": {
			writes: []struct{ replaced, rv string }{{"1", "2"}, {"2", "3"}}, cached: at("2", "0/1 written at 2"), want: "0/1 written at 3"},
		"another object of the same name": {
			writes: []struct{ replaced, rv string }{{"1", "2"}},
			cached: func() *hicachev1alpha1.HiCacheDeployment { h := at("1", "new object"); h.UID = "u2"; return h }(), want: "new object"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := &statusWrites{m: map[string]statusWrite{}}
			for _, wr := range tc.writes {
				w.wrote(at(wr.rv, "0/1 written at "+wr.rv), wr.replaced)
			}
			got := tc.cached.DeepCopy()
			w.readYourWrite(got)
			if got.Status.Ready != tc.want {
				t.Errorf("read status %q, want %q", got.Status.Ready, tc.want)
			}
			if tc.want == tc.cached.Status.Ready && len(tc.writes) > 0 {
				if _, kept := w.m[writeKey(got, types.NamespacedName{Namespace: "n", Name: "d"})]; kept {
					t.Errorf("the write is still remembered once the cache moved past it")
				}
			}
		})
	}
}
