package crdvalidation

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

func admit(t *testing.T, doc string) (map[string]any, field.ErrorList) {
	t.Helper()
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	out, errs, err := v.Admit(context.Background(), obj, "default")
	if err != nil {
		t.Fatal(err)
	}
	return out, errs
}

// TestSamplesAreAdmitted admits every sample of config/samples: the embedded CRDs accept them.
func TestSamplesAreAdmitted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testutil.SamplesDir(), "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			if _, errs := admit(t, doc); len(errs) > 0 {
				t.Errorf("%s: refused: %s", filepath.Base(f), Message(errs))
			}
			seen++
		}
	}
	if seen < 6 {
		t.Fatalf("admitted %d samples, want at least 6", seen)
	}
}

// TestDefaultsAreFilledIn checks the defaults the integration suite sees the API server fill in.
func TestDefaultsAreFilledIn(t *testing.T) {
	got, errs := admit(t, `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: defaults}
spec:
  model: {path: Qwen/Qwen3-8B, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
  storage: {backendRef: {name: mooncake}}
status: {replicas: 3}
`)
	if len(errs) > 0 {
		t.Fatal(Message(errs))
	}
	want := map[string]any{
		"model":    map[string]any{"path": "Qwen/Qwen3-8B", "revision": "0123456789abcdef0123456789abcdef01234567"},
		"profile":  "Qwen3",
		"replicas": int64(1),
		"topology": map[string]any{"tensorParallel": int64(1), "pipelineParallel": int64(1), "dataParallel": int64(1), "gpusPerNode": int64(8)},
		"hicache":  map[string]any{},
		"rollout":  map[string]any{"maxUnavailable": int64(1)},
		"storage":  map[string]any{"backendRef": map[string]any{"name": "mooncake"}, "namespaceStrategy": "LayoutHash", "flushPolicy": "Auto", "protocol": "tcp"},
	}
	if diff := cmp.Diff(want, got["spec"]); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}
	if _, ok := got["status"]; ok {
		t.Errorf("status kept on create: %v", got["status"])
	}
	if ns := got["metadata"].(map[string]any)["namespace"]; ns != "default" {
		t.Errorf("namespace %v, want the request's (default)", ns)
	}
}

