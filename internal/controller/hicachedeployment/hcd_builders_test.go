package hicachedeployment

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

func TestBuildGroupGolden(t *testing.T) {
	cases := map[string]struct {
		sample  string
		group   int
		backend *resolve.Backend
	}{
		"deepseek-v4-tp16-2nodes": {sample: "hicachedeployment_deepseek_v4.yaml", group: 0},
		"qwen3-tp4":               {sample: "hicachedeployment_qwen3.yaml", group: 1},
		// HA masters: the ranks find the leader through etcd, with the cluster id and the
		// client's short RPC deadlines.
		"qwen3-tp4-ha-masters": {sample: "hicachedeployment_qwen3.yaml", group: 1, backend: testsupport.HaTestBackend()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := testsupport.LoadSample(t, tc.sample)
			be := tc.backend
			if be == nil {
				be = testsupport.TestBackend()
			}
			sts, err := BuildGroup(h, testsupport.MustResolve(t, h), be, tc.group, testImages)
			if err != nil {
				t.Fatalf("buildGroup: %v", err)
			}
			b, err := yaml.Marshal(sts)
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", name+".statefulset.golden.yaml"), b)
		})
	}
}

func TestBuildGroupShape(t *testing.T) {
	cases := map[string]struct {
		hcd          *hicachev1alpha1.HiCacheDeployment
		wantPods     int32
		wantGPUs     string
		wantAffinity bool
	}{
		"one GPU":             {hcd: testsupport.MakeHCD("q").Obj(), wantPods: 1, wantGPUs: "1"},
		"TP4 on one node":     {hcd: testsupport.MakeHCD("q").TP(4).Obj(), wantPods: 1, wantGPUs: "4"},
		"TP8 fills a node":    {hcd: testsupport.MakeHCD("q").TP(8).Obj(), wantPods: 1, wantGPUs: "8"},
		"TP16 over two nodes": {hcd: testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Obj(), wantPods: 2, wantGPUs: "8", wantAffinity: true},
		"TP16 over four 4-GPU nodes": {
			hcd: testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).GPUsPerNode(4).Obj(), wantPods: 4, wantGPUs: "4", wantAffinity: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sts := mustBuildGroup(t, tc.hcd, 0)
			if got := *sts.Spec.Replicas; got != tc.wantPods {
				t.Errorf("replicas = %d, want %d pods", got, tc.wantPods)
			}
			c := sts.Spec.Template.Spec.Containers[0]
			want := resource.MustParse(tc.wantGPUs)
			for kind, list := range map[string]corev1.ResourceList{"requests": c.Resources.Requests, "limits": c.Resources.Limits} {
				if got, ok := list[GPUResource]; !ok || got.Cmp(want) != 0 {
					t.Errorf("%s %s = %v, want %s", kind, GPUResource, got.String(), tc.wantGPUs)
				}
			}
			aff := sts.Spec.Template.Spec.Affinity
			if !tc.wantAffinity {
				if aff != nil {
					t.Errorf("a one-pod group has affinity %+v", aff)
				}
				return
			}
			if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Fatalf("a multi-node group has no required anti-affinity: %+v", aff)
			}
			term := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
			if term.TopologyKey != "kubernetes.io/hostname" {
				t.Errorf("anti-affinity topology key = %q", term.TopologyKey)
			}
			sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			if err != nil {
				t.Fatal(err)
			}
			// The term keeps this group's ranks apart, and only them.
			if !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
				t.Errorf("the anti-affinity selector %s does not match the group's own pods", sel)
			}
			other := mustBuildGroup(t, tc.hcd, 1)
			if sel.Matches(labels.Set(other.Spec.Template.Labels)) {
				t.Errorf("the anti-affinity selector %s also repels group 1's pods", sel)
			}
		})
	}
}

