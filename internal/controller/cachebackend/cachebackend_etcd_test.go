package cachebackend

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
)

// A backend on a managed etcd publishes its client Service (status, store id); its masters and
// store pods reach it through the proxy beside them, on their loopback.
func TestManagedEtcdEndpoints(t *testing.T) {
	cb := testsupport.WithStore(testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 1, testsupport.EmptyDirStorage()))
	const want = "mc-etcd.default.svc:2379"
	if got := storeuse.HaEtcdEndpoints(cb); !slices.Equal(got, []string{want}) {
		t.Errorf("etcd endpoints %q, want [%s]", got, want)
	}
	if got := storeuse.ManagedRPCAddress(cb); got != "etcd://"+want {
		t.Errorf("clients' master address %q, want etcd://%s", got, want)
	}
	args := BuildMasterDeployment(cb, "img").Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--ha_backend_connstring=127.0.0.1:23790") {
		t.Errorf("master args %q do not name the proxy to the managed etcd", args)
	}
	if env, _ := testsupport.EnvValue(BuildStoreStatefulSet(cb, "img", 1).Spec.Template.Spec.Containers[0].Env, "MOONCAKE_MASTER"); env.Value != "etcd://127.0.0.1:23790" {
		t.Errorf("store pods' MOONCAKE_MASTER %q, want the proxy etcd://127.0.0.1:23790", env.Value)
	}
	if id := storeuse.StoreIDOf(cb); id != "etcd://mc-etcd.default.svc.cluster.local:2379#default.mc" {
		t.Errorf("store id %q does not name the managed etcd and the masters' cluster id", id)
	}
	// An existing etcd is still given as the spec names it.
	ext := testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "e-0:2379", "e-1:2379")
	if got := storeuse.HaEtcdEndpoints(ext); !slices.Equal(got, []string{"e-0:2379", "e-1:2379"}) {
		t.Errorf("existing etcd endpoints %q", got)
	}
	if storeuse.ManagedEtcd(ext) != nil || storeuse.ManagedEtcd(testsupport.ManagedBackend("mc")) != nil {
		t.Error("a backend without a managed etcd has one")
	}
}

