package cachebackend

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/etcdtls"
)

// The managed etcd of a backend's HA masters (spec.mooncake.managed.ha.etcd.managed): a
// StatefulSet of etcd members with stable names, their peers found through a headless Service,
// a client Service, a NetworkPolicy, and a Secret of certificates (etcdtls). The members serve
// clients and each other with mutual TLS only: a pod without the client certificate is refused,
// whatever its labels. The pinned mooncake_master and Mooncake client speak only plaintext to
// etcd (docs/compatibility.md), so every pod the operator gives the etcd (masters, store pods,
// flush Jobs, serving ranks) runs etcd's gRPC proxy beside it (etcdProxyContainer): it listens on
// the pod's loopback only and holds the client certificate, and the pod is given etcd://
// 127.0.0.1:23790. The operator never talks to this etcd: it builds the objects, and counts the
// Ready members from the StatefulSet's status. Members are not added or removed (the API
// refuses a change of replicas), so the initial cluster is always the full set.

// etcdDefaultRequests are a member's requests when spec.mooncake.managed.ha.etcd.managed.resources
// sets none: about 40 MiB of memory and a few millicores were measured for a member under three
// masters.
var etcdDefaultRequests = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("100m"),
	corev1.ResourceMemory: resource.MustParse("128Mi"),
}

// etcdPeersName is the headless Service that names each member (<pod>.<cb>-etcd-peers).
func etcdPeersName(cb string) string { return cb + "-etcd-peers" }

// etcdMembers is the number of members, spec's replicas (1 by default).
func etcdMembers(e *hicachev1alpha1.ManagedEtcd) int32 {
	if e.Replicas == nil || *e.Replicas < 1 {
		return hicachev1alpha1.DefaultEtcdReplicas
	}
	return *e.Replicas
}

// etcdMemberHost is the stable DNS name of member i.
func etcdMemberHost(cb *hicachev1alpha1.CacheBackend, pod string) string {
	return fmt.Sprintf("%s.%s.%s.svc", pod, etcdPeersName(cb.Name), cb.Namespace)
}

// etcdInitialCluster is every member's name and peer URL.
func etcdInitialCluster(cb *hicachev1alpha1.CacheBackend, members int32) string {
	parts := make([]string, 0, members)
	for i := range members {
		pod := storeuse.EtcdName(cb.Name) + "-" + strconv.Itoa(int(i))
		parts = append(parts, fmt.Sprintf("%s=https://%s:%d", pod, etcdMemberHost(cb, pod), storeuse.EtcdPeerPort))
	}
	return strings.Join(parts, ",")
}

// etcdArgs are the flags of every member; $(POD_NAME) is the member's own pod, which the
// kubelet expands.
func etcdArgs(cb *hicachev1alpha1.CacheBackend, members int32) []string {
	self := etcdMemberHost(cb, "$(POD_NAME)")
	return []string{
		"--name=$(POD_NAME)",
		"--data-dir=" + storeuse.EtcdDataMount + "/data",
		fmt.Sprintf("--listen-client-urls=https://0.0.0.0:%d", storeuse.EtcdClientPort),
		fmt.Sprintf("--advertise-client-urls=https://%s:%d", self, storeuse.EtcdClientPort),
		fmt.Sprintf("--listen-peer-urls=https://0.0.0.0:%d", storeuse.EtcdPeerPort),
		fmt.Sprintf("--initial-advertise-peer-urls=https://%s:%d", self, storeuse.EtcdPeerPort),
		// The probes' port stays plain HTTP: it serves health and metrics, no keys.
		fmt.Sprintf("--listen-metrics-urls=http://0.0.0.0:%d", storeuse.EtcdMetricsPort),
		// Clients and peers present a certificate of the backend's CA, or are refused.
		"--client-cert-auth=true",
		"--trusted-ca-file=" + storeuse.EtcdTLSMount + "/" + etcdtls.KeyCACert,
		"--cert-file=" + storeuse.EtcdTLSMount + "/" + etcdtls.KeyServerCert,
		"--key-file=" + storeuse.EtcdTLSMount + "/" + etcdtls.KeyServerKey,
		"--peer-client-cert-auth=true",
		"--peer-trusted-ca-file=" + storeuse.EtcdTLSMount + "/" + etcdtls.KeyCACert,
		"--peer-cert-file=" + storeuse.EtcdTLSMount + "/" + etcdtls.KeyServerCert,
		"--peer-key-file=" + storeuse.EtcdTLSMount + "/" + etcdtls.KeyServerKey,
		// A member checks a peer's certificate against the CA; without this it would also
		// require the certificate's names to resolve to the peer's address, which the wildcard
		// of the members' names never does (a three-member etcd then never forms).
		"--peer-skip-client-san-verification=true",
		"--initial-cluster=" + etcdInitialCluster(cb, members),
		"--initial-cluster-state=new",
		// Members of another backend's etcd, should one be reached by mistake, refuse to join.
		"--initial-cluster-token=" + cb.Namespace + "." + cb.Name,
		"--auto-compaction-mode=periodic",
		"--auto-compaction-retention=" + storeuse.EtcdCompactionRetention,
	}
}