func TestBuildGroupKeepsUserResources(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Resources("16", "128Gi").Obj()
	before := h.Spec.Resources.DeepCopy()
	sts := mustBuildGroup(t, h, 0)
	got := sts.Spec.Template.Spec.Containers[0].Resources
	want := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("128Gi"), GPUResource: resource.MustParse("4")},
		Limits:   corev1.ResourceList{GPUResource: resource.MustParse("4")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(*before, h.Spec.Resources); diff != "" {
		t.Errorf("buildGroup changed the spec's resources:\n%s", diff)
	}
}

// TestBuildGroupMemoryCoversTheSegment: every rank mounts spec.storage.globalSegmentSize of its
// pod's memory for the store, so the pod asks for it on top of spec.resources.
func TestBuildGroupMemoryCoversTheSegment(t *testing.T) {
	cases := map[string]struct {
		hcd         *hicachev1alpha1.HiCacheDeployment
		wantRequest string // "" for no memory request
		wantLimit   string // "" for no memory limit
	}{
		"TP4 lends 4 × 4Gi on top of the request": {
			hcd: testsupport.MakeHCD("q").TP(4).Storage("mc").Segment("4Gi").Resources("16", "128Gi").Obj(), wantRequest: "144Gi",
		},
		"TP16 over two pods: 8 ranks × 16Gi per pod, request and limit": {
			hcd:         withMemoryLimit(testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Storage("mc").Segment("16Gi").Resources("32", "64Gi").Obj(), "64Gi"),
			wantRequest: "192Gi", wantLimit: "192Gi",
		},
		"no memory request: the segment is the request": {
			hcd: testsupport.MakeHCD("q").TP(2).Storage("mc").Segment("1Gi").Obj(), wantRequest: "2Gi",
		},
		"a pure client lends nothing": {
			hcd: testsupport.MakeHCD("q").TP(4).Storage("mc").Segment("0").Resources("16", "128Gi").Obj(), wantRequest: "128Gi",
		},
		"no storage": {
			hcd: testsupport.MakeHCD("q").TP(4).Resources("16", "128Gi").Obj(), wantRequest: "128Gi",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sts, err := BuildGroup(tc.hcd, testsupport.MustResolve(t, tc.hcd), testsupport.TestBackend(), 0, PodImages{SGLang: "img", Guard: testGuardImage})
			if err != nil {
				t.Fatal(err)
			}
			res := sts.Spec.Template.Spec.Containers[0].Resources
			for _, c := range []struct {
				what string
				list corev1.ResourceList
				want string
			}{{"request", res.Requests, tc.wantRequest}, {"limit", res.Limits, tc.wantLimit}} {
				got, ok := c.list[corev1.ResourceMemory]
				switch {
				case c.want == "" && ok:
					t.Errorf("memory %s = %s, want none", c.what, got.String())
				case c.want != "" && (!ok || got.Cmp(resource.MustParse(c.want)) != 0):
					t.Errorf("memory %s = %s, want %s", c.what, got.String(), c.want)
				}
			}
		})
	}
}

func withMemoryLimit(h *hicachev1alpha1.HiCacheDeployment, q string) *hicachev1alpha1.HiCacheDeployment {
	h.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
	return h
}

