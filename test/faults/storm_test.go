package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// stormLabel is the label another client rewrites on the deployments.
const stormLabel = "faults.hicache.io/storm"

// Another client patches the labels of five deployments every 10 ms each while they are created
// and rolled to a new image; a sixth, quiet one beside them is not touched. Every deployment
// converges; no status field, once written, is ever missing from what the storm's patches
// return; each stormy deployment ends with the quiet one's status (but for its name); the
// operator leaves the storm's label alone.
func TestLabelStormDuringARollout(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	withBackend(t, ns)
	mgr := startManager(t, ns, "storm")
	mark := auditMark(t)
	stormy := []string{"storm-a", "storm-b", "storm-c", "storm-d", "storm-e"}
	all := append(slices.Clone(stormy), "quiet")
	for _, name := range all {
		createDeployment(t, ns, name, 1)
	}
	s := startStorm(t, ns, stormy)

	began := time.Now()
	took, _ := waitConverged(t, ns, same(all, want{replicas: 1}), 3*time.Minute)
	// A read-modify-write loses to the storm every time; a patch, as kubectl apply sends, does not.
	for _, name := range all {
		h := &hicachev1alpha1.HiCacheDeployment{}
		h.Namespace, h.Name = ns, name
		patch := fmt.Sprintf(`{"spec":{"sglang":{"image":%q}}}`, rolledImage)
		if err := k8s.Patch(ctx, h, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("rolling %s to %s: %v", name, rolledImage, err)
		}
	}
	rolled, _ := waitConverged(t, ns, same(all, want{replicas: 1, image: rolledImage}), 3*time.Minute)
	patches, failed, last := s.stop()
	elapsed := time.Since(began)
	ops := byUsers(auditSince(t, mark, ns), mgr.user)
	conflicts := 0
	for _, e := range ops {
		if e.code() == 409 {
			conflicts++
		}
	}
	writes, _ := writesOf(ops)
	logf("under %d label patches (%.0f/s, %d failed): created deployments converged in %s, the roll in %s; the operator made %d writes, %d answered 409 Conflict",
		patches, float64(patches)/elapsed.Seconds(), failed, took.Round(time.Millisecond), rolled.Round(time.Millisecond), writes, conflicts)
	if patches < int64(len(stormy))*int64(elapsed/time.Second) {
		t.Errorf("the storm made %d patches in %s, fewer than one per deployment per second: it was no storm", patches, elapsed.Round(time.Second))
	}
	for _, l := range s.lost() {
		t.Error(l)
	}

	quiet := statusOf(t, ns, "quiet")
	for _, name := range stormy {
		var h hicachev1alpha1.HiCacheDeployment
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &h); err != nil {
			t.Fatal(err)
		}
		if got := statusOf(t, ns, name); got != quiet {
			t.Errorf("the status of %s differs from the quiet deployment's:\n%s\nwant\n%s", name, got, quiet)
		}
		if got := h.Labels[stormLabel]; got != last[name] {
			t.Errorf("%s has label %s=%q, want the storm's last %q", name, stormLabel, got, last[name])
		}
	}
	checkChildren(t, ns, replicasOf(all, 1))
}

