package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// managedEtcdReady waits until the backend's managed etcd has its members Ready, as its pods and
// the backend's status (status.etcd, EtcdReady) say, checks that every member pod is admitted
// under the restricted Pod Security level, and returns the client endpoint the masters are
// given.
func managedEtcdReady(t *testing.T, ns string, members int32) string {
	t.Helper()
	endpoint := fmt.Sprintf("%s-etcd.%s.svc:2379", backendName, ns)
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d etcd members Ready in status", members), func() (bool, string) {
		cb := getBackend(t, ns)
		e := cb.Status.Etcd
		return e != nil && e.Ready == members && len(e.Endpoints) == 1 && e.Endpoints[0] == endpoint &&
				conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionEtcdReady, metav1.ConditionTrue),
			fmt.Sprintf("etcd %+v conditions %+v", e, cb.Status.Conditions)
	})
	pods := backendPods(t, ns, "etcd")
	if len(pods) != int(members) {
		t.Fatalf("%d etcd pods, want %d", len(pods), members)
	}
	for i := range pods {
		if !kubeutil.PodReady(&pods[i]) {
			t.Errorf("etcd pod %s is not Ready", pods[i].Name)
		}
		admittedAsRestricted(t, &pods[i])
	}
	return endpoint
}

// etcdProbeScript talks to the etcd at ETCD (host:port) as a pod without the client certificate
// would: in plaintext, then in TLS without a certificate, asking GET /version each time, and
// prints one line per attempt ("plain: ..." and "tls: ...").
const etcdProbeScript = `
import os, socket, ssl
host, port = os.environ["ETCD"].rsplit(":", 1)
req = b"GET /version HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n"
def read(s):
    out = b""
    try:
        while len(out) < 4096:
            b = s.recv(4096)
            if not b:
                break
            out += b
    except Exception as e:
        return "error " + type(e).__name__ + " " + repr(out[:200])
    return repr(out[:200])
s = socket.create_connection((host, int(port)), 10)
s.sendall(req)
print("plain:", read(s), flush=True)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    t = ctx.wrap_socket(socket.create_connection((host, int(port)), 10))
    t.sendall(req)
    print("tls:", read(t), flush=True)
except Exception as e:
    print("tls: error", type(e).__name__, flush=True)
`

// etcdRefusesWithoutTheCertificate checks, from a pod on the real node that carries the
// backend's label (so that the etcd's NetworkPolicy, where one is enforced, admits it) and no
// client certificate, that the managed etcd at endpoint tells it nothing: a plaintext request
// and a TLS one without a certificate both fail, neither answers etcd's version.
func etcdRefusesWithoutTheCertificate(t *testing.T, ns, endpoint string) {
	t.Helper()
	ctx := context.Background()
	name := "etcd-no-cert"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"probe.py": etcdProbeScript}}
	if err := k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	job := scriptJob(ns, name, corev1.Container{Name: "probe", Command: []string{"python3", "/scripts/probe.py"},
		Env: []corev1.EnvVar{{Name: "ETCD", Value: endpoint}}})
	job.Spec.Template.Labels = map[string]string{hicachev1alpha1.LabelBackend: backendName}
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the probe without a certificate ran", func() (bool, string) {
		var j batchv1.Job
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return false, err.Error()
		}
		return j.Status.Succeeded > 0 || j.Status.Failed > 0, fmt.Sprintf("%+v", j.Status)
	})
	out := jobLog(t, ns, name)
	logf("%s: a pod without the etcd's client certificate: %s", ns, strings.TrimSpace(out))
	if !strings.Contains(out, "plain:") || !strings.Contains(out, "tls:") {
		t.Fatalf("the probe did not run both attempts: %s", out)
	}
	if strings.Contains(out, "etcdserver") || strings.Contains(out, "etcdcluster") {
		t.Errorf("the managed etcd answered a pod without its client certificate: %s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "tls:") && !strings.Contains(l, "error") {
			t.Errorf("a TLS client without a certificate was not refused: %s", l)
		}
	}
}

// servingMaster waits for a master pod other than not to serve, and returns its name and when.
func servingMaster(t *testing.T, ns, not string, timeout time.Duration) (string, time.Time) {
	t.Helper()
	var name string
	var at time.Time
	testutil.Eventually(t, timeout, "a master serves", func() (bool, string) {
		for _, p := range backendPods(t, ns, "master") {
			if p.Name != not && p.Status.PodIP != "" && masterHealth(t, &p).Ready() {
				name, at = p.Name, time.Now()
				return true, ""
			}
		}
		return false, "no master serves"
	})
	return name, at
}