func TestBuildEtcdStatefulSet(t *testing.T) {
	cases := map[string]struct {
		cb          *hicachev1alpha1.CacheBackend
		members     int32
		cluster     string
		claim       *corev1.PersistentVolumeClaimSpec
		emptyDir    *corev1.EmptyDirVolumeSource
		resources   corev1.ResourceRequirements
		placeOnNode map[string]string
	}{
		"one member on emptyDir": {
			cb:        testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 1, testsupport.EmptyDirStorage()),
			members:   1,
			cluster:   "mc-etcd-0=https://mc-etcd-0.mc-etcd-peers.default.svc:2380",
			emptyDir:  &corev1.EmptyDirVolumeSource{},
			resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
		},
		"one member on a memory emptyDir": {
			cb: testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 1, hicachev1alpha1.EtcdStorage{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("256Mi"))}}),
			members:   1,
			cluster:   "mc-etcd-0=https://mc-etcd-0.mc-etcd-peers.default.svc:2380",
			emptyDir:  &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("256Mi"))},
			resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
		},
		"three members on claims of a class, with resources and placement": {
			cb: func() *hicachev1alpha1.CacheBackend {
				cb := testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 3, testsupport.ClaimStorage("2Gi", "fast"))
				cb.Spec.Mooncake.Managed.HA.Etcd.Managed.Resources = corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
				cb.Spec.Placement = &hicachev1alpha1.BackendPlacement{NodeSelector: map[string]string{"pool": "system"}}
				return cb
			}(),
			members: 3,
			cluster: "mc-etcd-0=https://mc-etcd-0.mc-etcd-peers.default.svc:2380,mc-etcd-1=https://mc-etcd-1.mc-etcd-peers.default.svc:2380," +
				"mc-etcd-2=https://mc-etcd-2.mc-etcd-peers.default.svc:2380",
			claim: &corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To("fast"),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
			},
			resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
			placeOnNode: map[string]string{"pool": "system"},
		},
		"five members on claims of the default class": {
			cb:      testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 2, 5, testsupport.ClaimStorage("1Gi", "")),
			members: 5,
			cluster: "mc-etcd-0=https://mc-etcd-0.mc-etcd-peers.default.svc:2380,mc-etcd-1=https://mc-etcd-1.mc-etcd-peers.default.svc:2380," +
				"mc-etcd-2=https://mc-etcd-2.mc-etcd-peers.default.svc:2380,mc-etcd-3=https://mc-etcd-3.mc-etcd-peers.default.svc:2380," +
				"mc-etcd-4=https://mc-etcd-4.mc-etcd-peers.default.svc:2380",
			claim: &corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
			resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sts := BuildEtcdStatefulSet(tc.cb, "etcd:test", "ca1")
			if sts.Name != "mc-etcd" || ptr.Deref(sts.Spec.Replicas, 0) != tc.members || sts.Spec.ServiceName != "mc-etcd-peers" {
				t.Errorf("StatefulSet %s, %d replicas, service %s; want mc-etcd, %d, mc-etcd-peers", sts.Name, ptr.Deref(sts.Spec.Replicas, 0), sts.Spec.ServiceName, tc.members)
			}
			// Members start side by side: one is Ready only once a majority has formed the cluster.
			if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
				t.Errorf("pod management %s, update %s; want Parallel and RollingUpdate", sts.Spec.PodManagementPolicy, sts.Spec.UpdateStrategy.Type)
			}
			if sel, _ := metav1.LabelSelectorAsSelector(sts.Spec.Selector); !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
				t.Errorf("the selector %s misses the template labels", sel)
			}
			if o := sts.OwnerReferences; len(o) != 1 || o[0].Kind != "CacheBackend" || o[0].UID != tc.cb.UID {
				t.Errorf("owner references %+v", o)
			}
			pod := sts.Spec.Template.Spec
			c := pod.Containers[0]
			if c.Image != "etcd:test" || !slices.Equal(c.Command, []string{"/usr/local/bin/etcd"}) {
				t.Errorf("image %s command %q", c.Image, c.Command)
			}
			wantArgs := []string{
				"--name=$(POD_NAME)",
				"--data-dir=/var/lib/etcd/data",
				"--listen-client-urls=https://0.0.0.0:2379",
				"--advertise-client-urls=https://$(POD_NAME).mc-etcd-peers.default.svc:2379",
				"--listen-peer-urls=https://0.0.0.0:2380",
				"--initial-advertise-peer-urls=https://$(POD_NAME).mc-etcd-peers.default.svc:2380",
				"--listen-metrics-urls=http://0.0.0.0:2381",
				"--client-cert-auth=true",
				"--trusted-ca-file=/etc/etcd/tls/ca.crt",
				"--cert-file=/etc/etcd/tls/server.crt",
				"--key-file=/etc/etcd/tls/server.key",
				"--peer-client-cert-auth=true",
				"--peer-trusted-ca-file=/etc/etcd/tls/ca.crt",
				"--peer-cert-file=/etc/etcd/tls/server.crt",
				"--peer-key-file=/etc/etcd/tls/server.key",
				"--peer-skip-client-san-verification=true",
				"--initial-cluster=" + tc.cluster,
				"--initial-cluster-state=new",
				"--initial-cluster-token=default.mc",
				"--auto-compaction-mode=periodic",
				"--auto-compaction-retention=10m",
			}
			if d := cmp.Diff(wantArgs, c.Args); d != "" {
				t.Errorf("args (-want +got):\n%s", d)
			}
			if e, ok := testsupport.EnvValue(c.Env, "POD_NAME"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("POD_NAME = %+v", e)
			}
			if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.StrVal != "metrics" {
				t.Errorf("readiness probe %+v, want GET /health on the metrics port", p)
			}
			if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/livez" || p.FailureThreshold*p.PeriodSeconds < 60 {
				t.Errorf("liveness probe %+v, want GET /livez, tolerant for a minute", p)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if d := cmp.Diff(map[string]int32{"client": 2379, "peer": 2380, "metrics": 2381}, ports); d != "" {
				t.Errorf("ports (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.resources, c.Resources); d != "" {
				t.Errorf("resources (-want +got):\n%s", d)
			}
			// The restricted Pod Security level, a read-only root and no API token.
			ps, cs := pod.SecurityContext, c.SecurityContext
			if !ptr.Deref(ps.RunAsNonRoot, false) || ptr.Deref(ps.RunAsUser, 0) == 0 || ps.SeccompProfile == nil ||
				ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || ptr.Deref(cs.AllowPrivilegeEscalation, true) ||
				cs.Capabilities == nil || !slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) > 0 ||
				!ptr.Deref(cs.ReadOnlyRootFilesystem, false) || ptr.Deref(ps.FSGroup, 0) != 65532 {
				t.Errorf("pod security %+v, container security %+v: not restricted with a read-only root and the member's group on its volume", ps, cs)
			}
			if ptr.Deref(pod.AutomountServiceAccountToken, true) {
				t.Error("etcd pods mount an API token they never use")
			}
			if d := cmp.Diff(tc.placeOnNode, pod.NodeSelector); d != "" {
				t.Errorf("node selector (-spec.placement +got):\n%s", d)
			}
			if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Error("members are not spread over nodes")
			}
			if m := c.VolumeMounts; len(m) != 2 || m[0].Name != "data" || m[0].MountPath != "/var/lib/etcd" ||
				m[1].Name != "tls" || m[1].MountPath != "/etc/etcd/tls" || !m[1].ReadOnly {
				t.Errorf("volume mounts %+v, want the data and the certificates read-only", m)
			}
			// The members mount the CA certificate and their own certificate, never the CA's key
			// or the client certificate.
			tls := pod.Volumes[0]
			var items []string
			for _, it := range tls.Secret.Items {
				items = append(items, it.Key)
			}
			if tls.Name != "tls" || tls.Secret.SecretName != "mc-etcd-tls" || !slices.Equal(items, []string{"ca.crt", "server.crt", "server.key"}) {
				t.Errorf("certificate volume %+v (items %q), want ca.crt, server.crt and server.key of Secret mc-etcd-tls", tls, items)
			}
			if a := sts.Spec.Template.Annotations["hicache.io/etcd-ca"]; a != "ca1" {
				t.Errorf("the pods name the CA %q, want ca1 (a new CA rolls them)", a)
			}
			pod.Volumes = pod.Volumes[1:]
			switch {
			case tc.claim != nil:
				if len(sts.Spec.VolumeClaimTemplates) != 1 || len(pod.Volumes) != 0 {
					t.Fatalf("claim templates %d, pod volumes %+v; want one claim named data", len(sts.Spec.VolumeClaimTemplates), pod.Volumes)
				}
				vc := sts.Spec.VolumeClaimTemplates[0]
				if vc.Name != "data" {
					t.Errorf("claim template %s, want data", vc.Name)
				}
				if d := cmp.Diff(*tc.claim, vc.Spec); d != "" {
					t.Errorf("claim (-want +got):\n%s", d)
				}
				if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
					t.Errorf("claim retention %+v: the claims must go with the backend", p)
				}
			default:
				if len(sts.Spec.VolumeClaimTemplates) != 0 || len(pod.Volumes) != 1 || pod.Volumes[0].Name != "data" {
					t.Fatalf("claim templates %d, volumes %+v; want an emptyDir named data", len(sts.Spec.VolumeClaimTemplates), pod.Volumes)
				}
				if d := cmp.Diff(tc.emptyDir, pod.Volumes[0].EmptyDir); d != "" {
					t.Errorf("emptyDir (-want +got):\n%s", d)
				}
			}
		})
	}
}

