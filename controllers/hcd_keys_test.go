package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

func withKeys(h *hicachev1alpha1.HiCacheDeployment, admin, api *hicachev1alpha1.SecretKeyReference) *hicachev1alpha1.HiCacheDeployment {
	h.Spec.Security = &hicachev1alpha1.ServingSecurity{AdminAPIKeySecretRef: admin, APIKeySecretRef: api}
	return h
}

// The keys reach the ranks as secretKeyRef variables that the rendered flags reference; the
// pod template holds no value of them.
func TestRankPodsTakeKeysFromSecrets(t *testing.T) {
	cases := map[string]struct {
		hcd      *hicachev1alpha1.HiCacheDeployment
		wantRefs map[string]string // variable → secret/key
		wantArgs []string
	}{
		"generated admin key only": {
			hcd:      makeHCD("q").TP(4).Obj(),
			wantRefs: map[string]string{resolve.AdminAPIKeyEnv: "q-sglang-admin/admin-api-key"},
			wantArgs: []string{"--admin-api-key", "$(HICACHE_ADMIN_API_KEY)"},
		},
		"both keys named": {
			hcd: withKeys(makeHCD("q").TP(4).Obj(), &hicachev1alpha1.SecretKeyReference{Name: "ops", Key: "admin"},
				&hicachev1alpha1.SecretKeyReference{Name: "clients", Key: "token"}),
			wantRefs: map[string]string{resolve.AdminAPIKeyEnv: "ops/admin", resolve.APIKeyEnv: "clients/token"},
			wantArgs: []string{"--admin-api-key", "$(HICACHE_ADMIN_API_KEY)", "--api-key", "$(HICACHE_API_KEY)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := mustBuildGroup(t, tc.hcd, 0).Spec.Template.Spec.Containers[0]
			refs := map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
				if strings.Contains(e.Name, "API_KEY") && e.Value != "" {
					t.Errorf("variable %s has a literal value", e.Name)
				}
			}
			if diff := cmp.Diff(tc.wantRefs, refs); diff != "" {
				t.Errorf("secretKeyRef variables (-want +got):\n%s", diff)
			}
			joined := " " + strings.Join(c.Args, " ") + " "
			for i := 0; i < len(tc.wantArgs); i += 2 {
				if !strings.Contains(joined, " "+tc.wantArgs[i]+" "+tc.wantArgs[i+1]+" ") {
					t.Errorf("args lack %s %s: %s", tc.wantArgs[i], tc.wantArgs[i+1], joined)
				}
			}
		})
	}
}

// The variables of the keys are the operator's: spec.template.env may not set them.
func TestTemplateEnvMayNotSetTheKeys(t *testing.T) {
	for _, name := range []string{resolve.AdminAPIKeyEnv, resolve.APIKeyEnv} {
		_, err := resolve.Resolve(makeHCD("q").TP(4).Env(name, "literal").Obj())
		if err == nil || !strings.Contains(err.Error(), "spec.template.env[0]") || !strings.Contains(err.Error(), name+" is set by the operator") {
			t.Errorf("%s in spec.template.env: %v, want a refusal naming the field", name, err)
		}
	}
}

func TestKeySecretProblem(t *testing.T) {
	h := makeHCD("q").Obj()
	ref := hicachev1alpha1.SecretKeyReference{Name: "s", Key: "k"}
	secret := func(data map[string][]byte, owned bool) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"}, Data: data}
		if owned {
			s.OwnerReferences = []metav1.OwnerReference{ownerRef(h)}
		}
		return s
	}
	cases := map[string]struct {
		s         *corev1.Secret
		generated bool
		want      string // a fragment of the problem; "" for none
	}{
		"missing":                      {s: nil, want: `Secret "s", named by spec.security.adminAPIKeySecretRef, does not exist in namespace default`},
		"no key":                       {s: secret(map[string][]byte{"other": []byte("x")}, false), want: `has no key "k"`},
		"empty key":                    {s: secret(map[string][]byte{"k": {}}, false), want: "or it is empty"},
		"a user's Secret":              {s: secret(map[string][]byte{"k": []byte("canary")}, false)},
		"generated, ours":              {s: secret(map[string][]byte{"k": []byte("canary")}, true), generated: true},
		"generated name, someone else": {s: secret(map[string][]byte{"k": []byte("canary")}, false), generated: true, want: "is not this deployment's"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := keySecretProblem(h, "spec.security.adminAPIKeySecretRef", ref, tc.s, tc.generated)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("problem %q, want %q", got, tc.want)
			}
			if strings.Contains(got, "canary") {
				t.Errorf("the problem quotes the Secret's data: %q", got)
			}
		})
	}
}

