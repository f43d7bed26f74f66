package controller

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// grant is one (API group, resource, verb) the operator holds.
type grant struct{ group, resource, verb string }

func (g grant) String() string {
	group := g.group
	if group == "" {
		group = "core"
	}
	return group + "/" + g.resource + " " + g.verb
}

// rbacUses names, for every verb the operator's roles grant, the function that makes the request
// and how. Reads through the manager's cache are the informer's list and watch of the kind (the
// kind is owned, watched, or read with Get from the cache, which starts its informer); get is
// granted beside them for the kinds the code reads with Get. Server-side apply is a patch, and a
// create where the object does not exist yet, so a kind the operator applies needs both.
// Nothing in the operator calls Update on any object or status, DeleteAllOf, or the override
// verb of the flush-override policy (that verb is for users who set spec.allowInUse).
var rbacUses = map[grant]string{
	// The three kinds of the API: read, and their status written with a merge patch.
	{"hicache.io", "hicachedeployments", "get"}:          "HiCacheDeploymentReconciler.SetupWithManager: For, and Watches for the writers of the same backend",
	{"hicache.io", "hicachedeployments", "list"}:         "HiCacheDeploymentReconciler.SetupWithManager: the informer",
	{"hicache.io", "hicachedeployments", "watch"}:        "HiCacheDeploymentReconciler.SetupWithManager: the informer",
	{"hicache.io", "cachebackends", "get"}:               "CacheBackendReconciler.SetupWithManager: For; the deployments read their backend",
	{"hicache.io", "cachebackends", "list"}:              "CacheBackendReconciler.SetupWithManager: the informer",
	{"hicache.io", "cachebackends", "watch"}:             "CacheBackendReconciler.SetupWithManager: the informer",
	{"hicache.io", "cacheflushes", "get"}:                "CacheFlushReconciler.SetupWithManager: For",
	{"hicache.io", "cacheflushes", "list"}:               "CacheFlushReconciler.claimedElsewhere: APIReader.List past the cache, and the informer",
	{"hicache.io", "cacheflushes", "watch"}:              "CacheFlushReconciler.SetupWithManager: the informer",
	{"hicache.io", "cacheflushes", "create"}:             "HiCacheDeploymentReconciler.requestFlush: Create of the flush a deployment asks for",
	{"hicache.io", "hicachedeployments/status", "patch"}: "Scope.WriteStatus: Status().Patch",
	{"hicache.io", "cachebackends/status", "patch"}:      "Scope.WriteStatus: Status().Patch",
	{"hicache.io", "cacheflushes/status", "patch"}:       "Scope.WriteStatus: Status().Patch",

	// Store grants and the EndpointSlices (metadata) of a Service an external backend names:
	// read through the cache, whose informers list and watch them.
	{"hicache.io", "clustercachestoregrants", "list"}:  "storeAuthority.Grants: List from the cache (the informer)",
	{"hicache.io", "clustercachestoregrants", "watch"}: "storeAuthority.Grants: List from the cache (the informer)",
	{"discovery.k8s.io", "endpointslices", "list"}:     "storeAuthority.Authorize: List from the cache (the informer)",
	{"discovery.k8s.io", "endpointslices", "watch"}:    "storeAuthority.Authorize: List from the cache (the informer)",

	// Pods: observed, deleted to roll or recreate a group or replace a store pod, patched with
	// the rank role labels and the master leader label.
	{"", "pods", "get"}:    "HiCacheDeploymentReconciler.podGone: Get",
	{"", "pods", "list"}:   "HiCacheDeploymentReconciler.SetupWithManager: Watches Pod",
	{"", "pods", "watch"}:  "HiCacheDeploymentReconciler.SetupWithManager: Watches Pod",
	{"", "pods", "delete"}: "HiCacheDeploymentReconciler.deletePods, CacheBackendReconciler.reconcileStores",
	{"", "pods", "patch"}:  "HiCacheDeploymentReconciler.applyRankRoles (apply), CacheBackendReconciler.labelLeader (merge patch)",

	// Secrets are read past the cache (the operator does not cache Secrets) and created when
	// the user gives none.
	{"", "secrets", "get"}:    "HiCacheDeploymentReconciler.ensureKeySecret: APIReader.Get",
	{"", "secrets", "create"}: "HiCacheDeploymentReconciler.ensureKeySecret: Create of a generated key Secret",
	{"", "secrets", "patch"}:  "HiCacheDeploymentReconciler.adoptKeySecret: the generated admin key's owner reference put back",

	{"", "configmaps", "get"}:    "HiCacheDeploymentReconciler.reconcileChildren: applier.apply reads the current one",
	{"", "configmaps", "list"}:   "HiCacheDeploymentReconciler.SetupWithManager: Owns ConfigMap",
	{"", "configmaps", "watch"}:  "HiCacheDeploymentReconciler.SetupWithManager: Owns ConfigMap",
	{"", "configmaps", "create"}: "HiCacheDeploymentReconciler.reconcileChildren: applier.apply",
	{"", "configmaps", "patch"}:  "HiCacheDeploymentReconciler.reconcileChildren: applier.apply",

	{"", "services", "get"}:    "HiCacheDeploymentReconciler.reconcileChildren: applier.apply reads the current one",
	{"", "services", "list"}:   "HiCacheDeploymentReconciler.SetupWithManager: Owns Service",
	{"", "services", "watch"}:  "HiCacheDeploymentReconciler.SetupWithManager: Owns Service",
	{"", "services", "create"}: "HiCacheDeploymentReconciler.executeGroupPlan, CacheBackendReconciler.reconcileMaster, CacheBackendReconciler.reconcileEtcd: applier.apply",
	{"", "services", "patch"}:  "HiCacheDeploymentReconciler.executeGroupPlan, CacheBackendReconciler.reconcileMaster, CacheBackendReconciler.reconcileEtcd: applier.apply",
	{"", "services", "delete"}: "HiCacheDeploymentReconciler.executeGroupPlan, CacheBackendReconciler.removeEtcd: a removed group's headless Service, the Services of an etcd a backend no longer runs",

	// The router's ServiceAccount, Role and RoleBinding: applied while spec.router is set,
	// deleted once it is not; read from the cache, which starts their informers.
	{"", "serviceaccounts", "get"}:                          "HiCacheDeploymentReconciler.reconcileRouter: Get",
	{"", "serviceaccounts", "list"}:                         "HiCacheDeploymentReconciler.reconcileRouter: the informer of the cached Get",
	{"", "serviceaccounts", "watch"}:                        "HiCacheDeploymentReconciler.reconcileRouter: the informer of the cached Get",
	{"", "serviceaccounts", "create"}:                       "HiCacheDeploymentReconciler.reconcileRouter: applier.apply",
	{"", "serviceaccounts", "patch"}:                        "HiCacheDeploymentReconciler.reconcileRouter: applier.apply",
	{"", "serviceaccounts", "delete"}:                       "HiCacheDeploymentReconciler.reconcileRouter: Delete",
	{"rbac.authorization.k8s.io", "roles", "get"}:           "HiCacheDeploymentReconciler.reconcileRouter: Get",
	{"rbac.authorization.k8s.io", "roles", "list"}:          "HiCacheDeploymentReconciler.reconcileRouter: the informer of the cached Get",
	{"rbac.authorization.k8s.io", "roles", "watch"}:         "HiCacheDeploymentReconciler.reconcileRouter: the informer of the cached Get",
	{"rbac.authorization.k8s.io", "roles", "create"}:        "HiCacheDeploymentReconciler.reconcileRouter: applier.apply",
	{"rbac.authorization.k8s.io", "roles", "patch"}:         "HiCacheDeploymentReconciler.reconcileRouter: applier.apply",
	{"rbac.authorization.k8s.io", "roles", "delete"}:        "HiCacheDeploymentReconciler.reconcileRouter: Delete",
	{"rbac.authorization.k8s.io", "rolebindings", "get"}:    "HiCacheDeploymentReconciler.reconcileRouter: Get",
	{"rbac.authorization.k8s.io", "rolebindings", "list"}:   "HiCacheDeploymentReconciler.reconcileRouter: the informer of the cached Get",
	{"rbac.authorization.k8s.io", "rolebindings", "watch"}:  "HiCacheDeploymentReconciler.reconcileRouter: the informer of the cached Get",
	{"rbac.authorization.k8s.io", "rolebindings", "create"}: "HiCacheDeploymentReconciler.reconcileRouter: applier.apply",
	{"rbac.authorization.k8s.io", "rolebindings", "patch"}:  "HiCacheDeploymentReconciler.reconcileRouter: applier.apply",
	{"rbac.authorization.k8s.io", "rolebindings", "delete"}: "HiCacheDeploymentReconciler.reconcileRouter: Delete",

	{"apps", "deployments", "get"}:    "CacheBackendReconciler.reconcileMaster: applier.apply reads the current one",
	{"apps", "deployments", "list"}:   "CacheBackendReconciler.SetupWithManager: Owns Deployment",
	{"apps", "deployments", "watch"}:  "CacheBackendReconciler.SetupWithManager: Owns Deployment",
	{"apps", "deployments", "create"}: "CacheBackendReconciler.reconcileMaster, HiCacheDeploymentReconciler.reconcileRouter: applier.apply",
	{"apps", "deployments", "patch"}:  "CacheBackendReconciler.reconcileMaster, HiCacheDeploymentReconciler.reconcileRouter: applier.apply",
	{"apps", "deployments", "delete"}: "CacheBackendReconciler.removeLegacyStoreDeployment, HiCacheDeploymentReconciler.reconcileRouter",

	{"apps", "statefulsets", "get"}:    "HiCacheDeploymentReconciler.executeGroupPlan: applier.apply reads the current one",
	{"apps", "statefulsets", "list"}:   "HiCacheDeploymentReconciler.SetupWithManager: Owns StatefulSet",
	{"apps", "statefulsets", "watch"}:  "HiCacheDeploymentReconciler.SetupWithManager: Owns StatefulSet",
	{"apps", "statefulsets", "create"}: "HiCacheDeploymentReconciler.executeGroupPlan, CacheBackendReconciler.reconcileStores, CacheBackendReconciler.reconcileEtcd: applier.apply",
	{"apps", "statefulsets", "patch"}:  "HiCacheDeploymentReconciler.executeGroupPlan (apply), HiCacheDeploymentReconciler.setGroupAnnotations (merge patch)",
	{"apps", "statefulsets", "delete"}: "HiCacheDeploymentReconciler.executeGroupPlan, CacheBackendReconciler.removeEtcd: a removed or recreated group, an etcd a backend no longer runs",

	{"batch", "jobs", "get"}:    "JobFlusher.FlushNamespace: Get of the namespace's flush Job",
	{"batch", "jobs", "list"}:   "CacheFlushReconciler.SetupWithManager: Owns Job; CacheFlushReconciler.cleanupJobs lists them",
	{"batch", "jobs", "watch"}:  "CacheFlushReconciler.SetupWithManager: Owns Job",
	{"batch", "jobs", "create"}: "JobFlusher.FlushNamespace: applier.apply",
	{"batch", "jobs", "patch"}:  "JobFlusher.FlushNamespace: applier.apply",
	{"batch", "jobs", "delete"}: "CacheFlushReconciler.cleanupJobs",

	{"admissionregistration.k8s.io", "validatingadmissionpolicies", "list"}:       "CacheFlushReconciler.checkInUse: lookupOverridePolicy lists them past the cache",
	{"admissionregistration.k8s.io", "validatingadmissionpolicybindings", "list"}: "CacheFlushReconciler.checkInUse: lookupOverridePolicy lists them past the cache",
	{"networking.k8s.io", "networkpolicies", "get"}:                               "HiCacheDeploymentReconciler.reconcileChildren: applier.apply reads the current one",
	{"networking.k8s.io", "networkpolicies", "list"}:                              "HiCacheDeploymentReconciler.SetupWithManager: Owns NetworkPolicy",
	{"networking.k8s.io", "networkpolicies", "watch"}:                             "HiCacheDeploymentReconciler.SetupWithManager: Owns NetworkPolicy",
	{"networking.k8s.io", "networkpolicies", "create"}:                            "HiCacheDeploymentReconciler.reconcileChildren, CacheBackendReconciler.reconcileMaster, CacheBackendReconciler.reconcileEtcd: applier.apply",
	{"networking.k8s.io", "networkpolicies", "patch"}:                             "HiCacheDeploymentReconciler.reconcileChildren, CacheBackendReconciler.reconcileMaster, CacheBackendReconciler.reconcileEtcd: applier.apply",
	{"networking.k8s.io", "networkpolicies", "delete"}:                            "HiCacheDeploymentReconciler.executeGroupPlan, CacheBackendReconciler.removeEtcd: a removed group's policy, the policy of an etcd a backend no longer runs",

	// The events recorder of every controller creates an event and patches its series.
	{"events.k8s.io", "events", "create"}: "Setup: mgr.GetEventRecorder",
	{"events.k8s.io", "events", "patch"}:  "Setup: mgr.GetEventRecorder",
}

