package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// pdSample is the deployment, shipped as a sample: DeepSeek-V4 served by two prefill
// groups of TP 8 (one node each) and one decode group of TP 16 (two nodes), the decode servers
// without L3, an EAGLE (MTP) draft, and a router in front.
const pdSample = "pd_deepseek_v4.yaml"

// waitRolesReady waits until both roles of a deployment have every group ready and current.
func waitRolesReady(t *testing.T, ns, name string, prefill, decode int32) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	var h *hicachev1alpha1.HiCacheDeployment
	eventually(t, 90*time.Second, fmt.Sprintf("%s has %d prefill and %d decode groups ready and current", name, prefill, decode), func() (bool, string) {
		h = getHCD(t, ns, name)
		r := h.Status.Roles
		if r == nil {
			return false, "no status.roles"
		}
		ok := h.Status.ObservedGeneration == h.Generation && h.Status.Ready == fmt.Sprintf("%d/%d", prefill+decode, prefill+decode) &&
			r.Prefill.ReadyReplicas == prefill && r.Prefill.UpdatedReplicas == prefill && r.Prefill.Replicas == prefill &&
			r.Decode.ReadyReplicas == decode && r.Decode.UpdatedReplicas == decode && r.Decode.Replicas == decode
		return ok, fmt.Sprintf("observed %d of %d, ready %s, roles %+v", h.Status.ObservedGeneration, h.Generation, h.Status.Ready, *r)
	})
	return h
}

// prefillPageKeys are the keys the prefill role's plan writes for n pages.
func prefillPageKeys(t *testing.T, h *hicachev1alpha1.HiCacheDeployment, n int) []string {
	t.Helper()
	roles, err := resolve.RolesOf(h)
	if err != nil {
		t.Fatal(err)
	}
	prefix := cache.NamespacePrefix(h.Status.Cache.Namespace, resolve.ServedModelName(&h.Spec))
	var keys []string
	for i := range n {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/page/%d", h.Name, i)))
		keys = append(keys, cache.KeysForPage(roles.Prefill.Plan, prefix, hex.EncodeToString(sum[:]))...)
	}
	return keys
}

// hashWatch follows the template hashes of a deployment's StatefulSets through a watch, from
// before a change until it is stopped, and checks the in-step bound after every event: while
// both roles still have groups on the template they had at the start, the count of one role's
// groups on a new template leads the other's by at most bound.
type hashWatch struct {
	mu         sync.Mutex
	start      map[string]string // StatefulSet → template hash at the start
	current    map[string]string
	role       map[string]hicachev1alpha1.Role
	events     int
	maxLead    int
	violations []string
	stop       func()
	done       chan struct{}
}

func watchHashes(t *testing.T, ns, name string, bound int) *hashWatch {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &hashWatch{start: map[string]string{}, current: map[string]string{}, role: map[string]hicachev1alpha1.Role{}, stop: cancel, done: make(chan struct{})}
	sel := hicachev1alpha1.LabelDeployment + "=" + name
	list, err := cs.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		h := s.Annotations[hicachev1alpha1.AnnotationTemplateHash]
		w.start[s.Name], w.current[s.Name] = h, h
		w.role[s.Name] = hicachev1alpha1.Role(s.Labels[hicachev1alpha1.LabelRole])
	}
	wi, err := cs.AppsV1().StatefulSets(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		for ev := range wi.ResultChan() {
			s, ok := ev.Object.(*appsv1.StatefulSet)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.events++
			if ev.Type == watch.Deleted {
				delete(w.current, s.Name)
			} else {
				w.current[s.Name] = s.Annotations[hicachev1alpha1.AnnotationTemplateHash]
				w.role[s.Name] = hicachev1alpha1.Role(s.Labels[hicachev1alpha1.LabelRole])
			}
			w.check(bound)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.close)
	return w
}

