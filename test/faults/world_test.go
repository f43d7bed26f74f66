package faults

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// nodesPerGroup is the rank pods per serving group of the deployment every test runs
// (testutil.DeepSeekV4).
const nodesPerGroup = testutil.DeepSeekV4Nodes

// rolledImage is the SGLang image a test rolls the deployments to: a CUDA build of the same
// release, so the pods roll and the L3 namespace stays (kwok runs no container).
const rolledImage = "lmsysorg/sglang:v0.5.23-cu129"

// withBackend starts a real Mooncake master for the test and creates CacheBackend "mooncake" in
// ns pointing at it; the managers of the test make it Ready.
func withBackend(t *testing.T, ns string) *mooncaketest.Master {
	t.Helper()
	m := mooncaketest.Start(t)
	if err := k8s.Create(context.Background(), testutil.ExternalBackend(ns, "mooncake", m.RPCAddr, m.AdminURL)); err != nil {
		t.Fatalf("creating CacheBackend mooncake: %v", err)
	}
	return m
}

// createDeployments creates DeepSeek-V4 deployments prefix-0 … prefix-<n-1> in ns, as fast as the API
// server takes them, and returns their names.
func createDeployments(t *testing.T, ns, prefix string, n int) []string {
	t.Helper()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		createDeployment(t, ns, names[i], 1)
	}
	return names
}

// createDeployment creates DeepSeek-V4 deployment name of replicas serving groups in ns.
func createDeployment(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	h := testutil.DeepSeekV4(ns, name)
	h.Spec.Replicas = ptr.To(replicas)
	if err := k8s.Create(context.Background(), h); err != nil {
		t.Fatalf("creating HiCacheDeployment %s: %v", name, err)
	}
}

// editDeployment reads a deployment, changes its spec and writes it back, retrying conflicts.
func editDeployment(t *testing.T, ns, name string, change func(*hicachev1alpha1.HiCacheDeployment)) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		var h hicachev1alpha1.HiCacheDeployment
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &h); err != nil {
			t.Fatal(err)
		}
		change(&h)
		err := k8s.Update(context.Background(), &h)
		if err == nil {
			return
		}
		if attempt > 20 {
			t.Fatalf("updating HiCacheDeployment %s: %v", name, err)
		}
	}
}

// want is what a converged deployment has: its groups, and the image of their pods ("" means
// the operator's default).
type want struct {
	replicas int32
	image    string
}

// converged tells whether a deployment reached w: Ready for its current generation, every group
// updated and ready, every rank pod Ready with the wanted image, none left over.
func converged(ctx context.Context, ns, name string, w want) (bool, string) {
	var h hicachev1alpha1.HiCacheDeployment
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &h); err != nil {
		return false, err.Error()
	}
	ready := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionReady)
	switch {
	case h.Status.ObservedGeneration != h.Generation:
		return false, fmt.Sprintf("%s: status of generation %d, want %d", name, h.Status.ObservedGeneration, h.Generation)
	case ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != h.Generation:
		return false, fmt.Sprintf("%s: Ready %+v", name, ready)
	case h.Status.ReadyReplicas != w.replicas || h.Status.UpdatedReplicas != w.replicas || h.Status.Replicas != w.replicas:
		return false, fmt.Sprintf("%s: %d/%d groups ready, %d updated, want %d", name, h.Status.ReadyReplicas, h.Status.Replicas, h.Status.UpdatedReplicas, w.replicas)
	}
	// The status may be older than the groups (a StatefulSet just deleted): the pods must be
	// those of the StatefulSets there are now.
	var groups appsv1.StatefulSetList
	if err := k8s.List(ctx, &groups, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: name}); err != nil {
		return false, err.Error()
	}
	current := map[types.UID]bool{}
	for _, g := range groups.Items {
		if g.DeletionTimestamp == nil {
			current[g.UID] = true
		}
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: name}); err != nil {
		return false, err.Error()
	}
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			return false, fmt.Sprintf("%s: pod %s is going", name, p.Name)
		}
		if ref := metav1.GetControllerOfNoCopy(p); ref == nil || !current[ref.UID] {
			return false, fmt.Sprintf("%s: pod %s belongs to no current StatefulSet", name, p.Name)
		}
		if !kubeutil.PodReady(p) {
			return false, fmt.Sprintf("%s: pod %s not Ready", name, p.Name)
		}
		if w.image != "" && p.Spec.Containers[0].Image != w.image {
			return false, fmt.Sprintf("%s: pod %s runs %s, want %s", name, p.Name, p.Spec.Containers[0].Image, w.image)
		}
		n++
	}
	if n != int(w.replicas)*nodesPerGroup {
		return false, fmt.Sprintf("%s: %d rank pods, want %d", name, n, int(w.replicas)*nodesPerGroup)
	}
	return true, ""
}