func TestBuildGroupEnv(t *testing.T) {
	h := testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Storage("mooncake").Env("HF_HOME", "/models").Obj()
	r := testsupport.MustResolve(t, h)
	sts := mustBuildGroup(t, h, 0)
	c := sts.Spec.Template.Spec.Containers[0]

	rank, ok := testsupport.EnvValue(c.Env, "NODE_RANK")
	if !ok || rank.ValueFrom == nil || rank.ValueFrom.FieldRef == nil {
		t.Fatalf("NODE_RANK is not from the downward API: %+v", rank)
	}
	if got, want := rank.ValueFrom.FieldRef.FieldPath, "metadata.labels['"+appsv1.PodIndexLabel+"']"; got != want {
		t.Errorf("NODE_RANK comes from %q, want %q", got, want)
	}
	if ip, ok := testsupport.EnvValue(c.Env, "POD_IP"); !ok || ip.ValueFrom == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("POD_IP = %+v, want status.podIP", ip)
	}
	for name, want := range map[string]string{
		"MOONCAKE_MASTER":         testsupport.TestBackend().RPCAddress,
		"MOONCAKE_LOCAL_HOSTNAME": "$(POD_IP)",
		"MOONCAKE_PROTOCOL":       "tcp",
		"HF_HOME":                 "/models",
	} {
		if e, ok := testsupport.EnvValue(c.Env, name); !ok || e.Value != want {
			t.Errorf("env %s = %q, want %q", name, e.Value, want)
		}
	}
	// Kubernetes expands $(VAR) only from variables defined earlier in the list.
	index := map[string]int{}
	for i, e := range c.Env {
		index[e.Name] = i
	}
	if index["POD_IP"] > index["MOONCAKE_LOCAL_HOSTNAME"] {
		t.Errorf("POD_IP is defined after MOONCAKE_LOCAL_HOSTNAME, which refers to it")
	}
	// --node-rank $(NODE_RANK) is expanded from the env too.
	if !containsArgs(c.Args, "--node-rank", "$(NODE_RANK)") {
		t.Errorf("args lack --node-rank $(NODE_RANK): %q", c.Args)
	}
	wantAddr := "d-0-0.d-0.default.svc:20102"
	if !containsArgs(c.Args, "--dist-init-addr", wantAddr) {
		t.Errorf("args lack --dist-init-addr %s: %q", wantAddr, c.Args)
	}
	if !strings.Contains(strings.Join(c.Args, " "), `"extra_backend_tag":"`+r.Namespace+`"`) {
		t.Errorf("args do not tag the namespace %s: %q", r.Namespace, c.Args)
	}
}

func TestBuildGroupRDMA(t *testing.T) {
	cases := map[string]struct {
		hcd  *hicachev1alpha1.HiCacheDeployment
		want bool
	}{
		"no storage": {hcd: testsupport.MakeHCD("q").TP(4).Obj()},
		"tcp":        {hcd: testsupport.MakeHCD("q").TP(4).Storage("mooncake").Obj()},
		"rdma":       {hcd: testsupport.MakeHCD("q").TP(4).Storage("mooncake").RDMA().Obj(), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sts := mustBuildGroup(t, tc.hcd, 0)
			pod := sts.Spec.Template.Spec
			c := pod.Containers[0]
			ipcLock := c.SecurityContext != nil && c.SecurityContext.Capabilities != nil &&
				len(c.SecurityContext.Capabilities.Add) == 1 && c.SecurityContext.Capabilities.Add[0] == "IPC_LOCK"
			mount := false
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/dev/infiniband" {
					mount = true
				}
			}
			hostPath := false
			for _, v := range pod.Volumes {
				if v.HostPath != nil && v.HostPath.Path == "/dev/infiniband" {
					hostPath = true
				}
			}
			got := map[string]bool{"IPC_LOCK": ipcLock, "mount": mount, "hostPath": hostPath}
			want := map[string]bool{"IPC_LOCK": tc.want, "mount": tc.want, "hostPath": tc.want}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("RDMA pieces (-want +got):\n%s", diff)
			}
			if e, _ := testsupport.EnvValue(c.Env, "MOONCAKE_PROTOCOL"); tc.want && e.Value != "rdma" {
				t.Errorf("MOONCAKE_PROTOCOL = %q, want rdma", e.Value)
			}
		})
	}
}

