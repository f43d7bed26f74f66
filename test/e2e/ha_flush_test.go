package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/controllers"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

// haBehindProxy is two masters with HA and the metadata log on a real etcd, which they reach
// through a proxy that can hold what they send; clients (the flush's too) find the leader in
// etcd itself. A CacheBackend "mooncake" in ns names them by etcd:// and, as its admin URL, the
// standby's, which survives the leader: the operator follows the leader.
type haBehindProxy struct {
	proxy           *mooncaketest.EtcdProxy
	ha              *mooncaketest.HA
	leader, standby *mooncaketest.Master
	held            atomic.Int64 // when the proxy started holding, in Unix nanoseconds
}

func startHABehindProxy(t *testing.T, ns string) *haBehindProxy {
	t.Helper()
	e := mooncaketest.StartEtcd(t)
	h := &haBehindProxy{proxy: mooncaketest.StartEtcdProxy(t, e)}
	cluster := "e2e." + ns
	h.ha = mooncaketest.StartHA(t, h.proxy.Etcd(), cluster, 2, true)
	h.leader = h.ha.Leader()
	for _, m := range h.ha.Masters {
		if m != h.leader {
			h.standby = m
		}
	}
	create(t, &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: "mooncake", Namespace: ns},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "etcd://" + e.Endpoint, AdminURL: h.standby.AdminURL, ClusterID: cluster},
		}},
	})
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, ns, "mooncake", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 30*time.Second)
	return h
}

func adminOf(t *testing.T, m *mooncaketest.Master) *mooncake.Client {
	t.Helper()
	c, err := mooncake.NewClient(m.AdminURL, &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// holdFirstAttempt makes what the masters send etcd arrive 2.5 s late from the start of the
// first attempt of the flushes in ns (the masters' leader lease is 5 s), until the test ends.
func (h *haBehindProxy) holdFirstAttempt(t *testing.T, ns string) {
	t.Cleanup(flushRuns.hook(func(req controllers.NamespaceFlushRequest) {
		if req.Flush.Namespace == ns && req.Attempt == 1 {
			h.held.Store(time.Now().UnixNano())
			h.proxy.Delay(2500 * time.Millisecond)
		}
	}, nil))
}

// killLeaderOnceVerified kills the leader, and drops what the proxy still holds of it, as soon as
// the operator has verified flush name's removal through the leader (it is Complete, or
// confirming the removal); it returns the next leader.
func (h *haBehindProxy) killLeaderOnceVerified(t *testing.T, ns, name string) *mooncaketest.Master {
	t.Helper()
	eventually(t, 90*time.Second, "the operator verifies the removal of "+name, func() (bool, string) {
		var f hicachev1alpha1.CacheFlush
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &f); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(f.Status.Conditions, hicachev1alpha1.ConditionComplete)
		return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == hicachev1alpha1.ReasonConfirmingRemoval), fmt.Sprintf("%+v", f.Status)
	})
	h.leader.Kill()
	h.proxy.Cut()
	t.Logf("leader killed %v after the masters' writes to etcd were held", time.Since(time.Unix(0, h.held.Load())).Round(time.Millisecond))
	next, took := h.ha.WaitLeader(t, h.leader, 60*time.Second)
	t.Logf("new leader %s served %v after the kill", next.RPCAddr, took.Round(100*time.Millisecond))
	return next
}

