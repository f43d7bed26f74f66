package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const (
	backendName = "mooncake"
	hcdName     = "tiny"
	servedName  = "tiny-qwen3"
	// The prompts: long enough that their prefix is above SGLang's default prefetch threshold
	// (256 tokens; shorter prefixes are never read from L3), greedy, a fixed continuation length.
	prompts   = 4
	words     = 400
	newTokens = 16
	// startBudget bounds one server's start in its pod (image already on the node): about 1-3
	// minutes on two loaded cores.
	startBudget = 15 * time.Minute
)

// cpuArgs are what the SGLang server needs on CPU besides the CPU engine the image turns on
// (docs/compatibility.md, "The SGLang server on CPU").
var cpuArgs = []string{"--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph", "--max-total-tokens", "8192"}

// The stale L3 read and its prevention, with the real server in the rendered rank pod:
//
//	(a) the deployment (bf16 KV, the checkpoint's dtype) answers fixed long-prefix prompts and
//	    writes their pages to L3 under its namespace; after its L1 and L2 are flushed it reads them
//	    back and answers the same;
//	(b) operator off: the rendered pod with a float32 KV cache (--dtype float32) and the same
//	    extra_backend_tag, outside the operator, reads the bf16 objects and answers other tokens
//	    than the float32 server without L3 objects (the baseline, same pod, a fresh tag);
//	(c) operator on: the same change to the deployment rolls it to a new namespace: no read of
//	    the old objects, every output equal to the baseline, also after its own L3 round trip;
//	    the old namespace is flushed once unused;
//	(d) the proxy, the probes and the admin key in front of the real server.
func TestStaleReadAndItsPrevention(t *testing.T) {
	ctx := context.Background()
	began := time.Now()
	// A host path holds the model (made in the pod below, no download): only the privileged
	// level admits hostPath volumes.
	ns := newNamespace(t, "engine", "privileged")
	managedBackend(t, ns)
	modelDir := makeModel(t, ns)

	h := &hicachev1alpha1.HiCacheDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: hcdName, Namespace: ns},
		Spec: hicachev1alpha1.HiCacheDeploymentSpec{
			Model: hicachev1alpha1.ModelSpec{
				Source:     &hicachev1alpha1.ModelSource{HostPath: &hicachev1alpha1.HostPathModelSource{Path: modelDir}},
				ServedName: servedName,
			},
			SGLang:   hicachev1alpha1.SGLangSpec{Image: serverImage, CompatibleRelease: "0.5.23"},
			Profile:  "Qwen3",
			Topology: hicachev1alpha1.TopologySpec{TensorParallel: 1, GPUsPerNode: 1},
			HiCache: hicachev1alpha1.HiCacheSpec{
				SizeGB: 1, IOBackend: "direct", MemLayout: "page_first_direct", PageSize: 4,
				// A read from L3 waits for the whole prefix: the figures do not depend on how
				// loaded the cores are.
				PrefetchPolicy: "wait_complete",
			},
			Storage:  &hicachev1alpha1.StorageSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: backendName}},
			Replicas: ptr.To(int32(1)),
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("2Gi")}},
			Template: hicachev1alpha1.PodOverrides{
				NodeSelector: localcluster.RealNodeSelector(),
				Tolerations:  []corev1.Toleration{localcluster.RealNodeToleration()},
				ExtraArgs:    cpuArgs,
			},
		},
	}
	if err := k8s.Create(ctx, h); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	pod := waitServing(t, ns, "")
	h = getHCD(t, ns)
	ns1 := cacheNS(h)
	logf("(a) the deployment's rank %s serves under %s, Ready by the rendered probes %s after create", pod.Name, ns1, time.Since(started).Round(time.Second))
	key := adminKey(t, ns)
	text := makePrompts()

	// (a) bf16 writes L3; its own round trip is exact.
	a1 := ask(t, pod.Status.PodIP, text, false, key)
	prefix1 := cache.NamespacePrefix(ns1, servedName)
	keys1 := waitKeys(t, ns, prefix1)
	a2 := ask(t, pod.Status.PodIP, text, true, key)
	for i := range a1.results {
		if a2.results[i].storage == 0 {
			t.Errorf("(a) prompt %d: nothing read from L3 after the flush of L1 and L2", i)
		}
		if !slices.Equal(a1.results[i].OutputIDs, a2.results[i].OutputIDs) {
			t.Errorf("(a) prompt %d: its own L3 round trip changed the output: %v, then %v", i, a1.results[i].OutputIDs, a2.results[i].OutputIDs)
		}
	}
	logf("(a) bf16: %d objects under %s; %s; after /flush_cache: %s", keys1, prefix1, a1, a2)
	if t.Failed() {
		t.FailNow()
	}

	// (b) the operator off: the rendered pod, float32 KV, outside the operator.
	base := bareServer(t, ns, "baseline", "engine-baseline", text, key)
	off := bareServer(t, ns, "off", ns1, text, key)
	var offMismatch, offTokens int
	for i := range base.results {
		d := differing(base.results[i].OutputIDs, off.results[i].OutputIDs)
		offMismatch += d
		offTokens += len(base.results[i].OutputIDs)
		if base.results[i].storage != 0 {
			t.Errorf("(b) baseline prompt %d read %d tokens from L3 under a fresh tag", i, base.results[i].storage)
		}
		if off.results[i].storage == 0 {
			t.Errorf("(b) prompt %d: the float32 server under %s read nothing of the bf16 objects", i, ns1)
		}
		if d == 0 {
			t.Errorf("(b) prompt %d: reading the bf16 objects into float32 slots gave the baseline's tokens: no stale read to prevent", i)
		}
	}
	logf("(b) operator off, float32 KV under %s: %s; %d/%d tokens differ from the no-L3 baseline (%s)", ns1, off, offMismatch, offTokens, base)
	if t.Failed() {
		t.FailNow()
	}

	// (c) the operator on: the same change to the deployment.
	rolled := time.Now()
	h = getHCD(t, ns)
	h.Spec.Template.ExtraArgs = append(slices.Clone(cpuArgs), "--dtype", "float32")
	if err := k8s.Update(ctx, h); err != nil {
		t.Fatal(err)
	}
	pod = waitServing(t, ns, ns1)
	ns2 := cacheNS(getHCD(t, ns))
	logf("(c) --dtype float32 rolled the deployment from %s to %s; rank %s Ready %s after the change", ns1, ns2, pod.Name, time.Since(rolled).Round(time.Second))
	c1 := ask(t, pod.Status.PodIP, text, false, key)
	waitKeys(t, ns, cache.NamespacePrefix(ns2, servedName))
	c2 := ask(t, pod.Status.PodIP, text, true, key)
	for i := range base.results {
		if c1.results[i].storage != 0 {
			t.Errorf("(c) prompt %d: %d tokens read from L3 in a fresh namespace", i, c1.results[i].storage)
		}
		if c2.results[i].storage == 0 {
			t.Errorf("(c) prompt %d: nothing read back from its own namespace after /flush_cache", i)
		}
		for r, run := range []askRun{c1, c2} {
			if !slices.Equal(run.results[i].OutputIDs, base.results[i].OutputIDs) {
				t.Errorf("(c) prompt %d, round %d: %v, the baseline %v", i, r+1, run.results[i].OutputIDs, base.results[i].OutputIDs)
			}
		}
	}
	flushed := time.Now()
	testutil.Eventually(t, 5*time.Minute, "the old namespace "+ns1+" flushed", func() (bool, string) {
		n := countKeys(t, ns, prefix1)
		h := getHCD(t, ns)
		var stale []hicachev1alpha1.StaleNamespace
		if h.Status.Cache != nil {
			stale = h.Status.Cache.StaleNamespaces
		}
		return n == 0 && len(stale) == 0, fmt.Sprintf("%d objects under %s; stale %+v", n, prefix1, stale)
	})
	logf("(c) operator on, float32 KV under %s: %s; after /flush_cache: %s; %s empty and no longer stale %s after that round trip",
		ns2, c1, c2, ns1, time.Since(flushed).Round(time.Second))

	// (d) the proxy, the probes and the key in front of the real server.
	guardChecks(t, pod.Status.PodIP, key)
	logf("done in %s", time.Since(began).Round(time.Second))
}