func TestBuildGroupReservedLabelsAndAnnotations(t *testing.T) {
	// Labels under hicache.io/ are refused outright: the operator finds its pods by them.
	for _, key := range []string{hicachev1alpha1.LabelDeployment, hicachev1alpha1.LabelGroup, hicachev1alpha1.LabelCacheNamespace, hicachev1alpha1.LabelBackend} {
		forged := testsupport.MakeHCD("q").TP(4).Labels(key, "forged").Obj()
		if _, err := resolve.Resolve(forged); err == nil || !strings.Contains(err.Error(), "spec.template.labels") {
			t.Errorf("label %s: Resolve gave %v, want a refusal naming spec.template.labels", key, err)
		}
	}
	h := testsupport.MakeHCD("q").TP(4).Storage("mooncake").
		Labels("app.kubernetes.io/managed-by", "me", "app.kubernetes.io/instance", "x", "team", "search").
		Annotations(hicachev1alpha1.AnnotationLayoutHash, "forged", hicachev1alpha1.AnnotationTemplateHash, "forged", "owner", "search-team").Obj()
	r := testsupport.MustResolve(t, h)
	sts := mustBuildGroup(t, h, 2)
	gotLabels := sts.Spec.Template.Labels
	wantLabels := map[string]string{
		"app.kubernetes.io/name": "sglang", "app.kubernetes.io/instance": "q", "app.kubernetes.io/managed-by": storeuse.FieldOwner,
		hicachev1alpha1.LabelDeployment: "q", hicachev1alpha1.LabelGroup: "2", hicachev1alpha1.LabelCacheNamespace: r.Namespace, hicachev1alpha1.LabelBackend: "mooncake", "team": "search",
	}
	if diff := cmp.Diff(wantLabels, gotLabels); diff != "" {
		t.Errorf("pod labels (-want +got):\n%s", diff)
	}
	ann := sts.Spec.Template.Annotations
	if ann[hicachev1alpha1.AnnotationLayoutHash] != r.ShortHash || ann[hicachev1alpha1.AnnotationTemplateHash] != sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] || ann["owner"] != "search-team" {
		t.Errorf("pod annotations %v: want layout %s, the StatefulSet's template hash %s and the user's owner",
			ann, r.ShortHash, sts.Annotations[hicachev1alpha1.AnnotationTemplateHash])
	}
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(gotLabels)) {
		t.Errorf("the selector %s does not match the template labels %v", sel, gotLabels)
	}
}

func TestBuildGroupCacheLabels(t *testing.T) {
	cases := map[string]struct {
		hcd           *hicachev1alpha1.HiCacheDeployment
		wantNamespace func(r string) string
		wantBackend   string
	}{
		"no storage: no namespace label": {hcd: testsupport.MakeHCD("q").TP(4).Obj(), wantNamespace: func(string) string { return "" }},
		"LayoutHash":                     {hcd: testsupport.MakeHCD("q").TP(4).Storage("mc").Obj(), wantNamespace: func(ns string) string { return ns }, wantBackend: "mc"},
		"Fixed":                          {hcd: testsupport.MakeHCD("q").TP(4).Storage("mc").Fixed("team-a").Obj(), wantNamespace: func(string) string { return "team-a" }, wantBackend: "mc"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := testsupport.MustResolve(t, tc.hcd)
			sts := mustBuildGroup(t, tc.hcd, 0)
			l := sts.Spec.Template.Labels
			if got, want := l[hicachev1alpha1.LabelCacheNamespace], tc.wantNamespace(r.Namespace); got != want {
				t.Errorf("%s = %q, want %q", hicachev1alpha1.LabelCacheNamespace, got, want)
			}
			if got := l[hicachev1alpha1.LabelBackend]; got != tc.wantBackend {
				t.Errorf("%s = %q, want %q", hicachev1alpha1.LabelBackend, got, tc.wantBackend)
			}
			if got := sts.Spec.Template.Annotations[hicachev1alpha1.AnnotationLayoutHash]; got != r.ShortHash {
				t.Errorf("%s = %q, want %q", hicachev1alpha1.AnnotationLayoutHash, got, r.ShortHash)
			}
		})
	}
}

