package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// as is a client that impersonates user.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func overrideFlush(ns, name string, allow bool) *hicachev1alpha1.CacheFlush {
	return &hicachev1alpha1.CacheFlush{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: "mooncake"},
			Scope: hicachev1alpha1.FlushScopeAll, AllowInUse: allow},
	}
}

// spec.allowInUse is set only by a user that holds the override verb: config/admission's
// policy asks the API server's authorizer, for the requesting user, at create time.
func TestOnlyHoldersOfTheOverrideVerbSetAllowInUse(t *testing.T) {
	for _, f := range []string{"flush_override_policy.yaml", "flush_override_role.yaml"} {
		testutil.CreateFromFile(t, k8sClient, filepath.Join(repoRoot(), "config", "admission", f))
	}
	ns := newNamespace(t)
	// Both may create CacheFlushes in ns; only "overrider" is bound to the override ClusterRole.
	create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "flusher", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"hicache.io"}, Resources: []string{"cacheflushes"}, Verbs: []string{"create", "get"}}}})
	for _, b := range []struct{ user, kind, role string }{
		{"flusher", "Role", "flusher"}, {"overrider", "Role", "flusher"}, {"overrider", "ClusterRole", "flush-override"},
	} {
		create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: b.user + "-", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: b.kind, Name: b.role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: b.user}}})
	}
	flusher, overrider := as(t, "flusher"), as(t, "overrider")
	ctx := context.Background()

	// The policy takes effect once the API server has compiled it.
	var err error
	testutil.Eventually(t, 30*time.Second, "flusher's allowInUse refused", func() (bool, string) {
		cf := overrideFlush(ns, "", true)
		cf.GenerateName = "before-the-policy-"
		if err = flusher.Create(ctx, cf); err == nil {
			_ = k8sClient.Delete(ctx, cf) // admitted before the policy took effect
			return false, "created"
		}
		return !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "allowInUse"), err.Error()
	})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("refusal %v is neither Forbidden nor Invalid", err)
	}
	for _, want := range []string{"spec.allowInUse", `verb "override" on cacheflushes in namespace ` + ns, "flusher does not have", "ClusterRole hicache-operator-flush-override"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if err := flusher.Create(ctx, overrideFlush(ns, "by-flusher", false)); err != nil {
		t.Errorf("flusher may create a CacheFlush without allowInUse: %v", err)
	}
	if err := overrider.Create(ctx, overrideFlush(ns, "by-overrider", true)); err != nil {
		t.Errorf("overrider, bound to the override ClusterRole, is refused allowInUse: %v", err)
	}
	// The verb is namespaced: overrider's binding does not reach another namespace.
	other := newNamespace(t)
	create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "flusher", Namespace: other},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"hicache.io"}, Resources: []string{"cacheflushes"}, Verbs: []string{"create"}}}})
	create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "overrider", Namespace: other},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "flusher"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "overrider"}}})
	testutil.Eventually(t, 30*time.Second, "overrider's allowInUse refused in "+other, func() (bool, string) {
		cf := overrideFlush(other, "", true)
		cf.GenerateName = "elsewhere-"
		err := overrider.Create(ctx, cf)
		if err == nil {
			t.Fatalf("overrider set allowInUse in namespace %s, where it holds no override verb", other)
		}
		return strings.Contains(err.Error(), "spec.allowInUse"), fmt.Sprintf("%v", err)
	})
}
