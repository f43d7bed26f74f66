package cachebackend

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
)

// The managed store pods: built here as a StatefulSet whose pods the operator replaces one at a
// time (store_plan.go decides which and when), after the master has moved their objects away.

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete

const (
	// storeHealthPort is the Mooncake client's own HTTP server (MOONCAKE_CLIENT_HTTP_PORT), whose
	// /health answers 200 once the client is set up and its master answers pings, 503 before
	// and while the master is unreachable.
	storeHealthPort = 9300
	// storeProcessMemory is what a store pod is given for the process itself when
	// spec.mooncake.managed.store.resources sets no memory request: about 100 MiB was measured.
	storeProcessMemory = 256 << 20
	// defaultLocalBuffer is Mooncake's DEFAULT_LOCAL_BUFFER_SIZE (mooncake_config.py), which the
	// store service registers besides its segment.
	defaultLocalBuffer = 1 << 30
	// drainConcurrency is how many objects the master moves at once for a drain (its default is
	// 4, and it plans moves about once a second).
	drainConcurrency = 32
	// drainPoll is how often a running drain is followed.
	drainPoll = 2 * time.Second
)

// storeName is the StatefulSet of a backend's store pods.
func storeName(cb string) string { return cb + "-store" }

// storeLocalBuffer is the local buffer of each store pod.
func storeLocalBuffer(s *hicachev1alpha1.StorePods) int64 {
	if s.LocalBufferSize != nil {
		return s.LocalBufferSize.Value()
	}
	return defaultLocalBuffer
}

// storeResources are the store container's resources: what spec.resources asks for the process
// (storeProcessMemory when it sets no memory request), plus the segment and the local buffer in
// the memory request, and in the memory limit when one is set.
func storeResources(s *hicachev1alpha1.StorePods) corev1.ResourceRequirements {
	res := *s.Resources.DeepCopy()
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	if _, ok := res.Requests[corev1.ResourceMemory]; !ok {
		if lim, ok := res.Limits[corev1.ResourceMemory]; ok {
			// A limit alone is also the request (as the API server defaults it): the process
			// gets what is left of it beside the segment and buffer, which are added to both.
			res.Requests[corev1.ResourceMemory] = lim.DeepCopy()
		} else {
			res.Requests[corev1.ResourceMemory] = *resource.NewQuantity(storeProcessMemory, resource.BinarySI)
		}
	}
	storeuse.AddSegmentMemory(&res, s.SegmentSize.Value()+storeLocalBuffer(s))
	return res
}

