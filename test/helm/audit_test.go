package helm

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// notInTheInstallFlow are the grants the install flow (an external CacheBackend and the sample
// HiCacheDeployment brought to Ready) does not make the operator request, each with why it is
// still needed. A verb granted that is neither requested in the flow nor listed here fails the
// test. internal/controller/rbac_test.go names the function behind every grant.
var notInTheInstallFlow = map[string]string{
	// Reads go through the manager's cache: the API server sees the informer's list and watch,
	// never a get, for every kind the code reads with Get from the cache.
	"get configmaps": "cached Get", "get services": "cached Get", "get statefulsets": "cached Get",
	"get deployments": "cached Get", "get jobs": "cached Get", "get networkpolicies": "cached Get",
	"get pods": "cached Get", "get serviceaccounts": "cached Get", "get roles": "cached Get",
	"get rolebindings": "cached Get", "get hicache.io/hicachedeployments": "cached Get",
	"get hicache.io/cachebackends": "cached Get", "get hicache.io/cacheflushes": "cached Get",
	// Server-side apply of an object that does not exist yet is audited as a patch, and the API
	// server authorizes it as create as well.
	"create configmaps": "apply of a new object", "create services": "apply of a new object",
	"create statefulsets": "apply of a new object", "create networkpolicies": "apply of a new object",
	"create deployments": "apply of a new object (the master's, the router's)", "create serviceaccounts": "apply of a new object (the router's)",
	"create roles": "apply of a new object (the router's)", "create rolebindings": "apply of a new object (the router's)",
	"create jobs": "apply of a new object (a flush Job)",
	// spec.router is not set in the sample (the operator still watches the router's kinds: it
	// looks for a router to remove).
	"patch serviceaccounts": "the router", "delete serviceaccounts": "the router removed",
	"patch roles": "the router", "delete roles": "the router removed",
	"patch rolebindings": "the router", "delete rolebindings": "the router removed",
	// The backend is external: no master Deployment, no store StatefulSet.
	"patch deployments": "a managed master", "delete deployments": "the router removed, or a store's old Deployment",
	// Nothing is flushed.
	"patch jobs":                           "a flush Job",
	"delete jobs":                          "a finished flush Job",
	"create hicache.io/cacheflushes":       "a deployment that asks for a flush",
	"patch hicache.io/cacheflushes/status": "a flush",
	// Nothing is removed, rolled or recreated, and no master leader is elected.
	"delete pods":                "a roll, a recreated group or a replaced store pod",
	"delete statefulsets":        "a removed or recreated group",
	"delete services":            "a removed group",
	"delete networkpolicies":     "a removed group",
	"patch pods":                 "rank role labels that differ, or the master leader label",
	"patch secrets":              "the generated admin key's Secret stripped of its owner reference",
	"patch events.k8s.io/events": "the series of a repeated event",
	"patch events":               "the series of a repeated leader-election event",
	// The manager looks for the override policy at its start and every 30 s: a watch of
	// namespaces cannot (a Role does not grant cluster-scoped kinds), and the flow may end first.
	"list admissionregistration.k8s.io/validatingadmissionpolicies":       "the override policy's look-up",
	"list admissionregistration.k8s.io/validatingadmissionpolicybindings": "the override policy's look-up",
	// The EndpointSlices of a Service an external backend names (the flow's names a loopback
	// master), and the grants, which a manager watching namespaces does not read.
	"list discovery.k8s.io/endpointslices":     "an external backend naming a Service of its namespace",
	"watch discovery.k8s.io/endpointslices":    "an external backend naming a Service of its namespace",
	"list hicache.io/clustercachestoregrants":  "a manager reading grant objects (not with watchNamespaces)",
	"watch hicache.io/clustercachestoregrants": "a manager reading grant objects (not with watchNamespaces)",
}

