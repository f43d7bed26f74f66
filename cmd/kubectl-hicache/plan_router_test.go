package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// withRouterDoc is a sample file with its spec.router replaced by router (the YAML flow mapping
// of the field; "" leaves the deployment without a router), so the tests follow the sample rather
// than a copy of it.
func withRouterDoc(t *testing.T, file, router string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inRouter := false
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case strings.HasPrefix(line, "  router:"):
			inRouter = true
			continue
		case inRouter && (strings.TrimSpace(line) == "" || indent > 2):
			continue
		}
		inRouter = false
		out = append(out, line)
	}
	if router != "" {
		out = append(out, "  router: "+router)
	}
	return strings.Join(out, "\n") + "\n"
}

// TestPlanShowsTheRouter: with spec.router, plan shows the router's mode, the servers each of its
// selectors discovers and its command line, which the pinned router's argument table accepts.
func TestPlanShowsTheRouter(t *testing.T) {
	spec, err := router.Spec()
	if err != nil {
		t.Fatal(err)
	}
	type workers struct {
		role, policy string
		groups       []string
	}
	for name, tc := range map[string]struct {
		file, router string // router "" plans the file as it is
		mode         string
		workers      []workers
		flags        []string // on the command line
	}{
		"the PD sample as shipped": {
			file: pdSample, mode: "prefill/decode",
			workers: []workers{{"prefill", "cache_aware", []string{"deepseek-v4-pd-prefill-0", "deepseek-v4-pd-prefill-1"}},
				{"decode", "cache_aware", []string{"deepseek-v4-pd-decode-0"}}},
			flags: []string{"--pd-disaggregation", "--prefill-selector", "--decode-selector", "--policy"},
		},
		"prefill/decode, one policy for both": {
			file: pdSample, router: "{replicas: 2}", mode: "prefill/decode",
			workers: []workers{{"prefill", "cache_aware", []string{"deepseek-v4-pd-prefill-0", "deepseek-v4-pd-prefill-1"}},
				{"decode", "cache_aware", []string{"deepseek-v4-pd-decode-0"}}},
			flags: []string{"--pd-disaggregation", "--prefill-selector", "--decode-selector", "--policy"},
		},
		"prefill/decode, a decode policy of its own": {
			file: pdSample, router: "{decodePolicy: power_of_two}", mode: "prefill/decode",
			workers: []workers{{"prefill", "cache_aware", []string{"deepseek-v4-pd-prefill-0", "deepseek-v4-pd-prefill-1"}},
				{"decode", "power_of_two", []string{"deepseek-v4-pd-decode-0"}}},
			flags: []string{"--pd-disaggregation", "--decode-policy"},
		},
		"regular": {
			file: sample("qwen3"), router: "{policy: round_robin}", mode: "regular",
			workers: []workers{{"", "round_robin", []string{"qwen3-0"}}},
			flags:   []string{"--selector", "--policy"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := tc.file
			if tc.router != "" {
				path = writeFile(t, "hcd.yaml", withRouterDoc(t, tc.file, tc.router))
			}
			r := planOf(t, "-f", path).Deployments[0].Router
			if r == nil {
				t.Fatal("plan -o json shows no router")
			}
			if r.Mode != tc.mode || r.Namespace != defaultNamespace || r.Release != "smg 1.13.0" {
				t.Errorf("router %s mode in %s, checked against %q; want %s mode in %s, smg 1.13.0", r.Mode, r.Namespace, r.Release, tc.mode, defaultNamespace)
			}
			var got []workers
			for _, w := range r.Workers {
				got = append(got, workers{w.Role, w.Policy, w.Groups})
			}
			if diff := cmp.Diff(tc.workers, got, cmp.AllowUnexported(workers{})); diff != "" {
				t.Errorf("workers (-want +got):\n%s", diff)
			}
			if !slices.Equal(r.Command[:len(router.Command())], router.Command()) {
				t.Fatalf("command %q does not start with %q", r.Command, router.Command())
			}
			args := r.Command[len(router.Command()):]
			if err := spec.Validate(args); err != nil {
				t.Errorf("the pinned router refuses the command line plan shows: %v", err)
			}
			for _, f := range tc.flags {
				if !slices.Contains(args, f) {
					t.Errorf("the router's command line lacks %s: %q", f, args)
				}
			}
			table := runPlugin(t, "", "plan", "-f", path).mustSucceed(t).stdout
			for _, want := range []string{"Router: Deployment " + r.Deployment, tc.mode + " mode", "Router command line (accepted by smg 1.13.0's argument definitions)", "python3 -m smg.launch_router"} {
				if !strings.Contains(table, want) {
					t.Errorf("plan output lacks %q:\n%s", want, table)
				}
			}
		})
	}
}

