package hicachedeployment

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/crdvalidation"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// withTemplate is a DeepSeek-V4 TP=16 deployment (two nodes per group) with spec.template set.
func withTemplate(t hicachev1alpha1.PodOverrides) *hicachev1alpha1.HiCacheDeployment {
	h := testsupport.MakeHCD("d").Profile("DeepSeekV4").TP(16).Storage("mooncake").Obj()
	h.Spec.Template = t
	return h
}

func serving(sts *appsv1.StatefulSet) corev1.Container { return sts.Spec.Template.Spec.Containers[0] }

func TestBuildGroupPodOverrides(t *testing.T) {
	weights := corev1.Volume{Name: "weights", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "dsv4", ReadOnly: true}}}
	zone := corev1.NodeSelectorRequirement{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	userAnti := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}}, TopologyKey: "kubernetes.io/hostname"}
	operatorAnti := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{hicachev1alpha1.LabelDeployment: "d", hicachev1alpha1.LabelGroup: "1"}},
		TopologyKey:   "kubernetes.io/hostname",
	}
	spread := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{hicachev1alpha1.LabelDeployment: "d"}}}
	logs := corev1.Container{Name: "logs", Image: "fluent-bit", Ports: []corev1.ContainerPort{{ContainerPort: 2020}}}
	fetch := corev1.Container{Name: "fetch", Image: "fetcher"}

	cases := map[string]struct {
		hcd   *hicachev1alpha1.HiCacheDeployment
		check func(t *testing.T, sts *appsv1.StatefulSet)
	}{
		"volumes and mounts come after the operator's": {
			hcd: withTemplate(hicachev1alpha1.PodOverrides{
				Volumes:      []corev1.Volume{weights},
				VolumeMounts: []corev1.VolumeMount{{Name: "weights", MountPath: "/models", ReadOnly: true}},
			}),
			check: func(t *testing.T, sts *appsv1.StatefulSet) {
				var vols, mounts []string
				for _, v := range sts.Spec.Template.Spec.Volumes {
					vols = append(vols, v.Name)
				}
				for _, m := range serving(sts).VolumeMounts {
					mounts = append(mounts, m.Name+":"+m.MountPath)
				}
				if diff := cmp.Diff([]string{"dshm", "hicache", "weights"}, vols); diff != "" {
					t.Errorf("volumes (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"dshm:/dev/shm", "hicache:/etc/hicache", "weights:/models"}, mounts); diff != "" {
					t.Errorf("mounts (-want +got):\n%s", diff)
				}
				if got := sts.Spec.Template.Spec.Volumes[2]; !cmp.Equal(got, weights) {
					t.Errorf("the user's volume was changed: %+v", got)
				}
			},
		},
		"the user's affinity keeps its terms and gains the group's anti-affinity": {
			hcd: withTemplate(hicachev1alpha1.PodOverrides{Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}}}},
				PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{userAnti}},
			}}),
			check: func(t *testing.T, sts *appsv1.StatefulSet) {
				a := sts.Spec.Template.Spec.Affinity
				if a == nil || a.NodeAffinity == nil || !cmp.Equal(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0], zone) {
					t.Fatalf("node affinity lost: %+v", a)
				}
				if diff := cmp.Diff([]corev1.PodAffinityTerm{userAnti, operatorAnti}, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution); diff != "" {
					t.Errorf("required anti-affinity (-want +got):\n%s", diff)
				}
			},
		},
		"a one-node group keeps the user's affinity alone": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := testsupport.MakeHCD("q").TP(4).Obj()
				h.Spec.Template.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{userAnti}}}
				return h
			}(),
			check: func(t *testing.T, sts *appsv1.StatefulSet) {
				if got := sts.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution; !cmp.Equal(got, []corev1.PodAffinityTerm{userAnti}) {
					t.Errorf("anti-affinity %+v, want only the user's term", got)
				}
			},
		},
		"scheduling and security fields reach the pod as written": {
			hcd: withTemplate(hicachev1alpha1.PodOverrides{
				TopologySpreadConstraints: []corev1.TopologySpreadConstraint{spread},
				PriorityClassName:         "inference-high",
				SchedulerName:             "my-scheduler",
				ImagePullSecrets:          []corev1.LocalObjectReference{{Name: "registry"}},
				SecurityContext:           &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1000)},
			}),
			check: func(t *testing.T, sts *appsv1.StatefulSet) {
				p := sts.Spec.Template.Spec
				if !cmp.Equal(p.TopologySpreadConstraints, []corev1.TopologySpreadConstraint{spread}) || p.PriorityClassName != "inference-high" ||
					p.SchedulerName != "my-scheduler" || !cmp.Equal(p.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry"}}) ||
					p.SecurityContext == nil || ptr.Deref(p.SecurityContext.FSGroup, 0) != 1000 {
					t.Errorf("pod spec %+v lacks the overrides", p)
				}
			},
		},
		"RDMA adds IPC_LOCK to the user's container security context": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := withTemplate(hicachev1alpha1.PodOverrides{ContainerSecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_RAW"}}}})
				h.Spec.Storage.Protocol = "rdma"
				return h
			}(),
			check: func(t *testing.T, sts *appsv1.StatefulSet) {
				sc := serving(sts).SecurityContext
				if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !cmp.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
					!cmp.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_RAW", "IPC_LOCK"}) {
					t.Errorf("security context %+v, want the user's with IPC_LOCK added", sc)
				}
			},
		},
		"sidecars follow the serving container, init containers run before it": {
			hcd: withTemplate(hicachev1alpha1.PodOverrides{Containers: []corev1.Container{logs}, InitContainers: []corev1.Container{fetch}}),
			check: func(t *testing.T, sts *appsv1.StatefulSet) {
				p := sts.Spec.Template.Spec
				if len(p.Containers) != 3 || p.Containers[0].Name != "sglang" || p.Containers[1].Name != resolve.GuardContainer || !cmp.Equal(p.Containers[2], logs) || !cmp.Equal(p.InitContainers, []corev1.Container{fetch}) {
					t.Errorf("containers %v, init containers %v", p.Containers, p.InitContainers)
				}
			},
		},
		"Volcano: the group is a PodGroup of its nodes": {
			hcd: withTemplate(hicachev1alpha1.PodOverrides{GangScheduling: &hicachev1alpha1.GangScheduling{Scheduler: hicachev1alpha1.GangVolcano, Queue: "inference"}}),
			check: func(t *testing.T, sts *appsv1.StatefulSet) {
				if sts.Spec.Template.Spec.SchedulerName != VolcanoScheduler || sts.Annotations[VolcanoMinMemberAnnotation] != "2" ||
					sts.Spec.Template.Annotations[VolcanoQueueAnnotation] != "inference" {
					t.Errorf("scheduler %q, StatefulSet annotations %v, pod annotations %v", sts.Spec.Template.Spec.SchedulerName, sts.Annotations, sts.Spec.Template.Annotations)
				}
			},
		},
		"Kueue: the group's StatefulSet is queued": {
			hcd: withTemplate(hicachev1alpha1.PodOverrides{GangScheduling: &hicachev1alpha1.GangScheduling{Scheduler: hicachev1alpha1.GangKueue, Queue: "team-a"}}),
			check: func(t *testing.T, sts *appsv1.StatefulSet) {
				if sts.Labels[KueueQueueLabel] != "team-a" || sts.Spec.Template.Spec.SchedulerName != "" || sts.Spec.Selector.MatchLabels[KueueQueueLabel] != "" {
					t.Errorf("StatefulSet labels %v, scheduler %q, selector %v", sts.Labels, sts.Spec.Template.Spec.SchedulerName, sts.Spec.Selector)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { tc.check(t, mustBuildGroup(t, tc.hcd, 1)) })
	}
}