// BuildStoreStatefulSet builds the store pods. replicas is the plan's (one more than asked
// while a roll runs).
func BuildStoreStatefulSet(cb *hicachev1alpha1.CacheBackend, image string, replicas int) *appsv1.StatefulSet {
	m := cb.Spec.Mooncake.Managed
	s := m.Store
	labels := storeuse.BackendLabels(cb, "store")
	podSec, sec := storeuse.RestrictedSecurity()
	nodeSelector, tolerations := storeuse.BackendPlacement(cb)
	protocol := string(s.Protocol)
	if protocol == "" {
		protocol = "tcp"
	}
	env := []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		// The master Service, or with HA the etcd where the store finds the leader.
		{Name: "MOONCAKE_MASTER", Value: storeuse.PodRPCAddress(cb, storeuse.ManagedRPCAddress(cb))},
		{Name: "MOONCAKE_TE_META_DATA_SERVER", Value: cb.Spec.Mooncake.MetadataServer},
		{Name: "MOONCAKE_GLOBAL_SEGMENT_SIZE", Value: strconv.FormatInt(s.SegmentSize.Value(), 10)},
		{Name: "MOONCAKE_LOCAL_BUFFER_SIZE", Value: strconv.FormatInt(storeLocalBuffer(s), 10)},
		{Name: "MOONCAKE_PROTOCOL", Value: protocol},
	}
	if len(s.RDMADevices) > 0 {
		env = append(env, corev1.EnvVar{Name: "MOONCAKE_DEVICE", Value: strings.Join(s.RDMADevices, ",")})
	}
	env = append(env,
		// The segment is named after this address: the operator finds a pod's segment by it.
		corev1.EnvVar{Name: "MOONCAKE_LOCAL_HOSTNAME", Value: "$(POD_IP)"},
		corev1.EnvVar{Name: "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", Value: "true"},
		corev1.EnvVar{Name: "MOONCAKE_CLIENT_HTTP_PORT", Value: strconv.Itoa(storeHealthPort)},
	)
	env = append(env, storeuse.ClientClusterEnv(storeuse.HaClusterID(cb))...)
	env = append(env, storeFailoverEnv(cb)...)
	container := corev1.Container{
		Name:    "store",
		Image:   image,
		Command: []string{"python3", "-m", "mooncake.mooncake_store_service", "--port=" + strconv.Itoa(storeuse.StoreHTTPPort)},
		Env:     env,
		Ports: []corev1.ContainerPort{
			{Name: "api", ContainerPort: storeuse.StoreHTTPPort, Protocol: corev1.ProtocolTCP},
			{Name: "health", ContainerPort: storeHealthPort, Protocol: corev1.ProtocolTCP},
		},
		// Ready once the segment is mounted and the master answers the client. No liveness
		// probe: a restart would drop the segment's objects and cannot bring a master back.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("health")}},
			PeriodSeconds:    5,
			TimeoutSeconds:   3,
			FailureThreshold: 3,
		},
		Resources:       storeResources(s),
		SecurityContext: sec,
	}
	var volumes []corev1.Volume
	if protocol == "rdma" {
		container.SecurityContext.Capabilities.Add = []corev1.Capability{"IPC_LOCK"}
		container.VolumeMounts = []corev1.VolumeMount{{Name: "infiniband", MountPath: "/dev/infiniband"}}
		volumes = []corev1.Volume{{Name: "infiniband", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: "/dev/infiniband"}}}}
	}
	return &appsv1.StatefulSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: storeName(cb.Name), Namespace: cb.Namespace,
			Labels: labels, OwnerReferences: storeuse.BackendOwner(cb)},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(replicas)),
			// The operator deletes each pod once the master has drained it; the StatefulSet
			// recreates it in the current template.
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: podSec,
					NodeSelector:    nodeSelector,
					Tolerations:     tolerations,
					Containers:      []corev1.Container{container},
					Volumes:         volumes,
				},
			},
		},
	}
}