// rolled counts, per role, the groups on a new template, and tells whether a role still has a
// group on its starting template.
func (w *hashWatch) rolled() (map[hicachev1alpha1.Role]int, map[hicachev1alpha1.Role]bool) {
	n, left := map[hicachev1alpha1.Role]int{}, map[hicachev1alpha1.Role]bool{}
	for name, h := range w.current {
		if h != w.start[name] {
			n[w.role[name]]++
		} else {
			left[w.role[name]] = true
		}
	}
	return n, left
}

func (w *hashWatch) check(bound int) {
	n, left := w.rolled()
	if !left[hicachev1alpha1.RolePrefill] || !left[hicachev1alpha1.RoleDecode] {
		return
	}
	lead := n[hicachev1alpha1.RolePrefill] - n[hicachev1alpha1.RoleDecode]
	if lead < 0 {
		lead = -lead
	}
	w.maxLead = max(w.maxLead, lead)
	if lead > bound {
		w.violations = append(w.violations, fmt.Sprintf("event %d: %d prefill and %d decode groups rolled", w.events, n[hicachev1alpha1.RolePrefill], n[hicachev1alpha1.RoleDecode]))
	}
}

func (w *hashWatch) close() {
	w.stop()
	<-w.done
}

// changed lists the StatefulSets whose template changed since the start.
func (w *hashWatch) changed() map[hicachev1alpha1.Role][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[hicachev1alpha1.Role][]string{}
	for name, h := range w.current {
		if h != w.start[name] {
			out[w.role[name]] = append(out[w.role[name]], name)
		}
	}
	return out
}

