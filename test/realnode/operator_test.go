package realnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The operator installed by helm install runs in its own pod on the real node, admitted under the
// restricted level, leads, passes its probes and serves metrics only to tokens RBAC allows.
func TestOperatorRunsInItsOwnPod(t *testing.T) {
	ctx := context.Background()
	pod, err := operatorPod(ctx)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("its pod runs on the real node, Ready, under the restricted level", func(t *testing.T) {
		if pod.Spec.NodeName != node.Name {
			t.Errorf("the operator's pod runs on %q, want the real node %s", pod.Spec.NodeName, node.Name)
		}
		ready := kubeutil.PodReady(pod)
		if !ready || len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("operator pod Ready=%v, containers %+v; want Ready with no restart", ready, pod.Status.ContainerStatuses)
		}
		// The namespace's level is enforced, so the pod's admission proves it meets it: a pod
		// that does not is refused.
		bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-restricted", Namespace: operatorNS},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: pod.Spec.Containers[0].Image}}}}
		err := k8s.Create(ctx, bad, client.DryRunAll)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") {
			t.Errorf("a pod without the restricted securityContext in %s: %v; want it refused by Pod Security admission", operatorNS, err)
		}
	})

	t.Run("it holds the leader lease", func(t *testing.T) {
		testutil.Eventually(t, 30*time.Second, "the operator's pod holds the lease", func() (bool, string) {
			var lease coordinationv1.Lease
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: operatorNS, Name: leaderElectionID}, &lease); err != nil {
				return false, err.Error()
			}
			holder := ptr.Deref(lease.Spec.HolderIdentity, "")
			return strings.HasPrefix(holder, pod.Name+"_"), fmt.Sprintf("holder %q, pod %s", holder, pod.Name)
		})
	})

	t.Run("its probes answer on the pod's address", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz"} {
			code, body := get(t, inNetns, "http://"+net.JoinHostPort(pod.Status.PodIP, "8081")+path, "")
			if code != http.StatusOK {
				t.Errorf("GET %s of the operator's pod: %d %q, want 200", path, code, body)
			}
		}
	})

	t.Run("metrics answer a token RBAC allows, and refuse others", func(t *testing.T) {
		reader := serviceAccountToken(t, operatorNS, "metrics-reader-test", release+"-metrics-reader")
		stranger := serviceAccountToken(t, operatorNS, "no-metrics-test", "")
		url := "https://" + net.JoinHostPort(pod.Status.PodIP, "8443") + "/metrics"
		// The operator's serving certificate is self-signed; the token is what is checked.
		tlsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext:     node.DialContext,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		}}
		// A new binding may take a moment to reach the authorizer's cache.
		testutil.Eventually(t, 30*time.Second, "metrics answer the metrics-reader token", func() (bool, string) {
			code, body := get(t, tlsClient, url, reader)
			return code == http.StatusOK && strings.Contains(body, "controller_runtime_reconcile_total"), fmt.Sprintf("%d %.200q", code, body)
		})
		if code, body := get(t, tlsClient, url, stranger); code != http.StatusForbidden {
			t.Errorf("metrics with a token without the metrics-reader role: %d %.200q, want 403", code, body)
		}
		if code, body := get(t, tlsClient, url, ""); code != http.StatusUnauthorized {
			t.Errorf("metrics without a token: %d %.200q, want 401", code, body)
		}
	})
}

// get fetches url, with a bearer token when one is given, and returns the status code and body.
func get(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// serviceAccountToken creates a ServiceAccount, bound to clusterRole unless it is empty, and
// returns a token of it from the TokenRequest API.
func serviceAccountToken(t *testing.T, ns, name, clusterRole string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), sa) })
	if clusterRole != "" {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		}
		if err := k8s.Create(ctx, crb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), crb) })
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
