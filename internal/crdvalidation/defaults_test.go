package crdvalidation

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// The API's Go defaults (Default) are the CRDs' schema defaults: each object, defaulted by the
// schema as the API server does and by Default, is the same object.
func TestGoDefaultsAreTheSchemas(t *testing.T) {
	type defaulter interface{ Default() }
	cases := map[string]struct {
		doc string
		obj func() defaulter
	}{
		"a bare deployment": {doc: `
apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: q, namespace: default}
spec:
  model: {path: Qwen/Qwen3-8B, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
`, obj: func() defaulter { return &hicachev1alpha1.HiCacheDeployment{} }},
		"a deployment with storage, roles, router, partial topology": {doc: `
apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: q, namespace: default}
spec:
  model: {path: Qwen/Qwen3-8B, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
  topology: {tensorParallel: 4, gpusPerNode: 4}
  storage: {backendRef: {name: mooncake}}
  roles:
    prefill: {}
    decode: {}
  router: {}
`, obj: func() defaulter { return &hicachev1alpha1.HiCacheDeployment{} }},
		"a managed backend with store pods and HA": {doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: mc, namespace: default}
spec:
  mooncake:
    managed:
      store: {segmentSize: 1Gi}
      ha: {etcd: {endpoints: ["etcd:2379"]}}
`, obj: func() defaulter { return &hicachev1alpha1.CacheBackend{} }},
		"a managed backend with HA on a managed etcd": {doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: mc, namespace: default}
spec:
  mooncake:
    managed:
      replicas: 3
      ha: {etcd: {managed: {storage: {emptyDir: {}}}}}
`, obj: func() defaulter { return &hicachev1alpha1.CacheBackend{} }},
		"an external backend": {doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: mc, namespace: default}
spec:
  mooncake:
    external: {rpcAddress: "master:50051", adminURL: "http://master:9003"}
`, obj: func() defaulter { return &hicachev1alpha1.CacheBackend{} }},
		"a flush": {doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: f, namespace: default}
spec:
  backendRef: {name: mc}
  scope: All
`, obj: func() defaulter { return &hicachev1alpha1.CacheFlush{} }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			bySchema, errs := admit(t, tc.doc)
			if len(errs) > 0 {
				t.Fatalf("the CRD refuses the sample: %v", errs)
			}
			schemaObj, goObj := tc.obj(), tc.obj()
			b, err := json.Marshal(bySchema)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, schemaObj); err != nil {
				t.Fatal(err)
			}
			if err := yaml.UnmarshalStrict([]byte(tc.doc), goObj); err != nil {
				t.Fatal(err)
			}
			goObj.Default()
			if diff := cmp.Diff(schemaObj, goObj); diff != "" {
				t.Errorf("Default differs from the CRD's defaults (-schema +Default):\n%s", diff)
			}
		})
	}
}