func TestGeneratedAdminKey(t *testing.T) {
	a, err := newAdminKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newAdminKey()
	if len(a) != 43 || string(a) == string(b) {
		t.Errorf("keys %q and %q: want 43 random base64url characters each", a, b)
	}
	s := buildAdminKeySecret(makeHCD("q").Obj(), a)
	if s.Name != "q-sglang-admin" || string(s.Data[resolve.GeneratedAdminKeyField]) != string(a) || !metav1.IsControlledBy(s, makeHCD("q").Obj()) {
		t.Errorf("secret %s %v: want q-sglang-admin holding the key, controlled by the deployment", s.Name, s.OwnerReferences)
	}
}

// A generated admin key's Secret that lost its owner reference is the deployment's again; any
// other Secret under that name stays someone else's.
func TestAdoptableKeySecret(t *testing.T) {
	h := makeHCD("q").Obj()
	generated := func(change func(*corev1.Secret)) *corev1.Secret {
		s := buildAdminKeySecret(h, []byte("canary"))
		s.OwnerReferences = nil
		if change != nil {
			change(s)
		}
		return s
	}
	other := makeHCD("other").Obj()
	cases := map[string]struct {
		s    *corev1.Secret
		want bool
	}{
		"lost its owner":     {s: generated(nil), want: true},
		"still owned":        {s: buildAdminKeySecret(h, []byte("canary"))},
		"owned by another":   {s: generated(func(s *corev1.Secret) { s.OwnerReferences = []metav1.OwnerReference{ownerRef(other)} })},
		"another's labels":   {s: generated(func(s *corev1.Secret) { s.Labels = commonLabels(other) })},
		"without the labels": {s: generated(func(s *corev1.Secret) { s.Labels = nil })},
		"one label missing":  {s: generated(func(s *corev1.Secret) { delete(s.Labels, "app.kubernetes.io/managed-by") })},
		"a non-controller owner": {s: generated(func(s *corev1.Secret) {
			ref := ownerRef(other)
			ref.Controller = nil
			s.OwnerReferences = []metav1.OwnerReference{ref}
		}), want: true},
		"none": {s: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := adoptableKeySecret(h, tc.s); got != tc.want {
				t.Errorf("adoptableKeySecret = %v, want %v", got, tc.want)
			}
		})
	}
}

// When a reconcile reads the key Secrets: only when it does not know them to be in order.
func TestPlanKeyCheck(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	const refs, period = "q-sglang-admin/admin-api-key (generated)", 30 * time.Minute
	checked := func(ago time.Duration, ok bool) *keyCheck { return &keyCheck{refs: refs, ok: ok, at: now.Add(-ago)} }
	waiting := []string{"container sglang of pod q-0-0 waits on Secret q-sglang-admin: secret \"q-sglang-admin\" not found"}
	cases := map[string]struct {
		f    keyFacts
		want keyAction
	}{
		"a new deployment: create the generated Secret, no read": {f: keyFacts{generated: true}, want: keysCreate},
		"a new deployment naming its Secrets: read them":         {f: keyFacts{}, want: keysRead},
		"running, not checked by this process: read":             {f: keyFacts{generated: true, hasGroups: true}, want: keysRead},
		"checked in order a minute ago: known":                   {f: keyFacts{last: checked(time.Minute, true)}, want: keysKnown},
		"checked in order, groups running: known":                {f: keyFacts{generated: true, hasGroups: true, last: checked(time.Minute, true)}, want: keysKnown},
		"checked just under the period ago: known":               {f: keyFacts{last: checked(period-time.Second, true)}, want: keysKnown},
		"checked a period ago: read":                             {f: keyFacts{last: checked(period, true)}, want: keysRead},
		"the last check found a problem: read":                   {f: keyFacts{last: checked(time.Second, false)}, want: keysRead},
		"a problem, no groups, generated: read, not create":      {f: keyFacts{generated: true, last: checked(time.Second, false)}, want: keysRead},
		"the spec names other Secrets: read": {f: keyFacts{last: &keyCheck{refs: "ops/admin", ok: true, at: now}},
			want: keysRead},
		"a rank waits on a Secret: read, though checked": {f: keyFacts{hasGroups: true, last: checked(time.Second, true), waiting: waiting},
			want: keysRead},
		"a rank waits, not checked: read": {f: keyFacts{generated: true, waiting: waiting}, want: keysRead},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := tc.f
			if f.refs == "" {
				f.refs = refs
			}
			f.now, f.period = now, period
			got, why := planKeyCheck(f)
			if got != tc.want {
				t.Errorf("planKeyCheck = %v (%s), want %v", got, why, tc.want)
			}
			if (got == keysKnown) != (why == "") {
				t.Errorf("action %v with reason %q: every read says why, a skip does not", got, why)
			}
		})
	}
}