// etcdResources are spec's resources, or etcdDefaultRequests when it sets none.
func etcdResources(e *hicachev1alpha1.ManagedEtcd) corev1.ResourceRequirements {
	if len(e.Resources.Requests) > 0 || len(e.Resources.Limits) > 0 || len(e.Resources.Claims) > 0 {
		return *e.Resources.DeepCopy()
	}
	return corev1.ResourceRequirements{Requests: etcdDefaultRequests.DeepCopy()}
}

// BuildEtcdStatefulSet builds the members: started side by side (a member is Ready only once a
// majority has formed the cluster), rolled one at a time, each with its data on a claim of its
// own or an emptyDir, spread over nodes where possible, and meeting the restricted Pod Security
// level with a read-only root.
func BuildEtcdStatefulSet(cb *hicachev1alpha1.CacheBackend, image, caFingerprint string) *appsv1.StatefulSet {
	e := storeuse.ManagedEtcd(cb)
	members := etcdMembers(e)
	labels := storeuse.BackendLabels(cb, "etcd")
	podSec, sec := storeuse.RestrictedSecurity()
	// A claim's volume is made writable for the member's group.
	podSec.FSGroup = ptr.To(int64(65532))
	sec.ReadOnlyRootFilesystem = ptr.To(true)
	nodeSelector, tolerations := storeuse.BackendPlacement(cb)
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("metrics")}},
			PeriodSeconds: period, TimeoutSeconds: 3, FailureThreshold: failures,
		}
	}
	liveness := probe("/livez", 10, 6)
	liveness.InitialDelaySeconds = 10
	sts := &appsv1.StatefulSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: storeuse.EtcdName(cb.Name), Namespace: cb.Namespace,
			Labels: labels, OwnerReferences: storeuse.BackendOwner(cb)},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(members),
			ServiceName:         etcdPeersName(cb.Name),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{storeuse.AnnotationEtcdCA: caFingerprint}},
				Spec: corev1.PodSpec{
					SecurityContext: podSec,
					NodeSelector:    nodeSelector,
					Tolerations:     tolerations,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
							Weight: 100,
							PodAffinityTerm: corev1.PodAffinityTerm{
								LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
								TopologyKey:   corev1.LabelHostname,
							},
						}},
					}},
					// etcd calls no Kubernetes API.
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					Containers: []corev1.Container{{
						Name:    "etcd",
						Image:   image,
						Command: []string{storeuse.EtcdBinary},
						Args:    etcdArgs(cb, members),
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						Ports: []corev1.ContainerPort{
							{Name: "client", ContainerPort: storeuse.EtcdClientPort, Protocol: corev1.ProtocolTCP},
							{Name: "peer", ContainerPort: storeuse.EtcdPeerPort, Protocol: corev1.ProtocolTCP},
							{Name: "metrics", ContainerPort: storeuse.EtcdMetricsPort, Protocol: corev1.ProtocolTCP},
						},
						// Ready while the member has a leader and no alarm.
						ReadinessProbe:  probe("/health", 5, 3),
						LivenessProbe:   liveness,
						Resources:       etcdResources(e),
						SecurityContext: sec,
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: storeuse.EtcdDataMount},
							{Name: "tls", MountPath: storeuse.EtcdTLSMount, ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{storeuse.EtcdSecretVolume(cb, "tls", etcdtls.KeyServerCert, etcdtls.KeyServerKey)},
				},
			},
		},
	}
	if s := e.Storage; s.Size != nil {
		claim := corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: labels},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: s.Size.DeepCopy()}},
			},
		}
		if s.StorageClassName != "" {
			claim.Spec.StorageClassName = ptr.To(s.StorageClassName)
		}
		sts.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claim}
		// The data is this backend's alone (its cluster id names it): it goes with the backend.
		sts.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
			WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		}
	} else {
		dir := corev1.EmptyDirVolumeSource{}
		if s.EmptyDir != nil {
			dir = *s.EmptyDir.DeepCopy()
		}
		sts.Spec.Template.Spec.Volumes = append(sts.Spec.Template.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &dir}})
	}
	return sts
}

