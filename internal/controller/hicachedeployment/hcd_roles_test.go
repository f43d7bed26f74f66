package hicachedeployment

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

const pdSample = "pd_deepseek_v4.yaml"

// mustServe resolves what a deployment serves.
func mustServe(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) []*servingRole {
	t.Helper()
	_, served, err := resolveServing(h)
	if err != nil {
		t.Fatalf("resolveServing: %v", err)
	}
	return served
}

// buildAll renders every serving group of a deployment, as reconcileChildren does.
func buildAll(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) map[GroupKey]*appsv1.StatefulSet {
	t.Helper()
	out := map[GroupKey]*appsv1.StatefulSet{}
	for _, sr := range mustServe(t, h) {
		for g := range sr.res.Replicas {
			sts, err := buildRoleGroup(h, sr, testsupport.TestBackend(), g, testImages)
			if err != nil {
				t.Fatalf("buildRoleGroup %s %d: %v", sr.role, g, err)
			}
			out[GroupKey{role: sr.role, index: g}] = sts
		}
	}
	return out
}

// The PD sample runs two prefill groups of one 8-GPU node and one decode group of two, each
// named and labelled by its role, each role's command line its own and accepted by the pinned
// release; only the prefill ranks, which write L3, carry its namespace.
func TestBuildRoleGroups(t *testing.T) {
	h := testsupport.LoadSample(t, pdSample)
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	sets := buildAll(t, h)
	want := map[GroupKey]struct {
		name  string
		nodes int32
	}{
		{role: hicachev1alpha1.RolePrefill, index: 0}: {"deepseek-v4-pd-prefill-0", 1},
		{role: hicachev1alpha1.RolePrefill, index: 1}: {"deepseek-v4-pd-prefill-1", 1},
		{role: hicachev1alpha1.RoleDecode, index: 0}:  {"deepseek-v4-pd-decode-0", 2},
	}
	if len(sets) != len(want) {
		t.Fatalf("%d groups rendered, want %d", len(sets), len(want))
	}
	namespace := mustServe(t, h)[0].res.Namespace
	for k, w := range want {
		sts := sets[k]
		if sts == nil {
			t.Fatalf("no group %s", k)
		}
		role := string(k.role)
		if sts.Name != w.name || sts.Spec.ServiceName != w.name || *sts.Spec.Replicas != w.nodes {
			t.Errorf("%s: StatefulSet %s (Service %s) of %d pods, want %s of %d", k, sts.Name, sts.Spec.ServiceName, *sts.Spec.Replicas, w.name, w.nodes)
		}
		for what, l := range map[string]map[string]string{"StatefulSet": sts.Labels, "pod": sts.Spec.Template.Labels, "selector": sts.Spec.Selector.MatchLabels} {
			if l[hicachev1alpha1.LabelRole] != role || l[hicachev1alpha1.LabelGroup] != fmt.Sprint(k.index) || l[hicachev1alpha1.LabelDeployment] != h.Name {
				t.Errorf("%s: %s labels %v, want role %s, group %d", k, what, l, role, k.index)
			}
		}
		if sel := labels.SelectorFromSet(sts.Spec.Selector.MatchLabels); !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
			t.Errorf("%s: the selector does not select its own pods", k)
		}
		svc := buildHeadlessService(h, k)
		if svc.Name != w.name || !cmp.Equal(svc.Spec.Selector, sts.Spec.Selector.MatchLabels) {
			t.Errorf("%s: headless Service %s selects %v, want %s selecting %v", k, svc.Name, svc.Spec.Selector, w.name, sts.Spec.Selector.MatchLabels)
		}
		c := sts.Spec.Template.Spec.Containers[0]
		args := sglang.ExpandVarRefs(c.Args, map[string]string{"NODE_RANK": "1", "POD_IP": "10.0.0.1", resolve.ServerAdminKeyEnv: "k"})
		if err := spec.Validate(args); err != nil {
			t.Errorf("%s: the pinned SGLang release refuses the command line: %v", k, err)
		}
		line := strings.Join(c.Args, " ")
		if !strings.Contains(line, "--disaggregation-mode "+role) || !strings.Contains(line, "--disaggregation-bootstrap-port 8998") {
			t.Errorf("%s: command line without its disaggregation flags: %s", k, line)
		}
		if w.nodes > 1 && !strings.Contains(line, fmt.Sprintf("--dist-init-addr %s-0.%s.default.svc:%d", w.name, w.name, DistInitPort)) {
			t.Errorf("%s: the rendezvous is not its own leader: %s", k, line)
		}
		if gpus := c.Resources.Limits[GPUResource]; gpus.Value() != 8 {
			t.Errorf("%s: %s GPUs per pod, want 8", k, gpus.String())
		}
		writes := k.role == hicachev1alpha1.RolePrefill
		if got := sts.Spec.Template.Labels[hicachev1alpha1.LabelCacheNamespace]; (got == namespace) != writes || (!writes && got != "") {
			t.Errorf("%s: pods labelled with L3 namespace %q; the prefill's is %s and only ranks that write L3 carry it", k, got, namespace)
		}
		if got := strings.Contains(line, "--enable-hierarchical-cache"); got != writes {
			t.Errorf("%s: hierarchical cache %v, want %v: %s", k, got, writes, line)
		}
		// The proxy serves the bootstrap port on the pod IP; SGLang binds it on loopback.
		guard := sts.Spec.Template.Spec.Containers[1]
		bootstrap := slices.ContainsFunc(guard.Ports, func(p corev1.ContainerPort) bool { return p.Name == "bootstrap" && p.ContainerPort == 8998 })
		forwarded := slices.Contains(guard.Args, "--port=8998")
		if bootstrap != writes || forwarded != writes || guard.Name != resolve.GuardContainer {
			t.Errorf("%s: bootstrap port exposed %v, forwarded %v by %s, want both on prefill ranks only", k, bootstrap, forwarded, guard.Name)
		}
		if got, ok := sts.Spec.Template.Annotations[router.BootstrapPortAnnotation]; ok != writes || (ok && got != "8998") {
			t.Errorf("%s: router's bootstrap port annotation %q (set %v), want 8998 on prefill pods only", k, got, ok)
		}
		if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil || !slices.Contains(c.SecurityContext.Capabilities.Add, "IPC_LOCK") {
			t.Errorf("%s: the RDMA transfer (backend mooncake) needs IPC_LOCK", k)
		}
		if w.nodes > 1 {
			terms := sts.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			if len(terms) == 0 || !cmp.Equal(terms[len(terms)-1].LabelSelector.MatchLabels, sts.Spec.Selector.MatchLabels) {
				t.Errorf("%s: the ranks' anti-affinity does not select the group's own ranks: %+v", k, terms)
			}
		}
	}
	if sets[GroupKey{role: hicachev1alpha1.RolePrefill}].Annotations[hicachev1alpha1.AnnotationTemplateHash] == sets[GroupKey{role: hicachev1alpha1.RoleDecode}].Annotations[hicachev1alpha1.AnnotationTemplateHash] {
		t.Error("the prefill and decode templates have one hash")
	}
	// Over TCP no RDMA device is needed.
	tcp := testsupport.LoadSample(t, pdSample)
	tcp.Spec.Roles.Transfer.Backend = hicachev1alpha1.TransferMooncakeTCP
	for k, sts := range buildAll(t, tcp) {
		if sc := sts.Spec.Template.Spec.Containers[0].SecurityContext; sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "IPC_LOCK") {
			t.Errorf("%s: IPC_LOCK with the mooncake_tcp transfer and a TCP store", k)
		}
	}
}