// statusOf is a deployment's status as JSON, without its times (conditions' transitions, the
// namespace's since) and with its name replaced by NAME, so that two deployments' statuses
// compare.
func statusOf(t *testing.T, ns, name string) string {
	t.Helper()
	var h hicachev1alpha1.HiCacheDeployment
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &h); err != nil {
		t.Fatal(err)
	}
	for i := range h.Status.Conditions {
		h.Status.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	if h.Status.Cache != nil {
		h.Status.Cache.Since = nil
	}
	// A formed group's record names objects of its own deployment: its revision derives from its
	// StatefulSet's UID and its pods are UIDs. Each UID must be a live pod of that group at that
	// rank; then only the ranks compare.
	for i := range h.Status.FormedGroups {
		g := &h.Status.FormedGroups[i]
		if g.Revision != "" {
			g.Revision = "REVISION"
		}
		var ranks []string
		for _, m := range strings.Split(g.Pods, ",") {
			rank, uid, ok := strings.Cut(m, "=")
			if !ok {
				t.Fatalf("%s: formed group %s has a malformed member %q in %q", name, g.Name, m, g.Pods)
			}
			var pod corev1.Pod
			podName := g.Name + "-" + rank
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podName}, &pod); err != nil {
				t.Fatalf("%s: formed group %s names rank %s, whose pod %s: %v", name, g.Name, rank, podName, err)
			}
			if string(pod.UID) != uid {
				t.Errorf("%s: formed group %s records pod %s as %s, but it is %s", name, g.Name, podName, uid, pod.UID)
			}
			ranks = append(ranks, rank+"=UID")
		}
		g.Pods = strings.Join(ranks, ",")
	}
	b, err := json.MarshalIndent(h.Status, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), name, "NAME")
}

// storm is the other client: one goroutine per deployment, a merge patch of its labels every
// 10 ms. Each patch's answer is the whole object: the storm checks that no status field, once
// there, goes missing.
type storm struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	patches atomic.Int64
	failed  atomic.Int64
	mu      sync.Mutex
	last    map[string]string
	losses  []string
}

func startStorm(t *testing.T, ns string, names []string) *storm {
	t.Helper()
	// A client of its own, with no rate limit of its own: the storm is as fast as the API server.
	cfg := cluster.Config()
	cfg.QPS = -1
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// Stopping lets each goroutine's patch in flight finish, so that the last label value it
	// recorded is the last one written.
	ctx, cancel := context.WithCancel(context.Background())
	s := &storm{cancel: cancel, last: map[string]string{}}
	t.Cleanup(func() { s.stop() })
	for _, name := range names {
		s.wg.Go(func() {
			seen := map[string]bool{}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				v := strconv.Itoa(i)
				h := &hicachev1alpha1.HiCacheDeployment{}
				h.Namespace, h.Name = ns, name
				patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, stormLabel, v)
				if err := c.Patch(context.Background(), h, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
					s.failed.Add(1)
					continue
				}
				s.patches.Add(1)
				s.mu.Lock()
				s.last[name] = v
				for _, f := range statusFields(&h.Status) {
					seen[f] = true
				}
				for f := range seen {
					if !slices.Contains(statusFields(&h.Status), f) {
						s.losses = append(s.losses, fmt.Sprintf("%s: status field %s was there and is gone (generation %d, observed %d)", name, f, h.Generation, h.Status.ObservedGeneration))
						delete(seen, f)
					}
				}
				s.mu.Unlock()
			}
		})
	}
	return s
}

// stop ends the storm and returns its patches, its failed patches and the last label value it
// set on each deployment.
func (s *storm) stop() (patches, failed int64, last map[string]string) {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.patches.Load(), s.failed.Load(), maps.Clone(s.last)
}

func (s *storm) lost() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.losses)
}

// statusFields names the status fields that, once written, stay for the life of a deployment
// whose spec stays valid: its plan, cache, shape, and each condition type.
func statusFields(st *hicachev1alpha1.HiCacheDeploymentStatus) []string {
	var f []string
	add := func(name string, set bool) {
		if set {
			f = append(f, name)
		}
	}
	add("observedGeneration", st.ObservedGeneration > 0)
	add("selector", st.Selector != "")
	add("attention", st.Attention != "")
	add("plan", st.Plan != nil)
	add("cache.layoutHash", st.Cache != nil && st.Cache.LayoutHash != "")
	add("cache.namespace", st.Cache != nil && st.Cache.Namespace != "")
	add("cache.backend", st.Cache != nil && st.Cache.Backend != "")
	for _, c := range st.Conditions {
		f = append(f, "conditions["+c.Type+"]")
	}
	return f
}