// claimVolumes makes n hostPath PersistentVolumes of class on the real node, writable by the
// etcd image's user, for the claims of the backend's etcd to bind to (the local cluster has no
// provisioner). When the test passes, the backend goes first, then, once its etcd pods are gone,
// the volumes and their directories; a failed test keeps them with its namespace.
func claimVolumes(t *testing.T, ns, class string, n int, size string) {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "realnode-"+class+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var pvs []*corev1.PersistentVolume
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		cb := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backendName}}
		if err := k8s.Delete(ctx, cb); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting the backend: %v", err)
			return
		}
		testutil.Eventually(t, 2*time.Minute, "the etcd pods gone with the backend", func() (bool, string) {
			var pods corev1.PodList
			if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/component": "etcd"}); err != nil {
				return false, err.Error()
			}
			return len(pods.Items) == 0, fmt.Sprintf("%d etcd pods", len(pods.Items))
		})
		for _, pv := range pvs {
			_ = k8s.Delete(ctx, pv)
		}
		_ = os.RemoveAll(dir)
	})
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("pv-%d", i))
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 65532, 65532); err != nil {
			t.Fatal(err)
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", class, i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              class,
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: p, Type: ptr.To(corev1.HostPathDirectory)}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: localcluster.RealNodeRoleLabel, Operator: corev1.NodeSelectorOpIn,
						Values: []string{localcluster.RealNodeRoleValue}}}}}}},
			},
		}
		if err := k8s.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		pvs = append(pvs, pv)
	}
}

// A backend's three masters on the three-member etcd the operator runs, each member's data on a
// claim: one etcd member's pod and the leader master's pod are killed together. The two members
// left are a majority, so a standby takes over within the failover bound; the replaced member
// comes back with its data on its claim and rejoins (a member that lost its data could not), and
// the status goes from EtcdDegraded back to EtcdReady. Clients write and read through etcd://
// after it, and nothing read holds another object's bytes. The claims go with the backend.
func TestThreeMemberEtcdLosesAMemberAndTheLeader(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "etcd3", restricted)
	class := "etcd-" + ns
	claimVolumes(t, ns, class, 3, "256Mi")
	began := time.Now()
	managedBackend(t, ns, 1, "64Mi", func(cb *hicachev1alpha1.CacheBackend) {
		cb.Spec.Mooncake.Managed.Replicas = ptr.To(int32(3))
		cb.Spec.Mooncake.Managed.HA = &hicachev1alpha1.MasterHA{Etcd: hicachev1alpha1.EtcdEndpoints{
			Managed: &hicachev1alpha1.ManagedEtcd{Replicas: ptr.To(int32(3)),
				Storage: hicachev1alpha1.EtcdStorage{Size: ptr.To(resource.MustParse("256Mi")), StorageClassName: class}}}}
	})
	endpoint := managedEtcdReady(t, ns, 3)
	logf("%s: three masters on a three-member etcd on claims Ready in %s", ns, time.Since(began).Round(time.Millisecond))
	var claims corev1.PersistentVolumeClaimList
	if err := k8s.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.Status.Phase != corev1.ClaimBound || !strings.HasPrefix(c.Spec.VolumeName, class+"-") {
			t.Errorf("claim %s: %s on %q, want Bound to one of the %s volumes", c.Name, c.Status.Phase, c.Spec.VolumeName, class)
		}
	}
	if len(claims.Items) != 3 {
		t.Errorf("%d claims, want one per member", len(claims.Items))
	}

	clients := viaEtcd(ns, endpoint, "etcd3")
	clients.putBefore(t)

	leader, _ := servingMaster(t, ns, "", time.Minute)
	var member, master corev1.Pod
	for _, p := range backendPods(t, ns, "etcd") {
		if strings.HasSuffix(p.Name, "-1") {
			member = p
		}
	}
	for _, p := range backendPods(t, ns, "master") {
		if p.Name == leader {
			master = p
		}
	}
	killed := time.Now()
	for _, p := range []*corev1.Pod{&member, &master} {
		if err := k8s.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	degraded := false
	newLeader, at := "", time.Time{}
	testutil.Eventually(t, 2*time.Minute, "another master serves on the two etcd members left", func() (bool, string) {
		if c := meta.FindStatusCondition(getBackend(t, ns).Status.Conditions, hicachev1alpha1.ConditionEtcdReady); c != nil && c.Reason == hicachev1alpha1.ReasonEtcdDegraded {
			degraded = true
		}
		for _, p := range backendPods(t, ns, "master") {
			if p.Name != leader && p.Status.PodIP != "" && masterHealth(t, &p).Ready() {
				newLeader, at = p.Name, time.Now()
				return true, ""
			}
		}
		return false, "no master serves"
	})
	served := at.Sub(killed)
	// docs/benchmarks.md: 11-12.7 s on the real node with one etcd member, of which Mooncake's
	// lease (about 4 s) and warm-up (5 s); two members of three must do as well.
	const failoverBound = 20 * time.Second
	if served > failoverBound {
		t.Errorf("a standby served %s after the kill, beyond the %s bound of docs/benchmarks.md", served.Round(100*time.Millisecond), failoverBound)
	}
	logf("%s: etcd member %s and leader master %s killed; %s served after %s", ns, member.Name, leader, newLeader, served.Round(100*time.Millisecond))
	testutil.Eventually(t, 2*time.Minute, "the replaced member rejoins with its data and EtcdReady is True again", func() (bool, string) {
		cb := getBackend(t, ns)
		if c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionEtcdReady); c != nil && c.Reason == hicachev1alpha1.ReasonEtcdDegraded {
			degraded = true
		}
		var p corev1.Pod
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: member.Name}, &p)
		return err == nil && p.UID != member.UID && kubeutil.PodReady(&p) && cb.Status.Etcd != nil && cb.Status.Etcd.Ready == 3 &&
				conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionEtcdReady, metav1.ConditionTrue),
			fmt.Sprintf("pod %s %v etcd %+v", p.Status.Phase, err, cb.Status.Etcd)
	})
	logf("%s: member %s rejoined %s after the kill (EtcdDegraded seen in status: %v); its restarts: %d", ns, member.Name,
		time.Since(killed).Round(100*time.Millisecond), degraded, restarts(t, ns, member.Name))
	if n := restarts(t, ns, member.Name); n > 0 {
		t.Errorf("the replaced member restarted %d times: with its data on its claim it should rejoin at once", n)
	}

	// Clients find the new leader in etcd, and read nothing but their own bytes.
	clients.checkAfter(t, "the failover", killed)

	// The members' claims go with the backend (the StatefulSet's claim retention policy).
	cb := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backendName}}
	if err := k8s.Delete(ctx, cb); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the etcd's claims deleted with the backend", func() (bool, string) {
		var left corev1.PersistentVolumeClaimList
		if err := k8s.List(ctx, &left, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var names []string
		for _, c := range left.Items {
			names = append(names, c.Name)
		}
		return len(names) == 0, strings.Join(names, ", ")
	})
}

