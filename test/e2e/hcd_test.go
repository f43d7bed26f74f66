package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// dsv4 is the suite's two-node DeepSeek-V4 deployment (testutil.DeepSeekV4), named dsv4, in ns.
func dsv4(ns string) *hicachev1alpha1.HiCacheDeployment { return testutil.DeepSeekV4(ns, "dsv4") }

const qwen3 = `
metadata: {name: qwen3}
spec:
  model: {path: Qwen/Qwen3-32B, revision: 0123456789abcdef0123456789abcdef01234567, servedName: qwen3-32b}
  profile: Qwen3
  topology: {tensorParallel: 4, gpusPerNode: 4}
  hicache: {ratio: "2"}
  storage: {backendRef: {name: mooncake}}
`

// checkRankFlags checks what every rank pod of a ready deployment runs against the plan and the
// real SGLang argument definitions.
func checkRankFlags(t *testing.T, ns, name string, nodes int, masterRPC string) {
	t.Helper()
	h := getHCD(t, ns, name)
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	pods := rankPods(t, ns, name)
	if len(pods) != nodes {
		t.Fatalf("%d rank pods, want %d", len(pods), nodes)
	}
	seenNodes := map[string]bool{}
	for _, p := range pods {
		c := p.Spec.Containers[0]
		// The kubelet expands $(NODE_RANK) from the pod's index before SGLang parses the line.
		expanded := sglang.ExpandVarRefs(c.Args, map[string]string{"NODE_RANK": p.Labels["apps.kubernetes.io/pod-index"], "POD_IP": "10.0.0.1"})
		if err := spec.Validate(expanded); err != nil {
			t.Errorf("pod %s: the pinned SGLang release refuses its command line: %v", p.Name, err)
		}
		if got, _ := flagValue(c.Args, "--tp-size"); got != fmt.Sprint(h.Spec.Topology.TensorParallel) {
			t.Errorf("pod %s: --tp-size %q, want %d", p.Name, got, h.Spec.Topology.TensorParallel)
		}
		if got, _ := flagValue(c.Args, "--hicache-storage-backend"); got != "mooncake" {
			t.Errorf("pod %s: --hicache-storage-backend %q, want mooncake", p.Name, got)
		}
		extra := extraConfig(t, c.Args)
		if extra["extra_backend_tag"] != h.Status.Cache.Namespace || extra["master_server_address"] != masterRPC {
			t.Errorf("pod %s: extra config %v, want extra_backend_tag %s and master %s", p.Name, extra, h.Status.Cache.Namespace, masterRPC)
		}
		if p.Labels[hicachev1alpha1.LabelCacheNamespace] != h.Status.Cache.Namespace {
			t.Errorf("pod %s: namespace label %q, want %q", p.Name, p.Labels[hicachev1alpha1.LabelCacheNamespace], h.Status.Cache.Namespace)
		}
		gpus := c.Resources.Limits[hicachedeployment.GPUResource]
		if want := int64(h.Spec.Topology.GPUsPerNode); gpus.Value() != want && nodes > 1 {
			t.Errorf("pod %s requests %s GPUs, want %d", p.Name, gpus.String(), want)
		}
		if nodes > 1 {
			if got, _ := flagValue(c.Args, "--nnodes"); got != fmt.Sprint(nodes) {
				t.Errorf("pod %s: --nnodes %q, want %d", p.Name, got, nodes)
			}
			if got, _ := flagValue(c.Args, "--node-rank"); got != "$(NODE_RANK)" {
				t.Errorf("pod %s: --node-rank %q, want $(NODE_RANK)", p.Name, got)
			}
			if v, _ := envValue(c, "NODE_RANK"); v != "fieldRef:metadata.labels['apps.kubernetes.io/pod-index']" {
				t.Errorf("pod %s: NODE_RANK from %q", p.Name, v)
			}
			addr, _ := flagValue(c.Args, "--dist-init-addr")
			if !strings.HasPrefix(addr, fmt.Sprintf("%s-0-0.%s-0.%s.svc:", name, name, ns)) {
				t.Errorf("pod %s: --dist-init-addr %q does not name the group's leader", p.Name, addr)
			}
		}
		seenNodes[p.Spec.NodeName] = true
	}
	if len(seenNodes) != nodes {
		t.Errorf("the %d ranks landed on %d nodes, want one node each", nodes, len(seenNodes))
	}
}