func TestKeyRecheckIn(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		last *keyCheck
		want time.Duration
	}{
		"none":                 {last: nil, want: 0},
		"a problem":            {last: &keyCheck{ok: false, at: now}, want: 0},
		"just checked":         {last: &keyCheck{ok: true, at: now}, want: 10 * time.Minute},
		"checked 4 min ago":    {last: &keyCheck{ok: true, at: now.Add(-4 * time.Minute)}, want: 6 * time.Minute},
		"overdue: in a second": {last: &keyCheck{ok: true, at: now.Add(-time.Hour)}, want: time.Second},
	}
	for name, tc := range cases {
		if got := keyRecheckIn(tc.last, now, 10*time.Minute); got != tc.want {
			t.Errorf("%s: keyRecheckIn = %v, want %v", name, got, tc.want)
		}
	}
}

// The check period is spread over [base, 1.25 base) by UID, the same for a UID each time.
func TestKeyCheckPeriodSpreadsByUID(t *testing.T) {
	const base = 30 * time.Minute
	seen := map[time.Duration]bool{}
	for i := range 200 {
		uid := types.UID(fmt.Sprintf("6f1c2a4e-0000-4000-8000-%012d", i))
		p := keyCheckPeriod(base, uid)
		if p < base || p >= base+base/4 {
			t.Fatalf("period %v for %s: want [%v, %v)", p, uid, base, base+base/4)
		}
		if keyCheckPeriod(base, uid) != p {
			t.Fatalf("period of %s changes between calls", uid)
		}
		seen[p.Truncate(time.Minute)] = true
	}
	if len(seen) < 6 {
		t.Errorf("200 UIDs fall into %d distinct minutes of the 7.5 the spread spans", len(seen))
	}
}

// Which rank containers wait on a Secret the spec names: the kubelet's CreateContainerConfigError
// with the messages it gives for a missing Secret and a missing key.
func TestPodsWaitingOnSecrets(t *testing.T) {
	pod := func(name string, init bool, reason, msg string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		cs := corev1.ContainerStatus{Name: "sglang", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
		if init {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{cs}
		} else {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		}
		return p
	}
	running := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ok"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "sglang", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	names := []string{"q-sglang-admin", "clients"}
	cases := map[string]struct {
		pods []corev1.Pod
		want int
	}{
		"running":           {pods: []corev1.Pod{running}},
		"Secret missing":    {pods: []corev1.Pod{pod("a", false, "CreateContainerConfigError", `secret "q-sglang-admin" not found`)}, want: 1},
		"key missing":       {pods: []corev1.Pod{pod("a", false, "CreateContainerConfigError", "couldn't find key token in Secret ns/clients")}, want: 1},
		"an init container": {pods: []corev1.Pod{pod("a", true, "CreateContainerConfigError", `secret "clients" not found`)}, want: 1},
		"another Secret":    {pods: []corev1.Pod{pod("a", false, "CreateContainerConfigError", `secret "hf-token" not found`)}},
		"a ConfigMap":       {pods: []corev1.Pod{pod("a", false, "CreateContainerConfigError", `configmap "q-hicache" not found`)}},
		"pulling":           {pods: []corev1.Pod{pod("a", false, "ImagePullBackOff", `secret "clients" not found`)}},
		"two pods waiting": {pods: []corev1.Pod{running, pod("a", false, "CreateContainerConfigError", `secret "clients" not found`),
			pod("b", false, "CreateContainerConfigError", `secret "clients" not found`)}, want: 2},
	}
	for name, tc := range cases {
		got := podsWaitingOnSecrets(tc.pods, names)
		if len(got) != tc.want {
			t.Errorf("%s: %q, want %d", name, got, tc.want)
		}
		for _, g := range got {
			if !strings.Contains(g, "waits on Secret") {
				t.Errorf("%s: %q does not say which Secret", name, g)
			}
		}
	}
}
