package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// decode turns one YAML document into an object.
func decode(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
		t.Fatalf("decoding %q: %v", doc, err)
	}
	return obj
}

func TestSamplesAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join(repoRoot(), "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			obj := decode(t, doc)
			obj.SetNamespace(ns)
			if err := k8sClient.Create(context.Background(), obj); err != nil {
				t.Errorf("%s: %s %s was refused: %v", filepath.Base(f), obj.GetKind(), obj.GetName(), err)
			}
			seen++
		}
	}
	if seen < 6 {
		t.Fatalf("found %d sample objects in config/samples, want at least 6", seen)
	}
}

const validHCD = `
apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: x}
spec:
  model: {path: deepseek-ai/DeepSeek-V4}
  profile: DeepSeekV4
  topology: {tensorParallel: 16, gpusPerNode: 8}
  storage: {backendRef: {name: mooncake}}
`

// hcdWith returns validHCD with the fields of spec replaced by the given YAML (merged at the top
// level of spec).
func hcdWith(t *testing.T, spec string) *unstructured.Unstructured {
	t.Helper()
	obj := decode(t, validHCD)
	patch := map[string]any{}
	if err := yaml.Unmarshal([]byte(spec), &patch); err != nil {
		t.Fatalf("decoding %q: %v", spec, err)
	}
	s := obj.Object["spec"].(map[string]any)
	for k, v := range patch {
		if v == nil {
			delete(s, k)
			continue
		}
		s[k] = v
	}
	return obj
}

func TestBadObjectsAreRefusedWithAReadableMessage(t *testing.T) {
	ns := newNamespace(t)
	cases := map[string]struct {
		obj  func(t *testing.T) *unstructured.Unstructured
		want string
	}{
		"unknown profile": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `profile: GPT5`) },
			want: `spec.profile: Unsupported value: "GPT5"`,
		},
		"no profile and no attention kind": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `profile: null`) },
			want: "set spec.profile to a built-in architecture",
		},
		"unknown attention kind": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `topology: {attention: GQA2, tensorParallel: 8}`)
			},
			want: `spec.topology.attention: Unsupported value: "GQA2"`,
		},
		"tensor parallel zero": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `topology: {tensorParallel: 0}`) },
			want: "spec.topology.tensorParallel: Invalid value: 0: spec.topology.tensorParallel in body should be greater than or equal to 1",
		},
		"tensor parallel too large": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `topology: {tensorParallel: 512}`) },
			want: "should be less than or equal to 256",
		},
		"TP x PP neither a multiple nor a divisor of gpusPerNode": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `topology: {tensorParallel: 3, gpusPerNode: 8}`)
			},
			want: "tensorParallel x pipelineParallel must be a multiple or a divisor of gpusPerNode",
		},
		"dp attention without data parallel": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `topology: {tensorParallel: 8, dpAttention: true}`)
			},
			want: "dpAttention needs dataParallel > 1 dividing tensorParallel",
		},
		"hicache ratio not above 1": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `hicache: {ratio: "1"}`) },
			want: "spec.hicache.ratio must be greater than 1",
		},
		"hicache ratio not a number": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `hicache: {ratio: "two"}`) },
			want: "spec.hicache.ratio in body should match",
		},
		"ratio and size together": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `hicache: {ratio: "2", sizeGB: 100}`) },
			want: "set ratio or sizeGB, not both",
		},
		"page_first with the direct io backend": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `hicache: {memLayout: page_first, ioBackend: direct}`)
			},
			want: "page_first and page_first_direct need ioBackend kernel",
		},
		"unknown memory layout": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `hicache: {memLayout: page_last}`) },
			want: `spec.hicache.memLayout: Unsupported value: "page_last"`,
		},
		"unknown kv cache dtype": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `hicache: {kvCacheDType: int3}`) },
			want: `spec.hicache.kvCacheDType: Unsupported value: "int3"`,
		},
		"buffer_only without storage": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, "hicache: {hostMemoryMode: buffer_only}\nstorage: null")
			},
			want: "buffer_only keeps no KV in host memory and needs an L3 store",
		},
		"draft that needs a model without one": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE3}}`)
			},
			want: "spec.topology.draft.modelPath is required",
		},
		"unknown draft algorithm": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: MEDUSA}}`)
			},
			want: `spec.topology.draft.algorithm: Unsupported value: "MEDUSA"`,
		},
		"ngram draft with a model": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: NGRAM, modelPath: x}}`)
			},
			want: "modelPath must be empty for NGRAM",
		},
		"fixed strategy without a namespace": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `storage: {backendRef: {name: m}, namespaceStrategy: Fixed}`)
			},
			want: "spec.storage.namespace is required with the Fixed namespace strategy",
		},
		"namespace with the LayoutHash strategy": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `storage: {backendRef: {name: m}, namespace: mine}`)
			},
			want: "spec.storage.namespace is only used with namespaceStrategy Fixed",
		},
		"namespace that is not a DNS label": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `storage: {backendRef: {name: m}, namespaceStrategy: Fixed, namespace: My_NS}`)
			},
			want: "spec.storage.namespace in body should match",
		},
		"deployment name with a dot": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				o := hcdWith(t, `replicas: 1`)
				o.SetName("qwen3.5-32b")
				return o
			},
			want: "metadata.name must be a DNS label",
		},
		"deployment name too long for its pods' labels": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				o := hcdWith(t, `replicas: 1`)
				o.SetName(strings.Repeat("n", 41))
				return o
			},
			want: "of at most 40 characters",
		},
		"negative replicas": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `replicas: -1`) },
			want: "spec.replicas in body should be greater than or equal to 0",
		},
		"model path empty": {
			obj:  func(t *testing.T) *unstructured.Unstructured { return hcdWith(t, `model: {path: ""}`) },
			want: "spec.model.path in body should be at least 1 chars long",
		},
		"model path too long": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `model: {path: `+strings.Repeat("m", 600)+`}`)
			},
			want: "spec.model.path: Too long: may not be more than 512",
		},
		"too many extra args": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return hcdWith(t, `template: {extraArgs: [`+strings.Repeat(`"--x",`, 70)+`"--y"]}`)
			},
			want: "spec.template.extraArgs: Too many: 71: must have at most 64 items",
		},
		"backend both managed and external": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: both}
spec:
  mooncake:
    managed: {}
    external: {rpcAddress: "m:50051", adminURL: "http://m:9003"}`)
			},
			want: "set exactly one of managed (the operator runs the master) or external",
		},
		"backend neither managed nor external": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: neither}
