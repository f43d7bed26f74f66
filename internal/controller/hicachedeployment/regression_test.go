package hicachedeployment

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// A variable the operator sets and the user sets again appears twice in the container's env,
// which server-side apply refuses ("duplicate entries for key [name=...]") with a message that
// does not name spec.template.env.
func TestUserEnvDoesNotDuplicateOperatorEnv(t *testing.T) {
	for _, name := range []string{"POD_IP", "NODE_RANK", "MOONCAKE_MASTER", "MOONCAKE_PROTOCOL"} {
		t.Run(name, func(t *testing.T) {
			h := testsupport.MakeHCD("q").TP(4).Storage("mooncake").Env(name, "user-value").Obj()
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
			h := testsupport.MakeHCD("q").TP(4).Obj()
			h.Name = name
			if _, err := resolve.Resolve(h); err != nil {
				return // refused with a message: fine
			}
			var problems []string
			if errs := validation.IsDNS1035Label(BuildClientService(h).Name); len(errs) > 0 {
				problems = append(problems, "client Service: "+strings.Join(errs, "; "))
			}
			if errs := validation.IsDNS1035Label(buildHeadlessService(h, GroupKey{}).Name); len(errs) > 0 {
				problems = append(problems, "headless Service: "+strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(groupName(name, GroupKey{}) + "-0123456789"); len(errs) > 0 {
				problems = append(problems, "controller-revision-hash label: "+strings.Join(errs, "; "))
			}
			if len(problems) > 0 {
				t.Errorf("name %q resolves, but the API server refuses:\n%s", name, strings.Join(problems, "\n"))
			}
		})
	}
}

// When the backend stops being ready under running groups, reconcileChildren does not run, so
// no desired hash is known: the status then says a rollout is under way when none is.
func TestBackendLossIsNotReportedAsARollout(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Storage("mooncake").Replicas(2).Obj()
	r := testsupport.MustResolve(t, h)
	obs := observation(t, h, "h", readyGroup(0, 1, "h", r), readyGroup(1, 1, "h", r))
	obs.backend, obs.desired = nil, map[GroupKey]string{}
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
	h := testsupport.MakeHCD("q").TP(4).KVDType("fp8_e4m3").Storage("new-backend").Obj()
	old := testsupport.MustResolve(t, testsupport.MakeHCD("q").TP(4).Storage("old-backend").Obj())
	h.Status.Cache = &hicachev1alpha1.CacheStatus{LayoutHash: old.Fingerprint, ShortHash: old.ShortHash, Namespace: old.Namespace, Backend: "old-backend"}
	cs, _ := cacheStatus(h, &observed{now: testsupport.T0, resolved: testsupport.MustResolve(t, h)})
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
	old := testsupport.MustResolve(t, testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(8).Obj())
	h := testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Replicas(3).Obj() // now 2 nodes per group
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
	if tag := storeuse.DefaultSGLangImage[strings.LastIndex(storeuse.DefaultSGLangImage, ":")+1:]; strings.TrimPrefix(tag, "v") != spec.Version() {
		t.Errorf("DefaultSGLangImage %s, but the command line is checked against sglang %s", storeuse.DefaultSGLangImage, spec.Version())
	}
	tag := storeuse.DefaultMooncakeImage[strings.LastIndex(storeuse.DefaultMooncakeImage, ":")+1:]
	var major, minor, patch int
	if _, err := fmt.Sscanf(tag, "%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatalf("DefaultMooncakeImage tag %q: %v", tag, err)
	}
	if before := major == 0 && (minor < 3 || minor == 3 && patch < 12); before || tag == "0.3.12" {
		t.Errorf("DefaultMooncakeImage %s predates the master's /api/v1/remove_all (0.3.12.post1)", storeuse.DefaultMooncakeImage)
	}
}
