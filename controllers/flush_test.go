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
	const id = "mooncake-master.default.svc.cluster.local:50051"
	cases := map[string]struct {
		namespace, layout string
		seq               int
		want              string
	}{
		"a stale namespace":              {namespace: "hc-0123456789", layout: "0123456789", seq: 1, want: "hc-0123456789-0123456789-" + storeHash(id)[:8] + "-1"},
		"a fixed namespace, a later one": {namespace: "team", layout: "abcdef0123", seq: 7, want: "team-abcdef0123-" + storeHash(id)[:8] + "-7"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := flushName(tc.namespace, tc.layout, id, tc.seq)
			if got != tc.want {
				t.Errorf("flushName = %q, want %q", got, tc.want)
			}
			if again := flushName(tc.namespace, tc.layout, id, tc.seq); again != got {
				t.Errorf("flushName is not deterministic: %q then %q", got, again)
			}
		})
	}
	// Distinct inputs give distinct names: another namespace, layout, store, or a later
	// generation (a namespace that goes stale again is flushed again).
	base := flushName("ns", "a", id, 1)
	for _, other := range []string{flushName("ns2", "a", id, 1), flushName("ns", "b", id, 1), flushName("ns", "a", "10.0.0.1:50051", 1), flushName("ns", "a", id, 2)} {
		if other == base {
			t.Errorf("two different flushes are both named %s", base)
		}
	}
	// The name stays a valid object name whatever the length of the namespace.
	long := strings.Repeat("d", 63)
	got := flushName(long, "0123456789", id, 3)
	if len(got) > 253 {
		t.Errorf("flushName has %d characters, over 253", len(got))
	}
	if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
		t.Errorf("flushName %q is not a valid name: %v", got, errs)
	}
	// A flush's Job name is a label value (63 characters at most) whatever the flush's name.
	for _, cf := range []string{flushName("hc-0123456789", "0123456789", id, 12), got} {
		if errs := validation.IsDNS1123Label(jobName(cf, 1)); len(errs) > 0 {
			t.Errorf("Job %q of CacheFlush %q: %v", jobName(cf, 1), cf, errs)
		}
	}
	if jobName(got, 1) == jobName(got, 2) {
		t.Error("two attempts of a flush share a Job name")
	}
}

func TestBuildFlush(t *testing.T) {
	home := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "oldest", Namespace: "team-a", UID: "cb-uid"}}
	h := makeHCD("q").TP(4).Storage("mooncake").Obj()
	cf := buildFlush(flushRequest{storeID: "10.0.0.1:50051", namespace: "hc-1", layout: "abc", home: home,
		reason: strings.Repeat("x", 2000), drainedFor: h, requester: "default/q"}, 2)
	if cf.Namespace != "team-a" || cf.Spec.BackendRef.Name != "oldest" || cf.Spec.Scope != hicachev1alpha1.FlushScopeNamespace || cf.Spec.Namespace != "hc-1" {
		t.Errorf("flush %s/%s of %s %s %s; want it beside the store's oldest backend", cf.Namespace, cf.Name, cf.Spec.BackendRef.Name, cf.Spec.Scope, cf.Spec.Namespace)
	}
	if !ptr.Deref(cf.Spec.Force, false) || cf.Spec.AllowInUse {
		t.Error("a layout flush is not forced, or overrides the in-use check")
	}
	if len(cf.Spec.Reason) > 1024 || !strings.HasSuffix(cf.Spec.Reason, "...") {
		t.Errorf("reason of %d characters, want it cut to the API's 1024 with an ellipsis", len(cf.Spec.Reason))
	}
	if o := cf.OwnerReferences; len(o) != 1 || o[0].UID != home.UID || o[0].Kind != "CacheBackend" {
		t.Errorf("owner references %+v, want the home backend (an owner must be in the same namespace)", o)
	}
	want := map[string]string{hicachev1alpha1.LabelStore: storeHash("10.0.0.1:50051"), hicachev1alpha1.LabelCacheNamespace: "hc-1", hicachev1alpha1.LabelLayout: "abc", "app.kubernetes.io/managed-by": FieldOwner}
	if diff := cmp.Diff(want, cf.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if cf.Annotations[hicachev1alpha1.AnnotationFlushSequence] != "2" || cf.Annotations[hicachev1alpha1.AnnotationDrainedFor] != string(h.UID) || cf.Annotations[hicachev1alpha1.AnnotationRequestedBy] != "default/q" {
		t.Errorf("annotations %v", cf.Annotations)
	}
}

