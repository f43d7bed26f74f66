package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// A tenant with create rights on CacheBackends and CacheFlushes in namespace A cannot reach the
// store of namespace B through an admin URL. Namespace B has a backend on a real master MB that
// holds keys the real Mooncake client put. Namespace A creates, for each attack, a CacheBackend
// whose rpcAddress names another store (so the in-use check finds no users of it) and whose
// adminURL names MB, then a CacheFlush of the whole store through it:
//
//   - rpcAddress another host's unused port (127.0.0.2), adminURL MB's as MB's backend names it;
//   - the same, adminURL's host spelled LOCALHOST;
//   - the same, adminURL's host spelled 127.0.0.1. (trailing dot);
//   - the same, adminURL's host spelled [::ffff:127.0.0.1] (IPv4-mapped IPv6);
//   - rpcAddress a Service name of namespace A, adminURL MB's (a name against an IP);
//   - rpcAddress MB's own host, adminURL MB's with userinfo, or with a path, query or fragment.
//
// Each of A's backends is Ready=False with StoreRefused, none of A's flushes completes (each says
// why it waits), and MB holds as many keys after as before. On the controllers before the store
// rule, the first attack emptied MB (12 keys, then 0); with loopback addresses counted as one
// host for a single master, it did too.
func TestExternalAdminURLOffTheRPCHostIsRefused(t *testing.T) {
	nsB, mb := namespaceWithBackend(t)
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("tenant-b-key-%d", i))
	}
	keysKeptThroughout(t, mb, keys)
	port := mb.AdminURL[strings.LastIndex(mb.AdminURL, ":")+1:]
	mbHost := mb.RPCAddr[:strings.LastIndex(mb.RPCAddr, ":")]
	attacks := []struct{ name, rpc, admin string }{
		{"unused-rpc", "127.0.0.2:1", mb.AdminURL},
		{"localhost", "127.0.0.2:1", "http://LOCALHOST:" + port},
		{"trailing-dot", "127.0.0.2:1", "http://127.0.0.1.:" + port},
		{"mapped-ipv6", "127.0.0.2:1", "http://[::ffff:127.0.0.1]:" + port},
		{"service-name", "decoy:50051", mb.AdminURL},
		{"userinfo", mbHost + ":1", "http://u:p@127.0.0.1:" + port},
		{"path", mbHost + ":1", mb.AdminURL + "/x"},
		{"query", mbHost + ":1", mb.AdminURL + "/?a=1"},
		{"fragment", mbHost + ":1", mb.AdminURL + "/#f"},
	}
	nsA := newNamespace(t)
	for _, a := range attacks {
		if err := k8s.Create(context.Background(), testutil.ExternalBackend(nsA, a.name, a.rpc, a.admin)); err != nil {
			t.Fatalf("creating CacheBackend %s: %v", a.name, err)
		}
		create(t, manualFlush(nsA, a.name, a.name, hicachev1alpha1.FlushScopeAll, nil))
	}
	for _, a := range attacks {
		eventually(t, 30*time.Second, fmt.Sprintf("CacheBackend %s/%s Ready=False %s", nsA, a.name, hicachev1alpha1.ReasonStoreRefused), func() (bool, string) {
			var cb hicachev1alpha1.CacheBackend
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: nsA, Name: a.name}, &cb); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
			if c == nil {
				return false, "no Ready condition"
			}
			ok := c.Status == metav1.ConditionFalse && c.Reason == hicachev1alpha1.ReasonStoreRefused &&
				strings.Contains(c.Message, "adminURL")
			return ok, c.Reason + ": " + c.Message
		})
	}
	// The flushes wait, saying why, for long enough that each would have run many times.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range attacks {
			var cf hicachev1alpha1.CacheFlush
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: nsA, Name: a.name}, &cf); err != nil {
				t.Fatal(err)
			}
			if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete); c != nil && c.Status == metav1.ConditionTrue {
				t.Fatalf("CacheFlush %s/%s completed: %s", nsA, a.name, c.Message)
			}
		}
		time.Sleep(time.Second)
	}
	for _, a := range attacks {
		var cf hicachev1alpha1.CacheFlush
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: nsA, Name: a.name}, &cf); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete)
		if c == nil || c.Reason != hicachev1alpha1.ReasonStoreRefused || !strings.Contains(c.Message, "calls no admin URL") {
			t.Errorf("CacheFlush %s/%s does not say it waits for a store the operator may call: %+v", nsA, a.name, c)
		}
	}
	// B's own backend still works: the rule refuses only what is off the RPC host.
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, nsB, "mooncake", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 10*time.Second)
}

// keysKeptThroughout puts keys on master mb and checks that it holds exactly as many when the
// test ends, however it ends, so that a failure says what another tenant's attempts removed.
func keysKeptThroughout(t *testing.T, mb *master, keys []string) {
	t.Helper()
	mb.putKeys(t, keys, 4096)
	before, err := mb.countKeys("")
	if err != nil {
		t.Fatal(err)
	}
	if before != int64(len(keys)) {
		t.Fatalf("the master holds %d keys, want %d", before, len(keys))
	}
	t.Cleanup(func() {
		after, err := mb.countKeys("")
		if err != nil {
			t.Errorf("counting the master's keys: %v", err)
		} else if after != before {
			t.Errorf("the master held %d keys before the other tenant's attempts and %d after", before, after)
		}
	})
}

// installOverridePolicy installs the admission policy and binding that guard spec.allowInUse,
// and the role that holds its verb, as config/admission ships them.
func installOverridePolicy(t *testing.T) {
	t.Helper()
	for _, f := range []string{"flush_override_policy.yaml", "flush_override_role.yaml"} {
		testutil.CreateFromFile(t, k8s, filepath.Join(repo, "config", "admission", f))
	}
}