func TestBuildGroupTemplateHash(t *testing.T) {
	base := testsupport.MakeHCD("q").TP(4).Storage("mc")
	hashOf := func(h *hicachev1alpha1.HiCacheDeployment, image string) string {
		sts, err := BuildGroup(h, testsupport.MustResolve(t, h), testsupport.TestBackend(), 0, PodImages{SGLang: image, Guard: testGuardImage})
		if err != nil {
			t.Fatal(err)
		}
		if sts.Annotations[hicachev1alpha1.AnnotationTemplateHash] != sts.Spec.Template.Annotations[hicachev1alpha1.AnnotationTemplateHash] {
			t.Fatalf("the StatefulSet's hash %s differs from its template's %s",
				sts.Annotations[hicachev1alpha1.AnnotationTemplateHash], sts.Spec.Template.Annotations[hicachev1alpha1.AnnotationTemplateHash])
		}
		return sts.Annotations[hicachev1alpha1.AnnotationTemplateHash]
	}
	want := hashOf(base.Obj(), "sglang:test")
	for range 5 {
		if got := hashOf(base.Obj(), "sglang:test"); got != want {
			t.Fatalf("the hash of one spec changed from %s to %s between builds", want, got)
		}
	}
	type spec = hicachev1alpha1.HiCacheDeployment
	cases := map[string]struct {
		change      func(h *spec)
		image       string
		wantChanged bool
	}{
		"a breaking KV dtype": {change: func(h *spec) { h.Spec.HiCache.KVCacheDType = "fp8_e4m3" }, wantChanged: true},
		"a new image":         {image: "sglang:other", wantChanged: true},
		"a new ratio":         {change: func(h *spec) { h.Spec.HiCache.Ratio = "3" }, wantChanged: true},
		"a pod label":         {change: func(h *spec) { h.Spec.Template.Labels = map[string]string{"a": "b"} }, wantChanged: true},
		"the fixed namespace": {change: func(h *spec) { h.Spec.Storage.NamespaceStrategy, h.Spec.Storage.Namespace = "Fixed", "x" }, wantChanged: true},
		"a volume": {change: func(h *spec) {
			h.Spec.Template.Volumes = []corev1.Volume{{Name: "w", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, wantChanged: true},
		"a scheduler": {change: func(h *spec) { h.Spec.Template.SchedulerName = "volcano" }, wantChanged: true},
		"a sidecar":   {change: func(h *spec) { h.Spec.Template.Containers = []corev1.Container{{Name: "logs", Image: "fluent-bit"}} }, wantChanged: true},
		"a leader label": {change: func(h *spec) {
			h.Spec.Template.Leader = &hicachev1alpha1.RoleOverrides{Labels: map[string]string{"a": "b"}}
		}},
		"a follower note": {change: func(h *spec) {
			h.Spec.Template.Follower = &hicachev1alpha1.RoleOverrides{Annotations: map[string]string{"a": "b"}}
		}},
		"more replicas":    {change: func(h *spec) { *h.Spec.Replicas = 5 }},
		"rollout budget":   {change: func(h *spec) { h.Spec.Rollout.MaxUnavailable = 3 }},
		"the flush policy": {change: func(h *spec) { h.Spec.Storage.FlushPolicy = "Manual" }},
		"a new generation": {change: func(h *spec) { h.Generation = 9 }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := base.Obj()
			if tc.change != nil {
				tc.change(h)
			}
			image := "sglang:test"
			if tc.image != "" {
				image = tc.image
			}
			got := hashOf(h, image)
			if changed := got != want; changed != tc.wantChanged {
				t.Errorf("hash %s → %s: changed = %v, want %v", want, got, changed, tc.wantChanged)
			}
		})
	}
}

func TestBuildGroupStatefulSet(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Obj()
	sts := mustBuildGroup(t, h, 3)
	if sts.Name != "q-3" || sts.Spec.ServiceName != "q-3" || sts.Namespace != "default" {
		t.Errorf("name %s, service %s, namespace %s; want q-3, q-3, default", sts.Name, sts.Spec.ServiceName, sts.Namespace)
	}
	if sts.Spec.UpdateStrategy.Type != "OnDelete" || sts.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("update strategy %s, pod management %s; want OnDelete and Parallel", sts.Spec.UpdateStrategy.Type, sts.Spec.PodManagementPolicy)
	}
	if len(sts.OwnerReferences) != 1 || sts.OwnerReferences[0].UID != h.UID || sts.OwnerReferences[0].Controller == nil || !*sts.OwnerReferences[0].Controller {
		t.Errorf("owner references %+v, want the deployment as controller", sts.OwnerReferences)
	}
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != "sglang:test" {
		t.Errorf("image = %q", got)
	}
	vols := map[string]bool{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		vols[v.Name] = true
		if v.ConfigMap != nil && v.ConfigMap.Name != resolve.ConfigMapName("q") {
			t.Errorf("the hicache volume mounts ConfigMap %s, want %s", v.ConfigMap.Name, resolve.ConfigMapName("q"))
		}
	}
	if !vols["dshm"] || !vols["hicache"] {
		t.Errorf("volumes %v lack dshm or hicache", vols)
	}
}

// Resolve refuses such extra args first; the renderer refuses them too, should a caller skip it.
func TestBuildGroupRefusesABadRender(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(4).Obj()
	res := testsupport.MustResolve(t, h)
	h.Spec.Template.ExtraArgs = []string{"--tp-size", "8"}
	if _, err := BuildGroup(h, res, nil, 0, PodImages{SGLang: "img", Guard: testGuardImage}); err == nil || !strings.Contains(err.Error(), "tp") {
		t.Errorf("extra args that set --tp-size rendered (err %v); want an error naming the flag", err)
	}
}

func TestServices(t *testing.T) {
	h := testsupport.MakeHCD("q").TP(16).Profile("DeepSeekV4").Replicas(2).Obj()
	g1 := mustBuildGroup(t, h, 1)
	g0 := mustBuildGroup(t, h, 0)

	headless := buildHeadlessService(h, GroupKey{index: 1})
	if headless.Name != g1.Spec.ServiceName || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless service %s (clusterIP %q, publish not ready %v), want %s, None, true",
			headless.Name, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses, g1.Spec.ServiceName)
	}
	hsel := labels.SelectorFromSet(headless.Spec.Selector)
	if !hsel.Matches(labels.Set(g1.Spec.Template.Labels)) || hsel.Matches(labels.Set(g0.Spec.Template.Labels)) {
		t.Errorf("the headless service of group 1 selects %s", hsel)
	}
	if p := headless.Spec.Ports; len(p) != 1 || p[0].Port != DistInitPort {
		t.Errorf("headless ports %+v, want the rendezvous port %d", p, DistInitPort)
	}

	client := BuildClientService(h)
	csel := labels.SelectorFromSet(client.Spec.Selector)
	for _, g := range []*struct {
		labels map[string]string
	}{{g0.Spec.Template.Labels}, {g1.Spec.Template.Labels}} {
		leader := labels.Merge(g.labels, labels.Set{appsv1.PodIndexLabel: "0"})
		follower := labels.Merge(g.labels, labels.Set{appsv1.PodIndexLabel: "1"})
		if !csel.Matches(leader) || csel.Matches(follower) {
			t.Errorf("the client service selector %s must match every leader and no follower", csel)
		}
	}
	if p := client.Spec.Ports; len(p) != 1 || p[0].Port != SGLangPort || p[0].TargetPort.StrVal != "http" {
		t.Errorf("client ports %+v", p)
	}
}