func TestDeepSeekV4TwoNodeGroupGoesReady(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	h := dsv4(ns)
	h.Spec.Topology.Draft = &hicachev1alpha1.DraftSpec{Algorithm: "DSPARK", ModelPath: "/models/deepseek-ai/DeepSeek-V4-DSpark"}
	create(t, h)
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "dsv4", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 60*time.Second)
	checkRankFlags(t, ns, "dsv4", 2, m.RPCAddr)

	h = getHCD(t, ns, "dsv4")
	if h.Status.Plan == nil || h.Status.Plan.Ranks != 16 || h.Status.Plan.Writers != 1 || h.Status.Plan.Nodes != 2 {
		t.Errorf("plan status %+v, want 16 ranks on 2 nodes with 1 writer (TP0; the 15 followers have no duties)", h.Status.Plan)
	}
	if !strings.Contains(h.Status.Draft, "DSPARK") || h.Status.Attention != hicachev1alpha1.AttentionDSV4 || h.Status.Ready != "1/1" {
		t.Errorf("status draft %q attention %q ready %q", h.Status.Draft, h.Status.Attention, h.Status.Ready)
	}
	args := rankPods(t, ns, "dsv4")[0].Spec.Containers[0].Args
	if got, _ := flagValue(args, "--speculative-algorithm"); got != "DSPARK" {
		t.Errorf("--speculative-algorithm %q, want DSPARK", got)
	}
	// The ConfigMap carries the plan for people and tools.
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "dsv4-hicache"}, &cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data["plan.json"], `"tpRank": 15`) || cm.Data["extra-config.json"] == "" {
		t.Errorf("ConfigMap dsv4-hicache lacks the plan or the extra config: %v", cm.Data)
	}
}

func TestQwen3SingleNodeAndScaling(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	create(t, hcd(t, ns, qwen3))
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "qwen3", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 60*time.Second)
	checkRankFlags(t, ns, "qwen3", 1, m.RPCAddr)
	h := getHCD(t, ns, "qwen3")
	if h.Status.Plan.Writers != 4 {
		t.Errorf("Qwen3 TP=4 has %d writers, want 4 (every rank writes its KV shard)", h.Status.Plan.Writers)
	}
	namespace := h.Status.Cache.Namespace

	// Scale out: a whole second group; the namespace stays (replicas are neutral).
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Replicas = ptr.To(int32(3)) })
	waitReadyGroups(t, ns, "qwen3", 3)
	if got := len(groups(t, ns, "qwen3")); got != 3 {
		t.Errorf("%d StatefulSets after scaling to 3, want 3", got)
	}
	if got := getHCD(t, ns, "qwen3").Status.Cache.Namespace; got != namespace {
		t.Errorf("scaling changed the namespace %s → %s", namespace, got)
	}
	// Scale in: whole groups go.
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Replicas = ptr.To(int32(1)) })
	waitReadyGroups(t, ns, "qwen3", 1)
	eventually(t, 30*time.Second, "groups 1 and 2 removed", func() (bool, string) {
		g := groups(t, ns, "qwen3")
		p := rankPods(t, ns, "qwen3")
		return len(g) == 1 && g[0].Name == "qwen3-0" && len(p) == 1, fmt.Sprintf("%d groups, %d pods", len(g), len(p))
	})
}

func waitReadyGroups(t *testing.T, ns, name string, n int32) {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("%s has %d ready groups", name, n), func() (bool, string) {
		h := getHCD(t, ns, name)
		ready := meta.IsStatusConditionTrue(h.Status.Conditions, hicachev1alpha1.ConditionReady)
		return ready && h.Status.ReadyReplicas == n && h.Status.Replicas == n && h.Status.ObservedGeneration == h.Generation,
			fmt.Sprintf("ready=%v %d/%d groups, observed %d of %d", ready, h.Status.ReadyReplicas, h.Status.Replicas, h.Status.ObservedGeneration, h.Generation)
	})
}

