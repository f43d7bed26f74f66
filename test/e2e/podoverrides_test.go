package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// secondScheduler is a scheduler name the suite's kube-scheduler serves besides
// default-scheduler (localcluster.Options.SchedulerNames): pods that name it are placed only
// because that profile runs, as a gang scheduler's pods would be by the gang scheduler.
const secondScheduler = "hicache-e2e-scheduler"

// dsv4Production is a two-node DeepSeek-V4 group with what a platform team puts in production:
// weights from a PersistentVolumeClaim, a log volume shared with a sidecar, node affinity,
// spread, a priority class, a pull secret, another scheduler, security contexts, annotations
// per role, a sidecar and an init container.
const dsv4Production = `
metadata: {name: dsv4}
spec:
  model: {path: /models/deepseek-v4, servedName: deepseek-v4}
  profile: DeepSeekV4
  topology: {tensorParallel: 16, gpusPerNode: 8}
  storage: {backendRef: {name: mooncake}}
  template:
    labels: {team: search}
    annotations: {cluster-autoscaler.kubernetes.io/safe-to-evict: "false"}
    leader:
      labels: {hicache-role: leader}
      annotations: {prometheus.io/scrape: "true", prometheus.io/port: "30000"}
    follower:
      labels: {team: search-followers}
      annotations: {prometheus.io/scrape: "false"}
    volumes:
    - {name: weights, persistentVolumeClaim: {claimName: dsv4-weights, readOnly: true}}
    - {name: logs, emptyDir: {}}
    volumeMounts:
    - {name: weights, mountPath: /models, readOnly: true}
    - {name: logs, mountPath: /var/log/sglang}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms: [{matchExpressions: [{key: nvidia.com/gpu.present, operator: In, values: ["true"]}]}]
    topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {hicache.io/deployment: dsv4}}}
    priorityClassName: PRIORITY
    schedulerName: hicache-e2e-scheduler
    imagePullSecrets: [{name: registry}]
    securityContext: {fsGroup: 2000}
    containerSecurityContext: {allowPrivilegeEscalation: false}
    containers:
    - {name: logs, image: fluent-bit, ports: [{containerPort: 2020}], volumeMounts: [{name: logs, mountPath: /logs, readOnly: true}]}
    initContainers:
    - {name: check-weights, image: busybox, command: [test, -d, /models], volumeMounts: [{name: weights, mountPath: /models, readOnly: true}]}
`

// weightsClaim is a PersistentVolume bound ahead to the claim claim of namespace ns, and the
// claim: the controller-manager's binder binds them, and pods that mount the claim schedule.
func weightsClaim(t *testing.T, ns, claim string) {
	t.Helper()
	ctx := context.Background()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "weights",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/models"}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			StorageClassName: &pv.Spec.StorageClassName,
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")}},
		},
	}
	for _, obj := range []client.Object{pv, pvc} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pv) })
	eventually(t, 30*time.Second, "the weights claim bound", func() (bool, string) {
		var got corev1.PersistentVolumeClaim
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pvc), &got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.ClaimBound, "phase " + string(got.Status.Phase)
	})
}

