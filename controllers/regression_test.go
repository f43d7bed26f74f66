package controllers

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake/flushjob"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// A variable the operator sets and the user sets again appears twice in the container's env,
// which server-side apply refuses ("duplicate entries for key [name=...]") with a message that
// does not name spec.template.env.
func TestUserEnvDoesNotDuplicateOperatorEnv(t *testing.T) {
	for _, name := range []string{"POD_IP", "NODE_RANK", "MOONCAKE_MASTER", "MOONCAKE_PROTOCOL"} {
		t.Run(name, func(t *testing.T) {
			h := makeHCD("q").TP(4).Storage("mooncake").Env(name, "user-value").Obj()
			_, err := resolve.Resolve(h)
			if err == nil || !strings.Contains(err.Error(), "spec.template.env[0]") || !strings.Contains(err.Error(), name) {
				t.Errorf("user env %s: Resolve gave %v; want a refusal naming spec.template.env[0] and the variable", name, err)
			}
		})
	}
}

// HiCacheDeployment names are DNS subdomains (dots, 253 characters); Service names must be DNS
// labels (no dots, 63 characters) and a StatefulSet's pods get a controller-revision-hash label
// of its name plus 11 characters. Such names are refused only by the API server, mid-apply.
func TestNamesTheAPIServerWouldRefuseAreReportedUpFront(t *testing.T) {
	for _, name := range []string{"qwen3.5-32b", strings.Repeat("n", 60)} {
		t.Run(name, func(t *testing.T) {
			h := makeHCD("q").TP(4).Obj()
			h.Name = name
			if _, err := resolve.Resolve(h); err != nil {
				return // refused with a message: fine
			}
			var problems []string
			if errs := validation.IsDNS1035Label(buildClientService(h).Name); len(errs) > 0 {
				problems = append(problems, "client Service: "+strings.Join(errs, "; "))
			}
			if errs := validation.IsDNS1035Label(buildHeadlessService(h, groupKey{}).Name); len(errs) > 0 {
				problems = append(problems, "headless Service: "+strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(groupName(name, groupKey{}) + "-0123456789"); len(errs) > 0 {
				problems = append(problems, "controller-revision-hash label: "+strings.Join(errs, "; "))
			}
			if len(problems) > 0 {
				t.Errorf("name %q resolves, but the API server refuses:\n%s", name, strings.Join(problems, "\n"))
			}
		})
	}
}

// derivative skips the apply when desired is a prefix of what exists: a flag removed from the end
// of the master's args, or a ConfigMap key no longer rendered, stays forever.
func TestDerivativeSeesRemovedValues(t *testing.T) {
	cb := managedBackend("mc")
	before := buildMasterDeployment(cb, "img")
	cb.Spec.Mooncake.Managed.EvictionRatio = ""
	after := buildMasterDeployment(cb, "img")
	for _, o := range []client.Object{before, after} {
		if err := stampAppliedHash(o); err != nil {
			t.Fatal(err)
		}
	}
	if derivative(after, asStored(before)) {
		t.Errorf("unsetting evictionRatio keeps the running master's args %q (want %q)",
			before.Spec.Template.Spec.Containers[0].Args, after.Spec.Template.Spec.Containers[0].Args)
	}

	withStore := makeHCD("q").TP(4).Storage("mooncake").Obj()
	r := mustResolve(t, withStore)
	oldCM, err := buildConfigMap(withStore, r, mooncakeOf(withStore, r, testBackend()))
	if err != nil {
		t.Fatal(err)
	}
	noStore := makeHCD("q").TP(4).Obj()
	newCM, err := buildConfigMap(noStore, mustResolve(t, noStore), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{oldCM, newCM} {
		if err := stampAppliedHash(o); err != nil {
			t.Fatal(err)
		}
	}
	if derivative(newCM, asStored(oldCM)) {
		t.Error("removing spec.storage keeps extra-config.json, naming the old backend, in the ConfigMap")
	}
}

// The flush Job is given the master's admin URL and its script fails when it cannot list the
// keys left; the backend's NetworkPolicy admits the admin port only from the operator.
func TestFlushJobMayReachWhatItIsGiven(t *testing.T) {
	cb := managedBackend("mc")
	np := buildMasterNetworkPolicy(cb, "hicache-system")
	job := buildFlushJob(NamespaceFlushRequest{
		Flush: testFlush("f", hicachev1alpha1.FlushScopeNamespace), Backend: cb, Prefix: "hc-1_", Image: "img", Attempt: 1,
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: "mc-master.default.svc:50051", AdminURL: "http://mc-master.default.svc:9003"},
	})
	if e, _ := envValue(job.Spec.Template.Spec.Containers[0].Env, flushjob.EnvAdminURL); e.Value == "" {
		return // the Job no longer needs the admin port
	}
	pod := labels.Set(job.Spec.Template.Labels)
	for _, rule := range np.Spec.Ingress {
		if rule.Ports[0].Port.IntVal != cb.Spec.Mooncake.Managed.AdminPort {
			continue
		}
		for _, peer := range rule.From {
			if sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector); err == nil && sel.Matches(pod) {
				return
			}
		}
	}
	t.Errorf("the flush Job's pod %v is given %s but the NetworkPolicy %s keeps it from the admin port %d",
		job.Spec.Template.Labels, flushjob.EnvAdminURL, np.Name, cb.Spec.Mooncake.Managed.AdminPort)
}

// When the backend stops being ready under running groups, reconcileChildren does not run, so
// no desired hash is known: the status then says a rollout is under way when none is.
func TestBackendLossIsNotReportedAsARollout(t *testing.T) {
	h := makeHCD("q").TP(4).Storage("mooncake").Replicas(2).Obj()
	r := mustResolve(t, h)
	obs := observation(t, h, "h", readyGroup(0, 1, "h", r), readyGroup(1, 1, "h", r))
	obs.backend, obs.desired = nil, map[groupKey]string{}
	obs.backendErr = &conditionError{hicachev1alpha1.ReasonBackendNotReady, `CacheBackend "mooncake" is not ready`}
	st := computeStatus(h, obs)
	if c := condsOf(st)["Progressing"]; c.Reason == hicachev1alpha1.ReasonRollingOut {
		t.Errorf("Progressing = %+v (%q) while nothing rolls; want the backend's reason", c, message(st, "Progressing"))
	}
}

// A stale namespace is flushed on the deployment's current backend. After a change of both the
// layout and spec.storage.backendRef, the old namespace lives on the old backend, where nothing
// flushes it; the flush goes to the new backend, where the namespace never existed.
func TestStaleNamespaceRemembersItsBackend(t *testing.T) {
	h := makeHCD("q").TP(4).KVDType("fp8_e4m3").Storage("new-backend").Obj()
	old := mustResolve(t, makeHCD("q").TP(4).Storage("old-backend").Obj())
	h.Status.Cache = &hicachev1alpha1.CacheStatus{LayoutHash: old.Fingerprint, ShortHash: old.ShortHash, Namespace: old.Namespace, Backend: "old-backend"}
	cs, _ := cacheStatus(h, &observed{now: t0, resolved: mustResolve(t, h)})
	if len(cs.StaleNamespaces) != 1 {
		t.Fatalf("stale namespaces %+v", cs.StaleNamespaces)
	}
	if got := cs.StaleNamespaces[0].Backend; got != "old-backend" {
		t.Errorf("namespace %s, written on old-backend, is recorded as on %q", cs.StaleNamespaces[0].Namespace, got)
	}
}

// Readiness is judged against the new group shape: after a change from one node per group to
// two, every running one-pod group counts as down. The status reports no ready group while all
// serve, and reconcileChildren, which uses the same test for its budget, rolls every group at
// once whatever spec.rollout.maxUnavailable says.
func TestGroupsOfTheOldShapeStillCountAsReady(t *testing.T) {
	old := mustResolve(t, makeHCD("d").Profile("DeepSeekV4").TP(8).Obj())
	h := makeHCD("d").Profile("DeepSeekV4").TP(16).Replicas(3).Obj() // now 2 nodes per group
	obs := observation(t, h, "new", readyGroup(0, 1, "old", old), readyGroup(1, 1, "old", old), readyGroup(2, 1, "old", old))
	var st hicachev1alpha1.HiCacheDeploymentStatus
	countGroups(h, &st, obs, 3)
	if st.ReadyReplicas != 3 {
		t.Errorf("ready groups = %d while 3 one-node groups of the old spec serve", st.ReadyReplicas)
	}
}

// A deployment without spec.sglang.image runs DefaultSGLangImage with a command line checked
// against another release (flags such as --attn-dp-size, DSPARK and the DeepSeek-V4 pools are
// not in v0.5.6); the default Mooncake image predates the admin remove_all API (0.3.12.post1).
func TestDefaultImagesMatchTheCheckedReleases(t *testing.T) {
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	if tag := DefaultSGLangImage[strings.LastIndex(DefaultSGLangImage, ":")+1:]; strings.TrimPrefix(tag, "v") != spec.Version() {
		t.Errorf("DefaultSGLangImage %s, but the command line is checked against sglang %s", DefaultSGLangImage, spec.Version())
	}
	tag := DefaultMooncakeImage[strings.LastIndex(DefaultMooncakeImage, ":")+1:]
	var major, minor, patch int
	if _, err := fmt.Sscanf(tag, "%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatalf("DefaultMooncakeImage tag %q: %v", tag, err)
	}
	if before := major == 0 && (minor < 3 || minor == 3 && patch < 12); before || tag == "0.3.12" {
		t.Errorf("DefaultMooncakeImage %s predates the master's /api/v1/remove_all (0.3.12.post1)", DefaultMooncakeImage)
	}
}
