package resolve

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// RoleResolved is one role of a disaggregated deployment: what Resolve decides for a deployment
// without roles, for the role's own topology and replicas. Its Plan holds the role's L3 duties
// (cache.RolePlan) and its Namespace is the one both roles share, the prefill's.
type RoleResolved struct {
	*Resolved
	// Role is prefill or decode.
	Role hicachev1alpha1.Role
	// L3 says whether the role reads and writes L3.
	L3 cache.RoleL3
	// Spec is the deployment as the role's servers see it: spec.topology, spec.replicas,
	// spec.resources and spec.template with the role's overrides, and no roles.
	Spec *hicachev1alpha1.HiCacheDeployment
}

// Roles is everything decided from a HiCacheDeployment with spec.roles.
type Roles struct {
	Prefill, Decode *RoleResolved
	// DecodeL3 is what the decode role does with L3.
	DecodeL3 cache.DecodeL3
	// Transfer is the KV transfer between the roles, defaults filled in.
	Transfer hicachev1alpha1.TransferSpec
}

// Each returns the roles in a fixed order, prefill first.
func (r *Roles) Each() []*RoleResolved { return []*RoleResolved{r.Prefill, r.Decode} }

// Namespace is the L3 namespace both roles write under.
func (r *Roles) Namespace() string { return r.Prefill.Namespace }

// RolesOf decides each role of a HiCacheDeployment with spec.roles: its topology, L3
// duties, layout and group shape, and the namespace they share. It refuses a pair of roles the
// pinned SGLang release would not run together, or that would write different bytes under one
// key.
func RolesOf(hcd *hicachev1alpha1.HiCacheDeployment) (*Roles, error) {
	return rolesOf(hcd, true)
}

func rolesOf(hcd *hicachev1alpha1.HiCacheDeployment, sglangRules bool) (*Roles, error) {
	roles := hcd.Spec.Roles
	if roles == nil {
		return nil, &FieldError{Field: "spec.roles", Message: "is not set: the deployment has no prefill and decode roles"}
	}
	if n := hcd.Name; len(n) > MaxRolesNameLength {
		return nil, &FieldError{Field: "metadata.name", Message: fmt.Sprintf(
			"%q is longer than %d characters, the most a deployment with spec.roles may have: it names the StatefulSets <name>-prefill-<group> and <name>-decode-<group>, whose pods' labels are bounded; choose a shorter name", n, MaxRolesNameLength)}
	}
	if err := checkVarRefs(&hcd.Spec); err != nil {
		return nil, err
	}
	if err := checkRoleEnv(roles); err != nil {
		return nil, err
	}
	out := &Roles{DecodeL3: cache.DecodeL3(roles.Decode.L3), Transfer: roles.Transfer}
	if out.DecodeL3 == "" {
		out.DecodeL3 = cache.DecodeL3None
	}
	if out.Transfer.Backend == "" {
		out.Transfer.Backend = hicachev1alpha1.TransferMooncake
	}
	if out.Transfer.BootstrapPort == 0 {
		out.Transfer.BootstrapPort = sglang.DefaultBootstrapPort
	}
	var err error
	if out.Prefill, err = resolveRole(hcd, hicachev1alpha1.RolePrefill, roles.Prefill.RoleSpec, out.DecodeL3, sglangRules); err != nil {
		return nil, err
	}
	if out.Decode, err = resolveRole(hcd, hicachev1alpha1.RoleDecode, roles.Decode.RoleSpec, out.DecodeL3, sglangRules); err != nil {
		return nil, err
	}
	if err := cache.CheckDecodeL3(out.DecodeL3, out.Decode.Topology); err != nil {
		return nil, roleProblem(err)
	}
	if err := cache.CheckRolePair(out.Prefill.Topology, out.Decode.Topology, out.DecodeL3, out.Prefill.Facts, out.Decode.Facts); err != nil {
		return nil, roleProblem(err)
	}
	// One namespace for both roles: decode servers continue the prefill's page hashes, and the
	// decode role's own layout variables are facts of it too.
	fixed := hcd.Spec.Storage != nil && hcd.Spec.Storage.NamespaceStrategy == hicachev1alpha1.NamespaceFixed
	shareRoleEnv(out, fixed)
	out.Decode.Namespace = out.Prefill.Namespace
	if !out.Decode.L3.Writes {
		out.Decode.SegmentPerRank, out.Decode.GlobalSegmentSize = 0, 0
	}
	return out, nil
}

// roleProblem names the spec field of a problem of the cache model's role rules.
func roleProblem(err error) error {
	var p *cache.RoleProblem
	if errors.As(err, &p) {
		return &FieldError{Field: "spec.roles." + p.Field, Message: p.Message}
	}
	return err
}

func resolveRole(hcd *hicachev1alpha1.HiCacheDeployment, role hicachev1alpha1.Role, rs hicachev1alpha1.RoleSpec, mode cache.DecodeL3, sglangRules bool) (*RoleResolved, error) {
	spec := RoleSpec(hcd, role)
	r, err := resolveOne(spec, false)
	if err != nil {
		return nil, roleError(role, err)
	}
	if sglangRules {
		if err := checkServerArgs(&spec.Spec, r, role, mode); err != nil {
			return nil, roleError(role, err)
		}
	}
	plan, err := cache.RolePlan(cache.Role(role), mode, r.Topology)
	if err != nil {
		return nil, roleError(role, topologyError(err))
	}
	r.Plan = plan
	return &RoleResolved{Resolved: r, Role: role, L3: cache.L3Of(cache.Role(role), mode), Spec: spec}, nil
}

