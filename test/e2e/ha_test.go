package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// An external backend given as etcd://: two real masters with HA on a real etcd. The backend's
// admin URL names the standby; the operator follows it to the leader, ranks are given the
// etcd:// address and the cluster id, a layout change's flush runs through etcd://, and when the
// leader is killed the status follows the new leader and re-reads the key count from it.
func TestExternalBackendOnEtcd(t *testing.T) {
	ns := newNamespace(t)
	e := mooncaketest.StartEtcd(t)
	cluster := "e2e." + ns
	ha := mooncaketest.StartHA(t, e, cluster, 2, true)
	leader := ha.Leader()
	var standby *mooncaketest.Master
	for _, m := range ha.Masters {
		if m != leader {
			standby = m
		}
	}

	// The etcd's address does not say which masters use it: a cluster administrator's grant does.
	grantStore(t, ha.ClientAddr, adminURLsOf(ha), ns)
	externalBackend(t, ns, "mooncake", ha.ClientAddr, standby.AdminURL, testutil.ClusterID(cluster))
	got := getBackend(t, ns, "mooncake")
	if ep := got.Status.Endpoints; ep.RPCAddress != ha.ClientAddr || ep.AdminURL != leader.AdminURL || ep.ClusterID != cluster {
		t.Errorf("endpoints %+v: want the etcd:// address, the leader's admin URL %s (the spec names the standby's) and cluster %s", ep, leader.AdminURL, cluster)
	}
	if got.Status.Leader != leader.RPCAddr || got.Status.ViewVersion == 0 {
		t.Errorf("status leader %q view %d, want %s and a view", got.Status.Leader, got.Status.ViewVersion, leader.RPCAddr)
	}
	if want := "etcd://" + e.Endpoint + "#" + cluster; got.Status.StoreID != want {
		t.Errorf("storeID %q, want %q", got.Status.StoreID, want)
	}

	// Ranks find the leader through etcd.
	create(t, dsv4(ns))
	waitReadyGroups(t, ns, "dsv4", 1)
	env := map[string]string{}
	for _, v := range groups(t, ns, "dsv4")[0].Spec.Template.Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	if env["MOONCAKE_MASTER"] != ha.ClientAddr || env["MC_STORE_CLUSTER_ID"] != cluster {
		t.Errorf("rank env MOONCAKE_MASTER=%q MC_STORE_CLUSTER_ID=%q, want %q and %q", env["MOONCAKE_MASTER"], env["MC_STORE_CLUSTER_ID"], ha.ClientAddr, cluster)
	}
	// And with deadlines that end a heartbeat's ping to a dead leader, as the store pods have.
	for _, v := range sglang.FailoverRPCEnv() {
		if env[v.Name] != v.Value {
			t.Errorf("rank env %s=%q, want %q", v.Name, env[v.Name], v.Value)
		}
	}

	// A client writes through etcd://; a layout change flushes the old namespace through it.
	nsA := getHCD(t, ns, "dsv4").Status.Cache.Namespace
	keysA := pageKeys(t, ns, "dsv4", 6)
	leader.PutKeys(t, keysA, 4096)
	admin := func(m *mooncaketest.Master) *mooncake.Client {
		c, err := mooncake.NewClient(m.AdminURL, &http.Client{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if n, err := admin(leader).CountKeysWithPrefix(context.Background(), nsA+"_"); err != nil || n != int64(len(keysA)) {
		t.Fatalf("%d keys (%v) under %s on the leader, want %d", n, err, nsA, len(keysA))
	}
	update(t, getHCD(t, ns, "dsv4"), dspark)
	var flushName string
	eventually(t, 90*time.Second, "the old namespace flushed through etcd://", func() (bool, string) {
		h := getHCD(t, ns, "dsv4")
		if h.Status.Cache.LastFlush == nil || h.Status.Cache.LastFlush.Namespace != nsA {
			var fs []string
			for _, f := range flushesOf(t, ns) {
				fs = append(fs, fmt.Sprintf("%s %+v", f.Name, f.Status))
			}
			return false, fmt.Sprintf("stale %+v; flushes %v", h.Status.Cache.StaleNamespaces, fs)
		}
		flushName = h.Status.Cache.LastFlush.Name
		return true, ""
	})
	cf := waitFlushComplete(t, ns, flushName)
	if cf.Status.Removed != int64(len(keysA)) || cf.Status.KeysLeft != 0 {
		t.Errorf("flush removed %d left %d, want %d and 0", cf.Status.Removed, cf.Status.KeysLeft, len(keysA))
	}

	// Objects of the new namespace, then the leader dies. The status follows the new leader and
	// re-reads the key count from it; the flushed namespace does not come back. How many objects
	// the failover kept is logged: with the pinned release not always all of them
	// (docs/compatibility.md).
	nsB := getHCD(t, ns, "dsv4").Status.Cache.Namespace
	keysB := pageKeys(t, ns, "dsv4", 5)
	standby.PutKeys(t, keysB, 4096) // through etcd://, from any master's helper
	time.Sleep(2 * time.Second)     // past the metadata log's batch (0.3 s was enough on loopback)
	leader.Kill()
	killed := time.Now()
	next, took := ha.WaitLeader(t, leader, 60*time.Second)
	t.Logf("new leader %s served %v after the kill", next.RPCAddr, took.Round(100*time.Millisecond))
	eventually(t, 60*time.Second, "the status follows the new leader and its key count", func() (bool, string) {
		b := getBackend(t, ns, "mooncake")
		n, err := admin(next).CountKeysWithPrefix(context.Background(), "")
		return err == nil && b.Status.Leader == next.RPCAddr && b.Status.Endpoints.AdminURL == next.AdminURL && b.Status.KeyCount == n,
			fmt.Sprintf("leader %q admin %q keys %d, the new leader holds %d (%v)", b.Status.Leader, b.Status.Endpoints.AdminURL, b.Status.KeyCount, n, err)
	})
	t.Logf("status followed %v after the kill", time.Since(killed).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "a Warning Event says the leader changed", func() (bool, string) {
		var evs eventsv1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "CacheBackend" && e.Reason == hicachev1alpha1.ReasonLeaderChanged && e.Type == "Warning" &&
				strings.Contains(e.Note, next.RPCAddr) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Note)
		}
		return false, strings.Join(seen, "; ")
	})
	kept, _ := admin(next).CountKeysWithPrefix(context.Background(), nsB+"_")
	t.Logf("kept across the failover: %d of %d objects of %s", kept, len(keysB), nsB)
	if n, _ := admin(next).CountKeysWithPrefix(context.Background(), nsA+"_"); n != 0 {
		t.Errorf("the flushed namespace %s came back with %d keys after the failover", nsA, n)
	}
}

func getBackend(t *testing.T, ns, name string) *hicachev1alpha1.CacheBackend {
	t.Helper()
	var cb hicachev1alpha1.CacheBackend
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cb); err != nil {
		t.Fatal(err)
	}
	if cb.Status.Endpoints == nil {
		cb.Status.Endpoints = &hicachev1alpha1.BackendEndpoints{}
	}
	return &cb
}
