package hicachedeployment

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// A deployment without spec.roles runs one kind of serving group; one with spec.roles runs two,
// prefill and decode, each with its own topology, replicas and command line. A serving group is
// named by its role and its index within the role (groupKey); a deployment without roles has
// the role "", and its groups keep the names and labels they always had.

// GroupKey names one serving group: its role ("" without roles) and its index within the role.
type GroupKey struct {
	role  hicachev1alpha1.Role
	index int
}

// String is the group's part of its names: "3" without roles, "prefill-3" in a role.
func (k GroupKey) String() string {
	if k.role == "" {
		return strconv.Itoa(k.index)
	}
	return string(k.role) + "-" + strconv.Itoa(k.index)
}

// describe is the group in a sentence: "serving group 3", "prefill group 3".
func (k GroupKey) describe() string {
	if k.role == "" {
		return fmt.Sprintf("serving group %d", k.index)
	}
	return fmt.Sprintf("%s group %d", k.role, k.index)
}

// roleOrder sorts roles as the deployment lists them: prefill before decode.
func roleOrder(r hicachev1alpha1.Role) int {
	switch r {
	case "":
		return 0
	case hicachev1alpha1.RolePrefill:
		return 1
	case hicachev1alpha1.RoleDecode:
		return 2
	}
	return 3
}

// compareKeys orders groups by role, then index.
func compareKeys(a, b GroupKey) int {
	if c := cmp.Compare(roleOrder(a.role), roleOrder(b.role)); c != 0 {
		return c
	}
	if a.role != b.role {
		return cmp.Compare(a.role, b.role)
	}
	return cmp.Compare(a.index, b.index)
}

// servingRole is one kind of serving group of a deployment: the deployment itself when it has
// no roles, or one of its roles.
type servingRole struct {
	// role is prefill or decode; "" without roles.
	role hicachev1alpha1.Role
	// spec is the deployment as the role's servers see it: the role's topology, replicas,
	// resources and pod overrides over the deployment's (resolve.RoleSpec); the deployment itself
	// without roles.
	spec *hicachev1alpha1.HiCacheDeployment
	// res is what is decided for the role's groups: topology, plan, layout, shape, replicas.
	res *resolve.Resolved
	// roles and rr are the deployment's roles and this one, nil without roles.
	roles *resolve.Roles
	rr    *resolve.RoleResolved
}

// plainRole is the one kind of serving group of a deployment without roles.
func plainRole(hcd *hicachev1alpha1.HiCacheDeployment, res *resolve.Resolved) *servingRole {
	return &servingRole{spec: hcd, res: res}
}

// writesL3 tells whether the role's ranks write the deployment's L3 namespace (when it has a
// store): without roles they do; a decode role only with spec.roles.decode.l3 Offload or HiCache.
// No role reads L3 without writing it, so a role that does not write does not use the namespace.
func (s *servingRole) writesL3() bool {
	return s.rr == nil || s.rr.L3.Writes
}

// serverConfig is the SGLang configuration of every rank of one of the role's groups, whose
// leader's rendezvous address is distInitAddr.
func (s *servingRole) serverConfig(be *resolve.Backend, distInitAddr string) (sglang.ServerConfig, *sglang.MooncakeConfig, error) {
	if s.rr == nil {
		return resolve.ServerConfig(s.spec, s.res, be, distInitAddr)
	}
	return resolve.RoleServerConfig(s.roles, s.rr, be, distInitAddr)
}

// resolveServing decides what a deployment serves: its layout (for a deployment with roles,
// the prefill's, whose namespace both roles share) and each kind of serving group it runs.
func resolveServing(hcd *hicachev1alpha1.HiCacheDeployment) (*resolve.Resolved, []*servingRole, error) {
	if hcd.Spec.Roles == nil {
		res, err := resolve.Resolve(hcd)
		if err != nil {
			return nil, nil, err
		}
		return res, []*servingRole{plainRole(hcd, res)}, nil
	}
	roles, err := resolve.RolesOf(hcd)
	if err != nil {
		return nil, nil, err
	}
	served := make([]*servingRole, 0, 2)
	for _, rr := range roles.Each() {
		served = append(served, &servingRole{role: rr.Role, spec: rr.Spec, res: rr.Resolved, roles: roles, rr: rr})
	}
	return roles.Prefill.Resolved, served, nil
}

// capitalize starts a sentence with a capital.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// specReplicas is the number of serving groups the spec asks of each role, from the spec alone
// (also when it cannot be resolved).
func specReplicas(hcd *hicachev1alpha1.HiCacheDeployment) map[hicachev1alpha1.Role]int32 {
	roles := hcd.Spec.Roles
	if roles == nil {
		return map[hicachev1alpha1.Role]int32{"": ptr.Deref(hcd.Spec.Replicas, hicachev1alpha1.DefaultReplicas)}
	}
	return map[hicachev1alpha1.Role]int32{
		hicachev1alpha1.RolePrefill: ptr.Deref(roles.Prefill.Replicas, hicachev1alpha1.DefaultReplicas),
		hicachev1alpha1.RoleDecode:  ptr.Deref(roles.Decode.Replicas, hicachev1alpha1.DefaultReplicas),
	}
}

// servedRole is the kind of serving group of role r the spec runs, nil when it runs none.
func (o *observed) servedRole(r hicachev1alpha1.Role) *servingRole {
	for _, sr := range o.served {
		if sr.role == r {
			return sr
		}
	}
	return nil
}