func TestFailedRankRecreatesItsWholeGroup(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	create(t, dsv4(ns))
	waitReadyGroups(t, ns, "dsv4", 1)
	before := rankPods(t, ns, "dsv4")
	if len(before) != 2 {
		t.Fatalf("%d pods, want 2", len(before))
	}
	// Rank 1 (a follower) fails; its leader is healthy, but the process group is broken.
	if err := cluster.FailPod(context.Background(), ns, before[1].Name); err != nil {
		t.Fatal(err)
	}
	waitGroupRecreated(t, ns, "dsv4", 1, before)
}

// A formed group's record of which pod holds each rank rides on the status write that reports the
// group Ready, so that its StatefulSet is written once; a rank pod replaced later (deleted, and made
// again by the StatefulSet) is told from that record, and the whole group is recreated.
func TestReplacedRankRecreatesItsWholeGroup(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	create(t, dsv4(ns))
	waitReadyGroups(t, ns, "dsv4", 1)
	h := getHCD(t, ns, "dsv4")
	before := rankPods(t, ns, "dsv4")
	if len(before) != 2 {
		t.Fatalf("%d pods, want 2", len(before))
	}
	if ok, msg := formedWith(h, "dsv4-0", before); !ok || len(h.Status.FormedGroups) != 1 {
		t.Errorf("the status that reports the group Ready: %s (of %d records)", msg, len(h.Status.FormedGroups))
	}
	if w := operatorWritesTo(ns, "statefulsets/dsv4-0"); len(w) != 1 {
		t.Errorf("the group's StatefulSet was written %d times, want once (its members are recorded in the status): %v", len(w), w)
	}
	replaceRankAndWaitRecreated(t, ns, "dsv4", 1, before)
	if n := len(getHCD(t, ns, "dsv4").Status.FormedGroups); n != 1 {
		t.Errorf("%d records in status.formedGroups after the recreation, want 1", n)
	}
}

// replaceRankAndWaitRecreated deletes the pod of the last rank of a formed group of a deployment
// of n groups, whose pods are before; its StatefulSet makes it again, a pod the group did not form
// with. It waits until the whole group is recreated (waitGroupRecreated) and recorded anew in
// status.formedGroups.
func replaceRankAndWaitRecreated(t *testing.T, ns, name string, n int32, before []corev1.Pod) {
	t.Helper()
	if err := k8s.Delete(context.Background(), &before[len(before)-1]); err != nil {
		t.Fatal(err)
	}
	waitGroupRecreated(t, ns, name, n, before)
	sts := name + "-" + before[0].Labels[hicachev1alpha1.LabelGroup]
	eventually(t, 10*time.Second, "the record of the group formed anew", func() (bool, string) {
		return formedWith(getHCD(t, ns, name), sts, groupPods(t, ns, before[0]))
	})
}

// formedWith tells whether h's status.formedGroups records the group of StatefulSet sts as formed
// with pods, by rank.
func formedWith(h *hicachev1alpha1.HiCacheDeployment, sts string, pods []corev1.Pod) (bool, string) {
	want := membersOf(pods)
	for _, f := range h.Status.FormedGroups {
		if f.Name == sts {
			return f.Pods == want, fmt.Sprintf("status.formedGroups records %s formed with %s, want %s", sts, f.Pods, want)
		}
	}
	return false, fmt.Sprintf("status.formedGroups %+v has no record of %s, want one of %s", h.Status.FormedGroups, sts, want)
}