// The peers Service names every member, Ready or not, at the names the initial cluster uses;
// the client Service reaches the Ready members' client port, at the address the masters get.
func TestEtcdServices(t *testing.T) {
	cb := testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 3, testsupport.ClaimStorage("1Gi", ""))
	sts := BuildEtcdStatefulSet(cb, "img", "ca1")
	tmpl := labels.Set(sts.Spec.Template.Labels)
	peers, clients := buildEtcdPeersService(cb), buildEtcdClientService(cb)
	if peers.Name != sts.Spec.ServiceName || peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("peers Service %s (clusterIP %q, publishNotReadyAddresses %v): want the StatefulSet's headless %s naming unready members",
			peers.Name, peers.Spec.ClusterIP, peers.Spec.PublishNotReadyAddresses, sts.Spec.ServiceName)
	}
	if clients.Spec.ClusterIP == corev1.ClusterIPNone || clients.Spec.PublishNotReadyAddresses {
		t.Error("the client Service must reach Ready members only, through a cluster IP")
	}
	if got := clients.Name + "." + clients.Namespace + ".svc:2379"; !slices.Equal(storeuse.ManagedEtcdEndpoints(cb), []string{got}) {
		t.Errorf("the masters are given %q, the client Service is %s", storeuse.ManagedEtcdEndpoints(cb), got)
	}
	for _, svc := range []*corev1.Service{peers, clients} {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(tmpl) {
			t.Errorf("Service %s selects %v, not the members", svc.Name, svc.Spec.Selector)
		}
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(BuildMasterDeployment(cb, "img").Spec.Template.Labels)) {
			t.Errorf("Service %s selects the masters", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.StrVal != p.Name {
				t.Errorf("Service %s port %s targets %q", svc.Name, p.Name, p.TargetPort.StrVal)
			}
		}
	}
	if len(clients.Spec.Ports) != 1 || clients.Spec.Ports[0].Port != 2379 {
		t.Errorf("client Service ports %+v, want the client port alone", clients.Spec.Ports)
	}
}

