package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

func getCB(t *testing.T, ns, name string) *hicachev1alpha1.CacheBackend {
	t.Helper()
	var cb hicachev1alpha1.CacheBackend
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cb); err != nil {
		t.Fatal(err)
	}
	return &cb
}

// An external backend pointed at a real master reports its objects, goes NotReady with a reason
// a person can act on when the master stops, and Ready again when it returns.
func TestExternalBackendHealthAndCapacity(t *testing.T) {
	ns, m := namespaceWithBackend(t)
	cb := getCB(t, ns, "mooncake")
	if ep := cb.Status.Endpoints; ep == nil || ep.RPCAddress != m.RPCAddr || ep.AdminURL != m.AdminURL || ep.MetadataServer != "P2PHANDSHAKE" {
		t.Errorf("endpoints %+v, want the master's addresses and P2PHANDSHAKE", cb.Status.Endpoints)
	}

	keys := []string{}
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("hc-0123456789_qwen3_%064x_%d_k", i, i%4))
	}
	m.putKeys(t, keys, 8192)
	eventually(t, 15*time.Second, "the key count and capacity in status", func() (bool, string) {
		cb := getCB(t, ns, "mooncake")
		return cb.Status.KeyCount == 12 && cb.Status.CapacityBytes > 0 && cb.Status.UsedBytes >= 12*8192 && cb.Status.Usage != "",
			fmt.Sprintf("keys %d capacity %d used %d usage %q", cb.Status.KeyCount, cb.Status.CapacityBytes, cb.Status.UsedBytes, cb.Status.Usage)
	})

	// A deployment writing to it shows up under its namespace.
	create(t, hcd(t, ns, qwen3))
	waitReadyGroups(t, ns, "qwen3", 1)
	want := getHCD(t, ns, "qwen3").Status.Cache.Namespace
	eventually(t, 15*time.Second, "the namespace in use listed on the backend", func() (bool, string) {
		cb := getCB(t, ns, "mooncake")
		for _, u := range cb.Status.Namespaces {
			if u.Namespace == want && slices.Equal(u.Deployments, []string{"qwen3"}) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", cb.Status.Namespaces)
	})

	// The poll interval is 1 s here: the flip must come within a few of them.
	m.stop(t)
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, ns, "mooncake", hicachev1alpha1.ConditionReady, metav1.ConditionFalse, 10*time.Second)
	c := meta.FindStatusCondition(getCB(t, ns, "mooncake").Status.Conditions, hicachev1alpha1.ConditionReady)
	if c.Reason != hicachev1alpha1.ReasonMasterUnreachable || !strings.Contains(c.Message, m.AdminURL) || !strings.Contains(c.Message, "connection refused") {
		t.Errorf("Ready=False %s: %q; want MasterUnreachable naming the admin URL and the error", c.Reason, c.Message)
	}
	// The serving groups keep running while the store is away.
	if h := getHCD(t, ns, "qwen3"); h.Status.ReadyReplicas != 1 {
		t.Errorf("the serving group went down with the store: %d ready", h.Status.ReadyReplicas)
	}
	m.restart(t)
	waitCondition(t, &hicachev1alpha1.CacheBackend{}, ns, "mooncake", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 10*time.Second)
}