// guardChecks: /server_info in every spelling the server answers carries no key, generation
// works through the proxy, and the admin routes refuse a request without the admin key.
func guardChecks(t *testing.T, ip, key string) {
	t.Helper()
	base := "http://" + net.JoinHostPort(ip, "30000")
	for _, path := range []string{"/server_info", "/get_server_info", "/server_info%0A", "/server_info%0a", "/server_info/", "//server_info"} {
		code, body := call(t, http.MethodGet, base+path, "", nil)
		if strings.Contains(body, key) {
			t.Errorf("(d) GET %s (HTTP %d) answers with the admin key", path, code)
		}
		if path == "/server_info" && (code != http.StatusOK || !strings.Contains(body, "tp_size")) {
			t.Errorf("(d) GET /server_info: HTTP %d, want 200 with the server's arguments: %.300s", code, body)
		}
	}
	if code, body := call(t, http.MethodGet, base+"/health_generate", "", nil); code != http.StatusOK {
		t.Errorf("(d) GET /health_generate: HTTP %d: %.300s", code, body)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/flush_cache"},
		{http.MethodPost, "/hicache/storage-backend/clear"},
		{http.MethodDelete, "/hicache/storage-backend"},
	} {
		for _, authz := range []string{"", "Bearer not-the-key"} {
			if code, _ := call(t, r.method, base+r.path, authz, nil); code != http.StatusUnauthorized {
				t.Errorf("(d) %s %s with authorization %q: HTTP %d, want 401", r.method, r.path, authz, code)
			}
		}
	}
	if code, body := call(t, http.MethodPost, base+"/flush_cache", "Bearer "+key, nil); code != http.StatusOK {
		t.Errorf("(d) POST /flush_cache with the admin key: HTTP %d: %.300s", code, body)
	}
}