// leaderElectionUses is the same for the namespaced leader-election Role: client-go's Lease lock
// reads, creates and renews (updates) the Lease, and the leader-election recorder writes core
// events.
var leaderElectionUses = map[grant]string{
	{"coordination.k8s.io", "leases", "get"}:    "main: LeaderElection (the Lease lock's Get)",
	{"coordination.k8s.io", "leases", "create"}: "main: LeaderElection (the Lease lock's Create)",
	{"coordination.k8s.io", "leases", "update"}: "main: LeaderElection (the Lease lock's Update, renewal and release)",
	{"", "events", "create"}:                    "main: LeaderElection (its recorder)",
	{"", "events", "patch"}:                     "main: LeaderElection (its recorder)",
	// The manager's own events, granted also in the release namespace.
	{"events.k8s.io", "events", "create"}: "Setup: mgr.GetEventRecorder",
	{"events.k8s.io", "events", "patch"}:  "Setup: mgr.GetEventRecorder",
}

// TestRBACGrantsOnlyWhatIsUsed checks the generated ClusterRole and the leader-election Role
// against the tables above: a verb granted that no table names is one nothing uses (remove its
// +kubebuilder:rbac marker), and a table row the role lacks is a request the API server would
// refuse. Each row's function must exist, so that a rename or removal makes the row stale here.
func TestRBACGrantsOnlyWhatIsUsed(t *testing.T) {
	funcs := declaredFuncs(t, ".", "cachebackend", "cacheflush", "hicachedeployment", "reconcile", "storeuse", filepath.Join("..", "..", "cmd", "manager"))
	for _, c := range []struct {
		file string
		uses map[grant]string
	}{
		{filepath.Join("..", "..", "config", "rbac", "role.yaml"), rbacUses},
		{filepath.Join("..", "..", "config", "rbac", "leader_election_role.yaml"), leaderElectionUses},
	} {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			granted := grantsOf(t, c.file)
			var unused, missing []string
			for _, g := range granted {
				if _, ok := c.uses[g]; !ok {
					unused = append(unused, g.String())
				}
			}
			for g, use := range c.uses {
				if !slices.Contains(granted, g) {
					missing = append(missing, g.String())
				}
				for _, name := range usedFuncs(use) {
					if !funcs[name] {
						t.Errorf("%s: the table names %s, which is not declared in the operator", g, name)
					}
				}
			}
			slices.Sort(unused)
			slices.Sort(missing)
			if len(unused) > 0 {
				t.Errorf("%s grants verbs nothing in the operator uses (remove them from the +kubebuilder:rbac markers, or name the function that uses them here): %s",
					c.file, strings.Join(unused, ", "))
			}
			if len(missing) > 0 {
				t.Errorf("%s lacks verbs the operator uses: %s", c.file, strings.Join(missing, ", "))
			}
		})
	}
}

