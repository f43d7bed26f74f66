package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// pdSample is the prefill/decode sample: DeepSeek-V4, prefill TP 8 × 2 groups, decode TP 16 × 1.
var pdSample = filepath.Join(samplesDir, "pd_deepseek_v4.yaml")

// TestPlanShowsBothRoles: plan shows each role's groups, L3 duties and command line, and the one
// namespace they share; every command line is accepted by the pinned release.
func TestPlanShowsBothRoles(t *testing.T) {
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	d := planOf(t, "-f", pdSample).Deployments[0]
	if len(d.Roles) != 2 || d.Roles[0].Role != "prefill" || d.Roles[1].Role != "decode" {
		t.Fatalf("roles %+v, want prefill then decode", d.Roles)
	}
	p, dec := d.Roles[0], d.Roles[1]
	if p.Group.Replicas != 2 || p.Group.TensorParallel != 8 || p.Group.Nodes != 1 {
		t.Errorf("prefill group %+v, want 2 groups of TP 8 on one node", p.Group)
	}
	if dec.Group.Replicas != 1 || dec.Group.TensorParallel != 16 || dec.Group.Nodes != 2 {
		t.Errorf("decode group %+v, want 1 group of TP 16 on two nodes", dec.Group)
	}
	if p.Writers != 1 || !p.L3.Reads || !p.L3.Writes {
		t.Errorf("prefill: %d writers, L3 %+v; want TP0 writing and every rank reading", p.Writers, p.L3)
	}
	if dec.Writers != 0 || dec.L3.Reads || dec.L3.Writes {
		t.Errorf("decode: %d writers, L3 %+v; want no L3 duties", dec.Writers, dec.L3)
	}
	if d.Layout.Namespace == "" || d.Transfer == nil || d.Transfer.BootstrapPort != 8998 {
		t.Errorf("namespace %q, transfer %+v", d.Layout.Namespace, d.Transfer)
	}
	for _, r := range d.Roles {
		args := sglang.ExpandVarRefs(r.Command[len(sglang.Command()):], map[string]string{"NODE_RANK": "1", "POD_IP": "10.0.0.1"})
		if err := spec.Validate(args); err != nil {
			t.Errorf("the pinned SGLang release refuses the %s role's command line: %v", r.Role, err)
		}
		if !slices.Contains(args, "--disaggregation-mode") || !slices.Contains(args, r.Role) {
			t.Errorf("the %s role's command line has no --disaggregation-mode %s: %q", r.Role, r.Role, args)
		}
		hasTag := strings.Contains(strings.Join(args, " "), `"extra_backend_tag":"`+d.Layout.Namespace+`"`)
		if hasTag != r.L3.Writes {
			t.Errorf("the %s role writes under %s: %v, want %v (%q)", r.Role, d.Layout.Namespace, hasTag, r.L3.Writes, args)
		}
	}
	table := runPlugin(t, "", "plan", "-f", pdSample).mustSucceed(t).stdout
	for _, want := range []string{"Prefill groups:  2 × 8 GPUs on 1 node", "Decode groups:   1 × 16 GPUs on 2 nodes",
		"Decode role: does not read and does not write L3", "shared by both roles", "SGLang command line of every decode rank",
		"--disaggregation-mode decode"} {
		if !strings.Contains(table, want) {
			t.Errorf("plan output lacks %q:\n%s", want, table)
		}
	}
}

// TestPlanRefusesRolesSGLangRefuses: a pair of roles the release refuses is refused by plan with
// the spec field to change.
func TestPlanRefusesRolesSGLangRefuses(t *testing.T) {
	b, err := os.ReadFile(pdSample)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(b), "l3: None", "l3: Offload", 1)
	res := runPlugin(t, doc, "plan", "-f", "-")
	if res.code == 0 || !strings.Contains(res.stderr, "spec.roles.decode.l3: Offload is refused by SGLang for DSV4 models") {
		t.Fatalf("exit %d, stderr %q; want a refusal naming spec.roles.decode.l3", res.code, res.stderr)
	}
}

// TestPlanAgreesWithTheController: the command line plan shows for each role is the one the
// operator renders into every group of that role (the leader's rendezvous address, which only
// the cluster knows, aside), so the plugin cannot drift from what runs.
func TestPlanAgreesWithTheController(t *testing.T) {
	for _, file := range []string{pdSample, sample("deepseek_v4"), sample("qwen3")} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			items, err := loadDeployments(source{name: file})
			if err != nil {
				t.Fatal(err)
			}
			h := items[0].hcd
			h.Namespace = defaultNamespace
			rep, err := planOne(items[0])
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{"": rep.Command}
			for _, r := range rep.Roles {
				want[r.Role] = r.Command
			}
			if h.Spec.Roles != nil {
				delete(want, "")
			}
			sets, err := hicachedeployment.RenderServingGroups(h, planBackend(), "sglang:test")
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for _, sts := range sets {
				role := sts.Labels[hicachev1alpha1.LabelRole]
				c := sts.Spec.Template.Spec.Containers[0]
				got := append(slices.Clone(c.Command), c.Args...)
				for i := range got {
					if i > 0 && got[i-1] == "--dist-init-addr" {
						got[i] = placeholderLeader
					}
				}
				if !slices.Equal(got, want[role]) {
					t.Errorf("StatefulSet %s runs\n  %q\nplan shows\n  %q", sts.Name, got, want[role])
				}
				seen[role]++
			}
			for role := range want {
				if seen[role] == 0 {
					t.Errorf("no StatefulSet of role %q", role)
				}
			}
		})
	}
}
