package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake/flushjob"
)

func testFlush(name string, scope hicachev1alpha1.FlushScope) *hicachev1alpha1.CacheFlush {
	cf := &hicachev1alpha1.CacheFlush{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid")},
		Spec:       hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: "mooncake"}, Scope: scope},
	}
	switch scope {
	case hicachev1alpha1.FlushScopeNamespace:
		cf.Spec.Namespace = "hc-0123456789"
	case hicachev1alpha1.FlushScopeTenant:
		cf.Spec.Tenant = "team-a"
	}
	return cf
}

func TestBuildFlushJob(t *testing.T) {
	cf := testFlush("old-layout", hicachev1alpha1.FlushScopeNamespace)
	cb := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mooncake", Namespace: "default"}}
	req := NamespaceFlushRequest{
		Flush: cf, Backend: cb, Prefix: "hc-0123456789_", Force: false, Image: "mooncake:test", Attempt: 2, Deadline: 90 * time.Second,
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: "m:50051", AdminURL: "http://m:9003", MetadataServer: "P2PHANDSHAKE"},
	}
	job := buildFlushJob(req)

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
	if job.Annotations[annotationAttempt] != "2" {
		t.Errorf("annotations %v do not name the attempt", job.Annotations)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy = %s", pod.RestartPolicy)
	}
	if diff := cmp.Diff(job.Labels, job.Spec.Template.Labels); diff != "" {
		t.Errorf("pod labels differ from the Job's:\n%s", diff)
	}
	if job.Labels[LabelBackend] != "mooncake" || job.Labels["hicache.io/flush"] != "old-layout" {
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
	if e, ok := envValue(c.Env, flushjob.EnvAdminURL); ok {
		t.Errorf("the flush Job is given %s=%q, which its NetworkPolicy does not let it reach", flushjob.EnvAdminURL, e.Value)
	}
	for name, want := range wantEnv {
		if e, ok := envValue(c.Env, name); !ok || e.Value != want {
			t.Errorf("env %s = %.60q, want %.60q", name, e.Value, want)
		}
	}
	if ip, ok := envValue(c.Env, "POD_IP"); !ok || ip.ValueFrom == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
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
	if e, _ := envValue(buildFlushJob(req).Spec.Template.Spec.Containers[0].Env, flushjob.EnvForce); e.Value != "true" {
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
			cf := testFlush("f", hicachev1alpha1.FlushScopeAll)
			cf.Status.Conditions = tc.conds
			if got := finished(cf); got != tc.want {
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
			cf := testFlush("f", scope)
			if got := scopePrefix(cf); scope != hicachev1alpha1.FlushScopeTenant && got != tc.prefix {
				t.Errorf("scopePrefix = %q, want %q", got, tc.prefix)
			}
			if got := describeScope(cf); got != tc.words {
				t.Errorf("describeScope = %q, want %q", got, tc.words)
			}
		})
	}
	// A namespace's prefix never takes in a longer namespace that starts the same.
	a, b := testFlush("f", hicachev1alpha1.FlushScopeNamespace), testFlush("f", hicachev1alpha1.FlushScopeNamespace)
	a.Spec.Namespace, b.Spec.Namespace = "team", "team-b"
	if strings.HasPrefix(scopePrefix(b)+"key", scopePrefix(a)) {
		t.Errorf("keys of %s start with the prefix %q of %s", b.Spec.Namespace, scopePrefix(a), a.Spec.Namespace)
	}
}

func TestFlushName(t *testing.T) {
	cases := map[string]struct {
		hcd, namespace string
		generation     int64
		want           string
	}{
		"a stale namespace":        {hcd: "qwen3", namespace: "hc-0123456789", generation: 2, want: "qwen3-flush-hc-0123456789-g2"},
		"a fixed namespace, later": {hcd: "qwen3", namespace: "team", generation: 7, want: "qwen3-flush-team-g7"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := flushName(tc.hcd, tc.namespace, tc.generation)
			if got != tc.want {
				t.Errorf("flushName = %q, want %q", got, tc.want)
			}
			if again := flushName(tc.hcd, tc.namespace, tc.generation); again != got {
				t.Errorf("flushName is not deterministic: %q then %q", got, again)
			}
		})
	}
	// Distinct inputs give distinct names: another namespace, or a later change of the spec (a
	// namespace that goes stale again is flushed again).
	if flushName("a", "hc-1", 1) == flushName("a", "hc-2", 1) || flushName("a", "ns", 1) == flushName("a", "ns", 2) {
		t.Error("two flushes of one deployment share a name")
	}
	// The name stays a valid object name whatever the length of the deployment's name.
	long := strings.Repeat("d", 253)
	got := flushName(long, "hc-0123456789", 3)
	if len(got) > 253 {
		t.Errorf("flushName has %d characters, over 253", len(got))
	}
	if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
		t.Errorf("flushName %q is not a valid name: %v", got, errs)
	}
	// Cut names of two namespaces stay distinct.
	if flushName(long, "hc-0000000001", 1) == flushName(long, "hc-0000000002", 1) {
		t.Error("two cut flush names collide")
	}
	// A flush's Job name is a label value (63 characters at most) whatever the flush's name.
	for _, cf := range []string{flushName("kimi-k2-instruct-eagle3-production-a", "hc-0123456789", 12), got} {
		if errs := validation.IsDNS1123Label(jobName(cf, 1)); len(errs) > 0 {
			t.Errorf("Job %q of CacheFlush %q: %v", jobName(cf, 1), cf, errs)
		}
	}
	if jobName(got, 1) == jobName(got, 2) {
		t.Error("two attempts of a flush share a Job name")
	}
}

func TestBuildFlush(t *testing.T) {
	h := makeHCD("q").TP(4).Storage("mooncake").Obj()
	cf := buildFlush(h, "q-flush-hc-1", "mooncake", "hc-1", strings.Repeat("x", 2000))
	if cf.Namespace != "default" || cf.Spec.BackendRef.Name != "mooncake" || cf.Spec.Scope != hicachev1alpha1.FlushScopeNamespace || cf.Spec.Namespace != "hc-1" {
		t.Errorf("flush %s/%s of %s %s %s", cf.Namespace, cf.Name, cf.Spec.BackendRef.Name, cf.Spec.Scope, cf.Spec.Namespace)
	}
	if !ptr.Deref(cf.Spec.Force, false) {
		t.Error("a layout flush is not forced")
	}
	if len(cf.Spec.Reason) > 1024 || !strings.HasSuffix(cf.Spec.Reason, "...") {
		t.Errorf("reason of %d characters, want it cut to the API's 1024 with an ellipsis", len(cf.Spec.Reason))
	}
	if o := cf.OwnerReferences; len(o) != 1 || o[0].UID != h.UID || o[0].Kind != "HiCacheDeployment" {
		t.Errorf("owner references %+v", o)
	}
	if cf.Labels[LabelDeployment] != "q" {
		t.Errorf("labels %v", cf.Labels)
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
			if got := truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
				t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}
