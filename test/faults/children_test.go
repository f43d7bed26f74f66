package faults

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// restoreBound is how soon a deleted or disowned child must be back.
const restoreBound = 10 * time.Second

// Every child a deployment owns is deleted, one at a time, and then stripped of its owner
// references, one at a time: each is back (a new object, or its owner reference again) within
// 10 s, and the deployment converges with no duplicate and no orphan. The admin key's Secret is
// the exception the operator's RBAC makes: it is read by name only (get, no list or watch), so a
// change to it is seen at the deployment's next reconcile, which the next fault here causes; it
// must be back by the time that fault is repaired.
func TestDeletedAndDisownedChildrenAreRestored(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	withBackend(t, ns)
	mgr := startManager(t, ns, "children")
	createDeployment(t, ns, "dsv4", 1)
	wants := map[string]want{"dsv4": {replicas: 1}}
	waitConverged(t, ns, wants, 2*time.Minute)
	var h hicachev1alpha1.HiCacheDeployment
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dsv4"}, &h); err != nil {
		t.Fatal(err)
	}
	children := ownedBy(t, ns, h.UID)
	if len(children) == 0 {
		t.Fatal("the deployment owns nothing")
	}
	// The Secret first, so that a watched child's fault follows it.
	slices.SortStableFunc(children, func(a, b *metav1.PartialObjectMetadata) int {
		return cmp.Compare(boolInt(a.Kind != "Secret"), boolInt(b.Kind != "Secret"))
	})
	mark := auditMark(t)

	// isBack tells whether o's restoration holds now.
	isBack := func(o *metav1.PartialObjectMetadata, back func(*metav1.PartialObjectMetadata) bool) (bool, error) {
		cur := &metav1.PartialObjectMetadata{}
		cur.SetGroupVersionKind(o.GroupVersionKind())
		err := k8s.Get(ctx, client.ObjectKeyFromObject(o), cur)
		return err == nil && cur.DeletionTimestamp == nil && back(cur), err
	}
	type fault struct {
		o    *metav1.PartialObjectMetadata
		back func(*metav1.PartialObjectMetadata) bool
	}
	var (
		slowest time.Duration
		pending *fault // the Secret's, repaired at the next reconcile
	)
	restore := func(what string, o *metav1.PartialObjectMetadata, do func() error, back func(*metav1.PartialObjectMetadata) bool) {
		t.Helper()
		began := time.Now()
		if err := do(); err != nil {
			t.Fatalf("%s %s %s: %v", what, o.Kind, o.Name, err)
		}
		if o.Kind == "Secret" {
			pending = &fault{o, back}
			return
		}
		for {
			ok, err := isBack(o, back)
			if ok {
				break
			}
			if time.Since(began) > restoreBound {
				t.Fatalf("%s %s %s: not restored within %s (%v)", what, o.Kind, o.Name, restoreBound, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		took := time.Since(began)
		slowest = max(slowest, took)
		logf("%s %s %s: restored after %s", what, o.Kind, o.Name, took.Round(time.Millisecond))
		if pending != nil {
			if ok, err := isBack(pending.o, pending.back); !ok {
				t.Errorf("%s %s %s: not restored by the reconcile that restored %s %s (%v)", what, pending.o.Kind, pending.o.Name, o.Kind, o.Name, err)
			} else {
				logf("%s %s %s: restored by the next reconcile, with %s %s", what, pending.o.Kind, pending.o.Name, o.Kind, o.Name)
			}
			pending = nil
		}
		waitConverged(t, ns, wants, time.Minute)
	}
	ownedAgain := func(cur *metav1.PartialObjectMetadata) bool {
		ref := metav1.GetControllerOfNoCopy(cur)
		return ref != nil && ref.UID == h.UID
	}
	for _, o := range children {
		restore("deleted", o, func() error { return k8s.Delete(ctx, o.DeepCopy()) }, func(cur *metav1.PartialObjectMetadata) bool {
			return cur.UID != o.UID && ownedAgain(cur)
		})
	}
	for _, o := range children {
		restore("disowned", o, func() error {
			return k8s.Patch(ctx, o.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`)))
		}, ownedAgain)
	}
	logf("%d children deleted, then disowned, one at a time: the slowest watched one was back after %s", len(children), slowest.Round(time.Millisecond))
	checkChildren(t, ns, map[string]int32{"dsv4": 1})
	// Each deleted child was created once more, nothing else.
	made := creations(byUsers(auditSince(t, mark, ns), mgr.user))
	for _, o := range children {
		key := resourceOf(o.Kind) + "/" + o.Name
		if made[key] != 1 {
			t.Errorf("%s %s was created %d times after its deletion, want once", o.Kind, o.Name, made[key])
		}
		delete(made, key)
	}
	if len(made) > 0 {
		t.Errorf("the manager also created %v", made)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ownedBy lists the objects of every child kind in ns whose controller is uid, by kind and name.
func ownedBy(t *testing.T, ns string, uid types.UID) []*metav1.PartialObjectMetadata {
	t.Helper()
	var out []*metav1.PartialObjectMetadata
	for _, gvk := range childKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatalf("listing %ss: %v", gvk.Kind, err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			if ref := metav1.GetControllerOfNoCopy(o); ref != nil && ref.UID == uid {
				o.SetGroupVersionKind(gvk)
				out = append(out, o)
			}
		}
	}
	slices.SortFunc(out, func(a, b *metav1.PartialObjectMetadata) int {
		return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
	})
	return out
}

// resourceOf is the API resource of a child kind, as audit events name it.
func resourceOf(kind string) string {
	if kind == "NetworkPolicy" {
		return "networkpolicies"
	}
	return strings.ToLower(kind) + "s"
}
