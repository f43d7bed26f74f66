package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// Bad combinations are refused before the plugin looks for a cluster: the kubeconfig named here
// does not exist, so reaching it would be a different error.
func TestFlushRefusesBadFlags(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no scope": {args: []string{"mooncake"}, want: "say what to flush: --prefix NS (one L3 namespace), --all (the whole store) or --tenant T (one tenant)"},
		"L3 namespace as -n": {args: []string{"mooncake", "--namespace", "hc-4d9c4e519d"},
			want: "say what to flush: --prefix NS (one L3 namespace), --all (the whole store) or --tenant T (one tenant); -n/--namespace hc-4d9c4e519d is the Kubernetes namespace of the CacheBackend, the L3 namespace goes to --prefix"},
		"prefix and all":     {args: []string{"mooncake", "--prefix", "hc-1", "--all"}, want: "--prefix and --all cannot be combined: give exactly one of --prefix, --all and --tenant"},
		"all and tenant":     {args: []string{"mooncake", "--all", "--tenant", "a"}, want: "--all and --tenant cannot be combined"},
		"all three":          {args: []string{"mooncake", "--prefix", "hc-1", "--all", "--tenant", "a"}, want: "--prefix and --all and --tenant cannot be combined"},
		"empty prefix":       {args: []string{"mooncake", "--prefix="}, want: "--prefix needs an L3 namespace"},
		"prefix with _":      {args: []string{"mooncake", "--prefix", "hc-4d9c4e519d_"}, want: "give the namespace without the trailing _ (--prefix hc-4d9c4e519d removes the keys that start with hc-4d9c4e519d_)"},
		"prefix upper case":  {args: []string{"mooncake", "--prefix", "HC-1"}, want: `--prefix "HC-1" is not an L3 namespace`},
		"prefix too long":    {args: []string{"mooncake", "--prefix", strings.Repeat("a", 64)}, want: "is not an L3 namespace: lower-case letters, digits and '-', 1 to 63 characters"},
		"empty tenant":       {args: []string{"mooncake", "--tenant="}, want: `--tenant "": a tenant is 1 to 128 characters`},
		"no backend":         {args: []string{"--all"}, want: "flush takes one CacheBackend name, got 0"},
		"two backends":       {args: []string{"a", "b", "--all"}, want: "flush takes one CacheBackend name, got 2"},
		"zero timeout":       {args: []string{"mooncake", "--all", "--timeout", "0s"}, want: "--timeout 0s: give a positive duration such as 5m, or --wait=false"},
		"reason too long":    {args: []string{"mooncake", "--all", "--reason", strings.Repeat("x", 1025)}, want: "--reason is 1025 characters long; keep it within 1024"},
		"unknown flag":       {args: []string{"mooncake", "--namespace-prefix", "hc-1"}, want: "unknown flag: --namespace-prefix"},
		"missing kubeconfig": {args: []string{"mooncake", "--all"}, want: "--kubeconfig testdata/no-such-kubeconfig: no such file"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"flush", "--kubeconfig", "testdata/no-such-kubeconfig"}, tt.args...)
			r := runPlugin(t, "", args...)
			if r.code != 1 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit code %d, stderr:\n%s\nwant code 1 and %q", r.code, r.stderr, tt.want)
			}
			if r.stdout != "" {
				t.Errorf("printed on stdout:\n%s", r.stdout)
			}
		})
	}
}