func TestEtcdStatusAndCondition(t *testing.T) {
	now := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	three := testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 3, testsupport.ClaimStorage("1Gi", ""))
	one := testsupport.WithManagedEtcd(testsupport.ManagedBackend("mc"), 3, 1, testsupport.EmptyDirStorage())
	sts := func(replicas, ready int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: replicas, ReadyReplicas: ready}}
	}
	cases := map[string]struct {
		cb         *hicachev1alpha1.CacheBackend
		sts        *appsv1.StatefulSet
		wantStatus *hicachev1alpha1.EtcdStatus
		reason     string // "" means no condition
		ok         bool
		msg        string
	}{
		"all three Ready": {cb: three, sts: sts(3, 3), reason: hicachev1alpha1.ReasonEtcdReady, ok: true, msg: "All 3 etcd members of mc-etcd are Ready",
			wantStatus: &hicachev1alpha1.EtcdStatus{Endpoints: []string{"mc-etcd.default.svc:2379"}, Replicas: 3, Ready: 3}},
		"two of three: a majority": {cb: three, sts: sts(3, 2), reason: hicachev1alpha1.ReasonEtcdDegraded, msg: "2 of 3 etcd members of mc-etcd are Ready: the masters can elect a leader, but 1 more failure(s) stop elections",
			wantStatus: &hicachev1alpha1.EtcdStatus{Endpoints: []string{"mc-etcd.default.svc:2379"}, Replicas: 3, Ready: 2}},
		"one of three: no quorum": {cb: three, sts: sts(3, 1), reason: hicachev1alpha1.ReasonEtcdNoQuorum, msg: "1 of 3 etcd members of mc-etcd are Ready, fewer than the 2 a majority needs",
			wantStatus: &hicachev1alpha1.EtcdStatus{Endpoints: []string{"mc-etcd.default.svc:2379"}, Replicas: 3, Ready: 1}},
		"not created yet": {cb: one, sts: nil, reason: hicachev1alpha1.ReasonEtcdNoQuorum, msg: "0 of 1 etcd members",
			wantStatus: &hicachev1alpha1.EtcdStatus{Endpoints: []string{"mc-etcd.default.svc:2379"}}},
		"one member Ready": {cb: one, sts: sts(1, 1), reason: hicachev1alpha1.ReasonEtcdReady, ok: true, msg: "All 1 etcd members",
			wantStatus: &hicachev1alpha1.EtcdStatus{Endpoints: []string{"mc-etcd.default.svc:2379"}, Replicas: 1, Ready: 1}},
		"an existing etcd": {cb: testsupport.WithHA(testsupport.ManagedBackend("mc"), 3, "e:2379"), sts: sts(3, 3)},
		"no HA":            {cb: testsupport.ManagedBackend("mc"), sts: nil},
		"an external master": {cb: &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mc", Namespace: "default"},
			Spec: hicachev1alpha1.CacheBackendSpec{Mooncake: &hicachev1alpha1.MooncakeSpec{
				External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "etcd://e:2379", AdminURL: "http://m:9003"}}}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := &hicachev1alpha1.CacheBackendStatus{Conditions: []metav1.Condition{{Type: hicachev1alpha1.ConditionEtcdReady, Status: metav1.ConditionTrue, Reason: "Stale"}}}
			st.Etcd = etcdStatusOf(tc.cb, tc.sts)
			if d := cmp.Diff(tc.wantStatus, st.Etcd); d != "" {
				t.Errorf("status.etcd (-want +got):\n%s", d)
			}
			setEtcdCondition(st, tc.cb, now)
			c := meta.FindStatusCondition(st.Conditions, hicachev1alpha1.ConditionEtcdReady)
			if tc.reason == "" {
				if c != nil {
					t.Errorf("condition %+v on a backend without a managed etcd", c)
				}
				return
			}
			if c == nil || c.Reason != tc.reason || (c.Status == metav1.ConditionTrue) != tc.ok || !strings.Contains(c.Message, tc.msg) {
				t.Errorf("condition %+v, want reason %s, true=%v, a message containing %q", c, tc.reason, tc.ok, tc.msg)
			}
		})
	}
}

