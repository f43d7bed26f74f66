package resolve

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// HasVarRef reports whether the kubelet would expand a $(NAME) reference in s: a "$(" not
// escaped as "$$(" (each "$$" stands for one literal "$").
func HasVarRef(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			continue
		}
		if i+1 < len(s) && s[i+1] == '$' {
			i++ // "$$" is a literal "$"
			continue
		}
		if i+1 < len(s) && s[i+1] == '(' {
			return true
		}
	}
	return false
}

// VarRefFields are the spec fields whose text reaches the serving container's command line, its
// environment or a layout fact, with their values, in the order a spec lists them. The kubelet
// expands $(NAME) in a container's args and env from the container's variables, so any of them
// could take another value on each pod (a ConfigMap, a field of the pod) under one L3
// namespace, or publish a Secret's value (the admin key through --served-model-name into
// /v1/models and every L3 key).
func VarRefFields(spec *hicachev1alpha1.HiCacheDeploymentSpec) [][2]string {
	var out [][2]string
	add := func(field, v string) {
		if v != "" {
			out = append(out, [2]string{field, v})
		}
	}
	m := spec.Model
	add("spec.model.path", m.Path)
	add("spec.model.servedName", m.ServedName)
	add("spec.model.revision", m.Revision)
	if s := m.Source; s != nil {
		add("spec.model.source.subPath", s.SubPath)
		if s.HostPath != nil {
			add("spec.model.source.hostPath.path", s.HostPath.Path)
		}
		if s.Hub != nil {
			add("spec.model.source.hub.repo", s.Hub.Repo)
		}
	}
	if d := spec.Topology.Draft; d != nil {
		add("spec.topology.draft.modelPath", d.ModelPath)
		add("spec.topology.draft.revision", d.Revision)
	}
	add("spec.hicache.mambaSSMDType", spec.HiCache.MambaSSMDType)
	add("spec.sglang.versionLine", spec.SGLang.VersionLine)
	if st := spec.Storage; st != nil {
		add("spec.storage.namespace", st.Namespace)
	}
	for i, a := range spec.Template.ExtraArgs {
		add(fmt.Sprintf("spec.template.extraArgs[%d]", i), a)
	}
	addEnv := func(field string, env []corev1.EnvVar) {
		for i, e := range env {
			add(fmt.Sprintf("%s[%d].value", field, i), e.Value)
		}
	}
	addEnv("spec.template.env", spec.Template.Env)
	if r := spec.Roles; r != nil {
		addEnv("spec.roles.prefill.template.env", r.Prefill.Template.Env)
		addEnv("spec.roles.decode.template.env", r.Decode.Template.Env)
		add("spec.roles.transfer.ibDevice", r.Transfer.IBDevice)
	}
	return out
}

// checkVarRefs refuses a $(NAME) reference in any field VarRefFields lists.
func checkVarRefs(spec *hicachev1alpha1.HiCacheDeploymentSpec) error {
	for _, f := range VarRefFields(spec) {
		if HasVarRef(f[1]) {
			return &FieldError{Field: f[0], Message: fmt.Sprintf(
				"%q holds a $(NAME) reference, which the kubelet replaces in the serving container with a variable's value when each pod starts: the operator chooses the L3 namespace from the text as written, so the value could differ from pod to pod under one namespace, or put a Secret's value on SGLang's command line; write the value itself (or $$( for a literal \"$(\")", truncate(f[1], 80))}
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimSpace(s[:n]) + "…"
}
