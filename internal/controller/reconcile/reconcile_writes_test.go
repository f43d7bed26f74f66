package reconcile

import (
	"context"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
			w := &StatusWrites{M: map[types.NamespacedName]statusWrite{}}
			for _, wr := range tc.writes {
				w.wrote(context.Background(), at(wr.rv, "0/1 written at "+wr.rv), wr.replaced)
			}
			got := tc.cached.DeepCopy()
			w.readYourWrite(got)
			if got.Status.Ready != tc.want {
				t.Errorf("read status %q, want %q", got.Status.Ready, tc.want)
			}
			if tc.want == tc.cached.Status.Ready && len(tc.writes) > 0 {
				if _, kept := w.M[types.NamespacedName{Namespace: "n", Name: "d"}]; kept {
					t.Errorf("the write is still remembered once the cache moved past it")
				}
			}
		})
	}
}

// cacheAt is a cache that holds one object, or none.
type cacheAt struct{ obj client.Object }

func (c cacheAt) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if c.obj == nil || client.ObjectKeyFromObject(c.obj) != key {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "hicachedeployments"}, key.Name)
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(c.obj.DeepCopyObject()).Elem())
	return nil
}

func (cacheAt) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// A write is remembered only until the cache holds it, or anything after it, or the object is
// gone: whether the cache's event comes before the write returns or after.
func TestStatusWriteForgottenWhenTheCacheCatchesUp(t *testing.T) {
	at := func(uid, rv string) *hicachev1alpha1.HiCacheDeployment {
		return &hicachev1alpha1.HiCacheDeployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "n", UID: types.UID(uid), ResourceVersion: rv,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "hicache-operator"}}}}
	}
	tests := map[string]struct {
		// cachedAtWrite is what the cache holds when the write returns (nil: nothing).
		cachedAtWrite *hicachev1alpha1.HiCacheDeployment
		// events are what the cache's event handler is given after the write.
		events []client.Object
		// deleted: the cache's handler sees the object deleted.
		deleted bool
		kept    bool
	}{
		"the cache still holds what was written over":       {cachedAtWrite: at("u1", "1"), kept: true},
		"the cache held the write before it returned":       {cachedAtWrite: at("u1", "2")},
		"the cache held a later write before it returned":   {cachedAtWrite: at("u1", "3")},
		"the object was gone from the cache at the write":   {},
		"another object of the name in the cache":           {cachedAtWrite: at("u2", "1")},
		"the cache's event of the write comes after it":     {cachedAtWrite: at("u1", "1"), events: []client.Object{at("u1", "2")}},
		"an event of the version written over changes none": {cachedAtWrite: at("u1", "1"), events: []client.Object{at("u1", "1")}, kept: true},
		"the cache's event of another object's write":       {cachedAtWrite: at("u1", "1"), events: []client.Object{func() client.Object { h := at("u1", "7"); h.Name = "e"; return h }()}, kept: true},
		"the object deleted before the cache caught up":     {cachedAtWrite: at("u1", "1"), deleted: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := cacheAt{}
			if tc.cachedAtWrite != nil {
				c.obj = tc.cachedAtWrite
			}
			w := &StatusWrites{cache: c, M: map[types.NamespacedName]statusWrite{}}
			w.wrote(context.Background(), at("u1", "2"), "1")
			for _, e := range tc.events {
				w.cached(e)
			}
			if tc.deleted {
				w.forget(types.NamespacedName{Namespace: "n", Name: "d"})
			}
			last, kept := w.M[types.NamespacedName{Namespace: "n", Name: "d"}]
			if kept != tc.kept {
				t.Fatalf("the write kept: %v, want %v", kept, tc.kept)
			}
			if kept && last.obj.GetManagedFields() != nil {
				t.Errorf("the write is kept with its managedFields, which the cache does not hold and no reconciler reads")
			}
		})
	}
	// A reconciler without a cache (a unit test's) remembers nothing, and reads what it is given.
	var none *StatusWrites
	none.wrote(context.Background(), at("u1", "2"), "1")
	read := at("u1", "1")
	none.readYourWrite(read)
	none.forget(types.NamespacedName{Namespace: "n", Name: "d"})
	if read.ResourceVersion != "1" {
		t.Errorf("a nil statusWrites read %s", read.ResourceVersion)
	}
}