func TestRankRoleMetadata(t *testing.T) {
	tmpl := hicachev1alpha1.PodOverrides{
		Leader:   &hicachev1alpha1.RoleOverrides{Labels: map[string]string{"role": "leader"}, Annotations: map[string]string{"prometheus.io/scrape": "true"}},
		Follower: &hicachev1alpha1.RoleOverrides{Annotations: map[string]string{"role": "follower"}},
	}
	cases := map[string]struct {
		tmpl            hicachev1alpha1.PodOverrides
		index           int
		wantLabels      map[string]string
		wantAnnotations []string // keys besides the role hash
	}{
		"the leader":             {tmpl: tmpl, index: 0, wantLabels: map[string]string{"role": "leader"}, wantAnnotations: []string{"prometheus.io/scrape"}},
		"a follower":             {tmpl: tmpl, index: 1, wantAnnotations: []string{"role"}},
		"another follower":       {tmpl: tmpl, index: 3, wantAnnotations: []string{"role"}},
		"no role overrides":      {index: 0},
		"an empty leader":        {tmpl: hicachev1alpha1.PodOverrides{Leader: &hicachev1alpha1.RoleOverrides{}}, index: 0},
		"only a leader, a pod 1": {tmpl: hicachev1alpha1.PodOverrides{Leader: tmpl.Leader}, index: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			labels, ann, err := rankRoleMetadata(&tc.tmpl, tc.index)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantLabels, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if tc.wantAnnotations == nil {
				if ann != nil {
					t.Errorf("annotations %v, want none", ann)
				}
				return
			}
			var keys []string
			for k := range ann {
				if k != hicachev1alpha1.AnnotationRankRoleHash {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			if diff := cmp.Diff(tc.wantAnnotations, keys); diff != "" || ann[hicachev1alpha1.AnnotationRankRoleHash] == "" {
				t.Errorf("annotation keys (-want +got):\n%s; role hash %q", diff, ann[hicachev1alpha1.AnnotationRankRoleHash])
			}
		})
	}
	// The hash follows the values, so a changed value is applied again and an unchanged one is not.
	_, a1, _ := rankRoleMetadata(&tmpl, 0)
	_, a2, _ := rankRoleMetadata(&tmpl, 0)
	changed := *tmpl.DeepCopy()
	changed.Leader.Annotations["prometheus.io/scrape"] = "false"
	_, a3, _ := rankRoleMetadata(&changed, 0)
	if a1[hicachev1alpha1.AnnotationRankRoleHash] != a2[hicachev1alpha1.AnnotationRankRoleHash] || a1[hicachev1alpha1.AnnotationRankRoleHash] == a3[hicachev1alpha1.AnnotationRankRoleHash] {
		t.Errorf("role hashes %s, %s (same values), %s (a changed value)", a1[hicachev1alpha1.AnnotationRankRoleHash], a2[hicachev1alpha1.AnnotationRankRoleHash], a3[hicachev1alpha1.AnnotationRankRoleHash])
	}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: a1}}
	if !podRankRoleCurrent(&pod, a2) || podRankRoleCurrent(&pod, a3) || podRankRoleCurrent(&pod, nil) {
		t.Error("podRankRoleCurrent does not follow the role hash")
	}
	if !podRankRoleCurrent(&corev1.Pod{}, nil) {
		t.Error("a pod with no role overrides, and none wanted, is current")
	}
}