// buildEtcdPeersService names every member, Ready or not (a member is not Ready before a
// majority of its peers has found it).
func buildEtcdPeersService(cb *hicachev1alpha1.CacheBackend) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: etcdPeersName(cb.Name), Namespace: cb.Namespace,
			Labels: storeuse.BackendLabels(cb, "etcd"), OwnerReferences: storeuse.BackendOwner(cb)},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 storeuse.BackendLabels(cb, "etcd"),
			Ports: []corev1.ServicePort{
				{Name: "client", Port: storeuse.EtcdClientPort, TargetPort: intstr.FromString("client"), Protocol: corev1.ProtocolTCP},
				{Name: "peer", Port: storeuse.EtcdPeerPort, TargetPort: intstr.FromString("peer"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// buildEtcdClientService is what the masters and clients reach: the Ready members' client port.
func buildEtcdClientService(cb *hicachev1alpha1.CacheBackend) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: storeuse.EtcdName(cb.Name), Namespace: cb.Namespace,
			Labels: storeuse.BackendLabels(cb, "etcd"), OwnerReferences: storeuse.BackendOwner(cb)},
		Spec: corev1.ServiceSpec{
			Selector: storeuse.BackendLabels(cb, "etcd"),
			Ports: []corev1.ServicePort{
				{Name: "client", Port: storeuse.EtcdClientPort, TargetPort: intstr.FromString("client"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// BuildEtcdNetworkPolicy admits the backend's own pods to the client port: its masters, which
// elect their leader and keep their metadata log there, and its clients (serving ranks, store
// pods, flush Jobs), which read the leader from it (etcd://). Only the members reach each other's
// peer port. Nothing reaches the metrics port but the kubelet's probes; the operator does not talk
// to etcd.
func BuildEtcdNetworkPolicy(cb *hicachev1alpha1.CacheBackend) *networkingv1.NetworkPolicy {
	backendPods := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{hicachev1alpha1.LabelBackend: cb.Name}}}
	members := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: storeuse.BackendLabels(cb, "etcd")}}
	return storeuse.IngressPolicy(storeuse.EtcdName(cb.Name), cb.Namespace, storeuse.BackendLabels(cb, "etcd"), storeuse.BackendOwner(cb), storeuse.BackendLabels(cb, "etcd"),
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{backendPods},
			Ports: []networkingv1.NetworkPolicyPort{storeuse.TCPPort(storeuse.EtcdClientPort)},
		},
		networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{members},
			Ports: []networkingv1.NetworkPolicyPort{storeuse.TCPPort(storeuse.EtcdPeerPort)},
		},
	)
}

// etcdStatusOf counts the members from the StatefulSet's status (nil: not created yet).
func etcdStatusOf(cb *hicachev1alpha1.CacheBackend, sts *appsv1.StatefulSet) *hicachev1alpha1.EtcdStatus {
	e := storeuse.ManagedEtcd(cb)
	if e == nil {
		return nil
	}
	st := &hicachev1alpha1.EtcdStatus{Endpoints: storeuse.ManagedEtcdEndpoints(cb)}
	if sts != nil {
		st.Replicas, st.Ready = sts.Status.Replicas, sts.Status.ReadyReplicas
	}
	return st
}

// setEtcdCondition says whether the managed etcd has every member Ready, a majority (elections
// still work, one more failure may stop them), or less (the masters cannot elect a leader; the
// serving one stops once its lease lapses). A backend without a managed etcd has no condition.
func setEtcdCondition(st *hicachev1alpha1.CacheBackendStatus, cb *hicachev1alpha1.CacheBackend, now time.Time) {
	e := storeuse.ManagedEtcd(cb)
	if e == nil || st.Etcd == nil {
		meta.RemoveStatusCondition(&st.Conditions, hicachev1alpha1.ConditionEtcdReady)
		return
	}
	want, ready := etcdMembers(e), st.Etcd.Ready
	quorum := want/2 + 1
	set := reconcile.ConditionsOf(&st.Conditions, cb.Generation, now).Set
	switch {
	case ready >= want:
		set(hicachev1alpha1.ConditionEtcdReady, true, hicachev1alpha1.ReasonEtcdReady,
			fmt.Sprintf("All %d etcd members of %s are Ready", want, storeuse.EtcdName(cb.Name)))
	case ready >= quorum:
		set(hicachev1alpha1.ConditionEtcdReady, false, hicachev1alpha1.ReasonEtcdDegraded,
			fmt.Sprintf("%d of %d etcd members of %s are Ready: the masters can elect a leader, but %d more failure(s) stop elections; check the pods of StatefulSet %s",
				ready, want, storeuse.EtcdName(cb.Name), ready-quorum+1, storeuse.EtcdName(cb.Name)))
	default:
		set(hicachev1alpha1.ConditionEtcdReady, false, hicachev1alpha1.ReasonEtcdNoQuorum,
			fmt.Sprintf("%d of %d etcd members of %s are Ready, fewer than the %d a majority needs: the masters cannot elect a leader; check the pods of StatefulSet %s (and their volumes)",
				ready, want, storeuse.EtcdName(cb.Name), quorum, storeuse.EtcdName(cb.Name)))
	}
}

