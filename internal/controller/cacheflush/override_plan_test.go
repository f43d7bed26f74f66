package cacheflush

import (
	"strings"
	"testing"
)

func TestPlanOverride(t *testing.T) {
	for _, c := range []struct {
		name      string
		in        overrideInput
		run, over bool
		whyHas    string
	}{
		{"nothing in use", overrideInput{FlushNamespace: "a"}, true, false, ""},
		{"in use, no override", overrideInput{FlushNamespace: "a", UserNamespaces: []string{"a"}, PolicyBound: true}, false, false, "once nothing uses it"},
		{"override, own namespace, policy bound", overrideInput{AllowInUse: true, FlushNamespace: "a", UserNamespaces: []string{"a"}, PolicyBound: true}, true, true, ""},
		{"override without the policy", overrideInput{AllowInUse: true, FlushNamespace: "a", UserNamespaces: []string{"a"}, PolicyWhy: "no binding"}, false, false, "no binding"},
		{"override of another namespace's users", overrideInput{AllowInUse: true, FlushNamespace: "a", UserNamespaces: []string{"a", "b"}, PolicyBound: true}, false, false, "namespaces b"},
		{"override of only another namespace's users", overrideInput{AllowInUse: true, FlushNamespace: "a", UserNamespaces: []string{"b"}, PolicyBound: true}, false, false, "namespaces b"},
		{"cluster grant covers other namespaces", overrideInput{AllowInUse: true, FlushNamespace: "a", UserNamespaces: []string{"b"}, PolicyBound: true, ClusterGrant: true}, true, true, ""},
		{"cluster grant without the policy", overrideInput{AllowInUse: true, FlushNamespace: "a", UserNamespaces: []string{"b"}, ClusterGrant: true}, false, false, "not both present"},
		{"no cluster grant, why kept", overrideInput{AllowInUse: true, FlushNamespace: "a", UserNamespaces: []string{"b"}, PolicyBound: true, ClusterGrantWhy: "the store grant g does not list namespace b"}, false, false, "does not list namespace b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := planOverride(c.in)
			if v.Run != c.run || v.Overridden != c.over || !strings.Contains(v.Why, c.whyHas) || (!v.Run && v.Why == "") {
				t.Errorf("planOverride(%+v) = %+v, want run %v overridden %v, why containing %q", c.in, v, c.run, c.over, c.whyHas)
			}
		})
	}
}