func TestPickFlush(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(sec) * time.Second)) }
	flush := func(name string, created int, seq string, state string) hicachev1alpha1.CacheFlush {
		cf := hicachev1alpha1.CacheFlush{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created),
			Annotations: map[string]string{hicachev1alpha1.AnnotationFlushSequence: seq}}}
		switch state {
		case "complete":
			cf.Status.Conditions = []metav1.Condition{{Type: hicachev1alpha1.ConditionComplete, Status: metav1.ConditionTrue, Reason: hicachev1alpha1.ReasonFlushed}}
		case "failed":
			cf.Status.Conditions = []metav1.Condition{{Type: hicachev1alpha1.ConditionFailed, Status: metav1.ConditionTrue, Reason: hicachev1alpha1.ReasonKeysLeft}}
		}
		return cf
	}
	since := func(sec int) *metav1.Time { v := at(sec); return &v }
	underView := func(cf hicachev1alpha1.CacheFlush, view int64, done int) hicachev1alpha1.CacheFlush {
		cf.Status.ViewVersion, cf.Status.CompletionTime = view, ptr.To(at(done))
		return cf
	}
	cases := map[string]struct {
		existing []hicachev1alpha1.CacheFlush
		since    *metav1.Time
		view     int64
		want     string
		next     int
		outdated string
	}{
		"none": {since: since(0), next: 1},
		"one created after writing started covers it (the other deployment's)": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 50, "1", "complete")}, since: since(10), want: "f1", next: 2},
		"one created in the same second covers it": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 10, "1", "")}, since: since(10), want: "f1", next: 2},
		"an older generation does not: a return to the layout is flushed anew": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 5, "1", "complete")}, since: since(10), next: 2},
		"complete is preferred to running, running to failed": {
			existing: []hicachev1alpha1.CacheFlush{flush("f3", 30, "3", "failed"), flush("f2", 20, "2", ""), flush("f4", 40, "4", "complete")}, since: since(10), want: "f4", next: 5},
		"running before failed": {
			existing: []hicachev1alpha1.CacheFlush{flush("f3", 30, "3", "failed"), flush("f2", 20, "2", "")}, since: since(10), want: "f2", next: 4},
		"no start recorded: only an unfinished flush counts": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 5, "1", "complete"), flush("f2", 6, "2", "")}, want: "f2", next: 3},
		"no start recorded and all finished: a new one": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 5, "1", "complete")}, next: 2},
		"a sequence that is not a number is skipped": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 5, "x", "complete"), flush("f7", 6, "7", "complete")}, since: since(100), next: 8},
		"completed under the leader that serves now: it covers": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 7, 60)}, since: since(10), view: 7, want: "f1", next: 2},
		"completed under an older leader: counted and flushed again": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 7, 60)}, since: since(10), view: 8, next: 2, outdated: "f1"},
		"the flush again covers, under the new leader": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 7, 60), underView(flush("f2", 70, "2", "complete"), 8, 80)},
			since:    since(10), view: 8, want: "f2", next: 3, outdated: "f1"},
		"a flush still running covers under any leader: it confirms with its own": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", ""), 7, 60)}, since: since(10), view: 8, want: "f1", next: 2},
		"without HA any completed flush covers": {
			existing: []hicachev1alpha1.CacheFlush{flush("f1", 50, "1", "complete")}, since: since(10), view: 8, want: "f1", next: 2},
		"the status lags the failover: of two completed flushes, the recount under the newer view covers": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 7, 60), underView(flush("f2", 70, "2", "complete"), 8, 80)},
			since:    since(10), view: 7, want: "f2", next: 3},
		"the last of the outdated ones is named": {
			existing: []hicachev1alpha1.CacheFlush{underView(flush("f1", 50, "1", "complete"), 6, 60), underView(flush("f2", 70, "2", "complete"), 7, 80)},
			since:    since(10), view: 9, next: 3, outdated: "f2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, next, outdated := pickFlush(tc.existing, tc.since, tc.view)
			gotName, outName := "", ""
			if got != nil {
				gotName = got.Name
			}
			if outdated != nil {
				outName = outdated.Name
			}
			if gotName != tc.want || next != tc.next || outName != tc.outdated {
				t.Errorf("pickFlush = %q, next %d, outdated %q; want %q, next %d, outdated %q", gotName, next, outName, tc.want, tc.next, tc.outdated)
			}
		})
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
		scope   storeScope
		pods    []corev1.Pod
		writers []hicachev1alpha1.HiCacheDeployment
		want    storeUse
	}{
		"nothing": {scope: storeScope{namespace: "hc-a"}},
		"a deployment in another namespace writes it": {
			scope:   storeScope{namespace: "hc-a"},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-b", "dsv4", "hc-a", "")},
			want:    storeUse{deployments: []string{"team-b/dsv4"}}},
		"its pods, mid-rollout off it, and another namespace": {
			scope: storeScope{namespace: "hc-a"},
			pods:  []corev1.Pod{pod("team-a", "q", "hc-a", corev1.PodRunning), pod("team-a", "q", "hc-a", corev1.PodPending), pod("team-a", "r", "hc-b", corev1.PodRunning)},
			want:  storeUse{deployments: []string{"team-a/q"}, pods: 2, podNamespaces: []string{"team-a"}}},
		"finished pods write nothing": {
			scope: storeScope{namespace: "hc-a"},
			pods:  []corev1.Pod{pod("team-a", "q", "hc-a", corev1.PodSucceeded), pod("team-a", "q", "hc-a", corev1.PodFailed)}},
		"scope All: every writer of the store": {
			scope:   storeScope{},
			pods:    []corev1.Pod{pod("team-a", "q", "hc-a", corev1.PodRunning)},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-b", "dsv4", "hc-b", ""), writer("team-c", "k", "fixed", "")},
			want:    storeUse{deployments: []string{"team-a/q", "team-b/dsv4", "team-c/k"}, pods: 1, podNamespaces: []string{"team-a"}}},
		"a deployment draining for this flush: its claim does not count": {
			scope:   storeScope{namespace: "fixed", draining: "team-a/d"},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-a", "d", "fixed", hicachev1alpha1.ReasonWaitingForFlush)}},
		"the draining UID of a deployment that does not drain counts": {
			scope:   storeScope{namespace: "fixed", draining: "team-a/d"},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-a", "d", "fixed", hicachev1alpha1.ReasonLayoutCurrent)},
			want:    storeUse{deployments: []string{"team-a/d"}}},
		"the draining deployment's pods count": {
			scope:   storeScope{namespace: "fixed", draining: "team-a/d"},
			pods:    []corev1.Pod{pod("team-a", "d", "fixed", corev1.PodRunning)},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-a", "d", "fixed", hicachev1alpha1.ReasonWaitingForFlush)},
			want:    storeUse{deployments: []string{"team-a/d"}, pods: 1, podNamespaces: []string{"team-a"}}},
		"the asking deployment is ignored, pods and claim": {
			scope:   storeScope{namespace: "fixed", ignore: "team-a/d"},
			pods:    []corev1.Pod{pod("team-a", "d", "fixed", corev1.PodRunning), pod("team-b", "d", "fixed", corev1.PodRunning)},
			writers: []hicachev1alpha1.HiCacheDeployment{writer("team-a", "d", "fixed", "")},
			want:    storeUse{deployments: []string{"team-b/d"}, pods: 1, podNamespaces: []string{"team-b"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := usersOf(tc.scope, tc.pods, tc.writers)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(storeUse{})); diff != "" {
				t.Errorf("usersOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStoreUseDescribe(t *testing.T) {
	cases := map[string]struct {
		use  storeUse
		want string
	}{
		"one here":   {use: storeUse{deployments: []string{"team-a/dsv4"}}, want: "HiCacheDeployment dsv4"},
		"one there":  {use: storeUse{deployments: []string{"team-b/dsv4"}, pods: 2}, want: "HiCacheDeployment team-b/dsv4 (2 serving pods)"},
		"pods alone": {use: storeUse{pods: 1}, want: "(1 serving pods)"},
		"many, bounded": {use: storeUse{deployments: []string{"team-a/1", "team-a/2", "team-a/3", "team-a/4", "team-a/5", "team-a/6", "team-a/7"}, pods: 10},
			want: "HiCacheDeployments 1, 2, 3, 4, 5 and 2 more (10 serving pods)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.use.describe("team-a"); got != tc.want {
				t.Errorf("describe = %q, want %q", got, tc.want)
			}
			if got := tc.use.describe("a"); len(got) > 200 {
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
			if got := truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
				t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}

func TestConflictWith(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(sec) * time.Second)) }
	// writer is a deployment whose status records namespace "shared" under layout, since the
	// given second (-1: recorded before since was kept; nil status with layout "").
	writer := func(ns, name string, created int, layout string, since int) hicachev1alpha1.HiCacheDeployment {
		h := hicachev1alpha1.HiCacheDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), CreationTimestamp: at(created)}}
		if layout != "" {
			h.Status.Cache = &hicachev1alpha1.CacheStatus{Namespace: "shared", LayoutHash: layout, ShortHash: layout[:1]}
			if since >= 0 {
				s := at(since)
				h.Status.Cache.Since = &s
			}
		}
		return h
	}
	cases := map[string]struct {
		self    hicachev1alpha1.HiCacheDeployment
		layout  string
		writers []hicachev1alpha1.HiCacheDeployment
		want    string
	}{
		"alone": {self: writer("a", "me", 0, "", 0), layout: "A"},
		"the same layout shares": {self: writer("a", "me", 0, "", 0), layout: "A",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", 10)}},
		"a newcomer yields to a recorded writer, however old it is": {self: writer("a", "me", 0, "", 0), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", 10)}, want: "b/other"},
		"the first to record keeps it": {self: writer("a", "me", 0, "B", 20), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", 10)}, want: "b/other"},
		"the later recorder yields": {self: writer("a", "me", 50, "B", 5), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", 10)}},
		"recorded in the same second: the older deployment keeps it": {self: writer("a", "me", 3, "B", 10), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 2, "A", 10)}, want: "b/other"},
		"then the smaller namespace/name": {self: writer("b", "me", 2, "B", 10), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("a", "other", 2, "A", 10)}, want: "a/other"},
		"recorded before since was kept counts as first": {self: writer("a", "me", 0, "B", 1), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "other", 10, "A", -1)}, want: "b/other"},
		"the strongest of several is named": {self: writer("z", "me", 0, "", 0), layout: "C",
			writers: []hicachev1alpha1.HiCacheDeployment{writer("b", "late", 1, "A", 30), writer("c", "early", 5, "B", 20), writer("d", "same", 0, "C", 1)}, want: "c/early"},
		"a writer whose claim is another namespace is not a conflict": {self: writer("a", "me", 0, "", 0), layout: "B",
			writers: []hicachev1alpha1.HiCacheDeployment{func() hicachev1alpha1.HiCacheDeployment {
				w := writer("b", "other", 0, "A", 0)
				w.Status.Cache.Namespace = "elsewhere"
				return w
			}()}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if w := conflictWith(&tc.self, "shared", tc.layout, tc.writers); w != nil {
				got = w.Namespace + "/" + w.Name
			}
			if got != tc.want {
				t.Errorf("conflictWith = %q, want %q", got, tc.want)
			}
		})
	}
	// Decided alike from either side: of two writers of different layouts exactly one yields.
	a, b := writer("a", "x", 5, "A", 7), writer("b", "y", 5, "B", 7)
	if (conflictWith(&a, "shared", "A", []hicachev1alpha1.HiCacheDeployment{b}) == nil) == (conflictWith(&b, "shared", "B", []hicachev1alpha1.HiCacheDeployment{a}) == nil) {
		t.Error("two writers of one namespace under different layouts both keep it, or both yield")
	}
}

func TestHeldCacheDropsTheClaim(t *testing.T) {
	h := makeHCD("q").TP(4).Storage("mc").Obj()
	since := t0
	old := &hicachev1alpha1.CacheStatus{Namespace: "shared", LayoutHash: "abc", ShortHash: "a", Backend: "mc", Since: &since,
		StaleNamespaces: []hicachev1alpha1.StaleNamespace{{Namespace: "older"}}}
	got := heldCache(old, h, "shared")
	if got.Namespace != "" || got.LayoutHash != "" || got.Since != nil || len(got.StaleNamespaces) != 1 || old.Namespace != "shared" {
		t.Errorf("held cache %+v (old %+v): want the claim on shared dropped, the stale list kept, old untouched", got, old)
	}
	if got := heldCache(old, h, "other"); got.Namespace != "shared" {
		t.Errorf("a claim on another namespace was dropped: %+v", got)
	}
	if got := heldCache(nil, h, "shared"); got.Backend != "mc" || got.Namespace != "" {
		t.Errorf("held cache of a new deployment %+v", got)
	}
}
