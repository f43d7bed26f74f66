package realnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

func getHCD(t *testing.T, ns, name string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	h := &hicachev1alpha1.HiCacheDeployment{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, h); err != nil {
		t.Fatal(err)
	}
	return h
}

// qwen3 creates the Qwen3 sample (TP 4 on one GPU node) in ns, writing to the backend, and waits
// until it is Ready with its ranks on the kwok GPU nodes.
func qwen3(t *testing.T, ns string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	h := testutil.LoadSample(t, "hicachedeployment_qwen3.yaml")
	h.Namespace, h.UID, h.Generation = ns, "", 0
	// The sample reads its weights from a node directory (a hostPath volume), which the Pod
	// Security level these namespaces enforce refuses; the simulated ranks read no weights, so
	// they name a directory inside the image instead.
	h.Spec.Model.Source, h.Spec.Model.Path = nil, "/models/Qwen/Qwen3-32B"
	h.Spec.Storage.BackendRef.Name = backendName
	if err := k8s.Create(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	waitHCDReady(t, ns, h.Name, 2*time.Minute)
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: h.Name}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == node.Name || p.Spec.NodeName == "" {
			t.Errorf("rank pod %s is on %q; SGLang ranks belong on the kwok GPU nodes", p.Name, p.Spec.NodeName)
		}
	}
	return getHCD(t, ns, h.Name)
}

func waitHCDReady(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, fmt.Sprintf("HiCacheDeployment %s/%s Ready", ns, name), func() (bool, string) {
		h := getHCD(t, ns, name)
		c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == h.Generation, fmt.Sprintf("%+v", h.Status.Conditions)
	})
}

// pageKeys are the keys the deployment's current plan writes for n pages, as SGLang names them.
func pageKeys(t *testing.T, h *hicachev1alpha1.HiCacheDeployment, n int) []string {
	t.Helper()
	res, err := resolve.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	prefix := cache.NamespacePrefix(h.Status.Cache.Namespace, resolve.ServedModelName(&h.Spec))
	var keys []string
	for i := range n {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/page/%d", h.Name, i)))
		keys = append(keys, cache.KeysForPage(res.Plan, prefix, hex.EncodeToString(sum[:]))...)
	}
	return keys
}

func getFlush(t *testing.T, ns, name string) *hicachev1alpha1.CacheFlush {
	t.Helper()
	cf := &hicachev1alpha1.CacheFlush{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cf); err != nil {
		t.Fatal(err)
	}
	return cf
}