func TestFlushSpecFromFlags(t *testing.T) {
	tests := map[string]struct {
		opts                 flushOptions
		prefixSet, tenantSet bool
		want                 hicachev1alpha1.CacheFlushSpec
	}{
		"prefix": {
			opts: flushOptions{prefix: "hc-4d9c4e519d", force: true, reason: "r", wait: true, timeout: 1}, prefixSet: true,
			want: hicachev1alpha1.CacheFlushSpec{Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: "hc-4d9c4e519d", Force: ptr.To(true), Reason: "r"},
		},
		"all without force": {
			opts: flushOptions{all: true, reason: defaultFlushReason, wait: true, timeout: 1},
			want: hicachev1alpha1.CacheFlushSpec{Scope: hicachev1alpha1.FlushScopeAll, Force: ptr.To(false), Reason: defaultFlushReason},
		},
		"tenant without wait needs no timeout": {
			opts: flushOptions{tenant: "team-a", force: true}, tenantSet: true,
			want: hicachev1alpha1.CacheFlushSpec{Scope: hicachev1alpha1.FlushScopeTenant, Tenant: "team-a", Force: ptr.To(true)},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tt.opts.spec("mooncake", tt.prefixSet, tt.tenantSet)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.BackendRef.Name = "mooncake"
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

// The conditions below are worded as the CacheFlush controller writes them.
func TestFlushProgress(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
	}
	const complete, failed = hicachev1alpha1.ConditionComplete, hicachev1alpha1.ConditionFailed
	tests := map[string]struct {
		status    hicachev1alpha1.CacheFlushStatus
		wantLine  string
		wantState flushState
	}{
		"not picked up": {wantLine: "waiting for the operator to take it up", wantState: flushPending},
		"waiting for its turn": {
			status:   hicachev1alpha1.CacheFlushStatus{Conditions: []metav1.Condition{cond(complete, "False", "WaitingForTurn", "Waiting for CacheFlush mooncake-manual-abcde of the same backend to finish")}},
			wantLine: "waiting for CacheFlush mooncake-manual-abcde of the same backend to finish",
		},
		"waiting for the backend": {
			status:   hicachev1alpha1.CacheFlushStatus{Conditions: []metav1.Condition{cond(complete, "False", "WaitingForBackend", `CacheBackend "mooncake" has no endpoints yet`)}},
			wantLine: `waiting for the backend: CacheBackend "mooncake" has no endpoints yet`,
		},
		"namespace in use": {
			status: hicachev1alpha1.CacheFlushStatus{Conditions: []metav1.Condition{cond(complete, "False", "InUse",
				"Namespace hc-1 of store m:50051 is in use by HiCacheDeployment team-b/dsv4 (1 serving pods); the flush runs once nothing uses it (spec.allowInUse overrides this, for holders of the override verb)")}},
			wantLine: "waiting: namespace hc-1 of store m:50051 is in use by HiCacheDeployment team-b/dsv4 (1 serving pods); the flush runs once nothing uses it (--allow-in-use overrides this, for holders of the override verb)",
		},
		"running": {
			status:   hicachev1alpha1.CacheFlushStatus{Attempts: 1, Conditions: []metav1.Condition{cond(complete, "False", "Running", "Attempt 1 is running")}},
			wantLine: "running attempt 1",
		},
		"attempt failed": {
			status: hicachev1alpha1.CacheFlushStatus{Attempts: 2, Conditions: []metav1.Condition{
				cond(complete, "False", "Running", "Attempt 2 is running"),
				cond(failed, "True", "BackendUnreachable", "Attempt 2 failed and is retried: connection refused")}},
			wantLine: "attempt 2 failed: connection refused, retrying",
		},
		"attempt timed out, backing off": {
			status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Conditions: []metav1.Condition{
				cond(complete, "False", "BackingOff", "Attempt 1 failed (AttemptTimedOut); attempt 2 of 5 starts at 2026-01-01T00:00:10Z"),
				cond(failed, "True", "AttemptTimedOut", "Attempt 1 failed: attempt timed out: it did not finish within 20s and was stopped")}},
			wantLine: "attempt 1 failed: attempt timed out: it did not finish within 20s and was stopped, retrying",
		},
		"gave up": {
			status: hicachev1alpha1.CacheFlushStatus{Attempts: 5, Conditions: []metav1.Condition{
				cond(complete, "False", "AttemptsExhausted", "Gave up after 5 attempts; the last failed (JobFailed): no output. Delete this CacheFlush to try again"),
				cond(failed, "True", "AttemptsExhausted", "Gave up after 5 attempts; the last failed (JobFailed): no output. Delete this CacheFlush to try again")}},
			wantLine:  "failed: gave up after 5 attempts; the last failed (JobFailed): no output. Delete this CacheFlush to try again",
			wantState: flushFailed,
		},
		"unverified": {
			status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, Conditions: []metav1.Condition{
				cond(failed, "True", "BackendUnreachable", "The flush ran but its result could not be verified: timeout")}},
			wantLine: "attempt 1 failed: The flush ran but its result could not be verified: timeout, retrying",
		},
		"keys left, retrying": {
			status: hicachev1alpha1.CacheFlushStatus{Attempts: 1, KeysLeft: 3, Conditions: []metav1.Condition{
				cond(failed, "True", "KeysLeftRetrying", "3 objects of the scope are left after attempt 1; retrying once")}},
			wantLine: "attempt 1 left 3 objects, retrying",
		},
		"keys left for good": {
			status: hicachev1alpha1.CacheFlushStatus{Attempts: 2, KeysLeft: 3, Conditions: []metav1.Condition{
				cond(complete, "False", "KeysLeft", "3 objects of the scope are still there after 2 forced attempts; something still writes them"),
				cond(failed, "True", "KeysLeft", "3 objects of the scope are still there after 2 forced attempts; something still writes them")}},
			wantLine:  "failed: 3 objects of the scope are still there after 2 forced attempts; something still writes them",
			wantState: flushFailed,
		},
		"complete after a failure": {
			status: hicachev1alpha1.CacheFlushStatus{Attempts: 2, Removed: 96, Conditions: []metav1.Condition{
				cond(complete, "True", "Flushed", "Removed 96 objects (namespace hc-1); 0 left"),
				cond(failed, "False", "Flushed", "The flush completed")}},
			wantLine:  "complete: removed 96 objects, 0 left",
			wantState: flushDone,
		},
		"unknown reason": {
			status:   hicachev1alpha1.CacheFlushStatus{Conditions: []metav1.Condition{cond(complete, "False", "Pending", "Queued")}},
			wantLine: "pending: Queued",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			line, state := flushProgress(&hicachev1alpha1.CacheFlush{Status: tt.status})
			if line != tt.wantLine || state != tt.wantState {
				t.Errorf("got %q (state %d), want %q (state %d)", line, state, tt.wantLine, tt.wantState)
			}
		})
	}
}

