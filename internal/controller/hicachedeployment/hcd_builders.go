package hicachedeployment

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// Labels and annotations the operator puts on what it creates.
const (
	// GPUResource is the extended resource rank pods request.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"

	// SGLangPort serves the leader's HTTP API; DistInitPort is torch.distributed's rendezvous.
	SGLangPort   = resolve.SGLangPort
	DistInitPort = resolve.DistInitPort

	configMountPath = "/etc/hicache"
)

// What gang schedulers read, set from spec.template.gangScheduling.
const (
	// VolcanoScheduler is Volcano's scheduler name.
	VolcanoScheduler = "volcano"
	// VolcanoMinMemberAnnotation on a StatefulSet sizes the PodGroup Volcano makes for its pods.
	VolcanoMinMemberAnnotation = "scheduling.volcano.sh/group-min-member"
	// VolcanoQueueAnnotation on a pod names the Volcano queue of its PodGroup.
	VolcanoQueueAnnotation = "scheduling.volcano.sh/queue-name"
	// KueueQueueLabel on a StatefulSet puts its pods, as one pod group, in a Kueue LocalQueue.
	KueueQueueLabel = "kueue.x-k8s.io/queue-name"
)

// groupName is the StatefulSet (and headless Service) of serving group k: "<hcd>-<g>" without
// roles, "<hcd>-prefill-<g>" and "<hcd>-decode-<g>" with them.
func groupName(hcd string, k GroupKey) string { return hcd + "-" + k.String() }

func commonLabels(hcd *hicachev1alpha1.HiCacheDeployment) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":        "sglang",
		"app.kubernetes.io/instance":    hcd.Name,
		"app.kubernetes.io/managed-by":  storeuse.FieldOwner,
		hicachev1alpha1.LabelDeployment: hcd.Name,
	}
}

func ownerRef(hcd *hicachev1alpha1.HiCacheDeployment) metav1.OwnerReference {
	return *metav1.NewControllerRef(hcd, hicachev1alpha1.GroupVersion.WithKind("HiCacheDeployment"))
}

// ServerConfig is the SGLang command line of every rank of group g of a deployment without
// roles.
func ServerConfig(hcd *hicachev1alpha1.HiCacheDeployment, r *resolve.Resolved, be *resolve.Backend, g int) (sglang.ServerConfig, *sglang.MooncakeConfig, error) {
	return roleServerConfig(hcd, plainRole(hcd, r), be, GroupKey{index: g})
}

// roleServerConfig is the SGLang command line of every rank of group k of role sr.
func roleServerConfig(hcd *hicachev1alpha1.HiCacheDeployment, sr *servingRole, be *resolve.Backend, k GroupKey) (sglang.ServerConfig, *sglang.MooncakeConfig, error) {
	addr := ""
	if sr.res.Nodes > 1 {
		name := groupName(hcd.Name, k)
		addr = fmt.Sprintf("%s-0.%s.%s.svc:%d", name, name, hcd.Namespace, DistInitPort)
	}
	return sr.serverConfig(be, addr)
}

// BuildConfigMap holds the rendered extra config and the rank plan, for people and tools.
func BuildConfigMap(hcd *hicachev1alpha1.HiCacheDeployment, r *resolve.Resolved, mc *sglang.MooncakeConfig) (*corev1.ConfigMap, error) {
	data := map[string]string{
		"layout.txt": fmt.Sprintf("namespace: %s\nfingerprint: %s\n\n%s",
			r.Namespace, r.Fingerprint, r.Facts.Canonical()),
	}
	if err := putPlan(data, "", r.Plan); err != nil {
		return nil, err
	}
	if mc != nil {
		extra, err := sglang.MooncakeExtraConfig(*mc)
		if err != nil {
			return nil, err
		}
		b, err := json.MarshalIndent(extra, "", "  ")
		if err != nil {
			return nil, err
		}
		data["extra-config.json"] = string(b)
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name: resolve.ConfigMapName(hcd.Name), Namespace: hcd.Namespace,
			Labels: commonLabels(hcd), OwnerReferences: []metav1.OwnerReference{ownerRef(hcd)},
		},
		Data: data,
	}, nil
}