// A managed backend gets a master Deployment, a Service and a NetworkPolicy rendered from its
// spec, and store pods when it asks for them.
func TestManagedBackendChildren(t *testing.T) {
	ns := newNamespace(t)
	cb := &hicachev1alpha1.CacheBackend{}
	if err := decodeInto(`
metadata: {name: store}
spec:
  mooncake:
    managed:
      image: example.com/mooncake:0.3.13.post1
      version: 0.3.13.post1
      rpcPort: 50052
      adminPort: 9004
      evictionHighWatermarkRatio: "0.85"
      evictionRatio: "0.1"
      leaseTTLMillis: 5000
      resources: {requests: {cpu: "1", memory: 1Gi}}
      store: {replicas: 2, segmentSize: 8Gi, resources: {requests: {memory: 10Gi}}}
`, cb); err != nil {
		t.Fatal(err)
	}
	cb.Namespace = ns
	create(t, cb)

	var dep appsv1.Deployment
	eventually(t, 20*time.Second, "the master Deployment", func() (bool, string) {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "store-master"}, &dep)
		return err == nil, fmt.Sprint(err)
	})
	c := dep.Spec.Template.Spec.Containers[0]
	wantArgs := []string{"--rpc_port=50052", "--rpc_address=$(POD_IP)", "--metrics_port=9004", "--enable_metric_reporting=true",
		"--eviction_high_watermark_ratio=0.85", "--eviction_ratio=0.1", "--default_kv_lease_ttl=5000"}
	if c.Image != "example.com/mooncake:0.3.13.post1" || !slices.Equal(c.Command, []string{"mooncake_master"}) || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("master container %s %v %v, want the spec's image and %v", c.Image, c.Command, c.Args, wantArgs)
	}
	if *dep.Spec.Replicas != 1 || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/health" || c.LivenessProbe == nil {
		t.Errorf("master: %d replicas, probes %+v / %+v", *dep.Spec.Replicas, c.ReadinessProbe, c.LivenessProbe)
	}
	if sc := dep.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || c.SecurityContext == nil ||
		*c.SecurityContext.AllowPrivilegeEscalation || len(c.SecurityContext.Capabilities.Drop) != 1 {
		t.Errorf("the master does not meet the restricted profile: %+v %+v", sc, c.SecurityContext)
	}
	var svc corev1.Service
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "store-master"}, &svc); err != nil {
		t.Fatal(err)
	}
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["rpc"] != 50052 || ports["admin"] != 9004 {
		t.Errorf("service ports %v", ports)
	}
	var np networkingv1.NetworkPolicy
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "store-master"}, &np); err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[0].From[0].PodSelector.MatchLabels[hicachev1alpha1.LabelBackend] != "store" {
		t.Errorf("network policy ingress %+v: want RPC from the backend's users and admin from the operator", np.Spec.Ingress)
	}
	var store appsv1.StatefulSet
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "store-store"}, &store); err != nil {
		t.Fatal(err)
	}
	if *store.Spec.Replicas != 2 || store.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("%d store pods, update strategy %s; want 2, replaced only by the operator (OnDelete)", *store.Spec.Replicas, store.Spec.UpdateStrategy.Type)
	}
	if v, _ := envValue(store.Spec.Template.Spec.Containers[0], "MOONCAKE_GLOBAL_SEGMENT_SIZE"); v != "8589934592" {
		t.Errorf("store segment size %q, want 8Gi in bytes", v)
	}
	// The status names the in-cluster endpoints; the fake nodes run no master, so it is honest
	// about not reaching it.
	eventually(t, 30*time.Second, "endpoints and a Ready condition", func() (bool, string) {
		cb := getCB(t, ns, "store")
		c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
		ok := cb.Status.Endpoints != nil && cb.Status.Endpoints.RPCAddress == "store-master."+ns+".svc:50052" && c != nil && c.Status == metav1.ConditionFalse
		return ok, fmt.Sprintf("%+v %+v", cb.Status.Endpoints, c)
	})
	// Children are owned, so they go with the backend.
	for _, o := range []client.Object{&dep, &svc, &np, &store} {
		if !metav1.IsControlledBy(o, getCB(t, ns, "store")) {
			t.Errorf("%s is not controlled by the CacheBackend", o.GetName())
		}
	}
}

// leakMarker starts every answer of a hostile admin URL: nothing of it may reach the status or
// the Events of the CacheBackend that names that URL.
const leakMarker = "XYZZY"

// hostileAdmin is an admin URL on loopback that forwards to a real master until it is turned,
// then answers with its own text.
type hostileAdmin struct {
	*httptest.Server
	turned atomic.Bool
}

func startHostileAdmin(t *testing.T, realAdminURL string, answer http.HandlerFunc) *hostileAdmin {
	t.Helper()
	target, err := url.Parse(realAdminURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	h := &hostileAdmin{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.turned.Load() {
			proxy.ServeHTTP(w, r)
			return
		}
		answer(w, r)
	}))
	t.Cleanup(h.Close)
	return h
}

