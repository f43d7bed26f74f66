package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/images"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

const backendName = "mooncake"

// realNodePlacement is spec.placement for the real node.
func realNodePlacement() *hicachev1alpha1.BackendPlacement {
	return &hicachev1alpha1.BackendPlacement{
		NodeSelector: localcluster.RealNodeSelector(),
		Tolerations:  []corev1.Toleration{localcluster.RealNodeToleration()},
	}
}

// managedBackend creates a managed CacheBackend with stores store pods of segment bytes each, on
// the real node, in the image the chart's defaults.mooncakeImage names, and waits until it is
// Ready.
func managedBackend(t *testing.T, ns string, stores int32, segment string, change ...func(*hicachev1alpha1.CacheBackend)) *hicachev1alpha1.CacheBackend {
	t.Helper()
	cb := &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: backendName, Namespace: ns},
		Spec: hicachev1alpha1.CacheBackendSpec{
			Type:      hicachev1alpha1.BackendMooncake,
			Placement: realNodePlacement(),
			Mooncake: &hicachev1alpha1.MooncakeSpec{Managed: &hicachev1alpha1.ManagedMooncake{
				Store: &hicachev1alpha1.StorePods{Replicas: ptr.To(stores), SegmentSize: resource.MustParse(segment)},
			}},
		},
	}
	for _, c := range change {
		c(cb)
	}
	began := time.Now()
	if err := k8s.Create(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	waitBackend(t, ns, metav1.ConditionTrue, 3*time.Minute)
	logf("%s/%s: managed backend Ready in %s", ns, backendName, time.Since(began).Round(time.Millisecond))
	return getBackend(t, ns)
}

func getBackend(t *testing.T, ns string) *hicachev1alpha1.CacheBackend {
	t.Helper()
	cb := &hicachev1alpha1.CacheBackend{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: backendName}, cb); err != nil {
		t.Fatal(err)
	}
	return cb
}

func waitBackend(t *testing.T, ns string, want metav1.ConditionStatus, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, fmt.Sprintf("CacheBackend %s/%s Ready=%s", ns, backendName, want), func() (bool, string) {
		cb := getBackend(t, ns)
		c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionReady)
		return c != nil && c.Status == want && c.ObservedGeneration == cb.Generation, fmt.Sprintf("%+v", cb.Status.Conditions)
	})
}

// backendPods are the running pods of the backend's component (master or store).
func backendPods(t *testing.T, ns, component string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{
		"app.kubernetes.io/instance": backendName, "app.kubernetes.io/component": component}); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// admin is the master's admin API, reached from the test through the master Service's ClusterIP
// inside the cluster's network namespace.
func admin(t *testing.T, ns string) *mooncake.Client {
	t.Helper()
	var svc corev1.Service
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: backendName + "-master"}, &svc); err != nil {
		t.Fatal(err)
	}
	var port int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "admin" {
			port = p.Port
		}
	}
	c, err := mooncake.NewClient("http://"+net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port))), inNetns)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func countKeys(t *testing.T, ns, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := admin(t, ns).CountKeysWithPrefix(ctx, prefix)
	if err != nil {
		t.Fatalf("counting the keys under %q: %v", prefix, err)
	}
	return n
}

// putKeys writes the keys, size bytes each, through the managed master by a client pod in the
// Mooncake image on the real node: hack/mooncake/store.py with the real Mooncake client, reaching
// the master by its Service name. The objects live in the store pods' segments.
func putKeys(t *testing.T, ns, name string, keys []string, size int) {
	t.Helper()
	storeJob(t, ns, name, keys, "put", "--size", strconv.Itoa(size))
}

// storeJob runs hack/mooncake/store.py with a command and its arguments (the keys in a file
// given as --keys-file) in a Job on the real node, waits for it to succeed and returns its log.
func storeJob(t *testing.T, ns, name string, keys []string, command ...string) string {
	t.Helper()
	return storeJobVia(t, ns, name, fmt.Sprintf("%s-master.%s.svc:%d", backendName, ns, 50051), nil, keys, command...)
}