// A deployment on the kwok GPU nodes goes Ready against the managed backend on the real node; a
// breaking change flushes its old namespace through the real Kubernetes Job, which removes
// exactly that namespace's objects; the CacheFlush records the count and the Job's outcome.
func TestBreakingChangeFlushesThroughAJob(t *testing.T) {
	ns := newNamespace(t, "flush", baseline)
	managedBackend(t, ns, 1, "64Mi")
	h := qwen3(t, ns)
	nsA := h.Status.Cache.Namespace
	keysA := pageKeys(t, h, 4)
	other := []string{"hc-0000000000_qwen3-32b_" + strings.Repeat("ab", 32) + "__k", "unrelated-key"}
	putKeys(t, ns, "put-keys", append(append([]string{}, keysA...), other...), 4096)
	if got := countKeys(t, ns, nsA+"_"); got != int64(len(keysA)) {
		t.Fatalf("%d keys under %s after the client pod put them, want %d", got, nsA, len(keysA))
	}

	// The operator removes the Job of an attempt once it has recorded it: watch from before the
	// change that makes it.
	watch := watchFlushJobs(t, ns)
	began := time.Now()
	h.Spec.HiCache.KVCacheDType = "fp8_e4m3"
	if err := k8s.Update(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	var flushName string
	testutil.Eventually(t, 3*time.Minute, "the old namespace flushed", func() (bool, string) {
		h := getHCD(t, ns, h.Name)
		if h.Status.Cache.LastFlush == nil || h.Status.Cache.LastFlush.Namespace != nsA {
			return false, fmt.Sprintf("cache status %+v", h.Status.Cache)
		}
		flushName = h.Status.Cache.LastFlush.Name
		cf := getFlush(t, ns, flushName)
		c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("flush %s: %+v", flushName, cf.Status.Conditions)
	})
	logf("%s: breaking change flushed through a Job in %s", ns, time.Since(began).Round(time.Millisecond))
	cf := getFlush(t, ns, flushName)
	if cf.Spec.Namespace != nsA || cf.Status.Removed != int64(len(keysA)) || cf.Status.KeysLeft != 0 || cf.Status.Method != hicachev1alpha1.MethodJob {
		t.Errorf("CacheFlush %s: namespace %s removed %d left %d method %q; want %s, %d, 0, %s",
			cf.Name, cf.Spec.Namespace, cf.Status.Removed, cf.Status.KeysLeft, cf.Status.Method, nsA, len(keysA), hicachev1alpha1.MethodJob)
	}
	if got := countKeys(t, ns, nsA+"_"); got != 0 {
		t.Errorf("%d keys left under the flushed namespace %s", got, nsA)
	}
	for _, k := range other {
		if n := countKeys(t, ns, k); n != 1 {
			t.Errorf("key %s of another namespace: %d, want it kept", k, n)
		}
	}
	// The Job's end reaches the watch about when it reaches the operator.
	var pod *corev1.Pod
	testutil.Eventually(t, 10*time.Second, "one Job of the flush seen Complete, its pod on the real node", func() (bool, string) {
		var mine []string
		pod = nil
		for name, j := range watch.seen() {
			if j.flush != flushName {
				continue
			}
			mine = append(mine, name)
			if j.complete && j.pod != nil && j.pod.Spec.NodeName == node.Name {
				pod = j.pod
			}
		}
		return len(mine) == 1 && pod != nil, fmt.Sprintf("Jobs of flush %s: %v, %+v", flushName, mine, watch.seen())
	})
	admittedAsRestricted(t, pod)
	// The namespace runs SGLang ranks, so it enforces baseline; the backend's own pods meet
	// restricted all the same.
	for _, component := range []string{"master", "store"} {
		for _, p := range backendPods(t, ns, component) {
			admittedAsRestricted(t, &p)
		}
	}
}

// jobSeen is what a test saw of a flush Job while it existed.
type jobSeen struct {
	flush    string
	pod      *corev1.Pod
	complete bool
	failed   bool
}

// jobWatch records every flush Job of a namespace, its pod and whether it completed or failed,
// from watches: the operator removes a Job once it has recorded it, and polling may miss its end.
type jobWatch struct {
	mu   sync.Mutex
	jobs map[string]*jobSeen
}

func watchFlushJobs(t *testing.T, ns string) *jobWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &jobWatch{jobs: map[string]*jobSeen{}}
	opts := metav1.ListOptions{LabelSelector: hicachev1alpha1.LabelFlush}
	// A list, then watches from its resourceVersion that resume where they stopped when the
	// server closes them: no event between the list and the end of the test is lost.
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs.Items {
		w.job(&jobs.Items[i])
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		w.pod(&pods.Items[i])
	}
	follow := func(rv string, watchFn toolscache.WatchFuncWithContext, seen func(runtime.Object)) {
		rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &toolscache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = opts.LabelSelector
			return watchFn(ctx, o)
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rw.Stop)
		go func() {
			for ev := range rw.ResultChan() {
				seen(ev.Object)
			}
		}()
	}
	follow(jobs.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return cs.BatchV1().Jobs(ns).Watch(ctx, o)
	}, func(o runtime.Object) {
		if j, ok := o.(*batchv1.Job); ok {
			w.job(j)
		}
	})
	follow(pods.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return cs.CoreV1().Pods(ns).Watch(ctx, o)
	}, func(o runtime.Object) {
		if p, ok := o.(*corev1.Pod); ok {
			w.pod(p)
		}
	})
	return w
}

func (w *jobWatch) job(j *batchv1.Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.entry(j.Name, j.Labels[hicachev1alpha1.LabelFlush])
	s.complete = s.complete || jobEnded(j, batchv1.JobComplete)
	s.failed = s.failed || jobEnded(j, batchv1.JobFailed)
}

func (w *jobWatch) pod(p *corev1.Pod) {
	if p.Spec.NodeName == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.entry(p.Labels["job-name"], p.Labels[hicachev1alpha1.LabelFlush]).pod = p.DeepCopy()
}

func (w *jobWatch) entry(job, flush string) *jobSeen {
	s := w.jobs[job]
	if s == nil {
		s = &jobSeen{flush: flush}
		w.jobs[job] = s
	}
	return s
}

// seen is a copy of what the watch recorded so far.
func (w *jobWatch) seen() map[string]jobSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]jobSeen{}
	for k, v := range w.jobs {
		out[k] = *v
	}
	return out
}

// jobName is the Job of attempt n of a flush (cacheflush.JobName, for short names).
func jobName(flush string, n int) string { return fmt.Sprintf("%s-%d", flush, n) }

