package cachebackend

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
)

func TestBuildStoreStatefulSet(t *testing.T) {
	cb := testsupport.WithStore(testsupport.ManagedBackend("mc"))
	sts := BuildStoreStatefulSet(cb, "mooncake:test", 4)
	if sts.Name != "mc-store" || ptr.Deref(sts.Spec.Replicas, 0) != 4 {
		t.Errorf("StatefulSet %s with %v replicas, want mc-store with the plan's 4", sts.Name, sts.Spec.Replicas)
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("update strategy %s: the StatefulSet would replace pods before the master drains them", sts.Spec.UpdateStrategy.Type)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	for name, want := range map[string]string{
		"MOONCAKE_MASTER":                    "mc-master.default.svc:50051",
		"MOONCAKE_GLOBAL_SEGMENT_SIZE":       "68719476736",
		"MOONCAKE_LOCAL_BUFFER_SIZE":         "1073741824", // Mooncake's default, now explicit
		"MOONCAKE_TE_META_DATA_SERVER":       "P2PHANDSHAKE",
		"MOONCAKE_LOCAL_HOSTNAME":            "$(POD_IP)",
		"MOONCAKE_PROTOCOL":                  "tcp",
		"MOONCAKE_ENABLE_CLIENT_HTTP_SERVER": "true",
		"MOONCAKE_CLIENT_HTTP_PORT":          "9300",
	} {
		if e, ok := testsupport.EnvValue(c.Env, name); !ok || e.Value != want {
			t.Errorf("env %s = %q, want %q", name, e.Value, want)
		}
	}
	if _, ok := testsupport.EnvValue(c.Env, "MOONCAKE_DEVICE"); ok {
		t.Error("MOONCAKE_DEVICE set over tcp")
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/health" || rp.HTTPGet.Port.StrVal != "health" {
		t.Fatalf("readiness probe %+v, want GET /health on the client's health port", rp)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "health" && p.ContainerPort == 9300 }) {
		t.Errorf("ports %+v: the probe's port is not declared", c.Ports)
	}
	if c.LivenessProbe != nil {
		t.Error("a liveness probe would restart a store pod, and drop its objects, whenever the master is away")
	}
	if sc := c.SecurityContext; sc == nil || len(sc.Capabilities.Add) != 0 || sts.Spec.Template.Spec.Volumes != nil {
		t.Errorf("a tcp store pod gets capabilities %+v or volumes %+v", sc, sts.Spec.Template.Spec.Volumes)
	}
	cb.Spec.Mooncake.Managed.Store.Replicas = nil
	if got := ptr.Deref(BuildStoreStatefulSet(cb, "img", 1).Spec.Replicas, 0); got != 1 {
		t.Errorf("store replicas unset gives %d pods, want 1", got)
	}
}

func TestStorePodsOverRDMA(t *testing.T) {
	cb := testsupport.WithStore(testsupport.ManagedBackend("mc"))
	s := cb.Spec.Mooncake.Managed.Store
	s.Protocol, s.RDMADevices = "rdma", []string{"mlx5_0", "mlx5_1"}
	spec := BuildStoreStatefulSet(cb, "img", 1).Spec.Template.Spec
	c := spec.Containers[0]
	for name, want := range map[string]string{"MOONCAKE_PROTOCOL": "rdma", "MOONCAKE_DEVICE": "mlx5_0,mlx5_1"} {
		if e, ok := testsupport.EnvValue(c.Env, name); !ok || e.Value != want {
			t.Errorf("env %s = %q, want %q", name, e.Value, want)
		}
	}
	if !slices.Equal(c.SecurityContext.Capabilities.Add, []corev1.Capability{"IPC_LOCK"}) {
		t.Errorf("capabilities %+v, want IPC_LOCK added (RDMA registers pinned memory)", c.SecurityContext.Capabilities)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/dev/infiniband" || len(spec.Volumes) != 1 || spec.Volumes[0].HostPath == nil {
		t.Errorf("mounts %+v volumes %+v, want the node's /dev/infiniband", c.VolumeMounts, spec.Volumes)
	}
}