func TestBuildConfigMap(t *testing.T) {
	cases := map[string]struct {
		hcd       *hicachev1alpha1.HiCacheDeployment
		wantExtra bool
	}{
		"no storage":   {hcd: testsupport.MakeHCD("q").TP(4).Obj()},
		"with storage": {hcd: testsupport.MakeHCD("q").TP(4).Storage("mooncake").Obj(), wantExtra: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := testsupport.MustResolve(t, tc.hcd)
			mc := mooncakeOf(tc.hcd, r, testsupport.TestBackend())
			if (mc != nil) != tc.wantExtra {
				t.Fatalf("mooncakeOf = %+v", mc)
			}
			cm, err := BuildConfigMap(tc.hcd, r, mc)
			if err != nil {
				t.Fatal(err)
			}
			if cm.Name != "q-hicache" {
				t.Errorf("name = %s", cm.Name)
			}
			var plan cache.RankPlan
			if err := json.Unmarshal([]byte(cm.Data["plan.json"]), &plan); err != nil {
				t.Fatalf("plan.json: %v", err)
			}
			if plan.NumRanks() != 4 {
				t.Errorf("plan.json has %d ranks, want 4", plan.NumRanks())
			}
			if !strings.Contains(cm.Data["layout.txt"], "namespace: "+r.Namespace+"\n") || !strings.Contains(cm.Data["layout.txt"], r.Fingerprint) {
				t.Errorf("layout.txt does not name namespace %s and fingerprint %s:\n%s", r.Namespace, r.Fingerprint, cm.Data["layout.txt"])
			}
			extra, ok := cm.Data["extra-config.json"]
			if ok != tc.wantExtra {
				t.Fatalf("extra-config.json present = %v, want %v", ok, tc.wantExtra)
			}
			if ok {
				var m map[string]any
				if err := json.Unmarshal([]byte(extra), &m); err != nil {
					t.Fatal(err)
				}
				if m["extra_backend_tag"] != r.Namespace {
					t.Errorf("extra-config.json tags %v, want %s", m["extra_backend_tag"], r.Namespace)
				}
			}
		})
	}
}