// An Event says when the etcd's state moves: a Warning when members are lost, a Normal Event when
// all are Ready again; none for the first state or an unchanged one.
func TestEtcdChange(t *testing.T) {
	st := func(ok bool, reason string) *hicachev1alpha1.CacheBackendStatus {
		if reason == "" {
			return &hicachev1alpha1.CacheBackendStatus{}
		}
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		return &hicachev1alpha1.CacheBackendStatus{Conditions: []metav1.Condition{{Type: hicachev1alpha1.ConditionEtcdReady,
			Status: status, Reason: reason, Message: "msg of " + reason}}}
	}
	cases := map[string]struct {
		old, now   *hicachev1alpha1.CacheBackendStatus
		wantType   string
		wantReason string
	}{
		"first state":            {old: st(false, ""), now: st(false, hicachev1alpha1.ReasonEtcdNoQuorum)},
		"unchanged":              {old: st(true, hicachev1alpha1.ReasonEtcdReady), now: st(true, hicachev1alpha1.ReasonEtcdReady)},
		"created, then Ready":    {old: st(false, hicachev1alpha1.ReasonEtcdNoQuorum), now: st(true, hicachev1alpha1.ReasonEtcdReady), wantType: corev1.EventTypeNormal, wantReason: hicachev1alpha1.ReasonEtcdReady},
		"a member lost":          {old: st(true, hicachev1alpha1.ReasonEtcdReady), now: st(false, hicachev1alpha1.ReasonEtcdDegraded), wantType: corev1.EventTypeWarning, wantReason: hicachev1alpha1.ReasonEtcdDegraded},
		"the majority lost":      {old: st(false, hicachev1alpha1.ReasonEtcdDegraded), now: st(false, hicachev1alpha1.ReasonEtcdNoQuorum), wantType: corev1.EventTypeWarning, wantReason: hicachev1alpha1.ReasonEtcdNoQuorum},
		"back to a majority":     {old: st(false, hicachev1alpha1.ReasonEtcdNoQuorum), now: st(false, hicachev1alpha1.ReasonEtcdDegraded), wantType: corev1.EventTypeWarning, wantReason: hicachev1alpha1.ReasonEtcdDegraded},
		"the etcd is not wanted": {old: st(true, hicachev1alpha1.ReasonEtcdReady), now: st(false, "")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			typ, reason, msg, changed := etcdChange(tc.old, tc.now)
			if changed != (tc.wantType != "") || typ != tc.wantType || reason != tc.wantReason {
				t.Errorf("event %q %q (changed %v), want %q %q", typ, reason, changed, tc.wantType, tc.wantReason)
			}
			if changed && msg != "msg of "+reason {
				t.Errorf("message %q, want the condition's", msg)
			}
		})
	}
}