// TestRBACChartLeaderElectionRole checks that the chart's leader-election Role grants what
// config/rbac/leader_election_role.yaml does (the chart's copy is written by hand).
func TestRBACChartLeaderElectionRole(t *testing.T) {
	want := grantsOf(t, filepath.Join("..", "..", "config", "rbac", "leader_election_role.yaml"))
	b, err := os.ReadFile(filepath.Join("..", "..", "charts", "hicache-operator", "templates", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if !strings.Contains(doc, "kind: Role\n") || !strings.Contains(doc, "-leader-election") {
			continue
		}
		var lines []string
		for _, l := range strings.Split(doc, "\n") {
			if !strings.Contains(l, "{{") {
				lines = append(lines, l)
			}
		}
		got := grantsOfYAML(t, []byte(strings.Join(lines, "\n")))
		slices.SortFunc(got, compareGrants)
		slices.SortFunc(want, compareGrants)
		if !slices.Equal(got, want) {
			t.Errorf("the chart's leader-election Role grants %v, config/rbac/leader_election_role.yaml %v", got, want)
		}
		return
	}
	t.Fatal("no leader-election Role in the chart's templates/rbac.yaml")
}

func compareGrants(a, b grant) int { return strings.Compare(a.String(), b.String()) }

func grantsOf(t *testing.T, file string) []grant {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return grantsOfYAML(t, b)
}

func grantsOfYAML(t *testing.T, b []byte) []grant {
	t.Helper()
	var role rbacv1.ClusterRole // a Role's rules have the same shape
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) == 0 {
		t.Fatal("no rules")
	}
	var out []grant
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Fatalf("rule %v: this test knows only rules by group, resource and verb", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, grant{g, res, v})
				}
			}
		}
	}
	return out
}

// usedFuncs is the function names a use names: the comma-separated "Type.method" or "func"
// before its first colon, each up to a space or parenthesis.
func usedFuncs(use string) []string {
	if i := strings.Index(use, ":"); i >= 0 {
		use = use[:i]
	}
	var names []string
	for _, part := range strings.Split(use, ",") {
		name := strings.TrimSpace(part)
		if i := strings.IndexAny(name, "( "); i >= 0 {
			name = name[:i]
		}
		names = append(names, name)
	}
	return names
}

// declaredFuncs is every function and method declared in the Go packages in dirs, as "name" and
// "Type.name".
func declaredFuncs(t *testing.T, dirs ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range file.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					name = fmt.Sprintf("%s.%s", recvType(fd.Recv.List[0].Type), name)
				}
				out[name] = true
			}
		}
	}
	return out
}

func recvType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvType(x.X)
	case *ast.IndexExpr:
		return recvType(x.X)
	case *ast.IndexListExpr:
		return recvType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return fmt.Sprintf("%T", e)
}