func TestMembersAnnotationRoundTrip(t *testing.T) {
	pods := []corev1.Pod{
		makePod("g0", 1).UID("uid-b").Ready().Obj(),
		makePod("g0", 0).UID("uid-a").Ready().Obj(),
	}
	got := membersAnnotation(pods)
	if want := "0=uid-a,1=uid-b"; got != want {
		t.Errorf("membersAnnotation = %q, want %q (sorted by ordinal)", got, want)
	}
	// The annotation recognises the same pods in any order, and a replaced one.
	g := groupOf(0, "h", got, pods[1], pods[0])
	if broken, why := groupBroken(g); broken {
		t.Errorf("the recorded members read back as broken: %s", why)
	}
	g.pods[1] = makePod("g0", 1).UID("uid-c").Ready().Obj()
	if broken, _ := groupBroken(g); !broken {
		t.Errorf("a replaced ordinal is not noticed with members %q", got)
	}
	if got := membersAnnotation(nil); got != "" {
		t.Errorf("membersAnnotation(nil) = %q", got)
	}
}

func containsArgs(args []string, seq ...string) bool {
	for i := 0; i+len(seq) <= len(args); i++ {
		ok := true
		for j := range seq {
			if args[i+j] != seq[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// A deployment the API accepts gets a ConfigMap the API server takes (at most 1 MiB of data):
// the plan of 1024 ranks (TP 128 × PP 8) is more than 1 MiB, so its JSON is left out and its table says so.
func TestBuildConfigMapFitsTheAPIServer(t *testing.T) {
	h := testsupport.MakeHCD("big").Profile("DeepSeekV4").TP(128).PP(8).Obj()
	r := testsupport.MustResolve(t, h)
	cm, err := BuildConfigMap(h, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for k, v := range cm.Data {
		size += len(k) + len(v)
	}
	if size > 1<<20 {
		t.Errorf("ConfigMap data %d bytes, more than the API server's 1 MiB", size)
	}
	if _, ok := cm.Data["plan.json"]; ok {
		t.Error("plan.json is there though it does not fit")
	}
	if txt := cm.Data["plan.txt"]; !strings.HasPrefix(txt, "RANK") || !strings.Contains(txt, "plan.json is left out: the plan of 1024 ranks") {
		t.Errorf("plan.txt does not hold the table and why plan.json is left out:\n%.300s", txt)
	}
	// Once the table does not fit either, the summary and the note stand for it.
	data := map[string]string{"plan.txt": strings.Repeat("x", maxPlanBytes-1000)}
	if err := putPlan(data, "decode-", r.Plan); err != nil {
		t.Fatal(err)
	}
	if txt := data["decode-plan.txt"]; !strings.HasPrefix(txt, r.Plan.Summary()+"\n") || !strings.Contains(txt, "the table and decode-plan.json are left out") {
		t.Errorf("decode-plan.txt = %q, want the summary and why the table and the JSON are left out", txt)
	}
	if _, ok := data["decode-plan.json"]; ok {
		t.Error("decode-plan.json is there though it does not fit")
	}
}

// Every rank pod runs SGLang on loopback and the proxy on the pod IP at SGLang's port: the
// probes, the Services and the router reach SGLang only through it, and it meets the
// restricted Pod Security profile on its own.
func TestRankPodsRunTheProxyInFrontOfSGLang(t *testing.T) {
	h := testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Storage("mc").Obj()
	p := mustBuildGroup(t, h, 0).Spec.Template.Spec
	c, g := p.Containers[0], p.Containers[1]
	line := strings.Join(c.Args, " ")
	if !strings.Contains(line, "--host 127.0.0.1 --port 30000") {
		t.Errorf("SGLang does not listen on loopback: %s", line)
	}
	if g.Name != resolve.GuardContainer || g.Image != testGuardImage || !cmp.Equal(g.Command, []string{"/manager"}) ||
		!cmp.Equal(g.Args, []string{"guard", "--listen-host=$(POD_IP)", "--upstream-host=127.0.0.1", "--port=30000"}) {
		t.Errorf("proxy container %s %s %v %v", g.Name, g.Image, g.Command, g.Args)
	}
	if len(g.Ports) != 1 || g.Ports[0].Name != "http" || g.Ports[0].ContainerPort != SGLangPort {
		t.Errorf("proxy ports %v, want http %d", g.Ports, SGLangPort)
	}
	if slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == SGLangPort }) {
		t.Errorf("the serving container still declares %d: %v", SGLangPort, c.Ports)
	}
	// $(POD_IP) expands only from a variable of the container itself; the proxy holds the
	// clients' admin key and the server's, the one SGLang holds (the same variable as SGLang's).
	var names []string
	for _, e := range g.Env {
		names = append(names, e.Name)
	}
	if !cmp.Equal(names, []string{"POD_IP", resolve.AdminAPIKeyEnv, resolve.ServerAdminKeyEnv}) || !cmp.Equal(g.Env[1], keyEnv(h)[0]) ||
		!cmp.Equal(g.Env[2], serverKeyEnv(h)[0]) || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return cmp.Equal(e, g.Env[2]) }) {
		t.Errorf("proxy env %v", names)
	}
	// The serving container holds no key a client presents.
	if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == resolve.AdminAPIKeyEnv || e.Name == resolve.APIKeyEnv }) {
		t.Errorf("the serving container holds a client key: %v", c.Env)
	}
	sc := g.SecurityContext
	if sc == nil || !ptr.Deref(sc.RunAsNonRoot, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
		sc.Capabilities == nil || !cmp.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || ptr.Deref(sc.RunAsUser, 0) == 0 {
		t.Errorf("proxy security context %+v does not meet the restricted profile", sc)
	}
	if _, ok := g.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit would throttle every request of the pod")
	}
	// With an API key the proxy reads it too.
	withKey := testsupport.MakeHCD("d").TP(4).Obj()
	withKey.Spec.Security = &hicachev1alpha1.ServingSecurity{APIKeySecretRef: &hicachev1alpha1.SecretKeyReference{Name: "s", Key: "k"}}
	g = mustBuildGroup(t, withKey, 0).Spec.Template.Spec.Containers[1]
	names = nil
	for _, e := range g.Env {
		names = append(names, e.Name)
	}
	if !cmp.Equal(names, []string{"POD_IP", resolve.AdminAPIKeyEnv, resolve.APIKeyEnv, resolve.ServerAdminKeyEnv, resolve.ServerAPIKeyEnv}) {
		t.Errorf("proxy env with an API key %v", names)
	}
}
