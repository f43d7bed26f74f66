package cacheflush

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/mooncake/flushjob"
)

func TestBuildFlushJob(t *testing.T) {
	cf := testsupport.TestFlush("old-layout", hicachev1alpha1.FlushScopeNamespace)
	cb := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mooncake", Namespace: "default"}}
	req := storeuse.NamespaceFlushRequest{
		Flush: cf, Backend: cb, Prefix: "hc-0123456789_", Force: false, Image: "mooncake:test", Attempt: 2, Deadline: 90 * time.Second,
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: "m:50051", AdminURL: "http://m:9003", MetadataServer: "P2PHANDSHAKE"},
	}
	job := BuildFlushJob(req)

	if job.Name != "old-layout-2" || job.Namespace != "default" {
		t.Errorf("job %s/%s, want default/old-layout-2 (one Job per attempt)", job.Namespace, job.Name)
	}
	if o := job.OwnerReferences; len(o) != 1 || o[0].Kind != "CacheFlush" || o[0].UID != cf.UID || !ptr.Deref(o[0].Controller, false) {
		t.Errorf("owner references %+v, want the CacheFlush as controller", o)
	}
	if ptr.Deref(job.Spec.BackoffLimit, -1) != 0 {
		t.Errorf("backoffLimit = %v, want 0: the operator counts attempts itself", job.Spec.BackoffLimit)
	}
	if job.Spec.TTLSecondsAfterFinished == nil {
		t.Error("the Job has no TTL")
	}
	if d := ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0); d != 90 {
		t.Errorf("activeDeadlineSeconds = %d, want the attempt's deadline, 90", d)
	}
	if job.Annotations[hicachev1alpha1.AnnotationAttempt] != "2" {
		t.Errorf("annotations %v do not name the attempt", job.Annotations)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy = %s", pod.RestartPolicy)
	}
	if diff := cmp.Diff(job.Labels, job.Spec.Template.Labels); diff != "" {
		t.Errorf("pod labels differ from the Job's:\n%s", diff)
	}
	if job.Labels[hicachev1alpha1.LabelBackend] != "mooncake" || job.Labels[hicachev1alpha1.LabelFlush] != "old-layout" {
		t.Errorf("labels %v do not name the backend and the flush", job.Labels)
	}

	// Restricted Pod Security.
	if sc := pod.SecurityContext; sc == nil || !ptr.Deref(sc.RunAsNonRoot, false) || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v is not restricted", sc)
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container security context %+v is not restricted", sc)
	}

	if c.Image != "mooncake:test" {
		t.Errorf("image = %q", c.Image)
	}
	wantEnv := map[string]string{
		"FLUSH_SCRIPT": flushjob.Script, flushjob.EnvMaster: "m:50051",
		flushjob.EnvMetadataServer: "P2PHANDSHAKE", flushjob.EnvPrefix: "hc-0123456789_", flushjob.EnvForce: "false",
		flushjob.EnvLocalHostname: "$(POD_IP)",
	}
	// The admin port is the operator's alone (the backend's NetworkPolicy): the Job is not
	// pointed at it, and the operator counts what is left itself.
	if e, ok := testsupport.EnvValue(c.Env, flushjob.EnvAdminURL); ok {
		t.Errorf("the flush Job is given %s=%q, which its NetworkPolicy does not let it reach", flushjob.EnvAdminURL, e.Value)
	}
	for name, want := range wantEnv {
		if e, ok := testsupport.EnvValue(c.Env, name); !ok || e.Value != want {
			t.Errorf("env %s = %.60q, want %.60q", name, e.Value, want)
		}
	}
	if ip, ok := testsupport.EnvValue(c.Env, "POD_IP"); !ok || ip.ValueFrom == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("POD_IP = %+v", ip)
	}
	// The result line reaches the operator through the termination message, and the exit code
	// of the script (not of cat) decides the Job's outcome.
	cmd := strings.Join(c.Command, " ")
	for _, want := range []string{`python3 -c "$FLUSH_SCRIPT"`, "/dev/termination-log", "exit $rc"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command %q lacks %q", cmd, want)
		}
	}
	if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("termination message policy = %s", c.TerminationMessagePolicy)
	}

	req.Force = true
	if e, _ := testsupport.EnvValue(BuildFlushJob(req).Spec.Template.Spec.Containers[0].Env, flushjob.EnvForce); e.Value != "true" {
		t.Errorf("force true renders %s=%q", flushjob.EnvForce, e.Value)
	}
}