// etcdChange says, for an Event, whether the managed etcd's state moved (all members Ready, a
// majority, fewer) from what the status last recorded, and how: a Warning when it got worse, a
// Normal Event when every member is Ready again. A first state (no condition before) is none.
func etcdChange(old, now *hicachev1alpha1.CacheBackendStatus) (eventType, reason, msg string, changed bool) {
	was := meta.FindStatusCondition(old.Conditions, hicachev1alpha1.ConditionEtcdReady)
	is := meta.FindStatusCondition(now.Conditions, hicachev1alpha1.ConditionEtcdReady)
	if was == nil || is == nil || was.Reason == is.Reason {
		return "", "", "", false
	}
	eventType = corev1.EventTypeWarning
	if is.Status == metav1.ConditionTrue {
		eventType = corev1.EventTypeNormal
	}
	return eventType, is.Reason, is.Message, true
}

// reconcileEtcd applies a backend's managed etcd and counts its members into st; for a backend
// that runs none (any more), it removes what the operator created for one.
func (r *CacheBackendReconciler) reconcileEtcd(ctx context.Context, cb *hicachev1alpha1.CacheBackend, st *hicachev1alpha1.CacheBackendStatus) error {
	e := storeuse.ManagedEtcd(cb)
	if e == nil {
		st.Etcd = nil
		return r.removeEtcd(ctx, cb)
	}
	image := e.Image
	if image == "" {
		image = r.Options.DefaultEtcdImage
	}
	bundle, err := r.reconcileEtcdTLS(ctx, cb)
	if err != nil {
		return err
	}
	a := reconcile.Applier{Client: r.Client}
	for _, o := range []client.Object{buildEtcdPeersService(cb), buildEtcdClientService(cb), BuildEtcdNetworkPolicy(cb)} {
		if _, err := a.ApplyIfChanged(ctx, o, newEmpty(o)); err != nil {
			return err
		}
	}
	desired := BuildEtcdStatefulSet(cb, image, etcdtls.CAFingerprint(bundle))
	if _, err := a.ApplyIfChanged(ctx, desired, &appsv1.StatefulSet{}); err != nil {
		return err
	}
	var cur appsv1.StatefulSet
	switch err := r.Get(ctx, client.ObjectKeyFromObject(desired), &cur); {
	case apierrors.IsNotFound(err):
		st.Etcd = etcdStatusOf(cb, nil)
	case err != nil:
		return fmt.Errorf("reading StatefulSet %s: %w", desired.Name, err)
	default:
		st.Etcd = etcdStatusOf(cb, &cur)
	}
	return nil
}

// removeEtcd deletes the managed etcd's objects of a backend that no longer asks for one (its
// masters left HA, or moved to an existing etcd). Only objects the backend controls are deleted;
// the claims go with the StatefulSet (its retention policy). The Secret of its certificates stays
// until the backend goes (it is the backend's): a backend that runs a managed etcd again reuses it.
func (r *CacheBackendReconciler) removeEtcd(ctx context.Context, cb *hicachev1alpha1.CacheBackend) error {
	objs := []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.Service{}, &networkingv1.NetworkPolicy{}}
	names := []string{storeuse.EtcdName(cb.Name), storeuse.EtcdName(cb.Name), etcdPeersName(cb.Name), storeuse.EtcdName(cb.Name)}
	for i, o := range objs {
		if err := r.Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: names[i]}, o); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		if !metav1.IsControlledBy(o, cb) || o.GetLabels()["app.kubernetes.io/component"] != "etcd" {
			continue
		}
		if err := r.Delete(ctx, o, client.Preconditions{UID: ptr.To(o.GetUID())}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s of the etcd the backend no longer runs: %w", names[i], err)
		}
	}
	return nil
}
