package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// rollNamespace is the L3 namespace (key prefix) the roll test writes, as a deployment would.
const rollNamespace = "hc-5t0r3r011_"

// storeRollObservation is what the test saw of the store while it rolled.
type storeRollObservation struct {
	mu sync.Mutex
	// minKeys is the lowest key count of the namespace seen, and when.
	minKeys   int64
	minAt     time.Duration
	polls     int
	countErrs int
	// maxDisrupted is the most store pods seen at once that were terminating or not Ready.
	maxDisrupted int
	disruptedAt  string
	// maxPods is the most store pods seen at once.
	maxPods int
	// gone are the store pods (by UID) seen deleted, in order.
	gone []string
}

// Bumping the store pods' image rolls them one at a time, each drained by the master before it
// is deleted: the key count of a live namespace never drops to zero, and no object is lost.
func TestStoreImageBumpRollsWithoutEmptyingTheCache(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "storeroll", restricted)
	const stores = 3
	managedBackend(t, ns, stores, "64Mi", func(cb *hicachev1alpha1.CacheBackend) {
		s := cb.Spec.Mooncake.Managed.Store
		s.Image = images.Mooncake
		s.LocalBufferSize = ptr.To(resource.MustParse("32Mi"))
		s.DrainTimeoutSeconds = 180
	})
	waitStoresCurrent(t, ns, stores, images.Mooncake, 2*time.Minute)
	initial := map[string]string{} // UID → name of the store pods before the roll
	for _, p := range backendPods(t, ns, "store") {
		initial[string(p.UID)] = p.Name
	}

	const n, size = 120, 256 << 10
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sdeepseek-ai-DeepSeek-V4_%064x__k", rollNamespace, i)
	}
	putKeys(t, ns, "put-keys", keys, size)
	before := countKeys(t, ns, rollNamespace)
	if before != n {
		t.Fatalf("%d keys under %s after the put, want %d", before, rollNamespace, n)
	}
	logSegments(t, ns, "before the roll")

	// A second tag of the same image: the store pods' template changes, the bytes do not.
	const bumped = "localhost/mooncake:store-roll"
	if err := node.TagImage(ctx, images.Mooncake, bumped); err != nil {
		t.Fatal(err)
	}
	obs := &storeRollObservation{minKeys: before, maxPods: stores}
	stop := make(chan struct{})
	done := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(done)
		watchStoreRoll(t, ns, obs, began, stop)
	}()
	cb := getBackend(t, ns)
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.Mooncake.Managed.Store.Image = bumped
	if err := k8s.Patch(ctx, cb, patch); err != nil {
		t.Fatal(err)
	}
	waitStoresCurrent(t, ns, stores, bumped, 8*time.Minute)
	rolled := time.Since(began)
	close(stop)
	<-done

	after := countKeys(t, ns, rollNamespace)
	logSegments(t, ns, "after the roll")
	verified := verifyKeys(t, ns, "verify-keys", keys, size)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	lost := float64(before-after) / float64(before)
	logf("%s: store roll of %d pods (image %s → %s) in %s; keys under %s: %d before, %d after, lowest %d (at +%s, %d polls, %d failed); %d of %d read back intact; lost fraction %.4f; at most %d pods disrupted at once (%s), at most %d pods",
		ns, stores, images.Mooncake, bumped, rolled.Round(time.Second), rollNamespace, before, after, obs.minKeys, obs.minAt.Round(time.Second),
		obs.polls, obs.countErrs, verified, n, lost, obs.maxDisrupted, obs.disruptedAt, obs.maxPods)

	if obs.minKeys == 0 {
		t.Errorf("the key count of %s dropped to zero during the roll (at +%s)", rollNamespace, obs.minAt)
	}
	if obs.polls < 5 || obs.countErrs > obs.polls/2 {
		t.Errorf("the key count was read %d times, %d failed: too few to say it never dropped", obs.polls, obs.countErrs)
	}
	if after != before || verified != n {
		t.Errorf("%d of %d keys left after the roll, %d read back intact; the master drains each store pod before it goes, so none should be lost", after, before, verified)
	}
	if obs.maxDisrupted > 1 {
		t.Errorf("%d store pods were down at once (%s); the roll takes one at a time", obs.maxDisrupted, obs.disruptedAt)
	}
	if obs.maxPods > stores+1 {
		t.Errorf("%d store pods at once; the roll adds one surge pod", obs.maxPods)
	}
	var replaced int
	for _, uid := range obs.gone {
		if _, ok := initial[uid]; ok {
			replaced++
		}
	}
	if replaced != stores {
		t.Errorf("%d of the %d store pods of the old image were seen deleted (%v)", replaced, stores, obs.gone)
	}
}