// bareServer runs the deployment's rendered rank pod template outside the operator (no operator labels,
// so the operator neither counts nor manages it) with a float32 KV cache and extra_backend_tag
// tag, asks the prompts once, and deletes it.
func bareServer(t *testing.T, ns, name, tag string, text []string, key string) askRun {
	t.Helper()
	ctx := context.Background()
	var groups appsv1.StatefulSetList
	if err := k8s.List(ctx, &groups, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: hcdName}); err != nil {
		t.Fatal(err)
	}
	if len(groups.Items) != 1 {
		t.Fatalf("%d serving groups, want 1", len(groups.Items))
	}
	spec := groups.Items[0].Spec.Template.Spec.DeepCopy()
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != resolve.ServingContainer {
			continue
		}
		j := slices.Index(c.Args, "--hicache-storage-backend-extra-config")
		if j < 0 || j+1 >= len(c.Args) {
			t.Fatalf("the rendered command line has no --hicache-storage-backend-extra-config: %q", c.Args)
		}
		var extra map[string]any
		if err := json.Unmarshal([]byte(c.Args[j+1]), &extra); err != nil {
			t.Fatal(err)
		}
		extra["extra_backend_tag"] = tag
		b, err := json.Marshal(extra)
		if err != nil {
			t.Fatal(err)
		}
		c.Args = append(slices.Clone(c.Args), "--dtype", "float32")
		c.Args[j+1] = string(b)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "engine-" + name}}, Spec: *spec}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testutil.Eventually(t, startBudget, "pod "+name+" Ready by the rendered probes", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		for _, s := range pod.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				t.Fatalf("pod %s: container %s restarted: %+v", name, s.Name, s.LastTerminationState)
			}
		}
		return kubeutil.PodReady(pod) && pod.Status.PodIP != "", fmt.Sprintf("%s %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
	})
	logf("(b) pod %s (float32 KV, tag %s) Ready in %s", name, tag, time.Since(began).Round(time.Second))
	run := ask(t, pod.Status.PodIP, text, false, key)
	if err := k8s.Delete(ctx, pod, client.GracePeriodSeconds(5)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "pod "+name+" gone", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return client.IgnoreNotFound(err) == nil && err != nil, fmt.Sprint(err)
	})
	return run
}