func TestBuildRoleGroupsGolden(t *testing.T) {
	sets := buildAll(t, testsupport.LoadSample(t, pdSample))
	for _, k := range []GroupKey{{role: hicachev1alpha1.RolePrefill, index: 1}, {role: hicachev1alpha1.RoleDecode, index: 0}} {
		t.Run(k.String(), func(t *testing.T) {
			b, err := yaml.Marshal(sets[k])
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", "pd-deepseek-v4-"+k.String()+".statefulset.golden.yaml"), b)
		})
	}
}

// A decode role that writes L3 (Offload, HiCache) carries the prefill's namespace: it keeps the
// namespace in use like the prefill does.
func TestDecodeWithL3CarriesTheNamespace(t *testing.T) {
	h := testsupport.MakeHCD("q").Profile("Qwen3").TP(4).Storage("mooncake").Roles(4, 1, 4, 1).DecodeL3("HiCache").Obj()
	served := mustServe(t, h)
	for _, sr := range served {
		sts, err := buildRoleGroup(h, sr, testsupport.TestBackend(), 0, PodImages{SGLang: "img", Guard: testGuardImage})
		if err != nil {
			t.Fatal(err)
		}
		if got := sts.Spec.Template.Labels[hicachev1alpha1.LabelCacheNamespace]; got != served[0].res.Namespace || got == "" {
			t.Errorf("%s pods write under %q, want the shared namespace %s", sr.role, got, served[0].res.Namespace)
		}
	}
}