// reconcileStores runs a managed backend's store pods: it observes the StatefulSet, its pods and
// the master's segments, asks planStores what to do, and does it. It returns how soon to look
// again (0: when something changes).
func (r *CacheBackendReconciler) reconcileStores(ctx context.Context, cb *hicachev1alpha1.CacheBackend, ep *hicachev1alpha1.BackendEndpoints,
	masterUp bool, st *hicachev1alpha1.CacheBackendStatus, now time.Time) (time.Duration, error) {
	m := cb.Spec.Mooncake.Managed
	if m == nil || m.Store == nil {
		st.StorePods, st.StoreRollout = nil, nil
		meta.RemoveStatusCondition(&st.Conditions, hicachev1alpha1.ConditionStoresCurrent)
		return 0, nil
	}
	log := ctrl.LoggerFrom(ctx)
	in, sts, pods, err := r.observeStores(ctx, cb, ep, masterUp, st, now)
	if err != nil {
		return 0, err
	}
	plan := planStores(in)

	image := m.Store.Image
	if image == "" {
		image = m.Image
	}
	if image == "" {
		image = r.Options.DefaultMooncakeImage
	}
	desired := BuildStoreStatefulSet(cb, image, plan.replicas)
	ca, err := r.etcdCAFingerprint(ctx, cb)
	if err != nil {
		return 0, fmt.Errorf("reading the etcd's certificates: %w", err)
	}
	storeuse.AddEtcdProxyWithCA(&desired.Spec.Template, cb, storeuse.ManagedEtcdImage(cb, r.Options.DefaultEtcdImage), ca)
	if _, err := (reconcile.Applier{Client: r.Client}).ApplyIfChanged(ctx, desired, &appsv1.StatefulSet{}); err != nil {
		return 0, err
	}
	if err := r.removeLegacyStoreDeployment(ctx, cb, sts); err != nil {
		return 0, err
	}

	rollout := plan.rollout
	switch plan.action {
	case storeDrain:
		c, err := mooncake.NewClient(ep.AdminURL, r.adminHTTP())
		if err != nil {
			return 0, err
		}
		id, err := c.CreateDrainJob(ctx, plan.segments, drainConcurrency)
		switch {
		case mooncake.IsSegmentBusy(err):
			// Already draining: a drain this status did not record.
		case err != nil:
			return 0, fmt.Errorf("asking the Mooncake master to drain store pod %s: %w", plan.pod, err)
		default:
			rollout.JobID = id
			r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonStoreDraining, "Drain", "%s", plan.message)
			log.Info("Draining a store pod", "pod", plan.pod, "segments", plan.segments, "job", id)
		}
	case storeDelete:
		pod := pods[plan.pod]
		if pod != nil {
			if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
				return 0, fmt.Errorf("deleting store pod %s: %w", plan.pod, err)
			}
			if plan.lost != "" {
				r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, "StoreObjectsLost", "Replace",
					"Store pod %s is replaced while it may still hold objects, which are lost: %s", plan.pod, plan.lost)
			} else {
				r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonStoreReplacing, "Replace", "%s", plan.message)
			}
		}
	default:
		if plan.lost != "" && plan.replicas < in.stsReplicas {
			r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, "StoreObjectsLost", "ScaleDown",
				"Store pods above %d are removed while they may still hold objects, which are lost: %s", plan.replicas, plan.lost)
		}
	}

	st.StoreRollout = rollout
	st.StorePods = storeCounts(sts, pods)
	reconcile.ConditionsOf(&st.Conditions, cb.Generation, now).Set(hicachev1alpha1.ConditionStoresCurrent, plan.current, plan.reason, plan.message)
	if plan.requeue {
		return drainPoll, nil
	}
	return 0, nil
}

// observeStores reads what planStores decides from. pods are the store pods by name.
func (r *CacheBackendReconciler) observeStores(ctx context.Context, cb *hicachev1alpha1.CacheBackend, ep *hicachev1alpha1.BackendEndpoints,
	masterUp bool, st *hicachev1alpha1.CacheBackendStatus, now time.Time) (storeObserved, *appsv1.StatefulSet, map[string]*corev1.Pod, error) {
	s := cb.Spec.Mooncake.Managed.Store
	in := storeObserved{want: int(ptr.Deref(s.Replicas, 1)), stsReplicas: -1, rollout: st.StoreRollout, now: now,
		timeout: time.Duration(max(s.DrainTimeoutSeconds, 10)) * time.Second}
	if s.DrainTimeoutSeconds == 0 {
		in.timeout = 300 * time.Second
	}
	var sts appsv1.StatefulSet
	switch err := r.Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: storeName(cb.Name)}, &sts); {
	case apierrors.IsNotFound(err):
		return in, nil, nil, nil
	case err != nil:
		return in, nil, nil, err
	}
	in.stsReplicas = int(ptr.Deref(sts.Spec.Replicas, 1))
	var list corev1.PodList
	if err := r.List(ctx, &list, client.InNamespace(cb.Namespace), client.MatchingLabels(storeuse.BackendLabels(cb, "store"))); err != nil {
		return in, nil, nil, err
	}
	// Until the StatefulSet controller has seen the last template, which pods run it is not
	// known: take none as old (nothing is drained for a roll meanwhile).
	revisionKnown := sts.Status.ObservedGeneration >= sts.Generation && sts.Status.UpdateRevision != ""
	pods := map[string]*corev1.Pod{}
	byIP := map[string]*storePod{}
	for i := range list.Items {
		p := &list.Items[i]
		ord, ok := storeOrdinal(p.Name, sts.Name)
		if !ok || !metav1.IsControlledBy(p, &sts) {
			continue
		}
		pods[p.Name] = p
		in.pods = append(in.pods, storePod{name: p.Name, ordinal: ord, ready: kubeutil.PodReady(p), deleting: p.DeletionTimestamp != nil,
			updated: !revisionKnown || p.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision})
	}
	for i := range in.pods {
		if ip := pods[in.pods[i].name].Status.PodIP; ip != "" {
			byIP[ip] = &in.pods[i]
		}
	}
	if !masterUp || ep == nil || ep.AdminURL == "" {
		return in, &sts, pods, nil
	}
	c, err := mooncake.NewClient(ep.AdminURL, r.adminHTTP())
	if err != nil {
		return in, nil, nil, err
	}
	segs, err := c.Segments(ctx)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Listing the master's segments failed", "error", err.Error())
		return in, &sts, pods, nil
	}
	in.segmentsKnown = true
	in.otherSegments = assignSegments(byIP, segs)
	if rec := st.StoreRollout; rec != nil && rec.JobID != "" {
		if job, err := c.QueryDrainJob(ctx, rec.JobID); err == nil {
			in.job = &job
		}
	}
	return in, &sts, pods, nil
}