// auditedRequest is the part of an audit event this test reads.
type auditedRequest struct {
	Verb             string `json:"verb"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
	} `json:"objectRef"`
}

// requestsOf reads the API server's audit log and returns the requests user made of resources
// (discovery and other non-resource requests left out).
func requestsOf(t *testing.T, auditLog, user string) []auditedRequest {
	t.Helper()
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatalf("the API server's audit log: %v", err)
	}
	defer f.Close()
	var out []auditedRequest
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditedRequest
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("an audit event: %v", err)
		}
		if e.ImpersonatedUser != nil && e.ImpersonatedUser.Username == user && e.ObjectRef != nil {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkRequestsIn fails the test for every request of user, in the audit log, of a
// cluster-scoped resource or of a namespace not in namespaces.
func checkRequestsIn(t *testing.T, auditLog, user string, namespaces ...string) {
	t.Helper()
	requests := requestsOf(t, auditLog, user)
	if len(requests) == 0 {
		t.Fatalf("the audit log %s holds no request of %s", auditLog, user)
	}
	byNamespace := map[string]int{}
	outside := map[string]int{}
	for _, e := range requests {
		ns := e.ObjectRef.Namespace
		byNamespace[ns]++
		if !slices.Contains(namespaces, ns) {
			where := "cluster-wide"
			if ns != "" {
				where = "in namespace " + ns
			}
			outside[grantKey(e.Verb, e.ObjectRef.APIGroup, e.ObjectRef.Resource)+" "+where]++
		}
	}
	t.Logf("requests of the operator by namespace: %v", byNamespace)
	if len(outside) > 0 {
		t.Errorf("the operator, watching %v, made requests outside them: %v", namespaces, outside)
	}
}

// grantKey is "verb resource" for the core group and "verb group/resource[/subresource]"
// otherwise, with the group's short forms for the built-in kinds this operator writes.
func grantKey(verb, group, resource string) string {
	switch group {
	case "", "apps", "batch", "networking.k8s.io", "rbac.authorization.k8s.io", "coordination.k8s.io":
		return verb + " " + resource
	}
	return verb + " " + group + "/" + resource
}

// checkEveryGrantRequested reads the API server's audit log and fails the test for every verb
// the chart's ClusterRole and leader-election Role grant that user never requested in the flow
// and that notInTheInstallFlow does not explain.
func checkEveryGrantRequested(t *testing.T, auditLog, user string) {
	t.Helper()
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatalf("the API server's audit log: %v", err)
	}
	defer f.Close()
	requested := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	events, size := 0, 0
	for sc.Scan() {
		events++
		size += len(sc.Bytes()) + 1
		var e auditedRequest
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("an audit event: %v", err)
		}
		if e.ImpersonatedUser == nil || e.ImpersonatedUser.Username != user || e.ObjectRef == nil {
			continue
		}
		res := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			res += "/" + e.ObjectRef.Subresource
		}
		requested[grantKey(e.Verb, e.ObjectRef.APIGroup, res)]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(requested) == 0 {
		t.Fatalf("the audit log %s holds no request of %s", auditLog, user)
	}
	var unused, stale []string
	for _, file := range []string{"role.yaml", "leader_election_role.yaml"} {
		for _, g := range roleGrants(t, filepath.Join("..", "..", "config", "rbac", file)) {
			_, explained := notInTheInstallFlow[g]
			if verb, res, _ := strings.Cut(g, " "); verb == "list" && requested["watch "+res] > 0 {
				// The informers list with a streaming watch (the API server sees watch); list is
				// what they fall back to where the API server streams no lists.
				explained = true
			}
			switch {
			case requested[g] == 0 && !explained:
				unused = append(unused, g)
			case requested[g] > 0 && notInTheInstallFlow[g] != "":
				stale = append(stale, g)
			}
		}
	}
	slices.Sort(unused)
	slices.Sort(stale)
	t.Logf("audit log: %d events, %d KiB; requests of the operator by verb and resource: %v", events, size>>10, requested)
	if len(stale) > 0 {
		t.Logf("requested in this run although listed as outside the install flow: %s", strings.Join(stale, ", "))
	}
	if len(unused) > 0 {
		t.Errorf("the operator's RBAC grants verbs it never requested and nothing explains: %s; "+
			"remove their +kubebuilder:rbac markers, or say in notInTheInstallFlow which path requests them",
			strings.Join(unused, ", "))
	}
}

func roleGrants(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, grantKey(v, g, res))
				}
			}
		}
	}
	return out
}
