package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// operatorNamespace is the namespace the suite's operator is told it runs in.
const operatorNamespace = "hicache-system"

// canary is a value no object or log line holds by chance.
func canary(t *testing.T, what string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "canary-" + what + "-" + hex.EncodeToString(b)
}

// forms are the spellings of a secret value an object or log can hold: as is, and in base64 as
// a Secret's data (and anything copied from it) holds it.
func forms(v string) []string {
	return []string{v, base64.StdEncoding.EncodeToString([]byte(v))}
}

// clusterSearch is every object of every resource the API server serves and can list, in every
// namespace, found through discovery.
type clusterSearch struct {
	resources, objects int
	// holders maps each needle to the objects holding it, as "resource namespace/name".
	holders map[string][]string
}

func searchCluster(t *testing.T, needles []string) clusterSearch {
	t.Helper()
	ctx := context.Background()
	dc, err := discovery.NewDiscoveryClientForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		t.Fatalf("discovery: %v", err)
	}
	out := clusterSearch{holders: map[string][]string{}}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("listing %s %s: %v", list.GroupVersion, r.Name, err)
			}
			out.resources++
			for _, item := range items.Items {
				out.objects++
				b, err := json.Marshal(item.Object)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range needles {
					if bytes.Contains(b, []byte(n)) {
						res := r.Name
						if gv.Group != "" {
							res += "." + gv.Group
						}
						out.holders[n] = append(out.holders[n], res+" "+item.GetNamespace()+"/"+item.GetName())
					}
				}
			}
		}
	}
	return out
}

// A canary planted in the Secrets of both keys, and the key the operator generates, appear in
// no object but their Secret and in no line of the operator's log, through a rollout of the
// ranks that use them. Every object of every resource the API server lists is searched.
func TestCanaryKeysAppearOnlyInTheirSecrets(t *testing.T) {
	stopLog := operatorLog.record()
	ns, _ := namespaceWithBackend(t)
	adminKey, apiKey := canary(t, "admin"), canary(t, "api")
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sglang-keys", Namespace: ns},
		Data: map[string][]byte{"admin": []byte(adminKey), "api": []byte(apiKey)}})

	named := hcd(t, ns, qwen3)
	named.Spec.Security = &hicachev1alpha1.ServingSecurity{
		AdminAPIKeySecretRef: &hicachev1alpha1.SecretKeyReference{Name: "sglang-keys", Key: "admin"},
		APIKeySecretRef:      &hicachev1alpha1.SecretKeyReference{Name: "sglang-keys", Key: "api"},
	}
	create(t, named)
	generated := hcd(t, ns, qwen3)
	generated.Name = "generated"
	create(t, generated)
	waitReadyGroups(t, ns, "qwen3", 1)
	waitReadyGroups(t, ns, "generated", 1)

	// A rollout: every rank replaced with a new image (a CUDA build of the same release), and
	// ready again.
	const rolled = "lmsysorg/sglang:v0.5.23-cu129"
	update(t, named, func(h *hicachev1alpha1.HiCacheDeployment) { h.Spec.SGLang.Image = rolled })
	eventually(t, 60*time.Second, "qwen3's ranks rolled to the new image and ready", func() (bool, string) {
		h := getHCD(t, ns, "qwen3")
		pods := rankPods(t, ns, "qwen3")
		ok := len(pods) == 1 && meta.IsStatusConditionTrue(h.Status.Conditions, hicachev1alpha1.ConditionReady) && h.Status.ObservedGeneration == h.Generation
		for _, p := range pods {
			ok = ok && p.Spec.Containers[0].Image == rolled
		}
		return ok, fmt.Sprintf("%d pods, status %+v", len(pods), h.Status.Conditions)
	})

	var genSecret corev1.Secret
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: resolve.GeneratedAdminKeySecret("generated")}, &genSecret); err != nil {
		t.Fatalf("the generated admin key's Secret: %v", err)
	}
	genKey := string(genSecret.Data[resolve.GeneratedAdminKeyField])
	if len(genKey) < 32 || !metav1.IsControlledBy(&genSecret, getHCD(t, ns, "generated")) {
		t.Fatalf("generated Secret holds a %d-character key, owners %v: want a random key owned by the deployment", len(genKey), genSecret.OwnerReferences)
	}

	// The ranks take the keys by reference: SGLang the server keys, the proxy in front of it
	// the clients' keys too.
	for name, want := range map[string]map[string]map[string]string{
		"qwen3": {
			resolve.ServingContainer: {resolve.ServerAdminKeyEnv: "qwen3-sglang-server/admin-api-key", resolve.ServerAPIKeyEnv: "qwen3-sglang-server/api-key"},
			resolve.GuardContainer: {resolve.AdminAPIKeyEnv: "sglang-keys/admin", resolve.APIKeyEnv: "sglang-keys/api",
				resolve.ServerAdminKeyEnv: "qwen3-sglang-server/admin-api-key", resolve.ServerAPIKeyEnv: "qwen3-sglang-server/api-key"},
		},
		"generated": {
			resolve.ServingContainer: {resolve.ServerAdminKeyEnv: "generated-sglang-server/admin-api-key"},
			resolve.GuardContainer:   {resolve.AdminAPIKeyEnv: "generated-sglang-admin/admin-api-key", resolve.ServerAdminKeyEnv: "generated-sglang-server/admin-api-key"},
		},
	} {
		for _, p := range rankPods(t, ns, name) {
			for _, c := range p.Spec.Containers {
				got := map[string]string{}
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						got[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
					}
				}
				if diff := cmp.Diff(want[c.Name], got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("pod %s, container %s: secretKeyRef variables (-want +got):\n%s", p.Name, c.Name, diff)
				}
			}
			c := p.Spec.Containers[0]
			if v, _ := flagValue(c.Args, "--admin-api-key"); v != "$("+resolve.ServerAdminKeyEnv+")" {
				t.Errorf("pod %s: --admin-api-key %q, want the variable reference", p.Name, v)
			}
		}
	}

	log := stopLog()
	secrets := map[string]string{adminKey: "sglang-keys", apiKey: "sglang-keys", genKey: "generated-sglang-admin"}
	// The server keys too are nowhere but in their Secrets.
	for _, name := range []string{"qwen3", "generated"} {
		var s corev1.Secret
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: resolve.ServerKeySecret(name)}, &s); err != nil {
			t.Fatalf("the server keys' Secret of %s: %v", name, err)
		}
		for _, f := range []string{resolve.ServerAdminKeyField, resolve.ServerAPIKeyField} {
			if len(s.Data[f]) < 32 || !metav1.IsControlledBy(&s, getHCD(t, ns, name)) {
				t.Fatalf("%s's server keys' Secret: %s of %d bytes, owners %v", name, f, len(s.Data[f]), s.OwnerReferences)
			}
			secrets[string(s.Data[f])] = s.Name
		}
	}
	var needles []string
	for k := range secrets {
		needles = append(needles, forms(k)...)
	}
	found := searchCluster(t, needles)
	for k, secret := range secrets {
		var holders []string
		for _, f := range forms(k) {
			holders = append(holders, found.holders[f]...)
			if bytes.Contains(log, []byte(f)) {
				t.Errorf("the operator's log holds the key of Secret %s", secret)
			}
		}
		if want := []string{"secrets " + ns + "/" + secret}; !slices.Equal(holders, want) {
			t.Errorf("the key of Secret %s is held by %v, want only %v", secret, holders, want)
		}
	}
	if found.objects < 100 || len(log) == 0 {
		t.Errorf("searched %d objects and %d bytes of log: the search cannot have seen the cluster", found.objects, len(log))
	}
	t.Logf("searched %d objects of %d resources and %d bytes (%d lines) of the operator's log", found.objects, found.resources, len(log), bytes.Count(log, []byte("\n")))
}