// waitServing waits until the deployment is Ready on a namespace other than not, with one
// running rank pod on the real node whose containers never restarted, and returns that pod.
func waitServing(t *testing.T, ns, not string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testutil.Eventually(t, startBudget, "HiCacheDeployment "+hcdName+" Ready", func() (bool, string) {
		h := getHCD(t, ns)
		c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionReady)
		var pods corev1.PodList
		if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{hicachev1alpha1.LabelDeployment: hcdName}); err != nil {
			return false, err.Error()
		}
		var live []corev1.Pod
		var states []string
		for _, p := range pods.Items {
			for _, s := range p.Status.ContainerStatuses {
				if s.RestartCount > 0 {
					t.Fatalf("rank pod %s: container %s restarted: %+v", p.Name, s.Name, s.LastTerminationState)
				}
				states = append(states, fmt.Sprintf("%s/%s %+v", p.Name, s.Name, s.State))
			}
			if p.DeletionTimestamp == nil && p.Labels[hicachev1alpha1.LabelCacheNamespace] == cacheNS(h) {
				live = append(live, p)
			}
		}
		ok := c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == h.Generation &&
			cacheNS(h) != "" && cacheNS(h) != not && len(live) == 1 && kubeutil.PodReady(&live[0]) && live[0].Spec.NodeName == node.Name
		if ok {
			pod = &live[0]
		}
		return ok, fmt.Sprintf("namespace %q, conditions %+v, pods %v", cacheNS(h), h.Status.Conditions, states)
	})
	return pod
}

// makeModel writes the tiny Qwen3-shape checkpoint (hack/sglang/make_tiny_model.py, in the image)
// into a directory of the cluster's, from a pod on the real node, and returns the directory.
func makeModel(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(cluster.Dir(), "models")
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "tiny-model", Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(0)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				NodeSelector:  localcluster.RealNodeSelector(),
				Tolerations:   []corev1.Toleration{localcluster.RealNodeToleration()},
				Containers: []corev1.Container{{
					Name: "make", Image: serverImage,
					Command:      []string{"python3", "/usr/local/share/hicache/make_tiny_model.py", "--arch", "qwen3", "/out/qwen3"},
					VolumeMounts: []corev1.VolumeMount{{Name: "out", MountPath: "/out"}},
				}},
				Volumes: []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: dir, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}},
			}},
		},
	}
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testutil.Eventually(t, 5*time.Minute, "the model Job", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		if job.Status.Failed > 0 {
			t.Fatalf("the model Job failed: %s", jobLog(t, ns, job.Name))
		}
		return job.Status.Succeeded == 1, fmt.Sprintf("%+v", job.Status)
	})
	logf("tiny Qwen3 checkpoint made on the real node in %s", time.Since(began).Round(time.Second))
	return filepath.Join(dir, "qwen3")
}

func jobLog(t *testing.T, ns, job string) string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil || len(pods.Items) == 0 {
		return fmt.Sprint(err)
	}
	out, err := cs.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return err.Error()
	}
	return string(out)
}

func newNamespace(t *testing.T, prefix, level string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := createNamespace(ctx, name, level); err != nil {
		t.Fatal(err)
	}
	return name
}

func managedBackend(t *testing.T, ns string) {
	t.Helper()
	cb := &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: backendName, Namespace: ns},
		Spec: hicachev1alpha1.CacheBackendSpec{
			Type: hicachev1alpha1.BackendMooncake,
			Placement: &hicachev1alpha1.BackendPlacement{
				NodeSelector: localcluster.RealNodeSelector(),
				Tolerations:  []corev1.Toleration{localcluster.RealNodeToleration()},
			},
			Mooncake: &hicachev1alpha1.MooncakeSpec{Managed: &hicachev1alpha1.ManagedMooncake{
				Store: &hicachev1alpha1.StorePods{Replicas: ptr.To(int32(1)), SegmentSize: resource.MustParse("512Mi")},
			}},
		},
	}
	began := time.Now()
	if err := k8s.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Minute, "CacheBackend Ready", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(cb), cb); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == cb.Generation, fmt.Sprintf("%+v", cb.Status.Conditions)
	})
	logf("%s: managed backend (master and one store pod) Ready in %s", ns, time.Since(began).Round(time.Second))
}

// cacheNS is the L3 namespace the deployment's current generation writes, "" before the operator
// has decided it.
func cacheNS(h *hicachev1alpha1.HiCacheDeployment) string {
	if h.Status.Cache == nil {
		return ""
	}
	return h.Status.Cache.Namespace
}

func getHCD(t *testing.T, ns string) *hicachev1alpha1.HiCacheDeployment {
	t.Helper()
	h := &hicachev1alpha1.HiCacheDeployment{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: hcdName}, h); err != nil {
		t.Fatal(err)
	}
	return h
}

