package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/crdvalidation"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const validHCD = `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata:
  name: broken
spec:
  model:
    path: Qwen/Qwen3-32B
    revision: 0123456789abcdef0123456789abcdef01234567
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
			content: strings.Replace(validHCD, "    path: Qwen/Qwen3-32B\n    revision: 0123456789abcdef0123456789abcdef01234567\n", "", 1),
			want:    []string{`HiCacheDeployment.hicache.io "broken" is invalid: [spec.model: Required value`},
		},
		"unknown profile": {
			content: strings.Replace(validHCD, "profile: Qwen3", "profile: Qwen9", 1),
			want:    []string{"spec.profile", `"Qwen9"`, "Qwen3Next"},
		},
		"wrong type": {
			content: strings.Replace(validHCD, "tensorParallel: 4", `tensorParallel: "four"`, 1),
			want:    []string{`spec.topology.tensorParallel: Invalid value: "string": spec.topology.tensorParallel in body must be of type integer: "string"`},
		},
		"group not a whole number of nodes": {
			content: strings.Replace(validHCD, "tensorParallel: 4", "tensorParallel: 6", 1),
			want:    []string{"spec.topology: tensorParallel x pipelineParallel must be a multiple or a divisor of gpusPerNode"},
		},
		"fixed strategy without a namespace": {
			content: strings.Replace(validHCD, "      name: mooncake\n", "      name: mooncake\n    namespaceStrategy: Fixed\n", 1),
			want:    []string{"spec.storage.namespace is required with the Fixed namespace strategy"},
		},
		"ratio not above one": {
			content: strings.Replace(validHCD, "pageSize: 64", `ratio: "0.5"`, 1),
			want:    []string{`spec.hicache.ratio: Invalid value: "0.5": spec.hicache.ratio must be greater than 1`},
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

// TestAcceptedLikeTheAPIServer plans the shared table's objects that the API server accepts
// (the integration suite creates them).
func TestAcceptedLikeTheAPIServer(t *testing.T) {
	for _, tc := range testutil.AcceptedObjects() {
		t.Run(tc.Name, func(t *testing.T) {
			runPlugin(t, "", "plan", "-f", writeFile(t, "accepted.yaml", tc.Doc)).mustSucceed(t)
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

// TestRefusedLikeTheAPIServer reads every object of the shared table of refused objects as a
// file: the plugin must refuse it with the API server's message, word for word (the integration
// suite records what a real kube-apiserver answered). Objects of other kinds than
// HiCacheDeployment go through the plugin's admission directly: plan reads only
// HiCacheDeployments.
func TestRefusedLikeTheAPIServer(t *testing.T) {
	server := testutil.RefusedMessages(t)
	v, err := crdvalidation.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range testutil.RefusedObjects() {
		t.Run(tc.Name, func(t *testing.T) {
			want, ok := server[tc.Name]
			if !ok {
				t.Fatalf("no message of the API server for this case; run the integration suite with -update")
			}
			obj := tc.Object(t)
			name := obj["metadata"].(map[string]any)["name"].(string)
			kind := tc.Kind(t)
			if kind != kindHiCacheDeployment {
				_, errs, err := v.Admit(context.Background(), obj, defaultNamespace)
				if err != nil {
					t.Fatal(err)
				}
				if got := crdvalidation.Message(errs); got != want {
					t.Errorf("the plugin's admission says\n  %s\nthe API server says\n  %s", got, want)
				}
				return
			}
			path := writeFile(t, "refused.yaml", tc.Doc)
			res := runPlugin(t, "", "plan", "-f", path)
			wantErr := fmt.Sprintf("error: %s: %s.%s %q is invalid: %s\n", path, kind, hicachev1alpha1.GroupVersion.Group, name, want)
			if res.code != 1 || res.stderr != wantErr {
				t.Errorf("exit code %d, stderr\n  %q\nwant exit code 1 and the API server's message\n  %q", res.code, res.stderr, wantErr)
			}
		})
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