func TestParseFlushOutput(t *testing.T) {
	cases := map[string]struct {
		out     string
		want    flushjob.Result
		wantErr string
	}{
		"the result line":         {out: `{"removed": 12, "left": 0}` + "\n", want: flushjob.Result{Removed: 12, Left: ptr.To(int64(0))}},
		"left unknown":            {out: `{"removed": 3, "left": null}`, want: flushjob.Result{Removed: 3}},
		"noise before the line":   {out: "connecting to m:50051\nwarning: slow\n  {\"removed\": 5, \"left\": 1}  \n", want: flushjob.Result{Removed: 5, Left: ptr.To(int64(1))}},
		"the last JSON line wins": {out: `{"removed": 1, "left": 9}` + "\n" + `{"removed": 2, "left": 0}`, want: flushjob.Result{Removed: 2, Left: ptr.To(int64(0))}},
		"no JSON":                 {out: "Traceback (most recent call last):\nImportError: no module named mooncake", wantErr: "no JSON result"},
		"empty":                   {out: "", wantErr: "no JSON result"},
		"malformed JSON":          {out: `{"removed": "many"}`, wantErr: `printed "{\"removed\": \"many\"}", not its JSON result`},
		"truncated JSON":          {out: `{"removed": 4`, wantErr: "not its JSON result"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseFlushOutput(tc.out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLastLine(t *testing.T) {
	cases := map[string]struct {
		msg  string
		err  error
		want string
	}{
		"last of several": {msg: "a\nb\nflush.py: master unreachable\n", want: "flush.py: master unreachable"},
		"nothing":         {want: "no output"},
		"nothing, an err": {err: errString("the flush script printed no JSON result"), want: "the flush script printed no JSON result"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := lastLine(tc.msg, tc.err); got != tc.want {
				t.Errorf("lastLine = %q, want %q", got, tc.want)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestFinished(t *testing.T) {
	c := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason}
	}
	cases := map[string]struct {
		conds []metav1.Condition
		want  bool
	}{
		"new":      {},
		"running":  {conds: []metav1.Condition{c("Complete", "False", "Running")}},
		"complete": {conds: []metav1.Condition{c("Complete", "True", "Flushed"), c("Failed", "False", "Flushed")}, want: true},
		"failed for good: keys left after every attempt": {
			conds: []metav1.Condition{c("Complete", "False", "KeysLeft"), c("Failed", "True", "KeysLeft")}, want: true,
		},
		"failed and retrying": {conds: []metav1.Condition{c("Complete", "False", "Running"), c("Failed", "True", "KeysLeftRetrying")}},
		"backend unreachable is retried": {
			conds: []metav1.Condition{c("Complete", "False", "Running"), c("Failed", "True", "BackendUnreachable")},
		},
		"waiting for its turn": {conds: []metav1.Condition{c("Complete", "False", "WaitingForTurn")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cf := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeAll)
			cf.Status.Conditions = tc.conds
			if got := storeuse.Finished(cf); got != tc.want {
				t.Errorf("finished = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestScopePrefixAndDescription(t *testing.T) {
	// Tenants are not key prefixes (the master keeps them apart), so only All and Namespace
	// have a prefix to count.
	cases := map[hicachev1alpha1.FlushScope]struct {
		prefix, words string
	}{
		hicachev1alpha1.FlushScopeAll:       {prefix: "", words: "the whole store"},
		hicachev1alpha1.FlushScopeNamespace: {prefix: "hc-0123456789_", words: "namespace hc-0123456789"},
		hicachev1alpha1.FlushScopeTenant:    {words: "tenant team-a"},
	}
	for scope, tc := range cases {
		t.Run(string(scope), func(t *testing.T) {
			cf := testsupport.TestFlush("f", scope)
			if got := scopePrefix(cf); scope != hicachev1alpha1.FlushScopeTenant && got != tc.prefix {
				t.Errorf("scopePrefix = %q, want %q", got, tc.prefix)
			}
			if got := describeScope(cf); got != tc.words {
				t.Errorf("describeScope = %q, want %q", got, tc.words)
			}
		})
	}
	// A namespace's prefix never takes in a longer namespace that starts the same.
	a, b := testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace), testsupport.TestFlush("f", hicachev1alpha1.FlushScopeNamespace)
	a.Spec.Namespace, b.Spec.Namespace = "team", "team-b"
	if strings.HasPrefix(scopePrefix(b)+"key", scopePrefix(a)) {
		t.Errorf("keys of %s start with the prefix %q of %s", b.Spec.Namespace, scopePrefix(a), a.Spec.Namespace)
	}
}

func TestUsersOf(t *testing.T) {
	pod := func(ns, deployment, l3 string, phase corev1.PodPhase) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deployment + "-0-0", Labels: map[string]string{hicachev1alpha1.LabelCacheNamespace: l3}}}
		if deployment != "" {
			p.Labels[hicachev1alpha1.LabelDeployment] = deployment
		}
		p.Status.Phase = phase
		return p
	}
	writer := func(ns, name, l3, reason string) hicachev1alpha1.HiCacheDeployment {
		h := hicachev1alpha1.HiCacheDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}}
		h.Status.Cache = &hicachev1alpha1.CacheStatus{Namespace: l3, Backend: "mooncake"}
		if reason != "" {
			h.Status.Conditions = []metav1.Condition{{Type: hicachev1alpha1.ConditionCacheLayoutCurrent, Status: metav1.ConditionFalse, Reason: reason}}
		}
		return h
	}
	cases := map[string]struct {
		scope   storeuse.StoreScope
		pods    []corev1.Pod
		writers []hicachev1alpha1.HiCacheDeployment
		want    storeuse.StoreUse
	}{
		"nothing": {scope: storeuse.StoreScope{Namespace: "hc-a"}},
		"a deployment in another namespace writes it": {
			scope:   storeuse.StoreScope{Namespace: "hc-a"},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-b", "dsv4", "hc-a", "")},
			want:    storeuse.StoreUse{Deployments: []string{"team-b/dsv4"}}},
		"its pods, mid-rollout off it, and another namespace": {
			scope: storeuse.StoreScope{Namespace: "hc-a"},
			pods:  []corev1.Pod{pod("team-a", "q", "hc-a", corev1.PodRunning), pod("team-a", "q", "hc-a", corev1.PodPending), pod("team-a", "r", "hc-b", corev1.PodRunning)},
			want:  storeuse.StoreUse{Deployments: []string{"team-a/q"}, Pods: 2, PodNamespaces: []string{"team-a"}}},
		"finished pods write nothing": {
			scope: storeuse.StoreScope{Namespace: "hc-a"},
			pods:  []corev1.Pod{pod("team-a", "q", "hc-a", corev1.PodSucceeded), pod("team-a", "q", "hc-a", corev1.PodFailed)}},
		"scope All: every writer of the store": {
			scope:   storeuse.StoreScope{},
			pods:    []corev1.Pod{pod("team-a", "q", "hc-a", corev1.PodRunning)},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-b", "dsv4", "hc-b", ""), writer("team-c", "k", "fixed", "")},
			want:    storeuse.StoreUse{Deployments: []string{"team-a/q", "team-b/dsv4", "team-c/k"}, Pods: 1, PodNamespaces: []string{"team-a"}}},
		"a deployment draining for this flush: its claim does not count": {
			scope:   storeuse.StoreScope{Namespace: "fixed", Draining: "team-a/d"},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-a", "d", "fixed", hicachev1alpha1.ReasonWaitingForFlush)}},
		"the draining UID of a deployment that does not drain counts": {
			scope:   storeuse.StoreScope{Namespace: "fixed", Draining: "team-a/d"},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-a", "d", "fixed", hicachev1alpha1.ReasonLayoutCurrent)},
			want:    storeuse.StoreUse{Deployments: []string{"team-a/d"}}},
		"the draining deployment's pods count": {
			scope:   storeuse.StoreScope{Namespace: "fixed", Draining: "team-a/d"},
			pods:    []corev1.Pod{pod("team-a", "d", "fixed", corev1.PodRunning)},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-a", "d", "fixed", hicachev1alpha1.ReasonWaitingForFlush)},
			want:    storeuse.StoreUse{Deployments: []string{"team-a/d"}, Pods: 1, PodNamespaces: []string{"team-a"}}},
		"the asking deployment is ignored, pods and claim": {
			scope:   storeuse.StoreScope{Namespace: "fixed", Ignore: "team-a/d"},
			pods:    []corev1.Pod{pod("team-a", "d", "fixed", corev1.PodRunning), pod("team-b", "d", "fixed", corev1.PodRunning)},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-a", "d", "fixed", "")},
			want:    storeuse.StoreUse{Deployments: []string{"team-b/d"}, Pods: 1, PodNamespaces: []string{"team-b"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := storeuse.UsersOf(tc.scope, tc.pods, tc.writers)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(storeuse.StoreUse{})); diff != "" {
				t.Errorf("usersOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStoreUseDescribe(t *testing.T) {
	cases := map[string]struct {
		use  storeuse.StoreUse
		want string
	}{
		"one here":   {use: storeuse.StoreUse{Deployments: []string{"team-a/dsv4"}}, want: "HiCacheDeployment dsv4"},
		"one there":  {use: storeuse.StoreUse{Deployments: []string{"team-b/dsv4"}, Pods: 2}, want: "HiCacheDeployment team-b/dsv4 (2 serving pods)"},
		"pods alone": {use: storeuse.StoreUse{Pods: 1}, want: "(1 serving pods)"},
		"many, bounded": {use: storeuse.StoreUse{Deployments: []string{"team-a/1", "team-a/2", "team-a/3", "team-a/4", "team-a/5", "team-a/6", "team-a/7"}, Pods: 10},
			want: "HiCacheDeployments 1, 2, 3, 4, 5 and 2 more (10 serving pods)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.use.Describe("team-a"); got != tc.want {
				t.Errorf("describe = %q, want %q", got, tc.want)
			}
			if got := tc.use.Describe("a"); len(got) > 200 {
				t.Errorf("describe is %d characters long", len(got))
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	cases := map[string]struct {
		in   string
		n    int
		want string
	}{
		"short":    {in: "abc", n: 5, want: "abc"},
		"exact":    {in: "abcde", n: 5, want: "abcde"},
		"too long": {in: "abcdefgh", n: 5, want: "ab..."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := storeuse.Truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
				t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}
