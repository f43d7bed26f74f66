package resolve_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// dsv4PD is the deployment: DeepSeek-V4, prefill TP 8 in two groups, decode TP 16 (two
// 8-GPU nodes) in one group, writing to a Mooncake store.
func dsv4PD() *hicachev1alpha1.HiCacheDeployment {
	return makeHCD("dsv4").Profile("DeepSeekV4").TP(8).Storage("mooncake").Roles(8, 2, 16, 1).Obj()
}

func mustRoles(t *testing.T, hcd *hicachev1alpha1.HiCacheDeployment) *resolve.Roles {
	t.Helper()
	r, err := resolve.RolesOf(hcd)
	if err != nil {
		t.Fatalf("RolesOf: %v", err)
	}
	return r
}

// roleArgs renders the command line of one role and parses it with the pinned release's table.
func roleArgs(t *testing.T, roles *resolve.Roles, rr *resolve.RoleResolved) map[string]string {
	t.Helper()
	cfg, _, err := resolve.RoleServerConfig(roles, rr, testBackend(), "leader:20102")
	if err != nil {
		t.Fatal(err)
	}
	args, err := sglang.Args(cfg)
	if err != nil {
		t.Fatalf("%s role: %v", rr.Role, resolve.SpecError(err))
	}
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	args = slices.Clone(args)
	for i, a := range args {
		if a == "$(NODE_RANK)" {
			args[i] = "1"
		}
	}
	occ, err := spec.Parse(args)
	if err != nil {
		t.Fatalf("the pinned release refuses the %s role's %q: %v", rr.Role, args, err)
	}
	out := map[string]string{}
	for _, o := range occ {
		out[o.Argument.Dest] = strings.Join(o.Values, " ")
		if len(o.Values) == 0 {
			out[o.Argument.Dest] = "true"
		}
	}
	return out
}

func TestDeepSeekV4PrefillDecode(t *testing.T) {
	roles := mustRoles(t, dsv4PD())
	p, d := roles.Prefill, roles.Decode
	if p.Replicas != 2 || p.Nodes != 1 || p.GPUsPerPod != 8 {
		t.Errorf("prefill: %d groups of %d pods with %d GPUs, want 2 groups of 1 pod with 8", p.Replicas, p.Nodes, p.GPUsPerPod)
	}
	if d.Replicas != 1 || d.Nodes != 2 || d.GPUsPerPod != 8 {
		t.Errorf("decode: %d groups of %d pods with %d GPUs, want 1 group of 2 pods with 8", d.Replicas, d.Nodes, d.GPUsPerPod)
	}
	if roles.Namespace() == "" || d.Namespace != p.Namespace {
		t.Errorf("namespaces: prefill %q, decode %q; want one shared namespace", p.Namespace, d.Namespace)
	}
	// The prefill writes exactly as a deployment without roles of its topology would.
	alone, err := resolve.Resolve(resolve.RoleSpec(dsv4PD(), hicachev1alpha1.RolePrefill))
	if err != nil {
		t.Fatal(err)
	}
	if alone.Namespace != roles.Namespace() {
		t.Errorf("the prefill's namespace %q differs from the same servers' without roles, %q", roles.Namespace(), alone.Namespace)
	}
	if got := p.Writers(); got != 1 {
		t.Errorf("prefill writers = %d, want 1 (TP0 of the replicated DeepSeek-V4 pools)", got)
	}
	if got := d.Writers(); got != 0 || d.L3.Reads || d.L3.Writes {
		t.Errorf("decode without L3: %d writers, L3 %+v; want no duties", got, d.L3)
	}
	if d.SegmentPerRank != 0 {
		t.Errorf("decode without L3 lends %d bytes to the store, want 0", d.SegmentPerRank)
	}

	pa := roleArgs(t, roles, p)
	for dest, want := range map[string]string{"disaggregation_mode": "prefill", "tp_size": "8", "disaggregation_bootstrap_port": "8998", "disaggregation_transfer_backend": "mooncake", "enable_hierarchical_cache": "true", "hicache_storage_backend": "mooncake"} {
		if pa[dest] != want {
			t.Errorf("prefill %s = %q, want %q", dest, pa[dest], want)
		}
	}
	if !strings.Contains(pa["hicache_storage_backend_extra_config"], `"extra_backend_tag":"`+roles.Namespace()+`"`) {
		t.Errorf("prefill extra config %s does not write under %s", pa["hicache_storage_backend_extra_config"], roles.Namespace())
	}
	da := roleArgs(t, roles, d)
	for dest, want := range map[string]string{"disaggregation_mode": "decode", "tp_size": "16", "nnodes": "2", "disaggregation_bootstrap_port": "8998"} {
		if da[dest] != want {
			t.Errorf("decode %s = %q, want %q", dest, da[dest], want)
		}
	}
	for _, dest := range []string{"enable_hierarchical_cache", "hicache_storage_backend", "hicache_storage_backend_extra_config"} {
		if v, ok := da[dest]; ok {
			t.Errorf("decode without L3 renders %s %q", dest, v)
		}
	}
}