// A one-member etcd on an emptyDir keeps nothing when its pod goes: the replaced member starts
// an empty etcd, and the masters' leader view and metadata log are gone with it. The leader's
// lease is gone too, so the masters elect a leader again in the new etcd (on the pinned release
// the view version stays the same, so the status sees no leader change): the test measures how
// long no master serves, that clients find the leader through etcd:// again, and what is left of
// the cache (a cold cache is what the user guide promises; wrong bytes would be a failure).
func TestOneMemberEtcdOnEmptyDirStartsOverWhenItsPodGoes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "etcd1", restricted)
	managedBackend(t, ns, 1, "64Mi", func(cb *hicachev1alpha1.CacheBackend) {
		cb.Spec.Mooncake.Managed.Replicas = ptr.To(int32(2))
		cb.Spec.Mooncake.Managed.HA = &hicachev1alpha1.MasterHA{Etcd: hicachev1alpha1.EtcdEndpoints{
			Managed: &hicachev1alpha1.ManagedEtcd{Storage: hicachev1alpha1.EtcdStorage{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}
	})
	clients := viaEtcd(ns, managedEtcdReady(t, ns, 1), "etcd1")
	clients.putBefore(t)
	leader, _ := servingMaster(t, ns, "", time.Minute)

	pod := backendPods(t, ns, "etcd")[0]
	killed := time.Now()
	if err := k8s.Delete(ctx, &pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	// Until the leader finds its lease gone it may keep serving: wait for a time with no
	// serving master, then for one that serves again.
	var down, served time.Duration
	var newLeader string
	testutil.Eventually(t, 3*time.Minute, "no master serves for a while, then one serves on the new etcd", func() (bool, string) {
		var seen []string
		serving := ""
		for _, m := range backendPods(t, ns, "master") {
			if m.Status.PodIP == "" {
				continue
			}
			h := masterHealth(t, &m)
			seen = append(seen, fmt.Sprintf("%s %s %s view %d", m.Name, h.Role, h.HAState, ptr.Deref(h.ViewVersion, 0)))
			if h.Ready() {
				serving = m.Name
			}
		}
		switch {
		case serving == "" && down == 0:
			down = time.Since(killed)
		case serving != "" && down > 0:
			newLeader, served = serving, time.Since(killed)
			return true, ""
		}
		return false, strings.Join(seen, "; ")
	})
	var p corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod.Name}, &p); err != nil || p.UID == pod.UID {
		t.Fatalf("the etcd member %s was not replaced: %v", pod.Name, err)
	}
	logf("%s: etcd pod on emptyDir killed; no master served from %s, then %s (was %s) served after %s", ns,
		down.Round(100*time.Millisecond), newLeader, leader, served.Round(100*time.Millisecond))
	// What is kept is a cold cache at worst; new clients find the leader in the new etcd.
	clients.checkAfter(t, "the etcd's loss", killed)
	testutil.Eventually(t, time.Minute, "the backend Ready again with the etcd Ready", func() (bool, string) {
		cb := getBackend(t, ns)
		return conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionReady, metav1.ConditionTrue) &&
			conditionIs(cb.Status.Conditions, hicachev1alpha1.ConditionEtcdReady, metav1.ConditionTrue), fmt.Sprintf("%+v", cb.Status.Conditions)
	})
}