// The PD deployment, the sample as shipped, goes Ready with both roles' groups, each
// running its own command line, and its router in front; a breaking change (the sample's MTP
// draft dropped, one packed layer less in every object) rolls both roles in step and flushes the
// old namespace, with pages written there by the real Mooncake client, once neither role uses
// it; a decode-only change then rolls decode alone and flushes nothing.
func TestPDDeploymentRollsRolesInStep(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	h := sampleHCD(t, ns, pdSample)
	name := h.Name
	create(t, h)
	h = waitRolesReady(t, ns, name, 2, 1)
	checkPDRouter(t, ns, name)

	// The router is the sample's, and the client Service points at it.
	var rd appsv1.Deployment
	var svc corev1.Service
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-router"}, &rd); err != nil {
		t.Fatal(err)
	}
	if r := rd.Spec.Template.Spec.Containers[0].Resources; *rd.Spec.Replicas != h.Spec.Router.Replicas || !equality.Semantic.DeepEqual(r, h.Spec.Router.Resources) {
		t.Errorf("router Deployment of %d pods with %+v; the sample asks for %d with %+v", *rd.Spec.Replicas, r, h.Spec.Router.Replicas, h.Spec.Router.Resources)
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector[hicachev1alpha1.LabelRouter] != name || len(svc.Spec.Selector) != 1 {
		t.Errorf("the client Service selects %v, want the router pods", svc.Spec.Selector)
	}

	// The groups, their labels and their command lines.
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	nsA := h.Status.Cache.Namespace
	want := map[string]int{name + "-prefill-0": 1, name + "-prefill-1": 1, name + "-decode-0": 2}
	sets := groups(t, ns, name)
	if len(sets) != len(want) {
		t.Fatalf("%d StatefulSets, want %v", len(sets), want)
	}
	for _, s := range sets {
		if n, ok := want[s.Name]; !ok || int(*s.Spec.Replicas) != n {
			t.Errorf("StatefulSet %s of %d pods; want %v", s.Name, *s.Spec.Replicas, want)
		}
	}
	pods := rankPods(t, ns, name)
	if len(pods) != 4 {
		t.Fatalf("%d rank pods, want 4", len(pods))
	}
	for _, p := range pods {
		role := p.Labels[hicachev1alpha1.LabelRole]
		c := p.Spec.Containers[0]
		expanded := sglang.ExpandVarRefs(c.Args, map[string]string{"NODE_RANK": p.Labels["apps.kubernetes.io/pod-index"], "POD_IP": "10.0.0.1"})
		if err := spec.Validate(expanded); err != nil {
			t.Errorf("pod %s: the pinned SGLang release refuses its command line: %v", p.Name, err)
		}
		if got, _ := flagValue(c.Args, "--disaggregation-mode"); got != role || !strings.HasPrefix(p.Name, name+"-"+role+"-") {
			t.Errorf("pod %s (role %q) runs --disaggregation-mode %q", p.Name, role, got)
		}
		if got, _ := flagValue(c.Args, "--speculative-algorithm"); got != "EAGLE" {
			t.Errorf("pod %s runs --speculative-algorithm %q, want the sample's EAGLE", p.Name, got)
		}
		_, hicache := flagValue(c.Args, "--enable-hierarchical-cache")
		writes := role == "prefill"
		if hicache != writes || (p.Labels[hicachev1alpha1.LabelCacheNamespace] == nsA) != writes {
			t.Errorf("pod %s: hierarchical cache %v, namespace label %q; want both only on prefill ranks (namespace %s)", p.Name, hicache, p.Labels[hicachev1alpha1.LabelCacheNamespace], nsA)
		}
		if writes && extraConfig(t, c.Args)["master_server_address"] != m.RPCAddr {
			t.Errorf("pod %s does not write to the master %s", p.Name, m.RPCAddr)
		}
	}
	if h.Status.Roles.Prefill.Ready != "2/2" || h.Status.Roles.Decode.Ready != "1/1" {
		t.Errorf("status.roles %+v, want prefill 2/2 and decode 1/1", *h.Status.Roles)
	}
	// The ConfigMap holds each role's plan, as kubectl hicache status reads them.
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: resolve.ConfigMapName(name)}, &cm); err != nil {
		t.Fatal(err)
	}
	for key, ranks := range map[string]int{"plan.json": 8, "decode-plan.json": 16} {
		var p cache.RankPlan
		if err := json.Unmarshal([]byte(cm.Data[key]), &p); err != nil || p.NumRanks() != ranks {
			t.Errorf("ConfigMap %s: %s has %d ranks (%v), want %d", cm.Name, key, p.NumRanks(), err, ranks)
		}
	}

	// Pages under the namespace both roles share, as the prefill's TP0 writes them.
	keysA := prefillPageKeys(t, h, 8)
	m.putKeys(t, keysA, 4096)
	if got := countPrefix(t, m, nsA); got != int64(len(keysA)) {
		t.Fatalf("%d keys under %s, want %d", got, nsA, len(keysA))
	}

	// A breaking change of both roles' templates rolls them in step. (With one decode group no
	// lead above 1 can arise here; TestPDRolesStayInStepWhenDecodeIsSlow holds a role back.)
	bound := max(int(h.Spec.Rollout.MaxUnavailable), 1)
	w := watchHashes(t, ns, name, bound)
	began := time.Now()
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) {
		h.Spec.Topology.Draft = nil
	})
	h = waitRolesReady(t, ns, name, 2, 1)
	rolledIn := time.Since(began)
	nsB := h.Status.Cache.Namespace
	if nsB == nsA {
		t.Fatalf("dropping the MTP draft kept namespace %s", nsA)
	}
	var flushName string
	eventually(t, 90*time.Second, "the old namespace flushed once neither role uses it", func() (bool, string) {
		h := getHCD(t, ns, name)
		if h.Status.Cache.LastFlush == nil || h.Status.Cache.LastFlush.Namespace != nsA {
			return false, fmt.Sprintf("cache status %+v", h.Status.Cache)
		}
		flushName = h.Status.Cache.LastFlush.Name
		return len(h.Status.Cache.StaleNamespaces) == 0, fmt.Sprintf("stale %+v", h.Status.Cache.StaleNamespaces)
	})
	cf := waitFlushComplete(t, ns, flushName)
	if cf.Status.Removed != int64(len(keysA)) || countPrefix(t, m, nsA) != 0 {
		t.Errorf("CacheFlush %s removed %d of %d keys, %d left under %s", cf.Name, cf.Status.Removed, len(keysA), countPrefix(t, m, nsA), nsA)
	}
	w.close()
	w.mu.Lock()
	if len(w.violations) > 0 {
		t.Errorf("the roles did not roll in step (bound %d): %s", bound, strings.Join(w.violations, "; "))
	}
	rolled, _ := w.rolled()
	events, maxLead := w.events, w.maxLead
	w.mu.Unlock()
	if rolled[hicachev1alpha1.RolePrefill] != 2 || rolled[hicachev1alpha1.RoleDecode] != 1 {
		t.Errorf("rolled %v, want both prefill groups and the decode group", rolled)
	}
	t.Logf("breaking change: both roles rolled in %s, %d StatefulSet events, largest lead %d (bound %d)", rolledIn.Round(time.Millisecond), events, maxLead, bound)
	checkPDRouter(t, ns, name)
	for _, p := range rankPods(t, ns, name) {
		if got, ok := flagValue(p.Spec.Containers[0].Args, "--speculative-algorithm"); ok {
			t.Errorf("pod %s runs --speculative-algorithm %q after the draft was dropped", p.Name, got)
		}
	}

	// A change of the decode role alone rolls decode alone and flushes nothing.
	flushes := len(flushesOf(t, ns))
	prefillPods := map[string]string{}
	for _, p := range rankPods(t, ns, name) {
		if p.Labels[hicachev1alpha1.LabelRole] == "prefill" {
			prefillPods[p.Name] = string(p.UID)
		}
	}
	w = watchHashes(t, ns, name, bound)
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) {
		h.Spec.Roles.Decode.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("48"), corev1.ResourceMemory: resource.MustParse("256Gi")}}
	})
	eventually(t, 60*time.Second, "the decode group rolled", func() (bool, string) {
		c := w.changed()
		return len(c[hicachev1alpha1.RoleDecode]) == 1, fmt.Sprintf("changed %v", c)
	})
	h = waitRolesReady(t, ns, name, 2, 1)
	if c := w.changed(); len(c[hicachev1alpha1.RolePrefill]) != 0 {
		t.Errorf("a decode-only change changed prefill groups %v", c[hicachev1alpha1.RolePrefill])
	}
	for _, p := range rankPods(t, ns, name) {
		switch p.Labels[hicachev1alpha1.LabelRole] {
		case "prefill":
			if prefillPods[p.Name] != string(p.UID) {
				t.Errorf("prefill pod %s was replaced by a decode-only change", p.Name)
			}
		case "decode":
			if cpu := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; cpu.String() != "48" {
				t.Errorf("decode pod %s requests %s CPUs, want 48", p.Name, cpu.String())
			}
		}
	}
	if h.Status.Cache.Namespace != nsB || len(h.Status.Cache.StaleNamespaces) != 0 {
		t.Errorf("a decode-only change moved the namespace %s → %s (stale %+v)", nsB, h.Status.Cache.Namespace, h.Status.Cache.StaleNamespaces)
	}
	time.Sleep(2 * time.Second) // a flush would be asked for by now
	if n := len(flushesOf(t, ns)); n != flushes {
		t.Errorf("%d CacheFlushes after a decode-only change, %d before", n, flushes)
	}
}

