package crdvalidation

import (
	"strings"
	"testing"
)

// spec.security at kubectl apply: the keys are Secret references, and the admin key is not the
// API key every client holds; literal keys in extraArgs are refused with the field to use.
func TestSecurityRefusals(t *testing.T) {
	base := `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: q}
spec:
  model: {path: Qwen/Qwen3-8B, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
  security: {adminAPIKeySecretRef: {name: ops, key: admin}, apiKeySecretRef: {name: clients, key: token}}
`
	cases := map[string]struct {
		doc, want string
	}{
		"accepted":          {doc: base},
		"the same key":      {doc: strings.Replace(base, "{name: clients, key: token}", "{name: ops, key: admin}", 1), want: "name the same Secret key"},
		"another key of it": {doc: strings.Replace(base, "{name: clients, key: token}", "{name: ops, key: token}", 1)},
		"no key":            {doc: strings.Replace(base, "{name: ops, key: admin}", "{name: ops}", 1), want: "spec.security.adminAPIKeySecretRef.key: Required value"},
		"a literal admin key": {doc: base + "  template: {extraArgs: [--admin-api-key, s3cret]}\n",
			want: "set spec.security.adminAPIKeySecretRef instead"},
		"a literal API key": {doc: base + "  template: {extraArgs: [--api-key=s3cret]}\n", want: "set spec.security.apiKeySecretRef instead"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, errs := admit(t, tc.doc)
			got := Message(errs)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if strings.Contains(got, "s3cret") {
				t.Errorf("the refusal quotes the key: %q", got)
			}
		})
	}
}
