package hicachedeployment

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
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
			hcd:      testsupport.MakeHCD("q").TP(4).Obj(),
			wantRefs: map[string]string{resolve.ServerAdminKeyEnv: "q-sglang-server/admin-api-key"},
			wantArgs: []string{"--admin-api-key", "$(HICACHE_SERVER_ADMIN_KEY)"},
		},
		"both keys named": {
			hcd: withKeys(testsupport.MakeHCD("q").TP(4).Obj(), &hicachev1alpha1.SecretKeyReference{Name: "ops", Key: "admin"},
				&hicachev1alpha1.SecretKeyReference{Name: "clients", Key: "token"}),
			// SGLang holds the server keys, never the Secrets spec.security names (the proxy
			// holds those).
			wantRefs: map[string]string{resolve.ServerAdminKeyEnv: "q-sglang-server/admin-api-key", resolve.ServerAPIKeyEnv: "q-sglang-server/api-key"},
			wantArgs: []string{"--admin-api-key", "$(HICACHE_SERVER_ADMIN_KEY)", "--api-key", "$(HICACHE_SERVER_API_KEY)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := mustBuildGroup(t, tc.hcd, 0).Spec.Template.Spec.Containers[0]
			if diff := cmp.Diff(tc.wantRefs, keyRefs(t, c)); diff != "" {
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
	for _, name := range []string{resolve.AdminAPIKeyEnv, resolve.APIKeyEnv, resolve.ServerAdminKeyEnv, resolve.ServerAPIKeyEnv, "HICACHE_ANYTHING"} {
		_, err := resolve.Resolve(testsupport.MakeHCD("q").TP(4).Env(name, "literal").Obj())
		if err == nil || !strings.Contains(err.Error(), "spec.template.env[0]") || !strings.Contains(err.Error(), name+" is set by the operator") {
			t.Errorf("%s in spec.template.env: %v, want a refusal naming the field", name, err)
		}
	}
}

func TestKeySecretProblem(t *testing.T) {
	h := testsupport.MakeHCD("q").Obj()
	ref := hicachev1alpha1.SecretKeyReference{Name: "s", Key: "k"}
	secret := func(data map[string][]byte, owned bool) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"}, Data: data}
		if owned {
			s.OwnerReferences = []metav1.OwnerReference{ownerRef(h)}
		}
		return s
	}
	const good = "canary-0123456789abcdef0123456789abcdef_v1.2"
	cases := map[string]struct {
		s         *corev1.Secret
		generated bool
		want      string // a fragment of the problem; "" for none
	}{
		"missing":                      {s: nil, want: `Secret "s", named by spec.security.adminAPIKeySecretRef, does not exist in namespace default`},
		"no key":                       {s: secret(map[string][]byte{"other": []byte("x")}, false), want: `has no key "k"`},
		"empty key":                    {s: secret(map[string][]byte{"k": {}}, false), want: "or it is empty"},
		"a user's Secret":              {s: secret(map[string][]byte{"k": []byte(good)}, false)},
		"generated, ours":              {s: secret(map[string][]byte{"k": []byte(good)}, true), generated: true},
		"too short":                    {s: secret(map[string][]byte{"k": []byte("canary")}, false), want: `Secret "s", named by spec.security.adminAPIKeySecretRef, under "k" holds a key of 6 bytes, which must be 32 to 512 bytes long`},
		"a trailing newline":           {s: secret(map[string][]byte{"k": []byte(good + "\n")}, false), want: "byte 44 (whitespace, a trailing newline included)"},
		"base64 with '+' and '/'":      {s: secret(map[string][]byte{"k": []byte("canary+canary/canary+canary/canary==")}, false), want: "byte 6 is not an ASCII letter"},
		"a space":                      {s: secret(map[string][]byte{"k": []byte("canary canary canary canary canary")}, false), want: "openssl rand -hex 32"},
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
	if resolve.KeyProblem(a) != "" {
		t.Errorf("a generated key is refused: %s", resolve.KeyProblem(a))
	}
	if len(a) != 43 || string(a) == string(b) {
		t.Errorf("keys %q and %q: want 43 random base64url characters each", a, b)
	}
	s := buildAdminKeySecret(testsupport.MakeHCD("q").Obj(), a)
	if s.Name != "q-sglang-admin" || string(s.Data[resolve.GeneratedAdminKeyField]) != string(a) || !metav1.IsControlledBy(s, testsupport.MakeHCD("q").Obj()) {
		t.Errorf("secret %s %v: want q-sglang-admin holding the key, controlled by the deployment", s.Name, s.OwnerReferences)
	}
}

// A generated admin key's Secret that lost its owner reference is the deployment's again; any
// other Secret under that name stays someone else's.
func TestAdoptableKeySecret(t *testing.T) {
	h := testsupport.MakeHCD("q").Obj()
	generated := func(change func(*corev1.Secret)) *corev1.Secret {
		s := buildAdminKeySecret(h, []byte("canary"))
		s.OwnerReferences = nil
		if change != nil {
			change(s)
		}
		return s
	}
	other := testsupport.MakeHCD("other").Obj()
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

// The router takes its keys from Secrets as the ranks do: its own control-plane key always (the
// operator generates it), SGLang's API key when the servers require one, which it then requires
// of its clients and presents to the leaders; never the servers' admin key.
func TestRouterTakesItsKeysFromSecrets(t *testing.T) {
	clients := &hicachev1alpha1.SecretKeyReference{Name: "clients", Key: "token"}
	for name, tc := range map[string]struct {
		hcd      *hicachev1alpha1.HiCacheDeployment
		wantRefs map[string]string
		apiKey   bool
	}{
		"no API key: open serving routes, locked management routes": {
			hcd:      withRouter(testsupport.MakeHCD("q").TP(4).Obj(), ""),
			wantRefs: map[string]string{resolve.RouterAdminKeyEnv: "q-router-admin/admin-api-key"},
		},
		"an API key: the router requires it and presents it": {
			hcd:      withRouter(withKeys(testsupport.MakeHCD("q").TP(4).Obj(), &hicachev1alpha1.SecretKeyReference{Name: "ops", Key: "admin"}, clients), ""),
			wantRefs: map[string]string{resolve.RouterAdminKeyEnv: "q-router-admin/admin-api-key", resolve.APIKeyEnv: "clients/token"},
			apiKey:   true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := BuildRouter(tc.hcd, storeuse.DefaultRouterImage)
			if err != nil {
				t.Fatal(err)
			}
			c := objs.Deployment.Spec.Template.Spec.Containers[0]
			if diff := cmp.Diff(tc.wantRefs, keyRefs(t, c)); diff != "" {
				t.Errorf("the router's secretKeyRef variables (-want +got):\n%s", diff)
			}
			joined := " " + strings.Join(c.Args, " ") + " "
			if !strings.Contains(joined, " --control-plane-api-keys operator:operator:admin:$("+resolve.RouterAdminKeyEnv+") ") {
				t.Errorf("router args lack the control-plane key: %s", joined)
			}
			if got := strings.Contains(joined, " --api-key $("+resolve.APIKeyEnv+") "); got != tc.apiKey {
				t.Errorf("router args give --api-key: %v, want %v: %s", got, tc.apiKey, joined)
			}
			if strings.Contains(joined, resolve.AdminAPIKeyEnv) {
				t.Errorf("the router is given the servers' admin key: %s", joined)
			}
		})
	}
}

// The router's control-plane key is generated in a Secret of its own, apart from the servers'
// admin key, as that one is: a 43-character key that KeyProblem accepts, owned by the deployment.
func TestGeneratedRouterKey(t *testing.T) {
	h := withRouter(testsupport.MakeHCD("q").Obj(), "")
	ref := resolve.RouterAdminKeySecret(h)
	admin, _ := resolve.AdminKeySecret(h)
	if ref.Name == admin.Name {
		t.Fatalf("the router's key and the servers' admin key share Secret %s", ref.Name)
	}
	key, err := newAdminKey()
	if err != nil {
		t.Fatal(err)
	}
	s := buildKeySecret(h, ref, key)
	if s.Name != "q-router-admin" || string(s.Data[ref.Key]) != string(key) || !metav1.IsControlledBy(s, h) {
		t.Errorf("router key Secret %s/%v, owned: %v", s.Name, s.Data, metav1.IsControlledBy(s, h))
	}
	if p := keySecretProblem(h, routerKeyField, ref, s, true); p != "" {
		t.Errorf("the generated router key is refused: %s", p)
	}
	foreign := s.DeepCopy()
	foreign.OwnerReferences = nil
	if p := keySecretProblem(h, routerKeyField, ref, foreign, true); !strings.Contains(p, "router's control-plane key") {
		t.Errorf("a Secret of that name that is not the deployment's: %q, want a refusal naming the router's key", p)
	}
}

// buildAdminKeySecret is the Secret of a generated admin key, as ensureKeys creates it, owned by the deployment so that it
// goes with it. Its value is set once, at creation; the operator never writes it again.
func buildAdminKeySecret(hcd *hicachev1alpha1.HiCacheDeployment, key []byte) *corev1.Secret {
	ref, _ := resolve.AdminKeySecret(hcd)
	return buildKeySecret(hcd, ref, key)
}

// keyRefs are c's secretKeyRef variables, "secret/key" by name; a key variable with a literal
// value fails the test.
func keyRefs(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	refs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
		if strings.Contains(e.Name, "KEY") && e.Value != "" {
			t.Errorf("variable %s has a literal value", e.Name)
		}
	}
	return refs
}