// addRolePlans adds the rank plan of each further role to a deployment's ConfigMap, under the
// role's name ("decode-plan.txt", "decode-plan.json").
func addRolePlans(cm *corev1.ConfigMap, served []*servingRole) error {
	for _, sr := range served {
		if err := putPlan(cm.Data, string(sr.role)+"-", sr.res.Plan); err != nil {
			return err
		}
	}
	return nil
}

// maxPlanBytes bounds what the rank plans take of a deployment's ConfigMap: the API server
// refuses a ConfigMap of more than 1 MiB, and the plan of a thousand ranks is more than that.
const maxPlanBytes = 768 << 10

// putPlan adds a plan's table and JSON to a ConfigMap's data under prefix ("plan.txt",
// "decode-plan.json"), as far as the plans put there before leave room under maxPlanBytes. A
// plan too large keeps its table and a note, or the note alone; its JSON is left out (kubectl
// hicache status then computes the plan from the spec).
func putPlan(data map[string]string, prefix string, plan cache.RankPlan) error {
	r, err := plan.Render()
	if err != nil {
		return err
	}
	room := maxPlanBytes
	for k, v := range data {
		if strings.HasSuffix(k, "plan.txt") || strings.HasSuffix(k, "plan.json") {
			room -= len(v)
		}
	}
	if len(r.JSON)+len(r.Table) <= room {
		data[prefix+"plan.txt"], data[prefix+"plan.json"] = r.Table, r.JSON
		return nil
	}
	why := fmt.Sprintf("the plan of %d ranks is %d bytes as JSON, more than this ConfigMap can hold; kubectl hicache plan prints it",
		plan.NumRanks(), len(r.JSON))
	if note := fmt.Sprintf("%splan.json is left out: %s\n", prefix, why); len(r.Table)+len(note) <= room {
		data[prefix+"plan.txt"] = r.Table + note
		return nil
	}
	data[prefix+"plan.txt"] = fmt.Sprintf("%s\nthe table and %splan.json are left out: %s\n", plan.Summary(), prefix, why)
	return nil
}