// membersOf is how the operator writes which pod holds each rank of a group: "0=<uid>,1=<uid>".
func membersOf(pods []corev1.Pod) string {
	parts := make([]string, 0, len(pods))
	for _, p := range pods {
		parts = append(parts, p.Labels[podIndexLabel]+"="+string(p.UID))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// groupPods are the rank pods of the serving group of pod p, sorted by name.
func groupPods(t *testing.T, ns string, p corev1.Pod) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, q := range rankPods(t, ns, p.Labels[hicachev1alpha1.LabelDeployment]) {
		if q.Labels[hicachev1alpha1.LabelGroup] == p.Labels[hicachev1alpha1.LabelGroup] && q.Labels[hicachev1alpha1.LabelRole] == p.Labels[hicachev1alpha1.LabelRole] {
			out = append(out, q)
		}
	}
	return out
}

// waitGroupRecreated waits until every rank pod of the group whose pods were before is a new pod,
// Ready, the deployment's n groups are Ready again, and a GroupRecreated Event says why.
func waitGroupRecreated(t *testing.T, ns, name string, n int32, before []corev1.Pod) {
	t.Helper()
	eventually(t, 60*time.Second, "every rank of the group replaced by a new pod, ready", func() (bool, string) {
		after := groupPods(t, ns, before[0])
		if len(after) != len(before) {
			return false, fmt.Sprintf("%d pods", len(after))
		}
		for i := range after {
			for _, old := range before {
				if after[i].UID == old.UID {
					return false, "pod " + after[i].Name + " is still the old one"
				}
			}
			if !kubeutil.PodReady(&after[i]) {
				return false, "pod " + after[i].Name + " not ready"
			}
		}
		return true, ""
	})
	waitReadyGroups(t, ns, name, n)
	eventually(t, 10*time.Second, "a GroupRecreated event", func() (bool, string) {
		n := countEvents(t, ns, name, hicachev1alpha1.ReasonGroupRecreated)
		return n > 0, "no GroupRecreated event"
	})
}

// countEvents counts the events with a reason about one object.
func countEvents(t *testing.T, ns, name, reason string) int {
	t.Helper()
	var events corev1.EventList
	if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events.Items {
		if e.Reason == reason && e.InvolvedObject.Name == name {
			n++
		}
	}
	return n
}

func TestBreakingChangeRotatesNamespaceNeutralDoesNot(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	h := dsv4(ns)
	h.Spec.Storage.FlushPolicy = hicachev1alpha1.FlushManual
	create(t, h)
	waitReadyGroups(t, ns, "dsv4", 1)
	nsA := getHCD(t, ns, "dsv4").Status.Cache.Namespace

	// Neutral: replicas.
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Replicas = ptr.To(int32(2)) })
	waitReadyGroups(t, ns, "dsv4", 2)
	if got := getHCD(t, ns, "dsv4").Status.Cache.Namespace; got != nsA {
		t.Fatalf("a replicas change moved the namespace %s → %s", nsA, got)
	}

	// Breaking: no draft → DSpark (3 packed layers change every object's size under the same key).
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) {
		h.Spec.Topology.Draft = &hicachev1alpha1.DraftSpec{Algorithm: "DSPARK", ModelPath: "/models/deepseek-ai/DeepSeek-V4-DSpark"}
	})
	waitReadyGroups(t, ns, "dsv4", 2)
	eventually(t, 60*time.Second, "every group on the new namespace", func() (bool, string) {
		h := getHCD(t, ns, "dsv4")
		ok := meta.IsStatusConditionTrue(h.Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent) &&
			h.Status.UpdatedReplicas == 2 && h.Status.ObservedGeneration == h.Generation
		return ok, fmt.Sprintf("namespace %s, updated %d", h.Status.Cache.Namespace, h.Status.UpdatedReplicas)
	})
	h = getHCD(t, ns, "dsv4")
	nsB := h.Status.Cache.Namespace
	if nsB == nsA {
		t.Fatalf("the draft change kept namespace %s", nsA)
	}
	if len(h.Status.Cache.StaleNamespaces) != 1 || h.Status.Cache.StaleNamespaces[0].Namespace != nsA {
		t.Errorf("stale namespaces %+v, want [%s]", h.Status.Cache.StaleNamespaces, nsA)
	}
	// Rolled groups are replaced on purpose, not recreated as broken.
	if n := countEvents(t, ns, "dsv4", hicachev1alpha1.ReasonGroupRecreated); n != 0 {
		t.Errorf("%d GroupRecreated events after a roll, want none: a rolled group is not a broken one", n)
	}
	for _, p := range rankPods(t, ns, "dsv4") {
		if p.Labels[hicachev1alpha1.LabelCacheNamespace] != nsB {
			t.Errorf("pod %s writes namespace %s, want %s", p.Name, p.Labels[hicachev1alpha1.LabelCacheNamespace], nsB)
		}
		if got := extraConfig(t, p.Spec.Containers[0].Args)["extra_backend_tag"]; got != nsB {
			t.Errorf("pod %s extra_backend_tag %v, want %s", p.Name, got, nsB)
		}
	}
}