// checkPDRouter checks the router of a deployment with roles: it runs in prefill/decode mode
// with a command line the pinned router accepts, and the selectors it discovers workers with,
// evaluated by Kubernetes' own selector code over every pod of the namespace, choose exactly the
// leaders of the prefill groups as prefill workers and those of the decode groups as decode
// workers: no follower, no router pod, no pod of another deployment. (test/router runs the
// router itself on the real node with these selectors.)
func checkPDRouter(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var dep appsv1.Deployment
	eventually(t, 30*time.Second, "the router Deployment", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-router"}, &dep)
		return err == nil, fmt.Sprint(err)
	})
	args := dep.Spec.Template.Spec.Containers[0].Args
	spec, err := router.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(args); err != nil {
		t.Errorf("the pinned router refuses the applied command line: %v", err)
	}
	if !slices.Contains(args, "--pd-disaggregation") {
		t.Errorf("router args %q lack --pd-disaggregation", args)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for flag, role := range map[string]string{"--prefill-selector": "prefill", "--decode-selector": "decode"} {
		set := labels.Set{}
		if i := slices.Index(args, flag); i >= 0 {
			for _, word := range args[i+1:] {
				if strings.HasPrefix(word, "--") {
					break
				}
				k, v, _ := strings.Cut(word, "=")
				set[k] = v
			}
		}
		sel := labels.SelectorFromSet(set)
		var got, want []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if sel.Matches(labels.Set(p.Labels)) {
				got = append(got, p.Name)
			}
			if p.Labels[hicachev1alpha1.LabelDeployment] == name && p.Labels[hicachev1alpha1.LabelRole] == role && p.Labels["apps.kubernetes.io/pod-index"] == "0" {
				want = append(want, p.Name)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		wantN := map[string]int{"prefill": 2, "decode": 1}[role]
		if len(set) == 0 || !slices.Equal(got, want) || len(want) != wantN {
			t.Errorf("router %s %v chooses %v; the %s leaders are %v (want %d)", flag, set, got, role, want, wantN)
		}
	}
}

// pdSlowDecode has four prefill groups and two decode groups of one single-GPU pod each, the
// decode pods kept on one node (set by the test), so that the test can hold the decode role's
// new pods off it.
const pdSlowDecode = `
metadata: {name: pd-slow}
spec:
  model: {path: Qwen/Qwen3-32B, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
  topology: {tensorParallel: 1, gpusPerNode: 1}
  storage: {backendRef: {name: mooncake}}
  roles:
    prefill: {replicas: 4}
    decode: {replicas: 2, template: {nodeSelector: {kubernetes.io/hostname: %s}}}
    transfer: {backend: mooncake_tcp}
`

// cordon marks a node unschedulable, as kubectl cordon does, until the returned function or the
// test's end undoes it: the pods on it keep running, new ones cannot be scheduled there.
func cordon(t *testing.T, node string) (uncordon func()) {
	t.Helper()
	set := func(v bool) error {
		var n corev1.Node
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: node}, &n); err != nil {
			return err
		}
		n.Spec.Unschedulable = v
		return k8s.Update(context.Background(), &n)
	}
	eventually(t, 10*time.Second, "node "+node+" cordoned", func() (bool, string) {
		err := set(true)
		return err == nil, fmt.Sprint(err)
	})
	var once sync.Once
	uncordon = func() {
		once.Do(func() {
			eventually(t, 10*time.Second, "node "+node+" uncordoned", func() (bool, string) {
				err := set(false)
				return err == nil, fmt.Sprint(err)
			})
		})
	}
	t.Cleanup(uncordon)
	return uncordon
}