// A deployment without roles keeps its names and labels: no role label, "<hcd>-<g>".
func TestGroupsWithoutRolesKeepTheirNames(t *testing.T) {
	h := testsupport.LoadSample(t, "hicachedeployment_qwen3.yaml")
	sets := buildAll(t, h)
	sts := sets[GroupKey{}]
	if sts == nil || sts.Name != h.Name+"-0" {
		t.Fatalf("no group %s-0 among %d", h.Name, len(sets))
	}
	for _, l := range []map[string]string{sts.Labels, sts.Spec.Template.Labels, sts.Spec.Selector.MatchLabels, buildHeadlessService(h, GroupKey{}).Spec.Selector} {
		if _, ok := l[hicachev1alpha1.LabelRole]; ok {
			t.Errorf("labels %v of a deployment without roles name a role", l)
		}
	}
}

func TestGroupsFrom(t *testing.T) {
	h := testsupport.LoadSample(t, pdSample)
	owned := func(name string, l map[string]string) appsv1.StatefulSet {
		return appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: l,
			OwnerReferences: []metav1.OwnerReference{ownerRef(h)}}}
	}
	stranger := owned("other-prefill-0", groupLabels(h, GroupKey{role: hicachev1alpha1.RolePrefill}))
	stranger.OwnerReferences = nil
	sets := []appsv1.StatefulSet{
		owned("p0", groupLabels(h, GroupKey{role: hicachev1alpha1.RolePrefill})),
		owned("p1", groupLabels(h, GroupKey{role: hicachev1alpha1.RolePrefill, index: 1})),
		owned("d0", groupLabels(h, GroupKey{role: hicachev1alpha1.RoleDecode})),
		owned("old0", groupLabels(h, GroupKey{})), // from before the roles
		owned("odd", map[string]string{hicachev1alpha1.LabelGroup: "0", hicachev1alpha1.LabelRole: "router"}),
		stranger,
	}
	pod := func(name string, k GroupKey, deleted bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: groupLabels(h, k)}}
		if deleted {
			p.DeletionTimestamp = ptr.To(testsupport.T0)
		}
		return p
	}
	pods := []corev1.Pod{
		pod("p0-0", GroupKey{role: hicachev1alpha1.RolePrefill}, false),
		pod("d0-0", GroupKey{role: hicachev1alpha1.RoleDecode}, false),
		pod("d0-1", GroupKey{role: hicachev1alpha1.RoleDecode}, false),
		pod("d0-1-going", GroupKey{role: hicachev1alpha1.RoleDecode}, true),
		pod("old0-0", GroupKey{}, false),
		pod("decode-1-0", GroupKey{role: hicachev1alpha1.RoleDecode, index: 1}, false), // no such group
	}
	got := map[string][]string{}
	for k, g := range groupsFrom(h, sets, pods) {
		if g.key != k {
			t.Errorf("group %s keyed %s", g.key, k)
		}
		names := []string{g.sts.Name}
		for _, p := range g.pods {
			names = append(names, p.Name)
		}
		got[k.String()] = names
	}
	want := map[string][]string{
		"prefill-0": {"p0", "p0-0"}, "prefill-1": {"p1"}, "decode-0": {"d0", "d0-0", "d0-1"}, "0": {"old0", "old0-0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
}

// Status counts the groups of both roles, each against its own replicas and shape, and a decode
// role without L3 is never "off layout".
func TestCountGroupsOfRoles(t *testing.T) {
	h := testsupport.LoadSample(t, pdSample)
	served := mustServe(t, h)
	p, d := served[0].res, served[1].res
	prefill := func(g int) *group { return inRole(hicachev1alpha1.RolePrefill, readyGroup(g, p.Nodes, "h", p)) }
	decode := func(g int) *group {
		grp := inRole(hicachev1alpha1.RoleDecode, readyGroup(g, d.Nodes, "h", d))
		for i := range grp.pods {
			delete(grp.pods[i].Labels, hicachev1alpha1.LabelCacheNamespace)
		}
		return grp
	}
	obs := observation(t, h, "h", prefill(0), prefill(1), decode(0), inRole(hicachev1alpha1.RoleDecode, readyGroup(1, 2, "h", d)))
	var st hicachev1alpha1.HiCacheDeploymentStatus
	countGroups(h, &st, obs, 3)
	if got := [3]int32{st.Replicas, st.ReadyReplicas, st.UpdatedReplicas}; got != [3]int32{3, 3, 3} || st.Ready != "3/3" {
		t.Errorf("existing, ready, updated = %v (%s), want 3 of 3: decode group 1 is beyond the decode role's replicas", got, st.Ready)
	}
	if off := groupsOffLayout(obs, p); len(off) != 0 {
		t.Errorf("groups %v off layout; the decode role writes no namespace", off)
	}
}

// With roles the deployment's pods admit each other on every port but the HTTP API: decode
// servers reach the prefill's bootstrap server and both roles' transfer engines.
func TestDeploymentNetworkPolicyAdmitsTheRoles(t *testing.T) {
	h := testsupport.LoadSample(t, pdSample)
	np := BuildDeploymentNetworkPolicy(h, mustServe(t, h)[0].res)
	found := false
	for _, rule := range np.Spec.Ingress {
		for _, from := range rule.From {
			if from.PodSelector == nil || from.PodSelector.MatchLabels[hicachev1alpha1.LabelDeployment] != h.Name || len(from.PodSelector.MatchExpressions) != 1 ||
				from.PodSelector.MatchExpressions[0].Key != hicachev1alpha1.LabelRole {
				continue
			}
			found = true
			for _, port := range rule.Ports {
				lo, hi := port.Port.IntVal, ptr.Deref(port.EndPort, port.Port.IntVal)
				if lo <= SGLangPort && SGLangPort <= hi {
					t.Errorf("the roles' rule admits the HTTP port: %v", port)
				}
				if *port.Protocol == corev1.ProtocolTCP && lo <= 8998 && 8998 <= hi {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("no rule admits the role pods to each other: %+v", np.Spec.Ingress)
	}
	if svc := BuildClientService(h); svc.Spec.Selector[hicachev1alpha1.LabelRouter] != h.Name {
		t.Errorf("with roles the client Service selects %v, want the router's pods", svc.Spec.Selector)
	}
}

// podsOf are running pods of a rendered group: the StatefulSet's template labels on each.
func podsOf(sts *appsv1.StatefulSet) []corev1.Pod {
	out := make([]corev1.Pod, *sts.Spec.Replicas)
	for i := range out {
		out[i] = corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: fmt.Sprintf("%s-%d", sts.Name, i), Labels: sts.Spec.Template.Labels}}
		out[i].Status.Phase = corev1.PodRunning
	}
	return out
}

// An L3 namespace is in use while a group of any role of any deployment writes it: the rendered
// pods of each role, old and new layout, mid-rollout. A decode role without L3 neither reads nor
// writes, so it keeps no namespace in use; one that offloads does.
func TestNamespaceInUseByRoles(t *testing.T) {
	deployment := func(name, l3, revision string) *hicachev1alpha1.HiCacheDeployment {
		h := testsupport.LoadSample(t, pdSample)
		h.Name = name
		h.Spec.Model.Revision = revision
		h.Spec.Roles.Decode.L3 = hicachev1alpha1.DecodeL3(l3)
		if l3 == "Offload" {
			// Offload is refused for DeepSeek-V4 (its pools): an MLA model without a draft offloads.
			h.Spec.Profile, h.Spec.Model.Source.SubPath, h.Spec.Topology.Draft = "DeepSeekV3", "deepseek-ai/DeepSeek-V3", nil
		}
		return h
	}
	type side struct{ prefillOld, decodeOld bool }
	cases := map[string]struct {
		l3     string
		groups side
		other  bool // another deployment of the old layout still runs
		inUse  bool
		pods   int
	}{
		"both roles on the old layout":                     {l3: "None", groups: side{true, true}, inUse: true, pods: 2},
		"prefill rolled, decode without L3 not yet":        {l3: "None", groups: side{false, true}, inUse: false},
		"prefill rolled, another deployment's prefill not": {l3: "None", groups: side{false, false}, other: true, inUse: true, pods: 1},
		"prefill rolled, decode that offloads not yet":     {l3: "Offload", groups: side{false, true}, inUse: true, pods: 2},
		"prefill not rolled, decode that offloads rolled":  {l3: "Offload", groups: side{true, false}, inUse: true, pods: 2},
		"both rolled": {l3: "Offload", groups: side{false, false}, inUse: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			old, cur := deployment("d", tc.l3, "1111111111111111111111111111111111111111"), deployment("d", tc.l3, "2222222222222222222222222222222222222222")
			oldNS, curNS := mustServe(t, old)[0].res.Namespace, mustServe(t, cur)[0].res.Namespace
			if oldNS == curNS {
				t.Fatalf("a new model revision keeps namespace %s", oldNS)
			}
			var pods []corev1.Pod
			pick := func(wantOld bool, role hicachev1alpha1.Role, g int) {
				h := cur
				if wantOld {
					h = old
				}
				pods = append(pods, podsOf(buildAll(t, h)[GroupKey{role: role, index: g}])...)
			}
			pick(tc.groups.prefillOld, hicachev1alpha1.RolePrefill, 0)
			pick(tc.groups.prefillOld, hicachev1alpha1.RolePrefill, 1)
			pick(tc.groups.decodeOld, hicachev1alpha1.RoleDecode, 0)
			if tc.other {
				pods = append(pods, podsOf(buildAll(t, deployment("e", tc.l3, "1111111111111111111111111111111111111111"))[GroupKey{role: hicachev1alpha1.RolePrefill}])...)
			}
			use := storeuse.UsersOf(storeuse.StoreScope{Namespace: oldNS}, pods, nil)
			if use.InUse() != tc.inUse || use.Pods != tc.pods {
				t.Errorf("namespace %s used by %+v, want in use %v by %d pods", oldNS, use, tc.inUse, tc.pods)
			}
		})
	}
}

// The router's prefill and decode selectors pick, among the pods the operator renders, exactly
// the leaders of each role's groups, and every prefill leader tells it its bootstrap port.
func TestRouterSelectsTheRenderedLeaders(t *testing.T) {
	h := pdWithRouter(t, hicachev1alpha1.RouterSpec{})
	objs, err := BuildRouter(h, storeuse.DefaultRouterImage)
	if err != nil {
		t.Fatal(err)
	}
	args := objs.Deployment.Spec.Template.Spec.Containers[0].Args
	pods := map[string]*corev1.Pod{}
	for _, sts := range buildAll(t, h) {
		for i := range *sts.Spec.Replicas {
			l := labels.Set{}
			for k, v := range sts.Spec.Template.Labels {
				l[k] = v
			}
			l[appsv1.PodIndexLabel] = fmt.Sprint(i) // set by the StatefulSet controller
			pods[fmt.Sprintf("%s-%d", sts.Name, i)] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: l, Annotations: sts.Spec.Template.Annotations}}
		}
	}
	for flag, want := range map[string][]string{
		"--prefill-selector": {h.Name + "-prefill-0-0", h.Name + "-prefill-1-0"},
		"--decode-selector":  {h.Name + "-decode-0-0"},
	} {
		sel := selectorArg(t, args, flag)
		if sel == nil {
			t.Fatalf("router args %q lack %s", args, flag)
		}
		var got []string
		for name, p := range pods {
			if sel.Matches(labels.Set(p.Labels)) {
				got = append(got, name)
				if flag == "--prefill-selector" && p.Annotations[router.BootstrapPortAnnotation] != "8998" {
					t.Errorf("prefill leader %s has no bootstrap port annotation for the router: %v", name, p.Annotations)
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s %s selects %q of the rendered pods, want %q", flag, sel, got, want)
		}
	}
}

// Status counts each role's groups and names the role that is not ready, and the groups held
// for the other role.
func TestComputeStatusOfRoles(t *testing.T) {
	h := testsupport.LoadSample(t, pdSample)
	served := mustServe(t, h)
	p, d := served[0].res, served[1].res
	prefill := func(g int, hash string) *group {
		return inRole(hicachev1alpha1.RolePrefill, readyGroup(g, p.Nodes, hash, p))
	}
	decode := func(g int, hash string) *group {
		return inRole(hicachev1alpha1.RoleDecode, readyGroup(g, d.Nodes, hash, d))
	}
	type counts struct{ prefill, decode string }
	cases := map[string]struct {
		groups   []*group
		inStep   []GroupKey
		ready    metav1.ConditionStatus
		progress metav1.ConditionStatus
		want     counts
		messages map[string][]string
	}{
		"both roles ready": {
			groups: []*group{prefill(0, "h"), prefill(1, "h"), decode(0, "h")},
			ready:  metav1.ConditionTrue, progress: metav1.ConditionFalse, want: counts{"2/2", "1/1"},
			messages: map[string][]string{"Ready": {"All 3 serving groups are ready"}},
		},
		"the decode group is missing": {
			groups: []*group{prefill(0, "h"), prefill(1, "h")},
			ready:  metav1.ConditionFalse, progress: metav1.ConditionTrue, want: counts{"2/2", "0/1"},
			messages: map[string][]string{"Ready": {"2 of 3 serving groups are ready", "the decode role has 0 of 1 groups ready"}},
		},
		"rolling in step": {
			groups: []*group{prefill(0, "h"), prefill(1, "old"), decode(0, "old")},
			inStep: []GroupKey{{role: hicachev1alpha1.RolePrefill, index: 1}},
			ready:  metav1.ConditionTrue, progress: metav1.ConditionTrue, want: counts{"2/2", "1/1"},
			messages: map[string][]string{"Progressing": {"1 of 3 serving groups run the current spec", "(prefill 1 of 2, decode 0 of 1)",
				"prefill group 1 waits for the decode role: the roles roll in step"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obs := observation(t, h, "h", tc.groups...)
			obs.inStep = tc.inStep
			st := computeStatus(h, obs)
			if st.Roles == nil {
				t.Fatal("no status.roles")
			}
			if got := (counts{st.Roles.Prefill.Ready, st.Roles.Decode.Ready}); got != tc.want {
				t.Errorf("roles ready %+v, want %+v", got, tc.want)
			}
			c := condsOf(st)
			if c[hicachev1alpha1.ConditionReady].Status != tc.ready || c[hicachev1alpha1.ConditionProgressing].Status != tc.progress {
				t.Errorf("Ready %s, Progressing %s; want %s, %s (%v)", c[hicachev1alpha1.ConditionReady].Status, c[hicachev1alpha1.ConditionProgressing].Status, tc.ready, tc.progress, st.Conditions)
			}
			for typ, phrases := range tc.messages {
				for _, ph := range phrases {
					if m := message(st, typ); !strings.Contains(m, ph) {
						t.Errorf("%s says %q, want %q in it", typ, m, ph)
					}
				}
			}
			if c[hicachev1alpha1.ConditionCacheLayoutCurrent].Status == metav1.ConditionFalse && !strings.Contains(name, "rolling") {
				t.Errorf("CacheLayoutCurrent %v: %s", c[hicachev1alpha1.ConditionCacheLayoutCurrent], message(st, hicachev1alpha1.ConditionCacheLayoutCurrent))
			}
		})
	}
	// Without roles there is no status.roles.
	q := testsupport.LoadSample(t, "hicachedeployment_qwen3.yaml")
	if st := computeStatus(q, observation(t, q, "h")); st.Roles != nil {
		t.Errorf("status.roles %+v of a deployment without roles", st.Roles)
	}
}