// BuildClientService fronts the leaders of every group, or the router when spec.router is set.
// With spec.roles it always fronts the router: a request must reach a prefill and a decode
// server together, which only a prefill/decode router does, so no leader is a client endpoint
// (without spec.router the Service has no endpoints until one is set).
func BuildClientService(hcd *hicachev1alpha1.HiCacheDeployment) *corev1.Service {
	sel := map[string]string{hicachev1alpha1.LabelDeployment: hcd.Name, appsv1.PodIndexLabel: "0"}
	if hcd.Spec.Router != nil || hcd.Spec.Roles != nil {
		sel = routerSelector(hcd)
	}
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: hcd.Name, Namespace: hcd.Namespace,
			Labels: commonLabels(hcd), OwnerReferences: []metav1.OwnerReference{ownerRef(hcd)},
		},
		Spec: corev1.ServiceSpec{
			Selector: sel,
			Ports: []corev1.ServicePort{{
				Name: "http", Port: SGLangPort, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// buildHeadlessService gives group k's ranks stable DNS names.
func buildHeadlessService(hcd *hicachev1alpha1.HiCacheDeployment, k GroupKey) *corev1.Service {
	labels := groupLabels(hcd, k)
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: groupName(hcd.Name, k), Namespace: hcd.Namespace,
			Labels: labels, OwnerReferences: []metav1.OwnerReference{ownerRef(hcd)},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 groupSelector(hcd.Name, k),
			Ports: []corev1.ServicePort{{
				Name: "dist", Port: DistInitPort, TargetPort: intstr.FromInt32(DistInitPort), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

func groupLabels(hcd *hicachev1alpha1.HiCacheDeployment, k GroupKey) map[string]string {
	l := commonLabels(hcd)
	l[hicachev1alpha1.LabelGroup] = strconv.Itoa(k.index)
	if k.role != "" {
		l[hicachev1alpha1.LabelRole] = string(k.role)
	}
	return l
}

// groupSelector selects the pods of group k: by deployment and index, and by role in a role
// (prefill group 0 and decode group 0 are two groups).
func groupSelector(hcd string, k GroupKey) map[string]string {
	sel := map[string]string{hicachev1alpha1.LabelDeployment: hcd, hicachev1alpha1.LabelGroup: strconv.Itoa(k.index)}
	if k.role != "" {
		sel[hicachev1alpha1.LabelRole] = string(k.role)
	}
	return sel
}

// BuildGroup is the StatefulSet of serving group g of a deployment without roles.
func BuildGroup(hcd *hicachev1alpha1.HiCacheDeployment, r *resolve.Resolved, be *resolve.Backend, g int, image PodImages) (*appsv1.StatefulSet, error) {
	return buildRoleGroup(hcd, plainRole(hcd, r), be, g, image)
}

// buildRoleGroup is the StatefulSet of group g of role sr: one pod per node, pod 0 the leader,
// every rank running the role's command line (checked against the pinned release's arguments
// by sglang.Args).
func buildRoleGroup(hcd *hicachev1alpha1.HiCacheDeployment, sr *servingRole, be *resolve.Backend, g int, image PodImages) (*appsv1.StatefulSet, error) {
	key := GroupKey{role: sr.role, index: g}
	r := sr.res
	cfg, mc, err := roleServerConfig(hcd, sr, be, key)
	if err != nil {
		return nil, err
	}
	args, err := sglang.Args(cfg)
	if err != nil {
		if sr.role != "" {
			return nil, fmt.Errorf("the %s role: %w", sr.role, resolve.SpecError(err))
		}
		return nil, err
	}
	spec := &sr.spec.Spec
	podLabels := groupLabels(hcd, key)
	for k, v := range spec.Template.Labels {
		if _, reserved := podLabels[k]; !reserved {
			podLabels[k] = v
		}
	}
	if spec.Storage != nil && sr.writesL3() {
		// Only ranks that write L3 carry its namespace: the label is what keeps a namespace in
		// use, and a decode role without L3 neither reads nor writes it.
		podLabels[hicachev1alpha1.LabelCacheNamespace] = r.Namespace
		podLabels[hicachev1alpha1.LabelBackend] = spec.Storage.BackendRef.Name
	}

	model, err := buildModelParts(spec, image.SGLang)
	if err != nil {
		return nil, err
	}
	env := []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "NODE_RANK", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + appsv1.PodIndexLabel + "']"}}},
	}
	if !slices.ContainsFunc(spec.Template.Env, func(e corev1.EnvVar) bool { return e.Name == HealthGenerationEnv }) {
		// /health checks the server's state; /health_generate generates (rankProbes). A user's
		// own setting wins.
		env = append(env, corev1.EnvVar{Name: HealthGenerationEnv, Value: "false"})
	}
	if mc != nil {
		mEnv, err := sglang.Env(*mc)
		if err != nil {
			return nil, err
		}
		for _, e := range mEnv {
			if userSetsRPCTimeout(spec.Template.Env, e.Name) {
				continue // the user's own deadline for the client's master requests wins
			}
			env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
		}
	}
	env = append(env, serverKeyEnv(hcd)...)
	env = append(env, spec.Template.Env...)

	resources := *spec.Resources.DeepCopy()
	gpus := *resource.NewQuantity(int64(r.GPUsPerPod), resource.DecimalSI)
	if resources.Requests == nil {
		resources.Requests = corev1.ResourceList{}
	}
	if resources.Limits == nil {
		resources.Limits = corev1.ResourceList{}
	}
	resources.Requests[GPUResource] = gpus
	resources.Limits[GPUResource] = gpus
	if mc != nil {
		storeuse.AddSegmentMemory(&resources, r.SegmentPerPod())
	}

	container := corev1.Container{
		Name:      resolve.ServingContainer,
		Image:     image.SGLang,
		Command:   sglang.Command(),
		Args:      args,
		Env:       env,
		Resources: resources,
		// SGLang's HTTP port (and a prefill's bootstrap port) are the proxy's in front of it:
		// SGLang listens on loopback (GuardContainer).
		Ports: []corev1.ContainerPort{
			{Name: "dist", ContainerPort: DistInitPort, Protocol: corev1.ProtocolTCP},
		},
		VolumeMounts: append([]corev1.VolumeMount{
			{Name: "dshm", MountPath: "/dev/shm"},
			{Name: "hicache", MountPath: configMountPath, ReadOnly: true},
		}, model.mounts...),
		SecurityContext: servingSecurity(spec.Template.SecurityContext, spec.Template.ContainerSecurityContext),
	}
	var bootstrapPort int32
	if sr.role == hicachev1alpha1.RolePrefill {
		// Decode servers find the prefill's ranks through the bootstrap server on its leader,
		// which the proxy serves on the pod IP.
		bootstrapPort = sr.roles.Transfer.BootstrapPort
	}
	budget, _ := resolve.StartupBudget(spec, r)
	container.StartupProbe, container.ReadinessProbe, container.LivenessProbe = rankProbes(budget)
	volumes := append([]corev1.Volume{
		{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "hicache", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: resolve.ConfigMapName(hcd.Name)}}}},
	}, model.volumes...)
	if (spec.Storage != nil && spec.Storage.Protocol == "rdma" && sr.writesL3()) || rdmaTransfer(sr) {
		// The store's RDMA protocol, or the KV transfer between roles over Mooncake's RDMA
		// transfer engine, registers memory with the devices.
		addCapability(&container, "IPC_LOCK")
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: "infiniband", MountPath: "/dev/infiniband"})
		volumes = append(volumes, corev1.Volume{Name: "infiniband", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: "/dev/infiniband"}}})
	}
	// The user's volumes and mounts come after the operator's: validation keeps their names and
	// paths apart.
	for i := range spec.Template.Volumes {
		volumes = append(volumes, *spec.Template.Volumes[i].DeepCopy())
	}
	for i := range spec.Template.VolumeMounts {
		container.VolumeMounts = append(container.VolumeMounts, *spec.Template.VolumeMounts[i].DeepCopy())
	}

	containers := []corev1.Container{container, GuardContainer(hcd, bootstrapPort, image.Guard)}
	for i := range spec.Template.Containers {
		containers = append(containers, *spec.Template.Containers[i].DeepCopy())
	}
	// The operator's init containers (a hub download of the weights) run first.
	initContainers := model.inits
	for i := range spec.Template.InitContainers {
		initContainers = append(initContainers, *spec.Template.InitContainers[i].DeepCopy())
	}
	if be != nil && be.EtcdProxy != nil {
		// The proxy to the backend's managed etcd starts before the ranks and runs beside them.
		initContainers = append([]corev1.Container{*be.EtcdProxy.Container.DeepCopy()}, initContainers...)
		volumes = append(volumes, *be.EtcdProxy.Volume.DeepCopy())
	}
	podSpec := corev1.PodSpec{
		InitContainers:            initContainers,
		Containers:                containers,
		Volumes:                   volumes,
		NodeSelector:              spec.Template.NodeSelector,
		Tolerations:               spec.Template.Tolerations,
		ServiceAccountName:        spec.Template.ServiceAccountName,
		Affinity:                  groupAffinity(spec.Template.Affinity, hcd.Name, key, r.Nodes),
		TopologySpreadConstraints: spec.Template.TopologySpreadConstraints,
		PriorityClassName:         spec.Template.PriorityClassName,
		SchedulerName:             spec.Template.SchedulerName,
		ImagePullSecrets:          spec.Template.ImagePullSecrets,
		SecurityContext:           spec.Template.SecurityContext.DeepCopy(),
	}
	annotations := map[string]string{hicachev1alpha1.AnnotationLayoutHash: r.ShortHash}
	if sr.roles != nil {
		// What the router reads of a role's leaders (a prefill's bootstrap port), set whether or
		// not spec.router is, so that adding a router rolls no group.
		maps.Copy(annotations, RolePodAnnotations(sr.roles, sr.role))
	}
	for k, v := range spec.Template.Annotations {
		if _, reserved := annotations[k]; !reserved {
			annotations[k] = v
		}
	}
	stsLabels, stsAnnotations := groupLabels(hcd, key), map[string]string{}
	if gang := spec.Template.GangScheduling; gang != nil {
		switch gang.Scheduler {
		case hicachev1alpha1.GangVolcano:
			// Volcano's controller makes one PodGroup per owner of volcano-scheduled pods, with
			// the owner's group-min-member as its size.
			podSpec.SchedulerName = VolcanoScheduler
			stsAnnotations[VolcanoMinMemberAnnotation] = strconv.Itoa(r.Nodes)
			if gang.Queue != "" {
				annotations[VolcanoQueueAnnotation] = gang.Queue
			}
		case hicachev1alpha1.GangKueue:
			// Kueue's StatefulSet integration admits the pods of a labelled StatefulSet as one
			// pod group of spec.replicas pods.
			stsLabels[KueueQueueLabel] = gang.Queue
		}
	}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: annotations},
		Spec:       podSpec,
	}
	hash, err := templateHash(&template)
	if err != nil {
		return nil, err
	}
	template.Annotations[hicachev1alpha1.AnnotationTemplateHash] = hash

	stsAnnotations[hicachev1alpha1.AnnotationTemplateHash] = hash
	sts := &appsv1.StatefulSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name: groupName(hcd.Name, key), Namespace: hcd.Namespace,
			Labels:          stsLabels,
			Annotations:     stsAnnotations,
			OwnerReferences: []metav1.OwnerReference{ownerRef(hcd)},
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(int32(r.Nodes)),
			ServiceName:         groupName(hcd.Name, key),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			// The operator replaces a group's pods all at once: ranks of one group must not mix
			// versions, and a lost rank cannot rejoin a running process group.
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Selector:       &metav1.LabelSelector{MatchLabels: groupSelector(hcd.Name, key)},
			Template:       template,
		},
	}
	return sts, nil
}