spec: {mooncake: {}}`)
			},
			want: "set exactly one of managed",
		},
		"backend of type Mooncake without mooncake settings": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: empty}
spec: {type: Mooncake}`)
			},
			want: "spec.mooncake is required when spec.type is Mooncake",
		},
		"external backend with a bad admin URL": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: badurl}
spec: {mooncake: {external: {rpcAddress: "m:50051", adminURL: "m:9003"}}}`)
			},
			want: "spec.mooncake.external.adminURL in body should match",
		},
		"managed backend in multi-tenant mode": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: tenants}
spec: {mooncake: {multiTenant: true, managed: {}}}`)
			},
			want: "multiTenant is only supported with an external master",
		},
		"managed backend with an eviction ratio above 1": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: evict}
spec: {mooncake: {managed: {evictionRatio: "1.5"}}}`)
			},
			want: "spec.mooncake.managed.evictionRatio in body should match",
		},
		"namespace flush without a prefix": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: noprefix}
spec: {backendRef: {name: mooncake}, scope: Namespace}`)
			},
			want: "spec.namespace (the key prefix to remove) is required when scope is Namespace",
		},
		"tenant flush without a tenant": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: notenant}
spec: {backendRef: {name: mooncake}, scope: Tenant}`)
			},
			want: "spec.tenant is required when scope is Tenant",
		},
		"flush of the whole store with a prefix": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: allprefix}
spec: {backendRef: {name: mooncake}, scope: All, namespace: hc-1}`)
			},
			want: "spec.namespace is only used with scope Namespace",
		},
		"unknown flush scope": {
			obj: func(t *testing.T) *unstructured.Unstructured {
				return decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: badscope}
spec: {backendRef: {name: mooncake}, scope: Everything}`)
			},
			want: `spec.scope: Unsupported value: "Everything"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obj := tc.obj(t)
			obj.SetNamespace(ns)
			err := k8sClient.Create(context.Background(), obj, client.DryRunAll)
			if err == nil {
				t.Fatalf("the API server accepted it; want a refusal saying %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with\n  %v\nwant the message to contain\n  %q", err, tc.want)
			}
		})
	}
}

func TestCacheFlushSpecIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	obj := decode(t, `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: f}
spec: {backendRef: {name: mooncake}, scope: Namespace, namespace: hc-1}`)
	obj.SetNamespace(ns)
	ctx := context.Background()
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(obj.Object, "hc-2", "spec", "namespace"); err != nil {
		t.Fatal(err)
	}
	err := k8sClient.Update(ctx, obj)
	if err == nil || !strings.Contains(err.Error(), "CacheFlush spec is immutable: create a new CacheFlush instead") {
		t.Fatalf("changing a CacheFlush's namespace: got %v, want a refusal naming immutability", err)
	}
}

func TestDefaultsAreFilledIn(t *testing.T) {
	ns := newNamespace(t)
	obj := decode(t, `
apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: defaults}
spec:
  model: {path: Qwen/Qwen3-8B}
  profile: Qwen3
  storage: {backendRef: {name: mooncake}}`)
	obj.SetNamespace(ns)
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{
		"spec.replicas":                  int64(1),
		"spec.topology.tensorParallel":   int64(1),
		"spec.topology.pipelineParallel": int64(1),
		"spec.topology.gpusPerNode":      int64(8),
		"spec.storage.namespaceStrategy": "LayoutHash",
		"spec.storage.flushPolicy":       "Auto",
		"spec.storage.protocol":          "tcp",
		"spec.rollout.maxUnavailable":    int64(1),
	} {
		got, found, err := unstructured.NestedFieldNoCopy(obj.Object, strings.Split(path, ".")...)
		if err != nil || !found || got != want {
			t.Errorf("%s = %v (found %v, err %v), want %v", path, got, found, err, want)
		}
	}
}

func TestHiCacheDeploymentScalesThroughTheScaleSubresource(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	obj := hcdWith(t, `replicas: 1`)
	obj.SetNamespace(ns)
	if err := k8sClient.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	typed := &hicachev1alpha1.HiCacheDeployment{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), typed); err != nil {
		t.Fatal(err)
	}
	scale := &autoscalingv1.Scale{}
	if err := k8sClient.SubResource("scale").Get(ctx, typed, scale); err != nil {
		t.Fatalf("reading the scale subresource: %v", err)
	}
	if scale.Spec.Replicas != 1 {
		t.Fatalf("scale.spec.replicas = %d, want 1", scale.Spec.Replicas)
	}
	scale.Spec.Replicas = 3
	if err := k8sClient.SubResource("scale").Update(ctx, typed, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("kubectl scale's request was refused: %v", err)
	}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas"); got != 3 {
		t.Errorf("spec.replicas = %d after scaling to 3", got)
	}
}