// objectsOn is every object the master holds, readable or not (master_key_count counts every
// object's metadata), and the readable ones under prefix.
func objectsOn(t *testing.T, m *mooncaketest.Master, prefix string) (all, readable int64) {
	t.Helper()
	var s mooncake.Summary
	eventually(t, 30*time.Second, "the master's object count", func() (bool, string) {
		var err error
		s, err = adminOf(t, m).Summary(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	readable, _ = adminOf(t, m).CountKeysWithPrefix(context.Background(), prefix)
	return s.KeyCount, readable
}

// A flush whose removal the leader had acknowledged but not yet written to etcd when it died:
// the objects are back on the next leader. The leader is killed, with its log to etcd still
// held, as soon as the operator has verified the removal through it. The flush must not end
// Complete while the new leader holds objects of the namespace: it runs again against the new
// leader, and counts the objects once.
func TestFlushIsNotUndoneByAFailoverRightAfterIt(t *testing.T) {
	ns := newNamespace(t)
	h := startHABehindProxy(t, ns)
	const prefix = "ha-durable"
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s_%03d", prefix, i)
	}
	h.leader.PutKeys(t, keys, 4096)
	time.Sleep(2 * time.Second) // the puts reach etcd
	if all, _ := objectsOn(t, h.leader, ""); all != int64(len(keys)) {
		t.Fatalf("the leader holds %d objects, want %d", all, len(keys))
	}

	h.holdFirstAttempt(t, ns)
	cf := &hicachev1alpha1.CacheFlush{ObjectMeta: metav1.ObjectMeta{Name: "durable", Namespace: ns},
		Spec: hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: "mooncake"},
			Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: prefix, Reason: "a failover right after it"}}
	create(t, cf)
	next := h.killLeaderOnceVerified(t, ns, cf.Name)

	done := waitFlushComplete(t, ns, cf.Name)
	all, readable := objectsOn(t, next, prefix+"_")
	t.Logf("flush %+v; the new leader holds %d objects, %d readable", done.Status, all, readable)
	if all != 0 || readable != 0 {
		t.Fatalf("flush %s is Complete (%s), but the new leader holds %d objects of the flushed namespace (%d readable)",
			cf.Name, meta.FindStatusCondition(done.Status.Conditions, hicachev1alpha1.ConditionComplete).Message, all, readable)
	}
	if done.Status.Removed != int64(len(keys)) {
		t.Errorf("removed %d, want the %d objects counted once", done.Status.Removed, len(keys))
	}
	// It ran once more, against the new leader, and said so. (What that run removed, the
	// objects that came back, is logged above: all of them when the kill beat the held log.)
	if done.Status.RepeatedAfterFailover != 1 || done.Status.ViewVersion == 0 {
		t.Errorf("repeatedAfterFailover %d, viewVersion %d: want one run again, under the new leader's view",
			done.Status.RepeatedAfterFailover, done.Status.ViewVersion)
	}
	eventually(t, 30*time.Second, "a Warning Event says the flush ran again after the failover", func() (bool, string) {
		var evs eventsv1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "CacheFlush" && e.Reason == hicachev1alpha1.ReasonFlushRepeatedAfterFailover && e.Type == "Warning" {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, strings.Join(seen, ", ")
	})
	// And it stays flushed.
	time.Sleep(2 * time.Second)
	if all, _ := objectsOn(t, next, prefix+"_"); all != 0 {
		t.Errorf("%d objects on the new leader 2 s after the flush completed", all)
	}
}

// The promise of a Fixed namespace across a failover: its layout changes, the writers stop, the
// namespace is flushed, and the leader dies right after the removal, before it reached etcd.
// The new layout must not start while the namespace holds objects of the old one.
func TestFixedNamespaceIsEmptyWhenTheNewLayoutStartsAfterAFailover(t *testing.T) {
	ns := newNamespace(t)
	h := startHABehindProxy(t, ns)
	d := dsv4(ns)
	d.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	d.Spec.Storage.Namespace = "dsv4-fixed"
	create(t, d)
	waitReadyGroups(t, ns, "dsv4", 1)
	keys := pageKeys(t, ns, "dsv4", 6)
	h.leader.PutKeys(t, keys, 4096)
	time.Sleep(2 * time.Second) // the puts reach etcd
	oldPods := rankPods(t, ns, "dsv4")

	h.holdFirstAttempt(t, ns)
	update(t, d, dspark)
	var name string
	eventually(t, 90*time.Second, "the flush of the fixed namespace", func() (bool, string) {
		fl := flushesOf(t, ns)
		if len(fl) == 0 {
			return false, "no flush"
		}
		name = fl[0].Name
		return true, ""
	})
	next := h.killLeaderOnceVerified(t, ns, name)

	waitReadyGroups(t, ns, "dsv4", 1)
	all, readable := objectsOn(t, next, "dsv4-fixed_")
	var complete []hicachev1alpha1.CacheFlush
	for _, f := range flushesOf(t, ns) {
		if meta.IsStatusConditionTrue(f.Status.Conditions, hicachev1alpha1.ConditionComplete) {
			complete = append(complete, f)
		}
	}
	t.Logf("the new layout runs; the new leader holds %d objects (%d readable of dsv4-fixed); %d complete flushes", all, readable, len(complete))
	if all != 0 || readable != 0 {
		t.Fatalf("the new layout started while the new leader holds %d objects of the old layout in the fixed namespace (%d readable)", all, readable)
	}
	for _, p := range rankPods(t, ns, "dsv4") {
		for _, o := range oldPods {
			if p.UID == o.UID {
				t.Errorf("pod %s survived the recreate", p.Name)
			}
		}
		for _, f := range complete {
			if p.CreationTimestamp.Before(f.Status.CompletionTime) {
				t.Errorf("pod %s was created at %s, before flush %s completed at %s", p.Name, p.CreationTimestamp, f.Name, f.Status.CompletionTime)
			}
		}
	}
}