// A store pod's memory request covers what it lends (the segment) and what its client registers
// for itself (the local buffer, 1 GiB by default), on top of what the process needs.
func TestStorePodMemory(t *testing.T) {
	gi := func(s string) resource.Quantity { return resource.MustParse(s) }
	tests := map[string]struct {
		buffer    *resource.Quantity
		resources corev1.ResourceRequirements
		request   string
		limit     string // "" for none
	}{
		"nothing set: 256Mi for the process, the default 1Gi buffer and the segment": {
			request: "66816Mi", // 64Gi + 1Gi + 256Mi
		},
		"a buffer given": {
			buffer:  ptr.To(gi("128Mi")),
			request: "65920Mi", // 64Gi + 128Mi + 256Mi
		},
		"a memory request for the process": {
			resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: gi("1Gi")}},
			request:   "66Gi",
		},
		"a limit is raised as much as the request": {
			resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: gi("512Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: gi("1Gi")},
			},
			request: "67072Mi", limit: "66Gi",
		},
		"a limit alone is also the request": {
			resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: gi("2Gi")}},
			request:   "67Gi", limit: "67Gi",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cb := testsupport.WithStore(testsupport.ManagedBackend("mc"))
			s := cb.Spec.Mooncake.Managed.Store
			s.LocalBufferSize, s.Resources = tc.buffer, tc.resources
			res := BuildStoreStatefulSet(cb, "img", 1).Spec.Template.Spec.Containers[0].Resources
			if got := res.Requests[corev1.ResourceMemory]; got.Cmp(gi(tc.request)) != 0 {
				t.Errorf("memory request %s, want %s", got.String(), tc.request)
			}
			got, ok := res.Limits[corev1.ResourceMemory]
			if ok != (tc.limit != "") || (ok && got.Cmp(gi(tc.limit)) != 0) {
				t.Errorf("memory limit %s (set %v), want %q", got.String(), ok, tc.limit)
			}
			if q := s.Resources.Requests[corev1.ResourceMemory]; tc.resources.Requests != nil && q.Cmp(tc.resources.Requests[corev1.ResourceMemory]) != 0 {
				t.Error("the spec's resources were changed")
			}
		})
	}
}

func TestAssignSegments(t *testing.T) {
	p0, p1 := &storePod{name: "mc-store-0"}, &storePod{name: "mc-store-1"}
	byIP := map[string]*storePod{"10.0.0.5": p0, "fd00::7": p1}
	other := assignSegments(byIP, []mooncake.Segment{
		{Name: "10.0.0.5:13001", Status: mooncake.SegmentOK, UsedBytes: 5},
		{Name: "10.0.0.5:13999", Status: mooncake.SegmentDrained}, // an earlier client at the same IP
		{Name: "[fd00::7]:12000", Status: mooncake.SegmentDraining},
		{Name: "10.0.0.50:13001", Status: mooncake.SegmentOK},       // a serving rank: not 10.0.0.5
		{Name: "10.0.0.51:13001", Status: mooncake.SegmentDraining}, // a rank's, not in service
		{Name: "no-port", Status: mooncake.SegmentOK},
	})
	if len(p0.segments) != 2 || p0.segments[0].used != 5 || len(p1.segments) != 1 || p1.segments[0].status != mooncake.SegmentDraining {
		t.Errorf("segments %+v and %+v", p0.segments, p1.segments)
	}
	if other != 2 {
		t.Errorf("%d other segments in service, want the rank's and the unnamed one", other)
	}
}

func TestStoreOrdinal(t *testing.T) {
	for pod, want := range map[string]int{"mc-store-0": 0, "mc-store-12": 12, "mc-store-x": -1, "other-store-1": -1, "mc-store-": -1, "mc-store-1-2": -1} {
		got, ok := storeOrdinal(pod, "mc-store")
		if (want < 0 && ok) || (want >= 0 && (!ok || got != want)) {
			t.Errorf("storeOrdinal(%q) = %d, %v; want %d", pod, got, ok, want)
		}
	}
}

// With HA a store pod's client gets short RPC timeouts: its objects are readable on a new leader
// only once it re-mounted there, after its ping to the dead leader failed.
func TestStorePodsOfHAMastersTimeOutTheirMasterRequests(t *testing.T) {
	cb := testsupport.WithStore(testsupport.ManagedBackend("mc"))
	c := BuildStoreStatefulSet(cb, "img", 1).Spec.Template.Spec.Containers[0]
	for _, name := range []string{"MC_RPC_TIMEOUT_MS", "MC_RPC_CONNECT_TIMEOUT_MS"} {
		if e, ok := testsupport.EnvValue(c.Env, name); ok {
			t.Errorf("without HA %s = %q: a lone master keeps its Service address, and the release's defaults stand", name, e.Value)
		}
	}
	cb.Spec.Mooncake.Managed.Replicas = ptr.To(int32(3))
	cb.Spec.Mooncake.Managed.HA = &hicachev1alpha1.MasterHA{Etcd: hicachev1alpha1.EtcdEndpoints{Endpoints: []string{"etcd:2379"}}}
	c = BuildStoreStatefulSet(cb, "img", 1).Spec.Template.Spec.Containers[0]
	for name, want := range map[string]string{"MC_RPC_TIMEOUT_MS": "10000", "MC_RPC_CONNECT_TIMEOUT_MS": "3000"} {
		if e, ok := testsupport.EnvValue(c.Env, name); !ok || e.Value != want {
			t.Errorf("with HA env %s = %q, want %q", name, e.Value, want)
		}
	}
}