func TestDecodeWithL3SharesThePrefillNamespace(t *testing.T) {
	for name, hcd := range map[string]*hicachev1alpha1.HiCacheDeployment{
		"DSV4 decode HiCache at another TP":   makeHCD("a").Profile("DeepSeekV4").Storage("mooncake").Roles(8, 1, 16, 1).DecodeL3("HiCache").Obj(),
		"Qwen3 decode offload at the same TP": makeHCD("b").Profile("Qwen3").Storage("mooncake").Roles(4, 2, 4, 2).DecodeL3("Offload").Obj(),
	} {
		t.Run(name, func(t *testing.T) {
			roles := mustRoles(t, hcd)
			da := roleArgs(t, roles, roles.Decode)
			if !strings.Contains(da["hicache_storage_backend_extra_config"], `"extra_backend_tag":"`+roles.Namespace()+`"`) {
				t.Errorf("decode extra config %q does not write under the prefill's %s", da["hicache_storage_backend_extra_config"], roles.Namespace())
			}
			if roles.Decode.Writers() == 0 || roles.Decode.SegmentPerRank != roles.Prefill.SegmentPerRank {
				t.Errorf("decode: %d writers, %d bytes per rank; want writers and the prefill's segment", roles.Decode.Writers(), roles.Decode.SegmentPerRank)
			}
		})
	}
}

func TestRoleChangesAndTheNamespace(t *testing.T) {
	base := mustRoles(t, dsv4PD()).Namespace()
	decodeOnly := dsv4PD()
	decodeOnly.Spec.Roles.Decode.Topology.TensorParallel = 8
	if got := mustRoles(t, decodeOnly).Namespace(); got != base {
		t.Errorf("a decode-only TP change moved the namespace from %s to %s", base, got)
	}
	breaking := dsv4PD()
	breaking.Spec.HiCache.KVCacheDType = "fp8_e4m3"
	if got := mustRoles(t, breaking).Namespace(); got == base {
		t.Errorf("a KV dtype change kept the namespace %s", got)
	}
}

func TestRolesRefuseWithTheFieldToChange(t *testing.T) {
	for name, tc := range map[string]struct {
		hcd   *hicachev1alpha1.HiCacheDeployment
		field string
		want  string
	}{
		"decode offload on DeepSeek-V4": {
			hcd:   makeHCD("x").Profile("DeepSeekV4").Storage("mooncake").Roles(8, 1, 16, 1).DecodeL3("Offload").Obj(),
			field: "spec.roles.decode.l3", want: "refused by SGLang for DSV4 models"},
		"MHA decode offload at another TP": {
			hcd:   makeHCD("x").Profile("Qwen3").Storage("mooncake").Roles(4, 1, 8, 1).DecodeL3("Offload").Obj(),
			field: "spec.roles.decode.topology.tensorParallel", want: "tp_size 4 on prefill, 8 on decode"},
		"a draft with PP on decode": {
			hcd:   makeHCD("x").Profile("DeepSeekV3").Draft("NEXTN").Roles(8, 1, 8, 1).RolePP(hicachev1alpha1.RoleDecode, 2).Obj(),
			field: "spec.roles.decode.topology.pipelineParallel", want: "only on prefill servers"},
		"DSpark at two attention TP sizes": {
			hcd:   makeHCD("x").Profile("DeepSeekV4").Draft("DSPARK").Roles(8, 1, 16, 1).Obj(),
			field: "spec.roles.decode.topology.tensorParallel", want: "prefill has 8, decode 16"},
		"a decode group of a fraction of a node": {
			hcd:   makeHCD("x").Profile("DeepSeekV4").Roles(8, 1, 12, 1).Obj(),
			field: "spec.roles.decode.topology", want: "needs 12 GPUs"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := resolve.RolesOf(tc.hcd)
			var fe *resolve.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a FieldError of %s", err, tc.field)
			}
			if fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), tc.field) {
				t.Fatalf("got %q (field %s), want %s: ...%s...", err, fe.Field, tc.field, tc.want)
			}
		})
	}
}

