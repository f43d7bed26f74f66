package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

const validHCD = `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata:
  name: broken
spec:
  model:
    path: Qwen/Qwen3-32B
  profile: Qwen3
  topology:
    tensorParallel: 4
    gpusPerNode: 4
  hicache:
    pageSize: 64
  storage:
    backendRef:
      name: mooncake
`

// TestBadFiles checks that every kind of bad input ends with exit code 1 and one message on
// stderr naming the file and the field at fault.
func TestBadFiles(t *testing.T) {
	cases := map[string]struct {
		content string
		// want are strings the message must contain (besides the file name).
		want []string
	}{
		"unknown field": {
			content: strings.Replace(validHCD, "pageSize: 64", "pageSzie: 64", 1),
			want:    []string{`unknown field "spec.hicache.pageSzie"`},
		},
		"field in the wrong case": {
			content: strings.Replace(validHCD, "tensorParallel: 4", "tensorparallel: 4", 1),
			want:    []string{`unknown field "spec.topology.tensorparallel"`},
		},
		"duplicate field": {
			content: strings.Replace(validHCD, "pageSize: 64", "pageSize: 64\n    pageSize: 32", 1),
			want:    []string{"pageSize"},
		},
		"wrong kind": {
			content: strings.Replace(validHCD, "kind: HiCacheDeployment", "kind: CacheBackend", 1),
			want:    []string{"kind is CacheBackend", "HiCacheDeployment"},
		},
		"no kind": {
			content: strings.Replace(validHCD, "kind: HiCacheDeployment\n", "", 1),
			want:    []string{"kind is missing"},
		},
		"wrong apiVersion": {
			content: strings.Replace(validHCD, "hicache.io/v1alpha1", "hicache.io/v1", 1),
			want:    []string{`apiVersion is "hicache.io/v1"`, "hicache.io/v1alpha1"},
		},
		"missing model path": {
			content: strings.Replace(validHCD, "    path: Qwen/Qwen3-32B\n", "", 1),
			want:    []string{"spec.model.path is required", `HiCacheDeployment "broken"`},
		},
		"unknown profile": {
			content: strings.Replace(validHCD, "profile: Qwen3", "profile: Qwen9", 1),
			want:    []string{"spec.profile", `"Qwen9"`, "Qwen3Next"},
		},
		"wrong type": {
			content: strings.Replace(validHCD, "tensorParallel: 4", `tensorParallel: "four"`, 1),
			want:    []string{"spec.topology.tensorParallel", "int32"},
		},
		"group not a whole number of nodes": {
			content: strings.Replace(validHCD, "tensorParallel: 4", "tensorParallel: 6", 1),
			want:    []string{"spec.topology", "6 GPUs"},
		},
		"fixed strategy without a namespace": {
			content: strings.Replace(validHCD, "      name: mooncake\n", "      name: mooncake\n    namespaceStrategy: Fixed\n", 1),
			want:    []string{"spec.storage.namespace is required with the Fixed namespace strategy"},
		},
		"ratio not above one": {
			content: strings.Replace(validHCD, "pageSize: 64", `ratio: "0.5"`, 1),
			want:    []string{"spec.hicache.ratio"},
		},
		"not YAML": {
			content: "spec: [unclosed\n",
			want:    []string{"not valid YAML"},
		},
		"empty file": {
			content: "# nothing here\n",
			want:    []string{"no HiCacheDeployment found"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, "bad.yaml", tc.content)
			for _, args := range [][]string{
				{"plan", "-f", path},
				{"diff", path, sample("qwen3")},
				{"diff", sample("qwen3"), path},
			} {
				res := runPlugin(t, "", args...)
				if res.code != 1 {
					t.Errorf("%v: exit code %d, want 1", args, res.code)
				}
				if res.stdout != "" {
					t.Errorf("%v: printed on stdout: %s", args, res.stdout)
				}
				msg := res.stderr
				if !strings.HasPrefix(msg, "error: "+path) || strings.Count(msg, "\n") != 1 {
					t.Errorf("%v: want one line starting with the file name, got %q", args, msg)
				}
				for _, w := range tc.want {
					if !strings.Contains(msg, w) {
						t.Errorf("%v: message lacks %q: %s", args, w, msg)
					}
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"plan without -f":        {args: []string{"plan"}, want: "-f is required"},
		"plan of a missing file": {args: []string{"plan", "-f", "does-not-exist.yaml"}, want: "does-not-exist.yaml: no such file"},
		"unknown output":         {args: []string{"plan", "-f", sample("qwen3"), "-o", "wide"}, want: `-o "wide" is not an output format`},
		"unknown flag":           {args: []string{"plan", "--frobnicate"}, want: "unknown flag: --frobnicate"},
		"diff with one file":     {args: []string{"diff", sample("qwen3")}, want: "diff takes two files"},
		"diff of a file with two": {
			args: []string{"diff", writeFile(t, "two.yaml", validHCD+"---\n"+validHCD), sample("qwen3")},
			want: "holds 2 HiCacheDeployments",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := runPlugin(t, "", tc.args...)
			if res.code != 1 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", res.code, res.stderr, tc.want)
			}
		})
	}
}

// TestDefaultsMatchCRD applies the generated CRD's structural defaults, as the API server does,
// and checks that the plugin's defaulting gives the same object. A new +kubebuilder:default
// marker that the plugin does not mirror fails here.
func TestDefaultsMatchCRD(t *testing.T) {
	schema := crdSchema(t)
	inputs := map[string]string{
		"minimal": `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: minimal}
spec:
  model: {path: m}
  profile: Qwen3
  storage: {backendRef: {name: mooncake}}
`,
		"empty topology and hicache": `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: empty}
spec:
  model: {path: m}
  profile: DeepSeekV3
  topology: {}
  hicache: {}
  rollout: {}
  template:
    tolerations: [{key: gpu, operator: Exists}]
    env: [{name: A, value: b}]
`,
	}
	matches, err := filepath.Glob(filepath.Join(samplesDir, "hicachedeployment_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(m)] = string(b)
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			js, err := yaml.YAMLToJSON([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := json.Unmarshal(js, &obj); err != nil {
				t.Fatal(err)
			}
			defaulting.Default(obj, schema)
			b, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			want := &hicachev1alpha1.HiCacheDeployment{}
			if err := json.Unmarshal(b, want); err != nil {
				t.Fatal(err)
			}

			items, err := loadDeployments(source{name: writeFile(t, "in.yaml", in)})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, items[0].hcd); diff != "" {
				t.Errorf("plugin defaults differ from the CRD's (-crd +plugin):\n%s", diff)
			}
		})
	}
}

func crdSchema(t *testing.T) *structuralschema.Structural {
	t.Helper()
	b, err := os.ReadFile("../../config/crd/bases/hicache.io_hicachedeployments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	var v1Schema *apiextensionsv1.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == hicachev1alpha1.GroupVersion.Version && v.Schema != nil {
			v1Schema = v.Schema.OpenAPIV3Schema
		}
	}
	if v1Schema == nil {
		t.Fatalf("the CRD has no schema for %s", hicachev1alpha1.GroupVersion.Version)
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1Schema, internal, nil); err != nil {
		t.Fatal(err)
	}
	s, err := structuralschema.NewStructural(internal)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