// watchStoreRoll polls the namespace's key count and the store pods until stop.
func watchStoreRoll(t *testing.T, ns string, obs *storeRollObservation, began time.Time, stop <-chan struct{}) {
	seen := map[string]bool{}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := admin(t, ns).CountKeysWithPrefix(cctx, rollNamespace)
		cancel()
		var pods corev1.PodList
		lerr := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{
			"app.kubernetes.io/instance": backendName, "app.kubernetes.io/component": "store"})
		obs.mu.Lock()
		obs.polls++
		if err != nil {
			obs.countErrs++
		} else if n < obs.minKeys {
			obs.minKeys, obs.minAt = n, time.Since(began)
		}
		if lerr == nil {
			now := map[string]bool{}
			var down []string
			for _, p := range pods.Items {
				now[string(p.UID)] = true
				seen[string(p.UID)] = true
				if p.DeletionTimestamp != nil || !kubeutil.PodReady(&p) {
					down = append(down, p.Name)
				}
			}
			for uid := range seen {
				if !now[uid] && !containsString(obs.gone, uid) {
					obs.gone = append(obs.gone, uid)
				}
			}
			if len(down) > obs.maxDisrupted {
				obs.maxDisrupted, obs.disruptedAt = len(down), strings.Join(down, ", ")+" at +"+time.Since(began).Round(time.Second).String()
			}
			obs.maxPods = max(obs.maxPods, len(pods.Items))
		}
		obs.mu.Unlock()
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// waitStoresCurrent waits until the backend reports its store pods current: want pods, all
// Ready, all in the image.
func waitStoresCurrent(t *testing.T, ns string, want int, image string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, fmt.Sprintf("%d store pods Ready in %s, StoresCurrent", want, image), func() (bool, string) {
		cb := getBackend(t, ns)
		c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionStoresCurrent)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != cb.Generation {
			return false, fmt.Sprintf("StoresCurrent %+v, rollout %+v", c, cb.Status.StoreRollout)
		}
		pods := backendPods(t, ns, "store")
		if len(pods) != want {
			return false, fmt.Sprintf("%d store pods", len(pods))
		}
		for _, p := range pods {
			if !kubeutil.PodReady(&p) || p.Spec.Containers[0].Image != image {
				return false, fmt.Sprintf("%s: ready %v image %s", p.Name, kubeutil.PodReady(&p), p.Spec.Containers[0].Image)
			}
		}
		return true, ""
	})
}

// verifyKeys reads the keys back through a client Job and returns how many hold the bytes put.
func verifyKeys(t *testing.T, ns, name string, keys []string, size int) int {
	t.Helper()
	out := storeJob(t, ns, name, keys, "verify", "--size", strconv.Itoa(size))
	for _, line := range strings.Split(out, "\n") {
		var r struct{ Verified, Missing, Wrong int }
		if strings.HasPrefix(line, "{\"verified\"") && json.Unmarshal([]byte(line), &r) == nil {
			return r.Verified
		}
	}
	t.Fatalf("the verify Job printed no counts:\n%s", out)
	return 0
}

// logSegments logs the master's segments: which store pod holds how much.
func logSegments(t *testing.T, ns, when string) {
	t.Helper()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	segs, err := admin(t, ns).Segments(cctx)
	if err != nil {
		logf("%s: segments %s: %v", ns, when, err)
		return
	}
	var b strings.Builder
	for _, s := range segs {
		fmt.Fprintf(&b, " %s %s %dKiB;", s.Name, s.Status, s.UsedBytes>>10)
	}
	logf("%s: segments %s:%s", ns, when, b.String())
}