// rdmaTransfer tells whether the role's ranks move KV between the roles over RDMA (the mooncake
// transfer backend; mooncake_tcp and nixl over TCP need no device).
func rdmaTransfer(sr *servingRole) bool {
	return sr.roles != nil && sr.roles.Transfer.Backend == hicachev1alpha1.TransferMooncake
}

// groupAffinity is the user's affinity (spec.template.affinity) with, for a group of several
// nodes, the operator's required anti-affinity term added: a rank never shares a node with
// another rank of its group. The user's node affinity, pod affinity and own anti-affinity terms
// are kept as they are.
func groupAffinity(user *corev1.Affinity, hcd string, k GroupKey, nodes int) *corev1.Affinity {
	if nodes == 1 {
		return user.DeepCopy()
	}
	a := user.DeepCopy()
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: groupSelector(hcd, k)},
			TopologyKey:   "kubernetes.io/hostname",
		})
	return a
}

// addCapability adds a Linux capability to a container's security context, keeping what the
// user set there (spec.template.containerSecurityContext).
func addCapability(c *corev1.Container, capability corev1.Capability) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	if c.SecurityContext.Capabilities == nil {
		c.SecurityContext.Capabilities = &corev1.Capabilities{}
	}
	if !slices.Contains(c.SecurityContext.Capabilities.Add, capability) {
		c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, capability)
	}
}

// templateHash is a short hash of a pod template, to tell groups that run it from those that
// do not.
func templateHash(t *corev1.PodTemplateSpec) (string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

// membersAnnotation records which pod UID holds each ordinal of a formed group, so a replaced
// rank is noticed even when its replacement looks healthy.
func membersAnnotation(pods []corev1.Pod) string {
	parts := make([]string, 0, len(pods))
	for i := range pods {
		parts = append(parts, pods[i].Labels[appsv1.PodIndexLabel]+"="+string(pods[i].UID))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// userSetsRPCTimeout tells whether spec.template.env sets name, one of the Mooncake client's RPC
// deadlines the ranks of HA masters get (sglang.FailoverRPCEnv): the user's value then stands
// alone, and the variable is listed once.
func userSetsRPCTimeout(user []corev1.EnvVar, name string) bool {
	if name != sglang.EnvRPCTimeout && name != sglang.EnvRPCConnectTimeout {
		return false
	}
	return slices.ContainsFunc(user, func(e corev1.EnvVar) bool { return e.Name == name })
}