// restarts is how often the pod's containers restarted.
func restarts(t *testing.T, ns, name string) int32 {
	t.Helper()
	var p corev1.Pod
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// etcdClients are store clients of the backend that find its leader master through its managed
// etcd, and the keys they put before a fault.
type etcdClients struct {
	ns, master, prefix string
	env                []corev1.EnvVar
	keys               []string
}

// viaEtcd is the clients of the backend in ns through the etcd at endpoint, whose keys start with
// prefix.
func viaEtcd(ns, endpoint, prefix string) *etcdClients {
	return &etcdClients{ns: ns, master: "etcd://" + endpoint, prefix: prefix,
		env: []corev1.EnvVar{{Name: "MC_STORE_CLUSTER_ID", Value: ns + "." + backendName}}}
}

// putBefore puts 30 objects of 4 KiB, before the fault.
func (c *etcdClients) putBefore(t *testing.T) {
	t.Helper()
	c.keys = make([]string, 30)
	for i := range c.keys {
		c.keys[i] = fmt.Sprintf("%s_k%02d", c.prefix, i)
	}
	storeJobVia(t, c.ns, "put-before", c.master, c.env, c.keys, "put", "--size", "4096")
}

// checkAfter checks the store through etcd after fault, which began at killed: what is read back
// of the objects put before holds their own bytes (how many are kept is logged), and a new
// client's objects are written and read back.
func (c *etcdClients) checkAfter(t *testing.T, fault string, killed time.Time) {
	t.Helper()
	out := storeJobVia(t, c.ns, "verify-after", c.master, c.env, c.keys, "verify", "--size", "4096")
	logf("%s: read back after %s: %s", c.ns, fault, lastJSON(out))
	if !strings.Contains(out, `"wrong": 0`) {
		t.Errorf("objects read back after %s hold other bytes: %s", fault, lastJSON(out))
	}
	fresh := []string{c.prefix + "_after_a", c.prefix + "_after_b", c.prefix + "_after_c"}
	// Until the store pods have re-mounted their segments on the new leader (at their next
	// heartbeat) a client with no segment of its own is refused a put for want of space (-200):
	// the writer tries again, as a rank does at its next backup.
	storeJobWith(t, c.ns, "put-after", c.master, c.env, fresh, 4, "put", "--size", "4096")
	var j batchv1.Job
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: "put-after"}, &j); err != nil {
		t.Fatal(err)
	}
	logf("%s: a new client's put succeeded %s after the kill, on try %d", c.ns, time.Since(killed).Round(100*time.Millisecond), j.Status.Failed+1)
	if out := storeJobVia(t, c.ns, "verify-fresh", c.master, c.env, fresh, "verify", "--size", "4096"); !strings.Contains(out, `"verified": 3`) {
		t.Errorf("writing and reading through etcd:// after %s: %s", fault, lastJSON(out))
	}
}
