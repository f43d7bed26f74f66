package resolve

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// Env is what the environment a user gives the serving container means to the L3 store: the
// value of every variable it sets, by class, keyed by name. A variable set to the release's
// default is left out of Layout and Keys, so writing a default changes nothing.
type Env struct {
	Layout, Keys, Neutral map[string]string
	// Reasons say why each Layout variable is one.
	Reasons map[string]string
}

// ClassifyEnv sorts the variables of a container's env by their class in env_vars.txt
// (sglang.EnvRuleOf). field names the list in errors (spec.template.env). The error is the
// first problem: a refused variable, or a non-neutral one whose value comes from a ConfigMap,
// a Secret or a field of the pod, which is not known when the namespace is chosen and may differ
// from pod to pod.
func ClassifyEnv(field string, env []corev1.EnvVar) (Env, error) {
	out := Env{}
	for i, e := range env {
		at := fmt.Sprintf("%s[%d]", field, i)
		rule, err := sglang.EnvRuleOf(e.Name)
		if err != nil {
			return out, err
		}
		if rule.Class == sglang.ArgRefused {
			msg := fmt.Sprintf("sets %s, which %s", e.Name, strings.TrimSuffix(rule.Reason, "; remove it"))
			if rule.Field != "" {
				msg += "; set " + rule.Field + " instead"
			} else if !strings.Contains(rule.Reason, sglang.HowToClassifyEnv) {
				msg += "; remove it"
			}
			return out, &FieldError{Field: at, Message: msg + " (internal/sglang/env_vars.txt classifies every variable)"}
		}
		if e.ValueFrom != nil && rule.Class != sglang.ArgNeutral {
			return out, &FieldError{Field: at, Message: fmt.Sprintf(
				"sets %s from %s, but %s is a %s variable (it %s): its value is part of the L3 namespace, which is chosen before any pod runs, and a reference can give each pod another value under one namespace; write the value itself in value",
				e.Name, sourceOf(e.ValueFrom), e.Name, rule.Class, rule.Reason)}
		}
		var into *map[string]string
		switch rule.Class {
		case sglang.ArgLayout:
			into = &out.Layout
		case sglang.ArgKeys:
			into = &out.Keys
		default:
			into = &out.Neutral
		}
		if rule.Class != sglang.ArgNeutral {
			if d, ok := sglang.EnvDefault(e.Name); ok && d == e.Value {
				continue
			}
		}
		if *into == nil {
			*into = map[string]string{}
		}
		(*into)[e.Name] = e.Value
		if rule.Class == sglang.ArgLayout {
			if out.Reasons == nil {
				out.Reasons = map[string]string{}
			}
			out.Reasons[e.Name] = rule.Reason
		}
	}
	return out, nil
}

func sourceOf(s *corev1.EnvVarSource) string {
	switch {
	case s.ConfigMapKeyRef != nil:
		return "a ConfigMap (valueFrom.configMapKeyRef)"
	case s.SecretKeyRef != nil:
		return "a Secret (valueFrom.secretKeyRef)"
	case s.FieldRef != nil:
		return "a field of the pod (valueFrom.fieldRef)"
	case s.ResourceFieldRef != nil:
		return "a container resource (valueFrom.resourceFieldRef)"
	}
	return "a reference (valueFrom)"
}

// envReasons are the reasons of a settings' layout variables, keyed by fact name.
func envReasons(env Env) map[string]string {
	if len(env.Reasons) == 0 {
		return nil
	}
	out := map[string]string{}
	for n, r := range env.Reasons {
		out[cache.FactEnvPrefix+n] = r
	}
	return out
}

// checkRoleEnv classifies each role's own env (spec.roles.<role>.template.env) under its own
// field path, so that a problem names the line the user wrote.
func checkRoleEnv(roles *hicachev1alpha1.RolesSpec) error {
	for _, r := range []struct {
		role hicachev1alpha1.Role
		env  []corev1.EnvVar
	}{{hicachev1alpha1.RolePrefill, roles.Prefill.Template.Env}, {hicachev1alpha1.RoleDecode, roles.Decode.Template.Env}} {
		field := "spec.roles." + string(r.role) + ".template.env"
		for i, e := range r.env {
			if reservedEnv(e.Name) {
				return &FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Message: fmt.Sprintf(
					"%s is set by the operator (POD_IP, NODE_RANK and MOONCAKE_* come from the topology and the CacheBackend, HICACHE_* are the operator's own, the keys among them from spec.security); remove it", e.Name)}
			}
		}
		if _, err := ClassifyEnv(field, r.env); err != nil {
			return err
		}
	}
	return nil
}

// shareRoleEnv makes the layout variables of the decode role facts of the namespace both roles
// write: the prefill's layout decides the namespace, and a variable only the decode servers set
// (or set to another value) would otherwise change their bytes under an unchanged namespace.
// Each is the fact env.<NAME>@decode beside the prefill's own env.<NAME>. (Decode servers
// that write to L3 must have the prefill's facts; cache.CheckRolePair refuses a difference.)
func shareRoleEnv(out *Roles, fixed bool) {
	p, d := out.Prefill, out.Decode
	added := false
	for _, n := range slices.Sorted(maps.Keys(d.Settings.LayoutEnv)) {
		v := d.Settings.LayoutEnv[n]
		if pv, ok := p.Settings.LayoutEnv[n]; ok && pv == v {
			continue
		}
		if p.Settings.LayoutEnv == nil {
			p.Settings.LayoutEnv = map[string]string{}
		}
		fact := n + "@" + string(hicachev1alpha1.RoleDecode)
		p.Settings.LayoutEnv[fact] = v
		if why := d.Reasons[cache.FactEnvPrefix+n]; why != "" {
			if p.Reasons == nil {
				p.Reasons = map[string]string{}
			}
			p.Reasons[cache.FactEnvPrefix+fact] = "set on the decode role, whose pages share the prefill's namespace: " + why
		}
		added = true
	}
	if !added {
		return
	}
	p.Facts = cache.Facts(p.Topology, p.Settings)
	p.Fingerprint, p.ShortHash = p.Facts.Fingerprint(), p.Facts.ShortFingerprint()
	if !fixed {
		p.Namespace = cache.Namespace(p.Facts)
	}
}