func TestProductionPodOverridesReachEveryRank(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	ctx := context.Background()
	weightsClaim(t, ns, "dsv4-weights")
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-inference"}, Value: 1000}
	if err := k8s.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pc) })
	pull := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry", Namespace: ns}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}}
	create(t, pull)

	h := hcd(t, ns, strings.Replace(dsv4Production, "PRIORITY", pc.Name, 1))
	create(t, h)
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "dsv4", hicachev1alpha1.ConditionReady, metav1.ConditionTrue, 90*time.Second)

	pods := rankPods(t, ns, "dsv4")
	if len(pods) != 2 {
		t.Fatalf("%d rank pods, want 2", len(pods))
	}
	nodes := map[string]bool{}
	for _, p := range pods {
		s := p.Spec
		nodes[s.NodeName] = true
		var vols []string
		for _, v := range s.Volumes {
			vols = append(vols, v.Name)
		}
		if !slices.Contains(vols, "weights") || !slices.Contains(vols, "logs") || !slices.Contains(vols, "hicache") {
			t.Errorf("pod %s volumes %v, want the user's weights and logs beside the operator's", p.Name, vols)
		}
		mounts := map[string]string{}
		for _, m := range s.Containers[0].VolumeMounts {
			mounts[m.MountPath] = m.Name
		}
		if mounts["/models"] != "weights" || mounts["/var/log/sglang"] != "logs" || mounts["/etc/hicache"] != "hicache" {
			t.Errorf("pod %s serving mounts %v", p.Name, mounts)
		}
		if s.Affinity == nil || s.Affinity.NodeAffinity == nil || s.Affinity.PodAntiAffinity == nil ||
			len(s.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("pod %s affinity %+v, want the node affinity and the group's anti-affinity", p.Name, s.Affinity)
		}
		if len(s.TopologySpreadConstraints) != 1 || s.PriorityClassName != pc.Name || s.Priority == nil || *s.Priority != 1000 ||
			s.SchedulerName != secondScheduler || len(s.ImagePullSecrets) != 1 || s.ImagePullSecrets[0].Name != "registry" {
			t.Errorf("pod %s: spread %v, priority class %q (priority %v), scheduler %q, pull secrets %v",
				p.Name, s.TopologySpreadConstraints, s.PriorityClassName, s.Priority, s.SchedulerName, s.ImagePullSecrets)
		}
		if s.SecurityContext == nil || s.SecurityContext.FSGroup == nil || *s.SecurityContext.FSGroup != 2000 ||
			s.Containers[0].SecurityContext == nil || s.Containers[0].SecurityContext.AllowPrivilegeEscalation == nil {
			t.Errorf("pod %s security contexts %+v / %+v", p.Name, s.SecurityContext, s.Containers[0].SecurityContext)
		}
		// The serving container, the proxy in front of it, then the user's sidecars.
		if len(s.Containers) != 3 || s.Containers[0].Name != "sglang" || s.Containers[1].Name != "guard" || s.Containers[2].Name != "logs" ||
			len(s.InitContainers) != 1 || s.InitContainers[0].Name != "check-weights" {
			t.Errorf("pod %s containers %d (%s…), init containers %d", p.Name, len(s.Containers), s.Containers[0].Name, len(s.InitContainers))
		}
		if p.Labels["team"] == "" || p.Annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] != "false" {
			t.Errorf("pod %s lacks the template's label or annotation: %v %v", p.Name, p.Labels, p.Annotations)
		}
		// The second profile, not default-scheduler, placed it.
		eventually(t, 20*time.Second, "the Scheduled event of "+p.Name, func() (bool, string) {
			by := scheduledBy(t, ns, p.Name)
			return by == secondScheduler, fmt.Sprintf("scheduled by %q", by)
		})
	}
	if len(nodes) != 2 {
		t.Errorf("the two ranks landed on %d nodes", len(nodes))
	}

	// Roles: the leader and the follower each carry their own, once they exist; a role's label
	// wins over the template's of the same key.
	uids := map[string]string{}
	waitRoles(t, ns, "dsv4", map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "30000"}, map[string]string{"prometheus.io/scrape": "false"}, "leader")
	eventually(t, 30*time.Second, "the follower's team label", func() (bool, string) {
		for _, p := range rankPods(t, ns, "dsv4") {
			want := "search"
			if p.Labels[podIndexLabel] != "0" {
				want = "search-followers"
			}
			if p.Labels["team"] != want {
				return false, fmt.Sprintf("pod %s team=%q, want %q", p.Name, p.Labels["team"], want)
			}
		}
		return true, ""
	})
	for _, p := range rankPods(t, ns, "dsv4") {
		uids[p.Name] = string(p.UID)
	}
	// A change of a role's annotations reaches the running pods in place: no rollout.
	hash := groups(t, ns, "dsv4")[0].Annotations[hicachev1alpha1.AnnotationTemplateHash]
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) {
		h.Spec.Template.Leader.Annotations = map[string]string{"prometheus.io/scrape": "true"}
		h.Spec.Template.Leader.Labels = nil
	})
	waitRoles(t, ns, "dsv4", map[string]string{"prometheus.io/scrape": "true"}, map[string]string{"prometheus.io/scrape": "false"}, "")
	for _, p := range rankPods(t, ns, "dsv4") {
		if uids[p.Name] != string(p.UID) {
			t.Errorf("pod %s was replaced for a change of role annotations", p.Name)
		}
		if _, ok := p.Annotations["prometheus.io/port"]; ok && p.Labels[podIndexLabel] == "0" {
			t.Errorf("leader %s keeps prometheus.io/port after it left spec.template.leader", p.Name)
		}
	}
	if got := groups(t, ns, "dsv4")[0].Annotations[hicachev1alpha1.AnnotationTemplateHash]; got != hash {
		t.Errorf("template hash %s → %s for a change of role annotations", hash, got)
	}
}