func TestFlushWarnings(t *testing.T) {
	cb := &hicachev1alpha1.CacheBackend{Status: hicachev1alpha1.CacheBackendStatus{Namespaces: []hicachev1alpha1.NamespaceUsage{
		{Namespace: "hc-a", Deployments: []string{"dsv4", "dsv4-canary"}},
		{Namespace: "hc-b", Deployments: []string{"qwen3"}},
		{Namespace: "hc-c"},
	}}}
	tests := map[string]struct {
		spec hicachev1alpha1.CacheFlushSpec
		want []string
	}{
		"namespace in use": {
			spec: hicachev1alpha1.CacheFlushSpec{Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: "hc-a"},
			want: []string{"namespace hc-a is in use by HiCacheDeployment dsv4, dsv4-canary: the flush waits until nothing uses it (--allow-in-use flushes it all the same)"},
		},
		"namespace in use, overridden": {
			spec: hicachev1alpha1.CacheFlushSpec{Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: "hc-a", AllowInUse: true},
			want: []string{"namespace hc-a is in use by HiCacheDeployment dsv4, dsv4-canary: --allow-in-use flushes it all the same: its cache starts cold"},
		},
		"namespace unused": {spec: hicachev1alpha1.CacheFlushSpec{Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: "hc-c"}},
		"all": {
			spec: hicachev1alpha1.CacheFlushSpec{Scope: hicachev1alpha1.FlushScopeAll},
			want: []string{
				"this flush also removes namespace hc-a, in use by HiCacheDeployment dsv4, dsv4-canary: the flush waits until nothing uses it (--allow-in-use flushes it all the same)",
				"this flush also removes namespace hc-b, in use by HiCacheDeployment qwen3: the flush waits until nothing uses it (--allow-in-use flushes it all the same)",
			},
		},
		"tenant: which tenant a deployment writes is not known, so every namespace counts": {
			spec: hicachev1alpha1.CacheFlushSpec{Scope: hicachev1alpha1.FlushScopeTenant, Tenant: "t", AllowInUse: true},
			want: []string{
				"this flush also removes namespace hc-a, in use by HiCacheDeployment dsv4, dsv4-canary: --allow-in-use flushes it all the same: its cache starts cold",
				"this flush also removes namespace hc-b, in use by HiCacheDeployment qwen3: --allow-in-use flushes it all the same: its cache starts cold",
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, flushWarnings(&tt.spec, cb)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLowerFirst(t *testing.T) {
	tests := map[string]string{
		"Namespace hc-1 is in use":   "namespace hc-1 is in use",
		"CacheBackend \"m\" is gone": "CacheBackend \"m\" is gone",
		"HTTP 500":                   "HTTP 500",
		"3 objects left":             "3 objects left",
		"":                           "",
		"Waiting":                    "waiting",
	}
	for in, want := range tests {
		if got := lowerFirst(in); got != want {
			t.Errorf("lowerFirst(%q) = %q, want %q", in, got, want)
		}
	}
}