func jobEnded(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// netnsRule inserts an iptables rule into the cluster's network namespace until the returned
// function removes it.
func netnsRule(t *testing.T, rule ...string) func() {
	t.Helper()
	run := func(op string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := node.Command(ctx, append([]string{"iptables", op, "FORWARD"}, rule...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables %s FORWARD %v: %v: %s", op, rule, err, out)
		}
		return nil
	}
	if err := run("-I"); err != nil {
		t.Fatal(err)
	}
	removed := false
	remove := func() {
		if !removed {
			removed = true
			if err := run("-D"); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(remove)
	return remove
}

// A flush Job that cannot reach the master fails; the CacheFlush records a Failed attempt with
// the Job's reason, and its next attempt, once the master answers again, completes.
func TestFailedFlushJobIsRetriedWhenTheMasterAnswers(t *testing.T) {
	ns := newNamespace(t, "flushfail", restricted)
	managedBackend(t, ns, 1, "32Mi")
	const stale = "hc-1111111111"
	keys := []string{stale + "_m_" + strings.Repeat("cd", 32) + "_0_k", stale + "_m_" + strings.Repeat("cd", 32) + "_1_k", "keep_x"}
	putKeys(t, ns, "put-keys", keys, 4096)

	// Pods other than the store reach the master's RPC port no more: for the flush Job's pod,
	// the master has stopped answering. The operator's pod still reaches the admin port, so the
	// attempt starts.
	master, store := backendPods(t, ns, "master")[0], backendPods(t, ns, "store")[0]
	restore := netnsRule(t, "-p", "tcp", "-d", master.Status.PodIP, "--dport", "50051", "!", "-s", store.Status.PodIP,
		"-j", "REJECT", "--reject-with", "tcp-reset")
	cf := &hicachev1alpha1.CacheFlush{
		ObjectMeta: metav1.ObjectMeta{Name: "stale", Namespace: ns},
		Spec: hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: backendName},
			Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: stale, Reason: "test"},
	}
	watch := watchFlushJobs(t, ns)
	if err := k8s.Create(context.Background(), cf); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testutil.Eventually(t, 3*time.Minute, "the first attempt failed with the Job's reason", func() (bool, string) {
		cf := getFlush(t, ns, "stale")
		c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == hicachev1alpha1.ReasonJobFailed && cf.Status.Attempts == 1,
			fmt.Sprintf("attempts %d, %+v", cf.Status.Attempts, cf.Status.Conditions)
	})
	logf("%s: the flush Job failed, recorded in %s", ns, time.Since(began).Round(time.Millisecond))
	// The Job's end reaches the watch about when it reaches the operator.
	testutil.Eventually(t, 10*time.Second, "the first Job seen Failed", func() (bool, string) {
		seen := watch.seen()
		j, ok := seen[jobName("stale", 1)]
		return len(seen) == 1 && ok && j.failed && j.pod != nil && j.pod.Spec.NodeName == node.Name,
			fmt.Sprintf("Jobs of the flush seen: %+v; want one, %s, Failed, its pod on the real node", seen, jobName("stale", 1))
	})
	if got := countKeys(t, ns, stale+"_"); got != 2 {
		t.Errorf("%d keys under %s after the failed attempt, want the 2 put", got, stale)
	}

	restore()
	testutil.Eventually(t, 2*time.Minute, "the next attempt completed", func() (bool, string) {
		cf := getFlush(t, ns, "stale")
		c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionComplete)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("attempts %d, %+v", cf.Status.Attempts, cf.Status.Conditions)
	})
	logf("%s: the retried flush completed %s after the first attempt began", ns, time.Since(began).Round(time.Millisecond))
	got := getFlush(t, ns, "stale")
	if got.Status.Attempts != 2 || got.Status.Removed != 2 || got.Status.KeysLeft != 0 || got.Status.Method != hicachev1alpha1.MethodJob {
		t.Errorf("flush: attempts %d removed %d left %d method %q; want 2, 2, 0, %s", got.Status.Attempts, got.Status.Removed, got.Status.KeysLeft, got.Status.Method, hicachev1alpha1.MethodJob)
	}
	testutil.Eventually(t, 10*time.Second, "the second attempt's Job seen Complete", func() (bool, string) {
		j, ok := watch.seen()[jobName("stale", 2)]
		return ok && j.complete, fmt.Sprintf("%+v", j)
	})
	if n := countKeys(t, ns, "keep_x"); n != 1 {
		t.Errorf("key keep_x of another namespace: %d, want it kept", n)
	}
	if f := meta.FindStatusCondition(got.Status.Conditions, hicachev1alpha1.ConditionFailed); f != nil && f.Status == metav1.ConditionTrue {
		t.Errorf("Failed = %+v after the attempt that completed", f)
	}
}