// A Secret a deployment names that is missing is said in the conditions and an Event, and
// nothing runs until it exists; the Secret the operator would generate, when it is someone
// else's, is not taken over.
func TestMissingKeySecretIsReportedThenRecovers(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	h := hcd(t, ns, qwen3)
	h.Spec.Security = &hicachev1alpha1.ServingSecurity{APIKeySecretRef: &hicachev1alpha1.SecretKeyReference{Name: "absent", Key: "token"}}
	create(t, h)
	waitReason := func(name, reason, fragment string) {
		t.Helper()
		eventually(t, 30*time.Second, fmt.Sprintf("%s Ready=False %s", name, reason), func() (bool, string) {
			c := meta.FindStatusCondition(getHCD(t, ns, name).Status.Conditions, hicachev1alpha1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, fragment), fmt.Sprintf("%+v", c)
		})
	}
	waitReason("qwen3", hicachev1alpha1.ReasonKeySecretInvalid, `Secret "absent", named by spec.security.apiKeySecretRef, does not exist`)
	if g := groups(t, ns, "qwen3"); len(g) != 0 {
		t.Errorf("%d serving groups exist without their API key's Secret", len(g))
	}
	var events corev1.EventList
	if err := k8s.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, e := range events.Items {
		warned = warned || e.Reason == hicachev1alpha1.ReasonKeySecretInvalid && e.Type == corev1.EventTypeWarning
	}
	if !warned {
		t.Error("no Warning Event says the Secret is missing")
	}
	// A key the proxy in front of SGLang could miss in another spelling: too short, and with a
	// trailing newline (as `echo key > file; kubectl create secret --from-file` stores it).
	short := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "absent", Namespace: ns}, Data: map[string][]byte{"token": []byte("short\n")}}
	create(t, short)
	waitReason("qwen3", hicachev1alpha1.ReasonKeySecretInvalid, `Secret "absent", named by spec.security.apiKeySecretRef, under "token" holds a key of 6 bytes, which must be 32 to 512 bytes long`)
	if g := groups(t, ns, "qwen3"); len(g) != 0 {
		t.Errorf("%d serving groups exist with a key the proxy could not take out of answers", len(g))
	}
	update(t, short, func(s *corev1.Secret) { s.Data["token"] = []byte(canary(t, "api") + "\n") })
	waitReason("qwen3", hicachev1alpha1.ReasonKeySecretInvalid, "(whitespace, a trailing newline included)")
	update(t, short, func(s *corev1.Secret) { s.Data["token"] = []byte(canary(t, "api")) })
	waitReadyGroups(t, ns, "qwen3", 1)

	// Someone else's Secret under the generated name.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: resolve.GeneratedAdminKeySecret("taken"), Namespace: ns},
		Data: map[string][]byte{resolve.GeneratedAdminKeyField: []byte("theirs")}})
	taken := hcd(t, ns, qwen3)
	taken.Name = "taken"
	create(t, taken)
	waitReason("taken", hicachev1alpha1.ReasonKeySecretInvalid, "is not this deployment's")
}
