package realnode

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// masterHealth asks one master pod's /health from inside the cluster's network namespace.
func masterHealth(t *testing.T, p *corev1.Pod) mooncake.Health {
	t.Helper()
	c, err := mooncake.NewClient("http://"+net.JoinHostPort(p.Status.PodIP, "9003"), inNetns)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := c.Health(ctx)
	if err != nil {
		return mooncake.Health{}
	}
	return h
}

// Three masters elect a leader in the etcd the operator runs for the backend (one member on an
// emptyDir, its pod admitted as restricted), with store pods; a deployment's ranks are given the
// etcd:// address; a client writes objects through it; the leader's pod is killed and a flush is
// requested right after; a standby takes over (the time is logged), the status follows it and
// re-reads the key count, the flush completes once, clients write and read again through
// etcd://, and what is read after the failover is never another object's bytes. How many
// objects the failover kept is logged (docs/compatibility.md: none were readable with the pinned
// release).
func TestHAMastersFailOverOnEtcd(t *testing.T) {
	ns := newNamespace(t, "ha", baseline)
	began := time.Now()
	cb := managedBackend(t, ns, 2, "64Mi", func(cb *hicachev1alpha1.CacheBackend) {
		cb.Spec.Mooncake.Managed.Replicas = ptr.To(int32(3))
		cb.Spec.Mooncake.Managed.HA = &hicachev1alpha1.MasterHA{Etcd: hicachev1alpha1.EtcdEndpoints{
			Managed: &hicachev1alpha1.ManagedEtcd{Storage: hicachev1alpha1.EtcdStorage{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}
	})
	endpoint := managedEtcdReady(t, ns, 1)
	etcdRefusesWithoutTheCertificate(t, ns, endpoint)
	clusterID := ns + "." + backendName
	etcdAddr := "etcd://" + endpoint
	if ep := cb.Status.Endpoints; ep == nil || ep.RPCAddress != etcdAddr || ep.ClusterID != clusterID {
		t.Fatalf("endpoints %+v, want %s and cluster %s", cb.Status.Endpoints, etcdAddr, clusterID)
	}
	var leaderPod string
	testutil.Eventually(t, 2*time.Minute, "one leader and two standbys in status, StandbyAvailable", func() (bool, string) {
		cb = getBackend(t, ns)
		roles := map[hicachev1alpha1.MasterRole]int{}
		for _, m := range cb.Status.Masters {
			roles[m.Role]++
		}
		if len(cb.Status.Masters) > 0 {
			leaderPod = cb.Status.Masters[0].Name
		}
		return roles[hicachev1alpha1.MasterLeader] == 1 && roles[hicachev1alpha1.MasterStandby] == 2 && cb.Status.Leader != "" &&
				conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionStandbyAvailable, metav1.ConditionTrue),
			fmt.Sprintf("masters %+v leader %q conditions %+v", cb.Status.Masters, cb.Status.Leader, cb.Status.Conditions)
	})
	logf("%s: three HA masters, leader %s, in %s", ns, leaderPod, time.Since(began).Round(time.Millisecond))
	for _, p := range backendPods(t, ns, "master") {
		if got := p.Labels[hicachev1alpha1.LabelMasterRole] == "leader"; got != (p.Name == leaderPod) {
			t.Errorf("pod %s: leader label %v, but the leader is %s", p.Name, got, leaderPod)
		}
		if h := masterHealth(t, &p); (h.Role == "leader") != (p.Name == leaderPod) {
			t.Errorf("pod %s says role %q; status says the leader is %s", p.Name, h.Role, leaderPod)
		}
	}
	for _, p := range backendPods(t, ns, "store") {
		env := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["MOONCAKE_MASTER"] != storeuse.EtcdProxyAddress || env["MC_STORE_CLUSTER_ID"] != clusterID {
			t.Errorf("store pod %s: MOONCAKE_MASTER=%q MC_STORE_CLUSTER_ID=%q", p.Name, env["MOONCAKE_MASTER"], env["MC_STORE_CLUSTER_ID"])
		}
	}

	// The ranks' config, and objects written through etcd:// by a client of the store pods.
	h := qwen3(t, ns)
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: resolve.ConfigMapName(h.Name)}, &cm); err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(mapValues(cm.Data), "\n"); !strings.Contains(all, storeuse.EtcdProxyAddress) {
		t.Errorf("the ranks' config does not name the proxy %s:\n%s", storeuse.EtcdProxyAddress, all)
	}
	clientEnv := []corev1.EnvVar{{Name: "MC_STORE_CLUSTER_ID", Value: clusterID}}
	keys := pageKeys(t, h, 40)
	storeJobVia(t, ns, "put-before", etcdAddr, clientEnv, keys, "put", "--size", "4096")
	prefix := h.Status.Cache.Namespace + "_"
	if n := countKeys(t, ns, prefix); n != int64(len(keys)) {
		t.Fatalf("%d keys under %s through the leader's Service, want %d", n, prefix, len(keys))
	}
	other := []string{"ha-other_a", "ha-other_b", "ha-other_c"}
	storeJobVia(t, ns, "put-other", etcdAddr, clientEnv, other, "put", "--size", "4096")
	time.Sleep(2 * time.Second) // past the metadata log's batch window

	// Kill the leader's pod and, right after, ask for a flush of the other namespace.
	var old corev1.Pod
	for _, p := range backendPods(t, ns, "master") {
		if p.Name == leaderPod {
			old = p
		}
	}
	killed := time.Now()
	if err := k8s.Delete(context.Background(), &old, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	cf := &hicachev1alpha1.CacheFlush{ObjectMeta: metav1.ObjectMeta{Name: "during-failover", Namespace: ns},
		Spec: hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: backendName},
			Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: "ha-other", Reason: "requested during a failover"}}
	if err := k8s.Create(context.Background(), cf); err != nil {
		t.Fatal(err)
	}
	var newLeader string
	var served time.Duration
	testutil.Eventually(t, 2*time.Minute, "another master serves", func() (bool, string) {
		for _, p := range backendPods(t, ns, "master") {
			if p.Name != old.Name && p.Status.PodIP != "" && masterHealth(t, &p).Ready() {
				newLeader, served = p.Name, time.Since(killed)
				return true, ""
			}
		}
		return false, "no master serves"
	})
	logf("%s: leader pod %s killed; %s served after %s", ns, old.Name, newLeader, served.Round(100*time.Millisecond))
	// The objects become readable on the new leader only once the store pods re-mounted their
	// segments there: how long after the kill that took is logged (looked at every 2 s, up to
	// 150 s).
	if c, err := mooncake.NewClient("http://"+net.JoinHostPort(podIP(t, ns, newLeader), "9003"), inNetns); err == nil {
		n, err := c.CountKeysWithPrefix(context.Background(), "")
		logf("%s: the new leader holds %d objects at once (%v)", ns, n, err)
		for n < int64(len(keys)) && time.Since(killed) < 150*time.Second {
			time.Sleep(2 * time.Second)
			n, err = c.CountKeysWithPrefix(context.Background(), h.Status.Cache.Namespace+"_")
		}
		logf("%s: %d of %d objects readable on the new leader %s after the kill (%v)", ns, n, len(keys), time.Since(killed).Round(time.Second), err)
	}
	testutil.Eventually(t, time.Minute, "the status names the new leader and the backend is Ready", func() (bool, string) {
		cb = getBackend(t, ns)
		return len(cb.Status.Masters) > 0 && cb.Status.Masters[0].Name == newLeader && cb.Status.Masters[0].Role == hicachev1alpha1.MasterLeader &&
				conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionReady, metav1.ConditionTrue),
			fmt.Sprintf("masters %+v conditions %+v", cb.Status.Masters, cb.Status.Conditions)
	})
	logf("%s: status followed the new leader %s after the kill", ns, time.Since(killed).Round(100*time.Millisecond))
	testutil.Eventually(t, 30*time.Second, "a Warning Event on the backend says the leader changed", func() (bool, string) {
		var evs eventsv1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "CacheBackend" && e.Reason == hicachev1alpha1.ReasonLeaderChanged && e.Type == "Warning" {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, strings.Join(seen, ", ")
	})
	if cb.Status.Leader == "" || !strings.HasPrefix(cb.Status.Leader, podIP(t, ns, newLeader)+":") {
		t.Errorf("status.leader %q is not the new leader %s", cb.Status.Leader, newLeader)
	}

	// The flush requested during the failover completes, once.
	testutil.Eventually(t, 3*time.Minute, "the flush requested during the failover completes", func() (bool, string) {
		f := getFlush(t, ns, cf.Name)
		c := meta.FindStatusCondition(f.Status.Conditions, hicachev1alpha1.ConditionComplete)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", f.Status)
	})
	f := getFlush(t, ns, cf.Name)
	logf("%s: flush during the failover: removed %d, left %d, %d attempts, view %d, run again %d time(s) (%d more)", ns,
		f.Status.Removed, f.Status.KeysLeft, f.Status.Attempts, f.Status.ViewVersion, f.Status.RepeatedAfterFailover, f.Status.RemovedAgain)
	if f.Status.Removed != int64(len(other)) || f.Status.KeysLeft != 0 {
		t.Errorf("the flush removed %d and left %d, want %d and 0 (counted once)", f.Status.Removed, f.Status.KeysLeft, len(other))
	}
	// It completed under the new leader, after confirming its removal with it.
	if b := getBackend(t, ns); f.Status.ViewVersion == 0 || f.Status.ViewVersion != b.Status.ViewVersion {
		t.Errorf("the flush completed under leader view %d; the backend's leader serves view %d", f.Status.ViewVersion, b.Status.ViewVersion)
	}

	// What the failover kept of the deployment's objects, read back through a client that found
	// the new leader in etcd: whatever is there must hold its own bytes (a cold cache is
	// acceptable, stale bytes are not), and the backend's key count is the new leader's.
	kept := countKeys(t, ns, prefix)
	out := storeJobVia(t, ns, "verify-after", etcdAddr, clientEnv, keys, "verify", "--size", "4096")
	logf("%s: kept across the failover: %d of %d objects; read back: %s", ns, kept, len(keys), lastJSON(out))
	if !strings.Contains(out, `"wrong": 0`) {
		t.Errorf("objects read back after the failover hold other bytes: %s", lastJSON(out))
	}
	if kept < int64(len(keys)) {
		logf("%s: the new leader's log on its metadata log:\n%s", ns, podLogLines(t, ns, newLeader, "oplog", "OpLog", "HotStandby", "standby", "Restore", "snapshot"))
	}
	for _, p := range backendPods(t, ns, "store") {
		logf("%s: store pod %s on the failover:\n%s", ns, p.Name, podLogLines(t, ns, p.Name, "emount", "leader", "Reconnect", "ping", "Failed", "timed out"))
	}
	testutil.Eventually(t, time.Minute, "the backend's key count re-read from the new leader", func() (bool, string) {
		cb = getBackend(t, ns)
		n := countKeys(t, ns, "")
		return cb.Status.KeyCount == n, fmt.Sprintf("status keyCount %d, the new leader holds %d", cb.Status.KeyCount, n)
	})
	// Clients write and read again through etcd://, against the new leader.
	fresh := pageKeys(t, h, 45)[len(keys):]
	storeJobVia(t, ns, "put-after", etcdAddr, clientEnv, fresh, "put", "--size", "4096")
	out = storeJobVia(t, ns, "verify-fresh", etcdAddr, clientEnv, fresh, "verify", "--size", "4096")
	if !strings.Contains(out, fmt.Sprintf(`"verified": %d`, len(fresh))) {
		t.Errorf("writing and reading through etcd:// after the failover: %s", lastJSON(out))
	}
	testutil.Eventually(t, 2*time.Minute, "a standby again: the replaced pod joins", func() (bool, string) {
		cb = getBackend(t, ns)
		return conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionStandbyAvailable, metav1.ConditionTrue), fmt.Sprintf("%+v", cb.Status.Masters)
	})
	if got := getHCD(t, ns, h.Name); got.Status.ReadyReplicas != ptr.Deref(got.Spec.Replicas, 1) {
		t.Errorf("%d serving groups Ready after the failover", got.Status.ReadyReplicas)
	}
}

// podLogLines are the lines of a pod's log that contain any of the words.
func podLogLines(t *testing.T, ns, pod string, words ...string) string {
	t.Helper()
	raw, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) && !strings.Contains(l, "Admin Metrics") {
				out = append(out, l)
				break
			}
		}
	}
	if len(out) > 40 {
		out = out[len(out)-40:]
	}
	return strings.Join(out, "\n")
}

func podIP(t *testing.T, ns, name string) string {
	t.Helper()
	var p corev1.Pod
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func lastJSON(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "{") {
			return lines[i]
		}
	}
	return out
}