// storeJobVia is storeJob through another master address (etcd://... for HA masters) and with
// env added to the client's environment.
func storeJobVia(t *testing.T, ns, name, master string, env []corev1.EnvVar, keys []string, command ...string) string {
	t.Helper()
	return storeJobWith(t, ns, name, master, env, keys, 0, command...)
}

// storeJobWith is storeJobVia whose pod is tried again up to retries times when it fails.
func storeJobWith(t *testing.T, ns, name, master string, env []corev1.EnvVar, keys []string, retries int32, command ...string) string {
	t.Helper()
	ctx := context.Background()
	script, err := os.ReadFile(filepath.Join(repoRoot(), "hack", "mooncake", "store.py"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string]string{"store.py": string(script), "keys.txt": strings.Join(keys, "\n") + "\n"}}
	if err := k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	// A client of the backend's managed etcd reaches it as the operator's own pods do: through
	// the proxy beside it, which holds the client certificate.
	var proxied *hicachev1alpha1.CacheBackend
	if strings.HasPrefix(master, "etcd://"+backendName+"-etcd.") {
		proxied = getBackend(t, ns)
		master = storeuse.EtcdProxyAddress
	}
	args := append(append([]string{"python3", "/scripts/store.py", "--master", master}, command...), "--keys-file", "/scripts/keys.txt")
	job := scriptJob(ns, name, corev1.Container{Name: command[0], Command: args, Env: env})
	if proxied != nil {
		storeuse.AddEtcdProxy(&job.Spec.Template, proxied, images.Etcd)
	}
	job.Spec.BackoffLimit = ptr.To(retries)
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("the client Job %s (%s of %d keys) succeeded", name, command[0], len(keys)), func() (bool, string) {
		var j batchv1.Job
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				t.Fatalf("the client Job %s failed: %s; its log:\n%s", name, c.Message, jobLog(t, ns, name))
			}
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", j.Status)
	})
	return jobLog(t, ns, name)
}

// scriptJob is a Job of one restricted pod on the real node that runs c in the Mooncake image,
// with the ConfigMap of the same name mounted at /scripts.
func scriptJob(ns, name string, c corev1.Container) *batchv1.Job {
	c.Image, c.ImagePullPolicy = images.Mooncake, corev1.PullNever
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "scripts", MountPath: "/scripts"})
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(0)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				NodeSelector:  localcluster.RealNodeSelector(),
				Tolerations:   []corev1.Toleration{localcluster.RealNodeToleration()},
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), RunAsGroup: ptr.To(int64(65532)),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Containers: []corev1.Container{c},
				Volumes: []corev1.Volume{{Name: "scripts", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}},
			}},
		},
	}
}

// jobLog is the log of a Job's pods.
func jobLog(t *testing.T, ns, job string) string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		out, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		// How the container ended says what an empty log cannot (a signal, an OOM kill).
		var ended []string
		for _, c := range p.Status.ContainerStatuses {
			if x := c.State.Terminated; x != nil {
				ended = append(ended, fmt.Sprintf("%s exited %d (%s, signal %d)", c.Name, x.ExitCode, x.Reason, x.Signal))
			}
		}
		fmt.Fprintf(&b, "--- %s (%v) %s\n%s\n", p.Name, err, strings.Join(ended, "; "), out)
	}
	return b.String()
}