// allConverged tells how many of the deployments converged to their wants, and why the first
// that did not has not.
func allConverged(ctx context.Context, ns string, wants map[string]want) (int, string) {
	names := make([]string, 0, len(wants))
	for n := range wants {
		names = append(names, n)
	}
	sort.Strings(names)
	done, why := 0, ""
	for _, n := range names {
		ok, reason := converged(ctx, ns, n, wants[n])
		if ok {
			done++
		} else if why == "" {
			why = reason
		}
	}
	return done, why
}

// same is the wants of deployments that all want w.
func same(names []string, w want) map[string]want {
	m := map[string]want{}
	for _, n := range names {
		m[n] = w
	}
	return m
}

// waitConverged waits until every deployment converged and returns how long that took. While
// it waits, a manager of supervised that exits is started again at once, as the kubelet restarts
// a pod's container; restarts says how many times.
func waitConverged(t *testing.T, ns string, wants map[string]want, timeout time.Duration, supervised ...*manager) (took time.Duration, restarts int) {
	t.Helper()
	ctx := context.Background()
	began := time.Now()
	reported := began
	for {
		for _, m := range supervised {
			if done, err := m.exited(); done {
				logf("manager %s exited (%v); starting it again", m.user, err)
				m.start()
				restarts++
			}
		}
		done, why := allConverged(ctx, ns, wants)
		if done == len(wants) {
			return time.Since(began), restarts
		}
		if time.Since(began) > timeout {
			t.Fatalf("%d of %d deployments converged within %s; %s\n%s", done, len(wants), timeout, why, describeGroups(ctx, ns))
		}
		if time.Since(reported) > 10*time.Second {
			logf("%d of %d deployments converged after %s; %s", done, len(wants), time.Since(began).Round(time.Second), why)
			reported = time.Now()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// childKinds are the kinds whose objects a deployment owns, directly or (pods) through its
// StatefulSets.
var childKinds = []schema.GroupVersionKind{
	appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
	appsv1.SchemeGroupVersion.WithKind("Deployment"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	corev1.SchemeGroupVersion.WithKind("ConfigMap"),
	corev1.SchemeGroupVersion.WithKind("Secret"),
	corev1.SchemeGroupVersion.WithKind("Pod"),
	{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"},
	{Group: "batch", Version: "v1", Kind: "Job"},
	hicachev1alpha1.GroupVersion.WithKind("CacheFlush"),
}

// expectedChildren is what a DeepSeek-V4 deployment of r serving groups owns: a StatefulSet, a
// headless Service and a NetworkPolicy per group, the client Service, the deployment's
// NetworkPolicy and ConfigMap, the two Secrets the operator generates (these deployments name
// no key Secret): the admin key's and the server keys'; and two rank pods per group.
func expectedChildren(r int) map[string]int {
	return map[string]int{"StatefulSet": r, "Service": r + 1, "NetworkPolicy": r + 1, "ConfigMap": 1, "Secret": 2, "Pod": nodesPerGroup * r}
}

// checkChildren lists every object of every child kind in ns and requires each deployment to own
// exactly expectedChildren (no duplicate) and no object to carry a deployment's label without a
// live owner (no orphan).
func checkChildren(t *testing.T, ns string, replicas map[string]int32) {
	t.Helper()
	ctx := context.Background()
	var hcds hicachev1alpha1.HiCacheDeploymentList
	if err := k8s.List(ctx, &hcds, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	live := map[types.UID]string{}
	for _, h := range hcds.Items {
		if h.DeletionTimestamp == nil {
			live[h.UID] = h.Name
		}
	}
	owned := map[string]map[string][]string{} // deployment → kind → names
	stsOwner := map[types.UID]string{}
	var problems []string
	note := func(owner, kind, name string) {
		if owned[owner] == nil {
			owned[owner] = map[string][]string{}
		}
		owned[owner][kind] = append(owned[owner][kind], name)
	}
	for _, gvk := range childKinds {
		// Pods after StatefulSets: their owner is a group's StatefulSet.
		if gvk.Kind == "Pod" {
			continue
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatalf("listing %ss: %v", gvk.Kind, err)
		}
		for _, o := range list.Items {
			if o.DeletionTimestamp != nil {
				continue
			}
			ref := metav1.GetControllerOfNoCopy(&o)
			switch {
			case ref != nil && ref.Kind == "HiCacheDeployment":
				name, ok := live[ref.UID]
				if !ok {
					problems = append(problems, fmt.Sprintf("%s %s is owned by deployment %s (uid %s), which is gone", gvk.Kind, o.Name, ref.Name, ref.UID))
					continue
				}
				note(name, gvk.Kind, o.Name)
				if gvk.Kind == "StatefulSet" {
					stsOwner[o.UID] = name
				}
			case o.Labels[hicachev1alpha1.LabelDeployment] != "":
				problems = append(problems, fmt.Sprintf("%s %s carries deployment %s's label and no owner of it (owners %v)", gvk.Kind, o.Name, o.Labels[hicachev1alpha1.LabelDeployment], o.OwnerReferences))
			}
		}
	}
	var pods metav1.PartialObjectMetadataList
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Labels[hicachev1alpha1.LabelDeployment] == "" {
			continue
		}
		ref := metav1.GetControllerOfNoCopy(&p)
		if ref == nil || stsOwner[ref.UID] == "" {
			problems = append(problems, fmt.Sprintf("pod %s of deployment %s belongs to no StatefulSet of a live deployment (owners %v)", p.Name, p.Labels[hicachev1alpha1.LabelDeployment], p.OwnerReferences))
			continue
		}
		note(stsOwner[ref.UID], "Pod", p.Name)
	}
	for name, r := range replicas {
		exp := expectedChildren(int(r))
		for kind := range owned[name] {
			if _, ok := exp[kind]; !ok {
				exp[kind] = 0
			}
		}
		for kind, n := range exp {
			got := owned[name][kind]
			if len(got) != n {
				slices.Sort(got)
				problems = append(problems, fmt.Sprintf("deployment %s owns %d %ss, want %d: %v", name, len(got), kind, n, got))
			}
		}
	}
	for name := range owned {
		if _, ok := replicas[name]; !ok {
			problems = append(problems, fmt.Sprintf("deployment %s, not part of the test, owns %v", name, owned[name]))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		t.Errorf("children of namespace %s:\n  %s", ns, strings.Join(problems, "\n  "))
	}
}

// replicasOf is the replicas of deployments that all have r.
func replicasOf(names []string, r int32) map[string]int32 {
	m := map[string]int32{}
	for _, n := range names {
		m[n] = r
	}
	return m
}

// statefulSetUIDs maps each StatefulSet of ns to its UID.
func statefulSetUIDs(t *testing.T, ns string) map[string]types.UID {
	t.Helper()
	var list appsv1.StatefulSetList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	m := map[string]types.UID{}
	for _, s := range list.Items {
		m[s.Name] = s.UID
	}
	return m
}

// countStatefulSets counts the StatefulSets of ns.
func countStatefulSets(ctx context.Context, ns string) int {
	var list appsv1.StatefulSetList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0
	}
	return len(list.Items)
}

// describeGroups lists the StatefulSets and rank pods of ns, for a failure message.
func describeGroups(ctx context.Context, ns string) string {
	var b strings.Builder
	var groups appsv1.StatefulSetList
	if err := k8s.List(ctx, &groups, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	for _, g := range groups.Items {
		fmt.Fprintf(&b, "StatefulSet %s uid %s owners %v deleting %v: replicas %d, status %d created, %d ready, %d current\n", g.Name, g.UID,
			g.OwnerReferences, g.DeletionTimestamp != nil, ptr.Deref(g.Spec.Replicas, 0), g.Status.Replicas, g.Status.ReadyReplicas, g.Status.CurrentReplicas)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		owner := ""
		if ref := metav1.GetControllerOfNoCopy(&p); ref != nil {
			owner = ref.Kind + " " + string(ref.UID)
		}
		fmt.Fprintf(&b, "pod %s on %q: %s, ready %v, deleting %v, owner %s\n", p.Name, p.Spec.NodeName, p.Status.Phase, kubeutil.PodReady(&p), p.DeletionTimestamp != nil, owner)
	}
	return b.String()
}