const podIndexLabel = "apps.kubernetes.io/pod-index"

// waitRoles waits until the leader pod carries leader (and the hicache-role label leaderLabel,
// or none when "") and every follower follower, among their annotations.
func waitRoles(t *testing.T, ns, name string, leader, follower map[string]string, leaderLabel string) {
	t.Helper()
	eventually(t, 30*time.Second, "the role annotations on the pods", func() (bool, string) {
		for _, p := range rankPods(t, ns, name) {
			want := follower
			if p.Labels[podIndexLabel] == "0" {
				want = leader
				if p.Labels["hicache-role"] != leaderLabel {
					return false, fmt.Sprintf("leader %s label hicache-role %q, want %q", p.Name, p.Labels["hicache-role"], leaderLabel)
				}
				if _, ok := p.Annotations["prometheus.io/port"]; ok && want["prometheus.io/port"] == "" {
					return false, "the leader keeps prometheus.io/port"
				}
			}
			for k, v := range want {
				if p.Annotations[k] != v {
					return false, fmt.Sprintf("pod %s annotation %s=%q, want %q", p.Name, k, p.Annotations[k], v)
				}
			}
		}
		return true, ""
	})
}

// scheduledBy is the scheduler that reported pod's Scheduled event.
func scheduledBy(t *testing.T, ns, pod string) string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == pod && e.Reason == "Scheduled" {
			return e.ReportingController
		}
	}
	return ""
}

// A spec whose flaw CEL cannot see within its cost budget (a mount of a volume spec.template
// does not define) is accepted by the API server and refused by the operator before anything
// is created, naming the field.
func TestMountOfAnUndefinedVolumeIsReported(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	h := hcd(t, ns, qwen3)
	h.Spec.Template.VolumeMounts = []corev1.VolumeMount{{Name: "weights", MountPath: "/models"}}
	create(t, h)
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "qwen3", hicachev1alpha1.ConditionReady, metav1.ConditionFalse, 30*time.Second)
	c := meta.FindStatusCondition(getHCD(t, ns, "qwen3").Status.Conditions, hicachev1alpha1.ConditionReady)
	if c.Reason != hicachev1alpha1.ReasonInvalidSpec || !strings.Contains(c.Message, `spec.template.volumeMounts[0]: mounts volume "weights", which spec.template.volumes does not define`) {
		t.Errorf("Ready %s: %s; want InvalidSpec naming spec.template.volumeMounts[0]", c.Reason, c.Message)
	}
	if g := groups(t, ns, "qwen3"); len(g) != 0 {
		t.Errorf("%d serving groups were created for a mount of an undefined volume", len(g))
	}
}