// progressing is the message of a deployment's Progressing condition.
func progressing(h *hicachev1alpha1.HiCacheDeployment) string {
	if c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionProgressing); c != nil {
		return c.Message
	}
	return ""
}

// A breaking change of a deployment whose decode groups come up slowly (their node is cordoned,
// so the decode role's new pods wait to be scheduled while the prefill role's start at once)
// rolls the prefill role only as far as the in-step bound allows: with four prefill groups and
// two decode groups, a planner that let each role roll on its own budget would have three
// prefill groups on the new template beside one decode group (a lead of 2, above the bound of
// 1) before the first new decode group is scheduled. The watch records every StatefulSet's
// template after each event; the prefill groups must be held, and say so, until the decode role
// catches up.
func TestPDRolesStayInStepWhenDecodeIsSlow(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	nodes := cluster.NodeNames()
	decodeNode := nodes[len(nodes)-1]
	create(t, hcd(t, ns, fmt.Sprintf(pdSlowDecode, decodeNode)))
	h := waitRolesReady(t, ns, "pd-slow", 4, 2)
	bound := max(int(h.Spec.Rollout.MaxUnavailable), 1)
	if bound != 1 {
		t.Fatalf("spec.rollout.maxUnavailable defaults to %d; the test is built for a bound of 1", h.Spec.Rollout.MaxUnavailable)
	}
	nsA := h.Status.Cache.Namespace

	w := watchHashes(t, ns, "pd-slow", bound)
	uncordon := cordon(t, decodeNode)
	began := time.Now()
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.HiCache.KVCacheDType = "fp8_e4m3" })

	// The prefill role rolls until it leads by the bound, then waits; a planner without the rule
	// would roll all four prefill groups instead, and the watch would record the lead of 2.
	var msg string
	eventually(t, 60*time.Second, "the prefill role held for the decode role", func() (bool, string) {
		msg = progressing(getHCD(t, ns, "pd-slow"))
		w.mu.Lock()
		n, _ := w.rolled()
		violations := len(w.violations)
		w.mu.Unlock()
		// Every round holds the groups the bound leaves, from the first; the status shows the
		// hold at the bound once it has seen both prefill groups roll.
		held := strings.Contains(msg, "(prefill 2 of 4, decode 1 of 2)") && strings.Contains(msg, "wait for the decode role")
		return held || violations > 0 || n[hicachev1alpha1.RolePrefill] == 4, fmt.Sprintf("rolled %v; Progressing: %s", n, msg)
	})
	w.mu.Lock()
	n, _ := w.rolled()
	violations := slices.Clone(w.violations)
	w.mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("the prefill role ran ahead of the decode role (bound %d): %s", bound, strings.Join(violations, "; "))
	}
	if n[hicachev1alpha1.RolePrefill] != 2 || n[hicachev1alpha1.RoleDecode] != 1 {
		t.Errorf("held with %d prefill and %d decode groups rolled, want 2 and 1 (a lead of the bound)", n[hicachev1alpha1.RolePrefill], n[hicachev1alpha1.RoleDecode])
	}
	// The decode role is slow because its new pod is not scheduled, not for another reason.
	heldAt := time.Since(began)
	eventually(t, 10*time.Second, "the rolled decode group's pod waiting for a node", func() (bool, string) {
		var pending []string
		for _, p := range rankPods(t, ns, "pd-slow") {
			if p.Labels[hicachev1alpha1.LabelRole] == "decode" && p.Spec.NodeName == "" {
				pending = append(pending, p.Name)
			}
		}
		return len(pending) == 1, fmt.Sprintf("decode pods waiting for a node: %v", pending)
	})

	// Once the decode pods can be scheduled, both roles finish.
	uncordon()
	h = waitRolesReady(t, ns, "pd-slow", 4, 2)
	rolledIn := time.Since(began)
	if h.Status.Cache.Namespace == nsA {
		t.Errorf("a new KV cache dtype kept namespace %s", nsA)
	}
	w.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Errorf("the roles did not roll in step (bound %d): %s", bound, strings.Join(w.violations, "; "))
	}
	rolled, _ := w.rolled()
	if rolled[hicachev1alpha1.RolePrefill] != 4 || rolled[hicachev1alpha1.RoleDecode] != 2 {
		t.Errorf("rolled %v, want all four prefill and both decode groups", rolled)
	}
	if w.maxLead != bound {
		t.Errorf("the largest lead was %d; the prefill role should have led by the bound %d while decode was held", w.maxLead, bound)
	}
	t.Logf("held in step %s after the change (%s); both roles rolled in %s, %d StatefulSet events, largest lead %d (bound %d)",
		heldAt.Round(time.Millisecond), msg, rolledIn.Round(time.Millisecond), w.events, w.maxLead, bound)
}
