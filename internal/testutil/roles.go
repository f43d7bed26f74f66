package testutil

import (
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// Roles splits the deployment into a prefill role of prefillGroups groups at tensor-parallel
// size prefillTP and a decode role of decodeGroups groups at decodeTP, with the defaults the API
// server fills in (decode L3 None, Mooncake transfer on port 8998).
func (b *HCDBuilder) Roles(prefillTP, prefillGroups, decodeTP, decodeGroups int32) *HCDBuilder {
	b.h.Spec.Roles = &hicachev1alpha1.RolesSpec{
		Prefill: hicachev1alpha1.PrefillRoleSpec{RoleSpec: hicachev1alpha1.RoleSpec{
			Topology: hicachev1alpha1.RoleTopology{TensorParallel: prefillTP},
			Replicas: ptr.To(prefillGroups),
		}},
		Decode: hicachev1alpha1.DecodeRoleSpec{
			RoleSpec: hicachev1alpha1.RoleSpec{
				Topology: hicachev1alpha1.RoleTopology{TensorParallel: decodeTP},
				Replicas: ptr.To(decodeGroups),
			},
			L3: hicachev1alpha1.DecodeL3None,
		},
		Transfer: hicachev1alpha1.TransferSpec{Backend: hicachev1alpha1.TransferMooncake, BootstrapPort: 8998},
	}
	return b
}

// DecodeL3 sets what the decode role does with L3 (after Roles).
func (b *HCDBuilder) DecodeL3(mode string) *HCDBuilder {
	b.h.Spec.Roles.Decode.L3 = hicachev1alpha1.DecodeL3(mode)
	return b
}

// RolePP sets one role's pipeline-parallel size (after Roles).
func (b *HCDBuilder) RolePP(role hicachev1alpha1.Role, n int32) *HCDBuilder {
	b.roleSpec(role).Topology.PipelineParallel = n
	return b
}

// RoleLabels adds pod labels of one role (after Roles).
func (b *HCDBuilder) RoleLabels(role hicachev1alpha1.Role, kv ...string) *HCDBuilder {
	rs := b.roleSpec(role)
	if rs.Template.Labels == nil {
		rs.Template.Labels = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		rs.Template.Labels[kv[i]] = kv[i+1]
	}
	return b
}

// Transfer sets the KV transfer backend and RDMA devices (after Roles).
func (b *HCDBuilder) Transfer(backend, ibDevice string) *HCDBuilder {
	b.h.Spec.Roles.Transfer.Backend = hicachev1alpha1.TransferBackend(backend)
	b.h.Spec.Roles.Transfer.IBDevice = ibDevice
	return b
}

func (b *HCDBuilder) roleSpec(role hicachev1alpha1.Role) *hicachev1alpha1.RoleSpec {
	if role == hicachev1alpha1.RoleDecode {
		return &b.h.Spec.Roles.Decode.RoleSpec
	}
	return &b.h.Spec.Roles.Prefill.RoleSpec
}