// A CacheBackend can name any URL the operator reaches; whatever it answers, its status and
// Events carry only what the operator parsed (numbers, known states) and its own sentences,
// never the text of the answer: an HTML page, Mooncake-shaped errors and health fields, a
// metrics page of garbage, a redirect, an answer that is not HTTP.
func TestBackendStatusNeverShowsTheAnswerOfItsAdminURL(t *testing.T) {
	ns := newNamespace(t)
	m := startMaster(t)
	secret := leakMarker + "-token=0f9e8d7c6b5a-internal-only"
	health := func(r *http.Request) bool { return r.URL.Path == "/health" }
	answers := map[string]http.HandlerFunc{
		"html-page": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, "%s<html><body>Internal dashboard %s</body></html>", leakMarker, secret)
		},
		"mooncake-error-shape": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"success":false,"error_code":-1011,"error_message":%q,"error":%q}`, secret, secret)
		},
		"plain-500": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, secret)
		},
		"health-fields": func(w http.ResponseWriter, r *http.Request) {
			if !health(r) {
				fmt.Fprint(w, "master_total_capacity_bytes 1\nmaster_allocated_bytes 0\nmaster_key_count 0\n")
				return
			}
			fmt.Fprintf(w, `{"status":%q,"role":%q,"ha_state":%q,"service_ready":false,"leader_address":%q}`, secret, secret, secret, secret)
		},
		"metrics-garbage": func(w http.ResponseWriter, r *http.Request) {
			if health(r) {
				fmt.Fprint(w, `{"status":"ok","role":"leader","ha_state":"serving","service_ready":true}`)
				return
			}
			fmt.Fprintf(w, "%s_metric{token=%q} 1\n%s is not a sample\n", leakMarker, secret, secret)
		},
		"redirect": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/"+secret, http.StatusFound)
		},
		"not-http": func(w http.ResponseWriter, _ *http.Request) {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString(secret + " " + secret + "\r\n\r\n")
			_ = buf.Flush()
			_ = conn.Close()
		},
	}
	servers := map[string]*hostileAdmin{}
	for name, answer := range answers {
		servers[name] = startHostileAdmin(t, m.AdminURL, answer)
		create(t, &hicachev1alpha1.CacheBackend{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
				External: &hicachev1alpha1.ExternalMooncake{RPCAddress: m.RPCAddr, AdminURL: servers[name].URL},
			}},
		})
	}
	// Ready through the real master first, so that turning produces a transition and its Event.
	for name := range answers {
		waitCondition(t, &hicachev1alpha1.CacheBackend{}, ns, name, hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 30*time.Second)
	}
	for _, s := range servers {
		s.turned.Store(true)
	}
	for name := range answers {
		waitCondition(t, &hicachev1alpha1.CacheBackend{}, ns, name, hicachev1alpha1.ConditionReady, metav1.ConditionFalse, 30*time.Second)
	}
	// A few more probes of the hostile answers (the poll interval is 1 s here).
	time.Sleep(3 * time.Second)

	for name := range answers {
		cb := getCB(t, ns, name)
		status, err := json.Marshal(cb.Status)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.ToUpper(string(status)), leakMarker) {
			t.Errorf("%s: the status shows the admin URL's answer:\n%s", name, status)
		}
		c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
		t.Logf("%s: Ready=False %s: %s", name, c.Reason, c.Message)
		if !strings.Contains(c.Message, servers[name].URL) {
			t.Errorf("%s: Ready=False %s %q does not name the admin URL", name, c.Reason, c.Message)
		}
	}
	var events corev1.EventList
	if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	warnings := 0
	for _, e := range events.Items {
		if e.Type == corev1.EventTypeWarning {
			warnings++
		}
		if b, _ := json.Marshal(e); strings.Contains(strings.ToUpper(string(b)), leakMarker) {
			t.Errorf("event %s about %s shows the admin URL's answer: %s: %s", e.Reason, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	if warnings < len(answers) {
		t.Errorf("%d Warning events for %d backends that went NotReady; want one each at least", warnings, len(answers))
	}
}

// hangingAdmin is an admin URL whose listener accepts connections and never answers.
func hangingAdmin(t *testing.T, accepted *atomic.Int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// Backends whose admin URLs hang do not delay the probes of another namespace's backend: a
// master that stops is reported within one poll interval plus the probe deadlines of the
// hanging backends that may be ahead of it, shared by the workers.
func TestHangingAdminURLsDoNotDelayAnotherBackend(t *testing.T) {
	ns, other := newNamespace(t), newNamespace(t)
	m := startMaster(t)
	// The backend reaches its master through a proxy that counts its probes, so that the master
	// can be stopped right after one: the worst moment, with the next probe a whole poll away.
	countingURL, probed := countingAdmin(t, m.AdminURL)
	externalBackend(t, ns, "mooncake", m.RPCAddr, countingURL)

	const hanging = 6
	accepted := make([]*atomic.Int64, hanging)
	for i := range hanging {
		accepted[i] = &atomic.Int64{}
		create(t, &hicachev1alpha1.CacheBackend{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("hangs-%d", i), Namespace: other},
			Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
				External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "127.0.0.1:1", AdminURL: hangingAdmin(t, accepted[i])},
			}},
		})
	}
	// Every hanging backend has been probed twice: the probes are in their steady rhythm, where
	// each hanging backend comes back to the queue one poll interval after its probe gave up.
	// (Before probes were bounded and spread over workers, this took a 10 s timeout per probe, in
	// turn: two minutes.)
	eventually(t, 180*time.Second, "every hanging admin URL probed twice", func() (bool, string) {
		least := int64(1 << 62)
		for _, a := range accepted {
			least = min(least, a.Load())
		}
		return least >= 2, fmt.Sprintf("the least probed was asked %d times", least)
	})

	// The bound: the backend's next probe is due within one poll interval (1 s here); by then
	// the workers may all be held by hanging probes, each for at most the probe deadline, with at
	// most all hanging backends ahead of it: ceil(hanging/workers) deadlines. Two seconds more for
	// the status write and this test's polling on a loaded machine.
	poll := time.Second
	rounds := (hanging + storeuse.DefaultBackendWorkers - 1) / storeuse.DefaultBackendWorkers
	bound := poll + time.Duration(rounds)*storeuse.DefaultProbeTimeout + 2*time.Second

	for n := probed.Load(); probed.Load() == n; {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	m.stop(t)
	var detected time.Duration
	eventually(t, 120*time.Second, "the stopped master reported", func() (bool, string) {
		c := meta.FindStatusCondition(getCB(t, ns, "mooncake").Status.Conditions, hicachev1alpha1.ConditionReady)
		detected = time.Since(start)
		return c != nil && c.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", c)
	})
	t.Logf("a stopped master was reported NotReady after %v, beside %d hanging backends (bound %v)", detected.Round(100*time.Millisecond), hanging, bound)
	if detected > bound {
		t.Errorf("a stopped master was reported after %v beside %d hanging backends; want within %v", detected.Round(100*time.Millisecond), hanging, bound)
	}
}

// countingAdmin is an admin URL that forwards to a real master's and counts the probes it
// answered.
func countingAdmin(t *testing.T, realAdminURL string) (string, *atomic.Int64) {
	t.Helper()
	target, err := url.Parse(realAdminURL)
	if err != nil {
		t.Fatal(err)
	}
	var probed atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy.ServeHTTP(w, r)
		if r.URL.Path == "/metrics" { // the probe's last request, answered
			probed.Add(1)
		}
	}))
	t.Cleanup(counting.Close)
	return counting.URL, &probed
}

// Probes follow the poll interval, not the rate of events: many deployments changing their use
// of the backend's namespaces at once wake it many times, and it asks its master at most once
// per interval.
func TestBackendProbesFollowThePollIntervalNotTheEvents(t *testing.T) {
	ns := newNamespace(t)
	m := startMaster(t)
	adminURL, probed := countingAdmin(t, m.AdminURL)
	externalBackend(t, ns, "mooncake", m.RPCAddr, adminURL)

	const n = 30
	poll := time.Second // the suite's BackendPollInterval
	before, start := probed.Load(), time.Now()
	for i := range n {
		h := hcd(t, ns, qwen3)
		h.Name = fmt.Sprintf("qwen3-%02d", i)
		h.Spec.Replicas = ptr.To(int32(0))
		if i%2 == 1 {
			h.Spec.Model.Revision = strings.Repeat("1", 40) // another commit: a second namespace
		}
		create(t, h)
	}
	eventually(t, 60*time.Second, "every deployment counted on the backend", func() (bool, string) {
		total := int32(0)
		for _, u := range getCB(t, ns, "mooncake").Status.Namespaces {
			total += u.DeploymentCount
		}
		return total == n, fmt.Sprintf("%d of %d counted", total, n)
	})
	elapsed := time.Since(start)
	probes := probed.Load() - before
	// One probe per interval begun, and one for the interval under way when the burst began.
	bound := int64(elapsed/poll) + 2
	t.Logf("%d deployments recorded on the backend in %v with %d probes (bound %d)", n, elapsed.Round(10*time.Millisecond), probes, bound)
	if probes > bound {
		t.Errorf("%d probes in %v while %d deployments changed, want at most %d (one per %v poll interval)", probes, elapsed.Round(10*time.Millisecond), n, bound, poll)
	}
}

// Store pods that an earlier release ran as a Deployment give way to the StatefulSet: the
// operator deletes the Deployment it owns once the StatefulSet's pods are all Ready, not before,
// and leaves a Deployment of that name alone when it is not the backend's.
func TestLegacyStoreDeploymentGoesOnceTheStatefulSetIsReady(t *testing.T) {
	ns := newNamespace(t)
	cb := &hicachev1alpha1.CacheBackend{}
	if err := decodeInto(`