func TestMissingBackendCreatesNothingThenRecovers(t *testing.T) {
	ns := newNamespace(t)
	create(t, hcd(t, ns, qwen3))
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "qwen3", hicachev1alpha1.ConditionBackendReady, metav1.ConditionFalse, 30*time.Second)
	h := getHCD(t, ns, "qwen3")
	c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionBackendReady)
	if c.Reason != hicachev1alpha1.ReasonBackendNotFound || !strings.Contains(c.Message, `CacheBackend "mooncake" does not exist`) {
		t.Errorf("BackendReady %s: %s", c.Reason, c.Message)
	}
	time.Sleep(time.Second)
	if g := groups(t, ns, "qwen3"); len(g) != 0 {
		t.Fatalf("%d serving groups were created without a backend", len(g))
	}
	m := startMaster(t)
	externalBackend(t, ns, "mooncake", m.RPCAddr, m.AdminURL)
	waitReadyGroups(t, ns, "qwen3", 1)
}

// A spec that only the resolver can judge (CEL refuses an impossible topology at apply; SGLang's
// refusal of --disable-radix-cache beside HiCache needs the flags parsed) is reported as
// InvalidSpec, creates nothing, and runs once fixed.
func TestInvalidSpecIsReportedAndFixable(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	h := hcd(t, ns, qwen3)
	h.Spec.Template.ExtraArgs = []string{"--disable-radix-cache"}
	create(t, h)
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "qwen3", hicachev1alpha1.ConditionReady, metav1.ConditionFalse, 30*time.Second)
	c := meta.FindStatusCondition(getHCD(t, ns, "qwen3").Status.Conditions, hicachev1alpha1.ConditionReady)
	if c.Reason != hicachev1alpha1.ReasonInvalidSpec || !strings.Contains(c.Message, "--disable-radix-cache") {
		t.Errorf("Ready %s: %s; want InvalidSpec naming --disable-radix-cache", c.Reason, c.Message)
	}
	if g := groups(t, ns, "qwen3"); len(g) != 0 {
		t.Fatalf("%d groups created for a spec SGLang refuses", len(g))
	}
	update(t, getHCD(t, ns, "qwen3"), func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.Template.ExtraArgs = nil })
	waitReadyGroups(t, ns, "qwen3", 1)
}

func TestSteadyStateCostsNoRequests(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	create(t, hcd(t, ns, qwen3))
	h := dsv4(ns)
	h.Name = "dsv4"
	create(t, h)
	waitReadyGroups(t, ns, "qwen3", 1)
	waitReadyGroups(t, ns, "dsv4", 1)
	// Let the last status writes and backend probes settle, then watch the operator's requests
	// about this namespace for a while (other tests' namespaces may still be going away).
	time.Sleep(3 * time.Second)
	lastWritesMu.Lock()
	lastWrites = nil
	lastWritesMu.Unlock()
	reqs := operatorRequests.Load()
	time.Sleep(5 * time.Second)
	lastWritesMu.Lock()
	defer lastWritesMu.Unlock()
	var ours []string
	for _, w := range lastWrites {
		if strings.Contains(w, "/namespaces/"+ns+"/") {
			ours = append(ours, w)
		}
	}
	if len(ours) != 0 {
		t.Errorf("after convergence the operator wrote %d times in 5 s, want none: %v", len(ours), ours)
	}
	// Reads come from the informers' cache: no request at all, for any namespace, but watches.
	if extra := operatorRequests.Load() - reqs - int64(len(lastWrites)); extra > 0 {
		t.Errorf("after convergence the operator sent %d reads, want none (reads come from the cache)", extra)
	}
}