// Resolve decides one kind of serving group: a deployment with roles has two, which RolesOf
// decides.
func TestResolveLeavesRolesToRolesOf(t *testing.T) {
	_, err := resolve.Resolve(dsv4PD())
	if !errors.Is(err, resolve.ErrHasRoles) || !strings.Contains(err.Error(), "spec.roles") {
		t.Fatalf("Resolve of a deployment with roles: %v, want ErrHasRoles naming spec.roles", err)
	}
}

func TestRoleSpecMergesTheRoleOverrides(t *testing.T) {
	hcd := makeHCD("x").Profile("DeepSeekV4").TP(8).Labels("team", "a").Env("A", "1").Resources("8", "64Gi").
		Roles(8, 2, 16, 1).RoleLabels(hicachev1alpha1.RoleDecode, "tier", "decode").Obj()
	hcd.Spec.Roles.Decode.Template.Env = append(hcd.Spec.Roles.Decode.Template.Env, hcd.Spec.Template.Env[0])
	hcd.Spec.Roles.Decode.Template.Env[0].Value = "2"
	d := resolve.RoleSpec(hcd, hicachev1alpha1.RoleDecode)
	if d.Spec.Roles != nil || d.Spec.Topology.TensorParallel != 16 || *d.Spec.Replicas != 1 {
		t.Errorf("decode spec: roles %v, TP %d, replicas %d; want no roles, TP 16, 1 group", d.Spec.Roles, d.Spec.Topology.TensorParallel, *d.Spec.Replicas)
	}
	if d.Spec.Template.Labels["team"] != "a" || d.Spec.Template.Labels["tier"] != "decode" {
		t.Errorf("decode labels %v, want team=a and tier=decode", d.Spec.Template.Labels)
	}
	if len(d.Spec.Template.Env) != 1 || d.Spec.Template.Env[0].Value != "2" {
		t.Errorf("decode env %v, want A=2 (the role's value)", d.Spec.Template.Env)
	}
	p := resolve.RoleSpec(hcd, hicachev1alpha1.RolePrefill)
	if _, ok := p.Spec.Template.Labels["tier"]; ok || *p.Spec.Replicas != 2 || p.Spec.Resources.Requests.Cpu().String() != "8" {
		t.Errorf("prefill spec: labels %v, replicas %d, resources %v", p.Spec.Template.Labels, *p.Spec.Replicas, p.Spec.Resources)
	}
	if hcd.Spec.Template.Labels["tier"] != "" || hcd.Spec.Template.Env[0].Value != "1" {
		t.Errorf("RoleSpec changed the deployment: labels %v, env %v", hcd.Spec.Template.Labels, hcd.Spec.Template.Env)
	}
}

// A deployment with roles names longer StatefulSets ("<name>-prefill-<g>"): its name is bounded
// so that its pods' controller-revision-hash label stays a valid label value.
func TestRolesNameLength(t *testing.T) {
	long := strings.Repeat("a", resolve.MaxRolesNameLength+1)
	if _, err := resolve.RolesOf(makeHCD(long).Profile("DeepSeekV4").TP(8).Roles(8, 1, 8, 1).Obj()); err == nil || !strings.Contains(err.Error(), "metadata.name") {
		t.Fatalf("RolesOf of a %d-character name: %v, want a refusal naming metadata.name", len(long), err)
	}
	name := long[:resolve.MaxRolesNameLength]
	if _, err := resolve.RolesOf(makeHCD(name).Profile("DeepSeekV4").TP(8).Roles(8, 1, 8, 1).Obj()); err != nil {
		t.Fatalf("RolesOf of a %d-character name: %v", len(name), err)
	}
	// The longest group name, its pods' controller-revision-hash (name-<10 characters>).
	if sts := name + "-prefill-1023"; len(sts)+11 > 63 {
		t.Errorf("StatefulSet %s makes a controller-revision-hash of %d characters", sts, len(sts)+11)
	}
}