// While clients read every object without pause, each read renews its lease and the master
// moves none of them: a store pod's drain cannot finish. The roll still ends, each pod replaced
// at drainTimeoutSeconds; what the replaced pods held is lost, the operator says so in a Warning
// Event, and no read ever returns bytes other than those written.
func TestStoreRollUnderConstantReadsEndsAtTheDrainDeadline(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "storehot", restricted)
	const stores, timeout = 2, 10
	managedBackend(t, ns, stores, "64Mi", func(cb *hicachev1alpha1.CacheBackend) {
		s := cb.Spec.Mooncake.Managed.Store
		s.Image = images.Mooncake
		s.LocalBufferSize = ptr.To(resource.MustParse("32Mi"))
		s.DrainTimeoutSeconds = timeout
	})
	waitStoresCurrent(t, ns, stores, images.Mooncake, 2*time.Minute)
	const n, size = 60, 64 << 10
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sQwen-Qwen3-32B_%064x_0_k", rollNamespace, i)
	}
	putKeys(t, ns, "put-keys", keys, size)
	before := countKeys(t, ns, rollNamespace)

	// Readers: every object read back about once a second, from before the bump to after the
	// roll.
	reader := startReader(t, ns, "reader", keys, size, 150*time.Second)
	time.Sleep(5 * time.Second)
	const bumped = "localhost/mooncake:store-hot"
	if err := node.TagImage(ctx, images.Mooncake, bumped); err != nil {
		t.Fatal(err)
	}
	cb := getBackend(t, ns)
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.Mooncake.Managed.Store.Image = bumped
	began := time.Now()
	if err := k8s.Patch(ctx, cb, patch); err != nil {
		t.Fatal(err)
	}
	// Each of the three drains (two old pods, then the surge pod) ends by the deadline at the
	// latest; the rest is pod start-up.
	waitStoresCurrent(t, ns, stores, bumped, 5*time.Minute)
	rolled := time.Since(began)
	after := countKeys(t, ns, rollNamespace)
	passes, wrong, worst := reader.results(t)

	var lostEvents []string
	var evs eventsv1.EventList
	if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Regarding.Kind == "CacheBackend" && e.Reason == "StoreObjectsLost" && e.Type == corev1.EventTypeWarning {
			lostEvents = append(lostEvents, e.Note)
		}
	}
	logf("%s: store roll of %d pods under constant reads (drain deadline %ds) in %s; keys under %s: %d before, %d after (lost fraction %.2f); %d read passes, fewest objects found in one %d of %d, wrong bytes %d; %d StoreObjectsLost events: %s",
		ns, stores, timeout, rolled.Round(time.Second), rollNamespace, before, after, float64(before-after)/float64(before), passes, worst, n, wrong,
		len(lostEvents), strings.Join(lostEvents, " | "))
	if wrong != 0 {
		t.Errorf("%d reads returned bytes other than those written", wrong)
	}
	if passes < 10 {
		t.Errorf("only %d read passes: the objects were not read without pause", passes)
	}
	if after < before && len(lostEvents) == 0 {
		t.Errorf("%d of %d objects were lost and no StoreObjectsLost Event says so", before-after, before)
	}
	if rolled > time.Duration(3*(timeout+60))*time.Second {
		t.Errorf("the roll took %s; each drain should give up at its %ds deadline", rolled, timeout)
	}
}

// reader is a Job that reads keys back in a loop for a while.
type reader struct {
	ns, name string
}

// startReader starts a Job on the real node that runs store.py verify over the keys again and
// again for d.
func startReader(t *testing.T, ns, name string, keys []string, size int, d time.Duration) *reader {
	t.Helper()
	ctx := context.Background()
	script, err := os.ReadFile(filepath.Join(repoRoot(), "hack", "mooncake", "store.py"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string]string{"store.py": string(script), "keys.txt": strings.Join(keys, "\n") + "\n"}}
	if err := k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	master := fmt.Sprintf("%s-master.%s.svc:%d", backendName, ns, 50051)
	loop := fmt.Sprintf(`end=$(( $(date +%%s) + %d )); while [ $(date +%%s) -lt $end ]; do python3 /scripts/store.py --master %s verify --size %d --keys-file /scripts/keys.txt 2>/dev/null || echo '{"failed": 1}'; done`,
		int(d.Seconds()), master, size)
	job := scriptJob(ns, name, corev1.Container{Name: "read", Command: []string{"sh", "-c", loop}})
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	return &reader{ns: ns, name: name}
}

// results waits for the reader to finish and returns how many passes it read, how many reads
// returned other bytes than written, and the fewest objects one pass found.
func (r *reader) results(t *testing.T) (passes, wrong, fewest int) {
	t.Helper()
	testutil.Eventually(t, 4*time.Minute, "the reader Job finished", func() (bool, string) {
		var j batchv1.Job
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: r.name}, &j); err != nil {
			return false, err.Error()
		}
		return j.Status.Succeeded+j.Status.Failed > 0, fmt.Sprintf("%+v", j.Status)
	})
	fewest = -1
	for _, line := range strings.Split(jobLog(t, r.ns, r.name), "\n") {
		var v struct{ Verified, Missing, Wrong int }
		if !strings.HasPrefix(line, "{\"verified\"") || json.Unmarshal([]byte(line), &v) != nil {
			continue
		}
		passes++
		wrong += v.Wrong
		if fewest < 0 || v.Verified < fewest {
			fewest = v.Verified
		}
	}
	return passes, wrong, fewest
}