func adminKey(t *testing.T, ns string) string {
	t.Helper()
	var s corev1.Secret
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: resolve.GeneratedAdminKeySecret(hcdName)}, &s); err != nil {
		t.Fatal(err)
	}
	k := string(s.Data[resolve.GeneratedAdminKeyField])
	if k == "" {
		t.Fatal("the generated admin key is empty")
	}
	return k
}

// admin is the master's admin API through its Service, inside the cluster's network namespace.
func admin(t *testing.T, ns string) *mooncake.Client {
	t.Helper()
	var svc corev1.Service
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: backendName + "-master"}, &svc); err != nil {
		t.Fatal(err)
	}
	var port int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "admin" {
			port = p.Port
		}
	}
	c, err := mooncake.NewClient("http://"+net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port))), inNetns)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func countKeys(t *testing.T, ns, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := admin(t, ns).CountKeysWithPrefix(ctx, prefix)
	if err != nil {
		t.Fatalf("counting the keys under %q: %v", prefix, err)
	}
	return n
}

// waitKeys waits until the objects under prefix stop growing (the server writes L3 behind its
// answers) and returns their count.
func waitKeys(t *testing.T, ns, prefix string) int64 {
	t.Helper()
	var last int64 = -1
	var n int64
	testutil.Eventually(t, 2*time.Minute, "the objects under "+prefix+" written", func() (bool, string) {
		n = countKeys(t, ns, prefix)
		settled := n > 0 && n == last
		last = n
		if !settled {
			time.Sleep(2 * time.Second)
		}
		return settled, fmt.Sprintf("%d objects", n)
	})
	return n
}

// makePrompts are the fixed prompts: words of the tiny model's vocabulary from a fixed seed.
func makePrompts() []string {
	rng := rand.New(rand.NewPCG(11, 7))
	var out []string
	for range prompts {
		w := make([]string, words)
		for i := range w {
			w[i] = fmt.Sprintf("w%d", rng.IntN(500))
		}
		out = append(out, strings.Join(w, " "))
	}
	return out
}

type answer struct {
	OutputIDs []int `json:"output_ids"`
	MetaInfo  struct {
		CachedTokens        int            `json:"cached_tokens"`
		CachedTokensDetails map[string]any `json:"cached_tokens_details"`
	} `json:"meta_info"`
	// storage is how many prompt tokens came from L3.
	storage int
}

type askRun struct {
	results []answer
	took    time.Duration
}

func (r askRun) String() string {
	var st []string
	for _, a := range r.results {
		st = append(st, strconv.Itoa(a.storage))
	}
	return fmt.Sprintf("%d prompts in %s, L3 tokens read %s", len(r.results), r.took.Round(100*time.Millisecond), strings.Join(st, "/"))
}

// ask sends the prompts greedily through the pod's proxy; flush first drops the server's L1
// and L2 (POST /flush_cache with the admin key), so a prefix seen before can only come from L3.
func ask(t *testing.T, ip string, text []string, flush bool, key string) askRun {
	t.Helper()
	base := "http://" + net.JoinHostPort(ip, "30000")
	if flush {
		if code, body := call(t, http.MethodPost, base+"/flush_cache", "Bearer "+key, nil); code != http.StatusOK {
			t.Fatalf("POST /flush_cache: HTTP %d: %s", code, body)
		}
		time.Sleep(time.Second)
	}
	began := time.Now()
	var run askRun
	for i, p := range text {
		body, err := json.Marshal(map[string]any{"text": p, "sampling_params": map[string]any{"temperature": 0, "max_new_tokens": newTokens, "ignore_eos": true}})
		if err != nil {
			t.Fatal(err)
		}
		code, out := call(t, http.MethodPost, base+"/generate", "", body)
		if code != http.StatusOK {
			t.Fatalf("prompt %d: POST /generate: HTTP %d: %.500s", i, code, out)
		}
		var a answer
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("prompt %d: %v: %.500s", i, err, out)
		}
		if len(a.OutputIDs) != newTokens {
			t.Fatalf("prompt %d: %d output tokens, want %d: %.500s", i, len(a.OutputIDs), newTokens, out)
		}
		if v, ok := a.MetaInfo.CachedTokensDetails["storage"].(float64); ok {
			a.storage = int(v)
		}
		run.results = append(run.results, a)
	}
	run.took = time.Since(began)
	return run
}

func call(t *testing.T, method, url, authz string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := inNetns.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func differing(a, b []int) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n + max(len(a), len(b)) - min(len(a), len(b))
}