// assignSegments gives each store pod the segments named after its IP (a store pod's
// MOONCAKE_LOCAL_HOSTNAME is its pod IP, and a segment is named HOST:PORT), and counts the
// segments in service that belong to no store pod: serving ranks that lend memory.
func assignSegments(byIP map[string]*storePod, segs []mooncake.Segment) (other int) {
	for _, sg := range segs {
		host, _, err := net.SplitHostPort(sg.Name)
		if p := byIP[host]; err == nil && p != nil {
			p.segments = append(p.segments, storeSegment{name: sg.Name, status: sg.Status, used: sg.UsedBytes})
		} else if sg.Status == mooncake.SegmentOK {
			other++
		}
	}
	return other
}

// storeOrdinal is the ordinal of a StatefulSet's pod, from its name.
func storeOrdinal(pod, sts string) (int, bool) {
	rest, ok := strings.CutPrefix(pod, sts+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// storeCounts counts the store pods for status.
func storeCounts(sts *appsv1.StatefulSet, pods map[string]*corev1.Pod) *hicachev1alpha1.StorePodsStatus {
	c := &hicachev1alpha1.StorePodsStatus{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		c.Replicas++
		if kubeutil.PodReady(p) {
			c.Ready++
		}
		if sts != nil && p.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision {
			c.Updated++
		}
	}
	return c
}

// removeLegacyStoreDeployment deletes the Deployment that ran the store pods before they were
// a StatefulSet, once the StatefulSet's pods are all Ready. Its pods' objects go with it.
func (r *CacheBackendReconciler) removeLegacyStoreDeployment(ctx context.Context, cb *hicachev1alpha1.CacheBackend, sts *appsv1.StatefulSet) error {
	if sts == nil || sts.Status.ReadyReplicas < ptr.Deref(sts.Spec.Replicas, 1) {
		return nil
	}
	var dep appsv1.Deployment
	if err := r.Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: storeName(cb.Name)}, &dep); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(&dep, cb) {
		return nil
	}
	if err := r.Delete(ctx, &dep); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the store Deployment %s, replaced by a StatefulSet: %w", dep.Name, err)
	}
	return nil
}

// adminHTTP is the HTTP client of the master's admin API.
func (r *CacheBackendReconciler) adminHTTP() *http.Client {
	if r.Options.HTTPClient != nil {
		return r.Options.HTTPClient
	}
	return storeuse.NewAdminHTTPClient()
}
