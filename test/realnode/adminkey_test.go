package realnode

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The admin endpoints of a rank require the key. SGLang's own server cannot start here (no GPU,
// no weights, and its CPU environment lacks the HTTP stack), so the leader's pod template as the
// operator rendered it runs on the real node with the SGLang stand-in as its image
// (cmd/sglang-standin: the release's argument check, then its key rules in front of its
// endpoints): the kubelet expands the key from the generated Secret into --admin-api-key, as it
// would for SGLang, and the proxy in front of it (the operator's image) owns the pod's port. Only
// what a GPU node provides is taken out: the GPU and memory requests, the placement on GPU nodes.
func TestAdminEndpointsRequireTheKey(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "adminkey", baseline)
	managedBackend(t, ns, 1, "64Mi")
	h := qwen3(t, ns)

	var sts appsv1.StatefulSet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Name + "-0"}, &sts); err != nil {
		t.Fatal(err)
	}
	tmpl := sts.Spec.Template.DeepCopy()
	spec := tmpl.Spec
	spec.NodeSelector = localcluster.RealNodeSelector()
	spec.Tolerations = []corev1.Toleration{localcluster.RealNodeToleration()}
	spec.Affinity = nil
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name == "sglang" {
			c.Image, c.ImagePullPolicy = images.SGLangStandin, corev1.PullNever
			c.Resources = corev1.ResourceRequirements{}
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "standin", Namespace: ns, Labels: map[string]string{"app": "sglang-standin"}}, Spec: spec}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testutil.Eventually(t, 2*time.Minute, "the stand-in Ready by the rendered probes", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		return kubeutil.PodReady(pod) && pod.Status.PodIP != "", fmt.Sprintf("%s %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
	})
	logf("%s: the rendered leader runs the stand-in, Ready in %s", ns, time.Since(began).Round(time.Millisecond))

	var secret corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resolve.GeneratedAdminKeySecret(h.Name)}, &secret); err != nil {
		t.Fatal(err)
	}
	key := string(secret.Data[resolve.GeneratedAdminKeyField])
	base := fmt.Sprintf("http://%s:30000", pod.Status.PodIP)
	call := func(method, path, authz string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := inNetns.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	got := map[string]int{
		"clear, no key":         call("POST", "/hicache/storage-backend/clear", ""),
		"clear, a wrong key":    call("POST", "/hicache/storage-backend/clear", "Bearer not-the-key"),
		"clear, the key":        call("POST", "/hicache/storage-backend/clear", "Bearer "+key),
		"detach, no key":        call("DELETE", "/hicache/storage-backend", ""),
		"flush cache, no key":   call("POST", "/flush_cache", ""),
		"health, no key":        call("GET", "/health", ""),
		"models, no key":        call("GET", "/v1/models", ""),
		"models, the admin key": call("GET", "/v1/models", "Bearer "+key),
	}
	want := map[string]int{
		"clear, no key": 401, "clear, a wrong key": 401, "clear, the key": 200, "detach, no key": 401, "flush cache, no key": 401,
		// No spec.security.apiKeySecretRef: the OpenAI endpoints take no key.
		"health, no key": 200, "models, no key": 200, "models, the admin key": 200,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: HTTP %d, want %d", k, got[k], w)
		}
	}
	// Those calls reached the stand-in through the proxy the operator renders beside it (SGLang
	// listens on loopback), which answers /server_info without the key the kubelet expanded into
	// the command line, though the stand-in reports it, as SGLang 0.5.23 does.
	for _, path := range []string{"/server_info", "/get_server_info"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := inNetns.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || strings.Contains(string(b), key) || !strings.Contains(string(b), `"admin_api_key":"<redacted>"`) {
			t.Errorf("GET %s: HTTP %d (%v), the admin key in it: %v", path, resp.StatusCode, err, strings.Contains(string(b), key))
		}
	}
	// SGLang logs its arguments, keys included, and so does the stand-in: the log anyone with
	// pods/log reads holds the server's admin key, never the clients' key, and the key it holds
	// opens nothing through the proxy, the only way in.
	logs, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "sglang"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(logs), key) || !strings.Contains(string(logs), "admin key set: true") {
		t.Errorf("the stand-in's log %q: want it to say the admin key is set, without the clients' key", logs)
	}
	m := regexp.MustCompile(`'admin_api_key': '([^']+)'`).FindSubmatch(logs)
	if m == nil {
		t.Fatalf("the stand-in's log has no admin_api_key in its server_args line, as the release's has: %.400s", logs)
	}
	logged := string(m[1])
	var serverKeys corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: resolve.ServerKeySecret(h.Name)}, &serverKeys); err != nil {
		t.Fatal(err)
	}
	if logged != string(serverKeys.Data[resolve.ServerAdminKeyField]) || logged == key {
		t.Fatalf("the logged admin key is not the server's (%d bytes logged)", len(logged))
	}
	for name, got := range map[string]int{
		"clear, the logged key":  call("POST", "/hicache/storage-backend/clear", "Bearer "+logged),
		"flush, the logged key":  call("POST", "/flush_cache", "Bearer "+logged),
		"detach, the logged key": call("DELETE", "/hicache/storage-backend", "Bearer "+logged),
	} {
		if got != http.StatusUnauthorized {
			t.Errorf("%s: HTTP %d through the proxy, want 401", name, got)
		}
	}
}