// TestRefusals checks a rule of each layer the server runs: schema, metadata, CEL.
func TestRefusals(t *testing.T) {
	base := `apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: f}
spec: {backendRef: {name: mooncake}, scope: Namespace, namespace: hc-1}
`
	cases := map[string]struct {
		doc, want string
	}{
		"accepted":     {doc: base},
		"enum":         {doc: strings.Replace(base, "scope: Namespace", "scope: Some", 1), want: `spec.scope: Unsupported value: "Some"`},
		"cel":          {doc: strings.Replace(base, ", namespace: hc-1", "", 1), want: "spec.namespace (the key prefix to remove) is required when scope is Namespace"},
		"metadata":     {doc: strings.Replace(base, "name: f}", "name: F_}", 1), want: `metadata.name: Invalid value: "F_": a lowercase RFC 1123 subdomain`},
		"missing name": {doc: strings.Replace(base, "name: f}", "labels: {a: b}}", 1), want: "metadata.name: Required value: name or generateName is required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, errs := admit(t, tc.doc)
			got := Message(errs)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUnknownKind(t *testing.T) {
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = v.Admit(context.Background(), map[string]any{"apiVersion": "v1", "kind": "Pod"}, "")
	if err == nil || !strings.Contains(err.Error(), "no CustomResourceDefinition serves /v1, Kind=Pod") {
		t.Errorf("got %v", err)
	}
}

// TestHubModelsNameACommit admits the model rules offline as the API server does: a hub model
// (a hub source, or a spec.model.path that is not absolute) and a hub draft (a
// spec.topology.draft.modelPath that is not absolute) name a 40-character commit. The resolver
// agrees on every case: what kubectl apply refuses it refuses for the same field, what kubectl
// apply admits it resolves.
func TestHubModelsNameACommit(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	const hubModel = "{path: Qwen/Qwen3-8B, revision: " + commit + "}"
	doc := func(model, draft string) string {
		d := "apiVersion: hicache.io/v1alpha1\nkind: HiCacheDeployment\nmetadata: {name: m, namespace: default}\nspec:\n  profile: Qwen3\n  model: " + model + "\n"
		if draft != "" {
			d += "  topology: {draft: " + draft + "}\n"
		}
		return d
	}
	cases := map[string]struct{ model, draft, field, want string }{
		"a hub id at a commit":         {model: hubModel},
		"an absolute path":             {model: "{path: /opt/weights/qwen3}"},
		"a hub source at a commit":     {model: "{revision: " + commit + ", source: {hub: {repo: Qwen/Qwen3-8B}}}"},
		"a claim with a free revision": {model: "{revision: r1, servedName: q, source: {pvc: {claimName: w}}}"},
		"a hub id at main": {model: "{path: Qwen/Qwen3-8B, revision: main}", field: "spec.model.revision",
			want: "spec.model.revision must be a commit (40 lowercase hex characters) when spec.model.path is a hub id (not an absolute path)"},
		"a hub id without a revision": {model: "{path: Qwen/Qwen3-8B}", field: "spec.model.revision",
			want: "spec.model.revision must be a commit (40 lowercase hex characters) when spec.model.path is a hub id"},
		"a hub id at an upper-case commit": {model: "{path: Qwen/Qwen3-8B, revision: " + strings.ToUpper(commit) + "}", field: "spec.model.revision",
			want: "spec.model.revision must be a commit"},
		"a hub id at a short commit": {model: "{path: Qwen/Qwen3-8B, revision: '" + commit[:7] + "'}", field: "spec.model.revision",
			want: "spec.model.revision must be a commit"},
		"a relative path": {model: "{path: models/qwen3, revision: v2}", field: "spec.model.revision",
			want: "or serve a local path (an absolute one, or spec.model.source)"},
		"a hub source at a tag": {model: "{revision: v1.0, source: {hub: {repo: Qwen/Qwen3-8B}}}", field: "spec.model.revision",
			want: "spec.model.revision must be a commit (40 lowercase hex characters) with a hub source"},
		"a hub source without a revision": {model: "{source: {hub: {repo: Qwen/Qwen3-8B}}}", field: "spec.model.revision",
			want: "so ranks started before and after the move would write two layouts under one L3 namespace; pin the commit"},
		"a hub draft at a commit":            {model: hubModel, draft: "{algorithm: EAGLE3, modelPath: org/draft, revision: " + commit + "}"},
		"a local draft":                      {model: hubModel, draft: "{algorithm: EAGLE3, modelPath: /drafts/eagle3}"},
		"a local draft with a free revision": {model: hubModel, draft: "{algorithm: EAGLE3, modelPath: /drafts/eagle3, revision: r2}"},
		"a draft in the model's checkpoint":  {model: hubModel, draft: "{algorithm: NEXTN, packedLayers: 1}"},
		"a hub draft without a revision": {model: hubModel, draft: "{algorithm: EAGLE3, modelPath: org/draft}", field: "spec.topology.draft.revision",
			want: "spec.topology.draft.revision must be a commit (40 lowercase hex characters) when spec.topology.draft.modelPath is a hub id (not an absolute path), which SGLang downloads when each rank starts (at main without a revision)"},
		"a hub draft at main": {model: hubModel, draft: "{algorithm: EAGLE3, modelPath: org/draft, revision: main}", field: "spec.topology.draft.revision",
			want: "pin the commit the branch or tag points at, or serve the draft from a local path"},
		"a draft revision without a draft path": {model: hubModel, draft: "{algorithm: NEXTN, packedLayers: 1, revision: " + commit + "}", field: "spec.topology.draft.revision",
			want: "spec.topology.draft.revision is the revision of spec.topology.draft.modelPath"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := doc(tc.model, tc.draft)
			_, errs := admit(t, d)
			got := Message(errs)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("kubectl apply: got %q, want %q", got, tc.want)
			}
			var h hicachev1alpha1.HiCacheDeployment
			if err := yaml.UnmarshalStrict([]byte(d), &h); err != nil {
				t.Fatal(err)
			}
			h.Default()
			_, rerr := resolve.Resolve(&h)
			switch {
			case tc.field == "" && rerr != nil:
				t.Errorf("the resolver refuses what kubectl apply admits: %v", rerr)
			case tc.field != "" && (rerr == nil || !strings.HasPrefix(rerr.Error(), tc.field+": ")):
				t.Errorf("the resolver: got %v, want a refusal of %s", rerr, tc.field)
			}
		})
	}
}