// TestPlanRouterRefusals: a router the API server would refuse is refused by plan with the field.
func TestPlanRouterRefusals(t *testing.T) {
	res := runPlugin(t, withRouterDoc(t, sample("qwen3"), "{prefillPolicy: bucket}"), "plan", "-f", "-")
	if res.code == 0 || !strings.Contains(res.stderr, "spec.router.prefillPolicy and spec.router.decodePolicy choose the servers of one role and apply only with spec.roles") {
		t.Fatalf("exit %d, stderr %q; want a refusal naming spec.router.prefillPolicy", res.code, res.stderr)
	}
}

// TestPlanWithoutRouterSaysClientsReachNoServer: a deployment with roles and no router is told
// that its client Service has nothing behind it; the PD sample, which has its router, is not.
func TestPlanWithoutRouterSaysClientsReachNoServer(t *testing.T) {
	table := runPlugin(t, withRouterDoc(t, pdSample, ""), "plan", "-f", "-").mustSucceed(t).stdout
	if !strings.Contains(table, "Router: none (spec.router is not set)") || !strings.Contains(table, "set spec.router") {
		t.Errorf("plan output does not say the router is missing:\n%s", table)
	}
	if table := runPlugin(t, "", "plan", "-f", pdSample).mustSucceed(t).stdout; strings.Contains(table, "Router: none") {
		t.Errorf("plan output of the PD sample says it has no router:\n%s", table)
	}
	if table := runPlugin(t, "", "plan", "-f", sample("qwen3")).mustSucceed(t).stdout; strings.Contains(table, "Router") {
		t.Errorf("plan output of a deployment without roles or router speaks of a router:\n%s", table)
	}
}

// TestPlanRouterAgreesWithTheController: the router command line plan shows is the one the
// operator runs, and each of its selectors, evaluated by Kubernetes' selector code over the pods
// of the StatefulSets the operator renders, chooses pod 0 of exactly the groups plan names, and
// no follower.
func TestPlanRouterAgreesWithTheController(t *testing.T) {
	for name, doc := range map[string]string{
		"prefill/decode": withRouterDoc(t, pdSample, "{prefillPolicy: bucket}"),
		"regular":        withRouterDoc(t, sample("qwen3"), "{}"),
	} {
		t.Run(name, func(t *testing.T) {
			items, err := loadDeployments(source{name: writeFile(t, "hcd.yaml", doc)})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := planOne(items[0])
			if err != nil {
				t.Fatal(err)
			}
			h := items[0].hcd
			h.Namespace = defaultNamespace
			objs, err := hicachedeployment.BuildRouter(h, storeuse.DefaultRouterImage)
			if err != nil {
				t.Fatal(err)
			}
			c := objs.Deployment.Spec.Template.Spec.Containers[0]
			if got := append(slices.Clone(c.Command), c.Args...); !slices.Equal(got, rep.Router.Command) {
				t.Errorf("the operator's router runs\n  %q\nplan shows\n  %q", got, rep.Router.Command)
			}
			if objs.Deployment.Name != rep.Router.Deployment || *objs.Deployment.Spec.Replicas != rep.Router.Replicas {
				t.Errorf("the operator runs %s × %d, plan shows %s × %d", objs.Deployment.Name, *objs.Deployment.Spec.Replicas, rep.Router.Deployment, rep.Router.Replicas)
			}
			sets, err := hicachedeployment.RenderServingGroups(h, planBackend(), "sglang:test")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range rep.Router.Workers {
				sel, err := labels.Parse(w.Selector)
				if err != nil {
					t.Fatalf("selector %q: %v", w.Selector, err)
				}
				var chosen []string
				for _, sts := range sets {
					for _, index := range []string{"0", "1"} {
						if sel.Matches(labels.Merge(sts.Spec.Template.Labels, labels.Set{appsv1.PodIndexLabel: index})) {
							chosen = append(chosen, sts.Name+"/pod "+index)
						}
					}
				}
				var want []string
				for _, g := range w.Groups {
					want = append(want, g+"/pod 0")
				}
				if !slices.Equal(chosen, want) {
					t.Errorf("the %q selector %s chooses %v of the rendered groups; plan names %v", w.Role, w.Selector, chosen, w.Groups)
				}
			}
		})
	}
}

// The text of plan -f for the PD sample as shipped, its router included, is pinned by a golden
// file (-update rewrites it).
func TestPlanRouterGolden(t *testing.T) {
	got := runPlugin(t, "", "plan", "-f", pdSample).mustSucceed(t).stdout
	testutil.CompareGolden(t, filepath.Join("testdata", "plan_pd_router.golden"), []byte(got), *update)
}