// RoleSpec is the deployment as one role's servers see it: the role's parallel sizes over
// spec.topology, its replicas, resources and pod overrides, and no roles. The deployment must
// have spec.roles.
func RoleSpec(hcd *hicachev1alpha1.HiCacheDeployment, role hicachev1alpha1.Role) *hicachev1alpha1.HiCacheDeployment {
	out := hcd.DeepCopy()
	roles := out.Spec.Roles
	out.Spec.Roles = nil
	if roles == nil {
		return out
	}
	rs := roles.Prefill.RoleSpec
	if role == hicachev1alpha1.RoleDecode {
		rs = roles.Decode.RoleSpec
	}
	t, o := &out.Spec.Topology, rs.Topology
	for _, f := range []struct {
		dst *int32
		v   int32
	}{{&t.TensorParallel, o.TensorParallel}, {&t.PipelineParallel, o.PipelineParallel}, {&t.DataParallel, o.DataParallel}, {&t.GPUsPerNode, o.GPUsPerNode}} {
		if f.v > 0 {
			*f.dst = f.v
		}
	}
	if o.DPAttention != nil {
		t.DPAttention = *o.DPAttention
	}
	out.Spec.Replicas = ptr.To(ptr.Deref(rs.Replicas, hicachev1alpha1.DefaultReplicas))
	if rs.Resources != nil {
		out.Spec.Resources = *rs.Resources.DeepCopy()
	}
	tpl, add := &out.Spec.Template, rs.Template
	tpl.Labels = merged(tpl.Labels, add.Labels)
	tpl.Annotations = merged(tpl.Annotations, add.Annotations)
	tpl.NodeSelector = merged(tpl.NodeSelector, add.NodeSelector)
	tpl.Tolerations = append(tpl.Tolerations, add.Tolerations...)
	for _, e := range add.Env {
		tpl.Env = setEnv(tpl.Env, e)
	}
	return out
}

func merged(base, add map[string]string) map[string]string {
	if len(add) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, add)
	return out
}

func setEnv(env []corev1.EnvVar, e corev1.EnvVar) []corev1.EnvVar {
	for i := range env {
		if env[i].Name == e.Name {
			env[i] = e
			return env
		}
	}
	return append(env, e)
}

// roleFields are the spec fields a role overrides, as errors of the role's spec name them.
var roleFields = []string{
	"spec.topology.tensorParallel", "spec.topology.pipelineParallel", "spec.topology.dataParallel",
	"spec.topology.dpAttention", "spec.topology.gpusPerNode", "spec.replicas", "spec.resources",
}

// roleError names a role's fields in an error about the role's spec: a role's parallel sizes,
// replicas and resources are its own.
func roleError(role hicachev1alpha1.Role, err error) error {
	pairs := make([]string, 0, 2*len(roleFields)+2)
	for _, f := range roleFields {
		pairs = append(pairs, f, "spec.roles."+string(role)+"."+strings.TrimPrefix(f, "spec."))
	}
	r := strings.NewReplacer(pairs...)
	var fe *FieldError
	if errors.As(err, &fe) {
		out := *fe
		out.Message = r.Replace(fe.Message)
		if fe.Field == "spec.topology" {
			out.Field = "spec.roles." + string(role) + ".topology"
		} else {
			out.Field = r.Replace(fe.Field)
		}
		if out.plain {
			out.Message = strings.Replace(out.Message, "spec.topology:", "spec.roles."+string(role)+".topology:", 1)
		}
		return &out
	}
	return fmt.Errorf("%s role: %s", role, r.Replace(err.Error()))
}

// RoleServerConfig is the SGLang server configuration every rank of one serving group of a role
// runs (ServerConfig for the role's spec, with the role's disaggregation flags). be is nil when
// the deployment has no L3 store; a decode role without L3 has no Mooncake config at all.
func RoleServerConfig(roles *Roles, rr *RoleResolved, be *Backend, distInitAddr string) (sglang.ServerConfig, *sglang.MooncakeConfig, error) {
	cfg, mc, err := ServerConfig(rr.Spec, rr.Resolved, be, distInitAddr)
	if err != nil {
		return cfg, mc, err
	}
	d := &sglang.Disaggregation{
		Mode:            string(rr.Role),
		TransferBackend: string(roles.Transfer.Backend),
		BootstrapPort:   int(roles.Transfer.BootstrapPort),
		IBDevice:        roles.Transfer.IBDevice,
	}
	if rr.Role == hicachev1alpha1.RoleDecode {
		switch roles.DecodeL3 {
		case cache.DecodeL3Offload:
			d.DecodeL3 = sglang.DecodeL3Offload
		case cache.DecodeL3HiCache:
			d.DecodeL3 = sglang.DecodeL3HiCache
		default:
			cfg.HiCache, mc = nil, nil
		}
	}
	cfg.Disaggregation = d
	return cfg, mc, nil
}