// A managed CacheBackend runs for real: its master and store pods on the real node, ready by
// their own probes; the operator reaches the master by its Service name, the store pods do too,
// and their segments become the backend's capacity.
func TestManagedBackendRunsOnTheRealNode(t *testing.T) {
	ns := newNamespace(t, "backend", restricted)
	cb := managedBackend(t, ns, 2, "32Mi")

	t.Run("the master and store pods run on the real node, Ready from their probes", func(t *testing.T) {
		for component, want := range map[string]int{"master": 1, "store": 2} {
			pods := backendPods(t, ns, component)
			if len(pods) != want {
				t.Fatalf("%d %s pods, want %d", len(pods), component, want)
			}
			for _, p := range pods {
				if p.Spec.NodeName != node.Name || p.Status.Phase != corev1.PodRunning {
					t.Errorf("%s pod %s: node %q phase %s; want Running on the real node %s", component, p.Name, p.Spec.NodeName, p.Status.Phase, node.Name)
				}
			}
		}
		master := backendPods(t, ns, "master")[0]
		if !kubeutil.PodReady(&master) || master.Spec.Containers[0].ReadinessProbe == nil {
			t.Errorf("the master pod is not Ready by a readiness probe: %+v", master.Status.Conditions)
		}
		// A store pod is Ready by its Mooncake client's /health: its segment is mounted and the
		// master answers it.
		testutil.Eventually(t, time.Minute, "the store pods Ready by their probe", func() (bool, string) {
			for _, p := range backendPods(t, ns, "store") {
				if p.Spec.Containers[0].ReadinessProbe == nil || p.Spec.Containers[0].ReadinessProbe.HTTPGet == nil {
					t.Fatalf("store pod %s has no HTTP readiness probe", p.Name)
				}
				if !kubeutil.PodReady(&p) {
					return false, p.Name + " not Ready"
				}
			}
			return true, ""
		})
	})

	t.Run("the operator reaches the master by its Service name", func(t *testing.T) {
		ep := cb.Status.Endpoints
		wantAdmin := fmt.Sprintf("http://%s-master.%s.svc:9003", backendName, ns)
		if ep == nil || ep.AdminURL != wantAdmin || !strings.HasPrefix(ep.RPCAddress, backendName+"-master."+ns+".svc:") {
			t.Fatalf("endpoints %+v, want the master Service's name (%s)", ep, wantAdmin)
		}
		c := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionMasterReachable)
		if c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("MasterReachable = %+v; the operator's pod probes %s", c, ep.AdminURL)
		}
	})

	t.Run("the store pods' segments are the backend's capacity", func(t *testing.T) {
		segment := resource.MustParse("32Mi")
		want := 2 * segment.Value()
		testutil.Eventually(t, 60*time.Second, "two segments of 32Mi in the backend's status", func() (bool, string) {
			st := getBackend(t, ns).Status
			return st.SegmentCount == 2 && st.CapacityBytes == want, fmt.Sprintf("segments %d capacity %d", st.SegmentCount, st.CapacityBytes)
		})
	})

	t.Run("the backend's pods are admitted under the restricted level", func(t *testing.T) {
		var dep appsv1.Deployment
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: backendName + "-master"}, &dep); err != nil {
			t.Fatal(err)
		}
		if dep.Status.ReadyReplicas != ptr.Deref(dep.Spec.Replicas, 1) {
			t.Errorf("Deployment %s: %d of %d replicas ready in a namespace enforcing %s", dep.Name, dep.Status.ReadyReplicas, ptr.Deref(dep.Spec.Replicas, 1), restricted)
		}
		for _, c := range dep.Status.Conditions {
			if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
				t.Errorf("Deployment %s: %s", dep.Name, c.Message)
			}
		}
		// A store pod turns Ready through its readiness probe, a period after its segment is
		// mounted (which the previous subtest waited for): wait for it rather than sample once.
		testutil.Eventually(t, 60*time.Second, "every store pod Ready in a namespace enforcing "+restricted, func() (bool, string) {
			var sts appsv1.StatefulSet
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: backendName + "-store"}, &sts); err != nil {
				return false, err.Error()
			}
			return sts.Status.ReadyReplicas == ptr.Deref(sts.Spec.Replicas, 1),
				fmt.Sprintf("StatefulSet %s: %d of %d replicas ready", sts.Name, sts.Status.ReadyReplicas, ptr.Deref(sts.Spec.Replicas, 1))
		})
	})
}