// What the operator renders into a rank pod is exactly what resolve reserves, and the CRD's CEL
// rules refuse each reserved name, path and port: the three lists cannot drift apart.
func TestOwnedPartsAreRefusedByTheAPI(t *testing.T) {
	// Everything the operator can add: RDMA and a hub model source (its volume, mount and
	// download container).
	h := withTemplate(hicachev1alpha1.PodOverrides{})
	h.Spec.Storage.Protocol = "rdma"
	h.Spec.Model = hicachev1alpha1.ModelSpec{Revision: "1111111111111111111111111111111111111111", Source: &hicachev1alpha1.ModelSource{Hub: &hicachev1alpha1.HubModelSource{Repo: "deepseek-ai/DeepSeek-V4"}}}
	sts := mustBuildGroup(t, h, 0)
	p := sts.Spec.Template.Spec
	var vols, paths, names []string
	var ports []int32
	for _, v := range p.Volumes {
		vols = append(vols, v.Name)
	}
	c := p.Containers[0]
	for _, m := range c.VolumeMounts {
		paths = append(paths, m.MountPath)
	}
	// The serving container's ports and the proxy's in front of it.
	for _, oc := range p.Containers[:2] {
		for _, port := range oc.Ports {
			ports = append(ports, port.ContainerPort)
		}
	}
	slices.Sort(ports)
	for _, ic := range append(slices.Clone(p.InitContainers), p.Containers...) {
		names = append(names, ic.Name)
	}
	sorted := func(l []string) []string { return slices.Sorted(slices.Values(l)) }
	if diff := cmp.Diff(sorted(resolve.ReservedVolumes), sorted(vols)); diff != "" {
		t.Errorf("rendered volumes vs resolve.ReservedVolumes (-reserved +rendered):\n%s", diff)
	}
	if diff := cmp.Diff(sorted(append(slices.Clone(resolve.ReservedMountPaths), hicachev1alpha1.ModelMountPath)), sorted(paths)); diff != "" {
		t.Errorf("rendered mount paths vs resolve.ReservedMountPaths and the model's (-reserved +rendered):\n%s", diff)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(resolve.ReservedPorts)), ports); diff != "" {
		t.Errorf("rendered ports vs resolve.ReservedPorts (-reserved +rendered):\n%s", diff)
	}
	if diff := cmp.Diff(sorted(resolve.ReservedContainers), sorted(names)); diff != "" || c.Name != resolve.ServingContainer {
		t.Errorf("rendered containers vs resolve.ReservedContainers (-reserved +rendered):\n%s; serving container %q", diff, c.Name)
	}

	v, err := crdvalidation.Default()
	if err != nil {
		t.Fatal(err)
	}
	refusedHCD := func(what string, h *hicachev1alpha1.HiCacheDeployment) {
		t.Helper()
		h.TypeMeta = metav1.TypeMeta{APIVersion: hicachev1alpha1.GroupVersion.String(), Kind: "HiCacheDeployment"}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(h)
		if err != nil {
			t.Fatal(err)
		}
		delete(obj, "status")
		_, errs, err := v.Admit(context.Background(), obj, "default")
		if err != nil {
			t.Fatal(err)
		}
		if len(errs) == 0 || !strings.Contains(crdvalidation.Message(errs), "spec.template.") {
			t.Errorf("%s: admitted (%v); the CRD must refuse it naming the spec.template field", what, errs)
		}
	}
	refused := func(what string, tmpl hicachev1alpha1.PodOverrides) { t.Helper(); refusedHCD(what, withTemplate(tmpl)) }
	empty := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	for _, name := range resolve.ReservedVolumes {
		refused("volume "+name, hicachev1alpha1.PodOverrides{Volumes: []corev1.Volume{{Name: name, VolumeSource: empty}}})
	}
	for _, path := range resolve.ReservedMountPaths {
		for _, at := range []string{path, path + "/below"} {
			refused("a mount at "+at, hicachev1alpha1.PodOverrides{Volumes: []corev1.Volume{{Name: "w", VolumeSource: empty}},
				VolumeMounts: []corev1.VolumeMount{{Name: "w", MountPath: at}}})
		}
	}
	// A per-pod sub-path: admitted at and below the neutral mount points (the resolver judges
	// the volume), refused elsewhere.
	perPod := func(at string) hicachev1alpha1.PodOverrides {
		return hicachev1alpha1.PodOverrides{Volumes: []corev1.Volume{{Name: "w", VolumeSource: empty}},
			VolumeMounts: []corev1.VolumeMount{{Name: "w", MountPath: at, SubPathExpr: "$(POD_NAME)"}}}
	}
	for _, n := range resolve.NeutralMountPoints {
		for _, at := range []string{n.Path, n.Path + "/below"} {
			h := withTemplate(perPod(at))
			h.TypeMeta = metav1.TypeMeta{APIVersion: hicachev1alpha1.GroupVersion.String(), Kind: "HiCacheDeployment"}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(h)
			if err != nil {
				t.Fatal(err)
			}
			delete(obj, "status")
			if _, errs, err := v.Admit(context.Background(), obj, "default"); err != nil || len(errs) > 0 {
				t.Errorf("a per-pod sub-path at the neutral mount point %s refused by the CRD: %v %v", at, err, errs)
			}
		}
		refused("a per-pod sub-path beside "+n.Path, perPod(n.Path+"x"))
	}
	refused("a per-pod sub-path over the weights", perPod("/data"))
	for _, port := range resolve.ReservedPorts {
		ports := []corev1.ContainerPort{{ContainerPort: port}}
		refused("a sidecar on "+strconv.Itoa(int(port)), hicachev1alpha1.PodOverrides{Containers: []corev1.Container{{Name: "s", Image: "x", Ports: ports}}})
		refused("an init container on "+strconv.Itoa(int(port)), hicachev1alpha1.PodOverrides{InitContainers: []corev1.Container{{Name: "s", Image: "x", Ports: ports}}})
	}
	for _, name := range resolve.ReservedContainers {
		refused("a sidecar named "+name, hicachev1alpha1.PodOverrides{Containers: []corev1.Container{{Name: name, Image: "x"}}})
		refused("an init container named "+name, hicachev1alpha1.PodOverrides{InitContainers: []corev1.Container{{Name: name, Image: "x"}}})
	}
	// The model's path, with a model source.
	withSource := func(tmpl hicachev1alpha1.PodOverrides) *hicachev1alpha1.HiCacheDeployment {
		h := withTemplate(tmpl)
		h.Spec.Model = hicachev1alpha1.ModelSpec{ServedName: "m", Source: &hicachev1alpha1.ModelSource{PVC: &hicachev1alpha1.ClaimModelSource{ClaimName: "w"}}}
		return h
	}
	for _, at := range []string{hicachev1alpha1.ModelMountPath, hicachev1alpha1.ModelMountPath + "/below"} {
		refusedHCD("a mount at "+at+" with a model source", withSource(hicachev1alpha1.PodOverrides{Volumes: []corev1.Volume{{Name: "w", VolumeSource: empty}},
			VolumeMounts: []corev1.VolumeMount{{Name: "w", MountPath: at}}}))
	}
	for _, e := range append(slices.Clone(resolve.ReservedEnv), "MOONCAKE_MASTER", "MOONCAKE_PROTOCOL") {
		refused("env "+e, hicachev1alpha1.PodOverrides{Env: []corev1.EnvVar{{Name: e, Value: "x"}}})
	}
	for _, l := range []string{hicachev1alpha1.LabelDeployment, hicachev1alpha1.LabelGroup, hicachev1alpha1.LabelCacheNamespace, hicachev1alpha1.LabelBackend, appsv1.PodIndexLabel} {
		refused("label "+l, hicachev1alpha1.PodOverrides{Labels: map[string]string{l: "x"}})
		refused("leader label "+l, hicachev1alpha1.PodOverrides{Leader: &hicachev1alpha1.RoleOverrides{Labels: map[string]string{l: "x"}}})
	}
	for _, a := range []string{hicachev1alpha1.AnnotationLayoutHash, hicachev1alpha1.AnnotationTemplateHash, hicachev1alpha1.AnnotationRankRoleHash} {
		refused("annotation "+a, hicachev1alpha1.PodOverrides{Annotations: map[string]string{a: "x"}})
		refused("follower annotation "+a, hicachev1alpha1.PodOverrides{Follower: &hicachev1alpha1.RoleOverrides{Annotations: map[string]string{a: "x"}}})
	}
}