// An init container that fills the directory SGLang loads its weights from is accepted by the
// API server and refused by the operator, naming the field, why and what to do; nothing runs.
// Mounted read-only, it runs, and the volume over the model path is a layout fact: another
// claim there is another namespace, an emptyDir at /tmp is none.
func TestContainerWritingWhatSGLangReadsIsRefused(t *testing.T) {
	ns, _ := namespaceWithBackend(t)
	h := hcd(t, ns, qwen3)
	h.Spec.Model.Path = "/data/qwen3"
	h.Spec.Template.Volumes = []corev1.Volume{{Name: "weights", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	h.Spec.Template.VolumeMounts = []corev1.VolumeMount{{Name: "weights", MountPath: "/data"}}
	h.Spec.Template.InitContainers = []corev1.Container{{Name: "fetch", Image: "s5cmd", Command: []string{"s5cmd", "cp", "s3://weights/qwen3/*", "/data/qwen3/"},
		VolumeMounts: []corev1.VolumeMount{{Name: "weights", MountPath: "/data"}}}}
	create(t, h)
	waitCondition(t, &hicachev1alpha1.HiCacheDeployment{}, ns, "qwen3", hicachev1alpha1.ConditionReady, metav1.ConditionFalse, 30*time.Second)
	c := meta.FindStatusCondition(getHCD(t, ns, "qwen3").Status.Conditions, hicachev1alpha1.ConditionReady)
	for _, want := range []string{`spec.template.initContainers[0].volumeMounts[0]: mounts volume "weights" writable (/data, not readOnly), which the serving container mounts at /data`,
		"the operator cannot know it when it chooses the L3 namespace", "mount it with readOnly: true"} {
		if c.Reason != hicachev1alpha1.ReasonInvalidSpec || !strings.Contains(c.Message, want) {
			t.Errorf("Ready %s: %s; want InvalidSpec saying %q", c.Reason, c.Message, want)
		}
	}
	eventually(t, 30*time.Second, "a Warning event InvalidSpec", func() (bool, string) {
		return countEvents(t, ns, "qwen3", hicachev1alpha1.ReasonInvalidSpec) > 0, "no InvalidSpec event"
	})
	if g := groups(t, ns, "qwen3"); len(g) != 0 {
		t.Errorf("%d serving groups were created for an init container writing the weights", len(g))
	}

	// The fix: the weights come from claims, the init container only reads them.
	update(t, h, func(h *hicachev1alpha1.HiCacheDeployment) {
		h.Spec.Template.Volumes[0].VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "qwen3-a", ReadOnly: true}}
		h.Spec.Template.InitContainers[0].VolumeMounts[0].ReadOnly = true
		h.Spec.Template.InitContainers[0].Command = []string{"test", "-d", "/data/qwen3"}
	})
	nsA := cacheNamespace(t, ns, "qwen3")
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "qwen3-hicache"}, &cm); err != nil {
		t.Fatal(err)
	}
	if facts := fmt.Sprint(cm.Data); !strings.Contains(facts, `mount./data={"volume":{"persistentVolumeClaim":{"claimName":"qwen3-a","readOnly":true}}}`) {
		t.Errorf("the ConfigMap's layout facts lack the claim over the model path: %s", facts)
	}

	other := hcd(t, ns, qwen3)
	other.Name = "qwen3-b"
	other.Spec.Model.Path = "/data/qwen3"
	other.Spec.Template.Volumes = []corev1.Volume{{Name: "weights", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "qwen3-b", ReadOnly: true}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	other.Spec.Template.VolumeMounts = []corev1.VolumeMount{{Name: "weights", MountPath: "/data", ReadOnly: true}, {Name: "scratch", MountPath: "/tmp"}}
	create(t, other)
	if nsB := cacheNamespace(t, ns, "qwen3-b"); nsB == nsA {
		t.Errorf("claims qwen3-a and qwen3-b over the model path write namespaces %s and %s: other weights need their own", nsA, nsB)
	}
}

// cacheNamespace waits for the L3 namespace a deployment's status reports, once its spec is
// resolved and accepted.
func cacheNamespace(t *testing.T, ns, name string) string {
	t.Helper()
	var got string
	eventually(t, 60*time.Second, "the L3 namespace of "+name, func() (bool, string) {
		h := getHCD(t, ns, name)
		if h.Status.Cache != nil {
			got = h.Status.Cache.Namespace
		}
		c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionReady)
		if c != nil && c.Reason == hicachev1alpha1.ReasonInvalidSpec {
			return false, "still InvalidSpec: " + c.Message
		}
		return got != "", "no namespace in the status"
	})
	return got
}