metadata: {name: legacy}
spec:
  mooncake:
    managed:
      store: {replicas: 2, segmentSize: 64Mi, localBufferSize: 16Mi}
`, cb); err != nil {
		t.Fatal(err)
	}
	cb.Namespace = ns
	create(t, cb)
	cb = getCB(t, ns, "legacy")
	labels := map[string]string{"app": "legacy-store"}
	legacy := func(owned bool) *appsv1.Deployment {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "legacy-store", Namespace: ns},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "store", Image: "example.com/mooncake:old"}}}}},
		}
		if owned {
			d.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(cb, hicachev1alpha1.GroupVersion.WithKind("CacheBackend"))}
		}
		return d
	}
	create(t, legacy(true))
	eventually(t, 60*time.Second, "the StatefulSet Ready, then the backend's old store Deployment gone", func() (bool, string) {
		var sts appsv1.StatefulSet
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "legacy-store"}, &sts); err != nil {
			return false, err.Error()
		}
		var dep appsv1.Deployment
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "legacy-store"}, &dep)
		gone := apierrors.IsNotFound(err) || (err == nil && dep.DeletionTimestamp != nil)
		if gone && sts.Status.ReadyReplicas < 2 {
			t.Fatalf("the old store Deployment was deleted with %d of 2 StatefulSet pods Ready", sts.Status.ReadyReplicas)
		}
		return gone, fmt.Sprintf("StatefulSet %d/2 Ready, Deployment: %v", sts.Status.ReadyReplicas, err)
	})
	eventually(t, 30*time.Second, "the Deployment removed", func() (bool, string) {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "legacy-store"}, &appsv1.Deployment{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// One of that name that is not the backend's stays.
	create(t, legacy(false))
	cb = getCB(t, ns, "legacy")
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.Mooncake.Managed.Store.LocalBufferSize = ptr.To(resource.MustParse("32Mi")) // a reconcile
	if err := k8s.Patch(context.Background(), cb, patch); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "legacy-store"}, &appsv1.Deployment{}); err != nil {
		t.Errorf("a Deployment the backend does not own was touched: %v", err)
	}
}

// An admin URL that answers like no master does, every way in turn (garbage, silence, drips of
// headers and body, answers without end, a compressed bomb, a redirect loop), beside a backend
// whose master is real: the hostile one is reported unreachable, each of its probes lets go
// within the probe deadline having read no more than the admin client's bounds, and the other
// backend stays Ready, probed at its own rhythm throughout.
func TestAHostileAdminURLHoldsNeitherTheOperatorNorAnotherBackend(t *testing.T) {
	ns := newNamespace(t)
	m := startMaster(t)
	healthyURL, probed := countingAdmin(t, m.AdminURL)
	externalBackend(t, ns, "healthy", m.RPCAddr, healthyURL)
	hostile := mooncaketest.StartHostile(t)
	create(t, &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: "hostile", Namespace: ns},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: m.RPCAddr, AdminURL: hostile.URL},
		}},
	})

	// Until the endpoint has answered every way, watch the healthy backend's probes and Ready,
	// and the heap of this process (the operator runs in it).
	answered := func() map[mooncaketest.HostileMode]bool {
		seen := map[mooncaketest.HostileMode]bool{}
		for _, r := range hostile.Requests() {
			seen[r.Mode] = true
		}
		return seen
	}
	var (
		maxGap, notReadyFor time.Duration
		lastProbe           = time.Now()
		seen                = probed.Load()
		peakHeap            uint64
		ms                  runtime.MemStats
	)
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapInuse
	start := time.Now()
	for next := time.Now(); len(answered()) < len(mooncaketest.HostileModes); next = next.Add(200 * time.Millisecond) {
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("the hostile endpoint answered %d of %d ways in 3 minutes: %v", len(answered()), len(mooncaketest.HostileModes), answered())
		}
		for time.Now().Before(next) {
			if n := probed.Load(); n != seen {
				maxGap, lastProbe, seen = max(maxGap, time.Since(lastProbe)), time.Now(), n
			}
			time.Sleep(20 * time.Millisecond)
		}
		c := meta.FindStatusCondition(getCB(t, ns, "healthy").Status.Conditions, hicachev1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue {
			notReadyFor += 200 * time.Millisecond
		}
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapInuse)
	}
	maxGap = max(maxGap, time.Since(lastProbe))
	window := time.Since(start)
	t.Logf("the hostile endpoint answered all %d ways in %v; the healthy backend's longest gap between probes was %v; heap in use %d MiB at the start, at most %d MiB",
		len(mooncaketest.HostileModes), window.Round(100*time.Millisecond), maxGap.Round(10*time.Millisecond), baseHeap>>20, peakHeap>>20)

	// The healthy backend: its poll interval (1 s here), 2 s more for a loaded machine.
	if bound := time.Second + 2*time.Second; maxGap > bound {
		t.Errorf("the healthy backend went %v without a probe beside the hostile one; want within %v", maxGap.Round(10*time.Millisecond), bound)
	}
	if notReadyFor > 0 {
		t.Errorf("the healthy backend was not Ready for about %v beside the hostile one", notReadyFor)
	}
	// The hostile one: each answer left by the operator within the probe deadline (1 s more for
	// a loaded machine), after at most the largest answer bound of the admin client (a 16 MiB
	// /metrics page) plus what the kernel's socket buffers on both ends of a loopback connection
	// hold (up to 10 MiB here).
	const maxBytes = 16<<20 + 24<<20
	for _, r := range hostile.Requests() {
		if r.Took > storeuse.DefaultProbeTimeout+time.Second {
			t.Errorf("%s %s: the operator held the answer for %v; want within the probe deadline %v", r.Mode, r.Path, r.Took.Round(10*time.Millisecond), storeuse.DefaultProbeTimeout)
		}
		if r.Bytes > maxBytes {
			t.Errorf("%s %s: the endpoint sent %d MiB before the operator left; want at most %d MiB", r.Mode, r.Path, r.Bytes>>20, maxBytes>>20)
		}
		if strings.Contains(r.Query, "loop=") {
			t.Errorf("the operator followed a redirect to %s?%s", r.Path, r.Query)
		}
	}
	c := meta.FindStatusCondition(getCB(t, ns, "hostile").Status.Conditions, hicachev1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != hicachev1alpha1.ReasonMasterUnreachable || !strings.Contains(c.Message, hostile.URL) {
		t.Errorf("the hostile backend's Ready is %+v; want False, %s, naming %s", c, hicachev1alpha1.ReasonMasterUnreachable, hostile.URL)
	}
}
