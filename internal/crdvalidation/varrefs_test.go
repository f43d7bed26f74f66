package crdvalidation

import (
	"strings"
	"testing"
)

// A $(NAME) reference in a field that reaches SGLang's command line or environment is refused
// at kubectl apply, naming the field; $$( is a literal and passes.
func TestVarRefRefusals(t *testing.T) {
	base := `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: q}
spec:
  model: {path: Qwen/Qwen3-8B, servedName: qwen, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
`
	cases := map[string]struct {
		doc, want string
	}{
		"accepted": {doc: base + "  template: {extraArgs: [--log-level, info], env: [{name: SGLANG_LOG_FORWARD_ITERS, value: '1'}]}\n"},
		"an escaped reference": {doc: strings.Replace(base, "servedName: qwen", "servedName: 'a$$(b)'", 1) +
			"  template: {extraArgs: [--json-model-override-args, '$$(OVR)'], env: [{name: A, value: 'x$$(B)'}]}\n"},
		"servedName": {doc: strings.Replace(base, "servedName: qwen", "servedName: '$(HICACHE_ADMIN_API_KEY)'", 1),
			want: "spec.model.servedName holds a $(NAME) reference"},
		"revision": {doc: strings.Replace(base, "revision: 0123456789abcdef0123456789abcdef01234567", "revision: 'r$(REV)'", 1), want: "spec.model.revision holds a $(NAME) reference"},
		"draft revision": {doc: base + "  topology: {draft: {algorithm: EAGLE3, modelPath: /drafts/d, revision: 'r$(REV)'}}\n",
			want: "spec.topology.draft.revision holds a $(NAME) reference"},
		"model path": {doc: strings.Replace(base, "path: Qwen/Qwen3-8B", "path: '/m/$(P)'", 1), want: "spec.model.path holds a $(NAME) reference"},
		"extraArgs": {doc: base + "  template: {extraArgs: [--json-model-override-args, '$(OVR)'], env: [{name: OVR, value: '{}'}]}\n",
			want: "spec.template.extraArgs holds a $(NAME) reference"},
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
