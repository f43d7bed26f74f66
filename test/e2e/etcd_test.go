package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

// A managed backend whose HA masters ask for a managed etcd: the operator runs a StatefulSet of
// the etcd image with its peers and client Services and its NetworkPolicy, gives the masters and
// the clients the client Service as etcd://, and counts the Ready members (kwok makes the pods
// Ready) into status.etcd and EtcdReady. The API server refuses a change of the members, and
// once the backend leaves HA the etcd's objects go.
func TestManagedEtcdChildren(t *testing.T) {
	ns := newNamespace(t)
	cb := &hicachev1alpha1.CacheBackend{}
	if err := decodeInto(`
metadata: {name: ha}
spec:
  mooncake:
    managed:
      replicas: 3
      ha: {etcd: {managed: {storage: {emptyDir: {medium: Memory}}}}}
      store: {replicas: 1, segmentSize: 1Gi}
`, cb); err != nil {
		t.Fatal(err)
	}
	cb.Namespace = ns
	create(t, cb)
	ctx := context.Background()
	endpoint := "ha-etcd." + ns + ".svc:2379"

	var sts appsv1.StatefulSet
	eventually(t, 20*time.Second, "the etcd StatefulSet", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ha-etcd"}, &sts)
		return err == nil, fmt.Sprint(err)
	})
	c := sts.Spec.Template.Spec.Containers[0]
	if *sts.Spec.Replicas != 1 || c.Image != storeuse.DefaultEtcdImage || sts.Spec.ServiceName != "ha-etcd-peers" {
		t.Errorf("etcd: %d members, image %s, service %s; want 1, %s, ha-etcd-peers", *sts.Spec.Replicas, c.Image, sts.Spec.ServiceName, storeuse.DefaultEtcdImage)
	}
	if v := sts.Spec.Template.Spec.Volumes; len(v) != 2 || v[0].Secret == nil || v[0].Secret.SecretName != "ha-etcd-tls" ||
		v[1].EmptyDir == nil || v[1].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("etcd volumes %+v, want the certificates of Secret ha-etcd-tls and the spec's emptyDir", v)
	}
	for _, name := range []string{"ha-etcd", "ha-etcd-peers"} {
		var svc corev1.Service
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			t.Errorf("Service %s: %v", name, err)
		}
	}
	var np networkingv1.NetworkPolicy
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ha-etcd"}, &np); err != nil {
		t.Errorf("NetworkPolicy ha-etcd: %v", err)
	}
	var dep appsv1.Deployment
	eventually(t, 20*time.Second, "the master Deployment", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ha-master"}, &dep)
		return err == nil, fmt.Sprint(err)
	})
	// The masters reach the etcd through the proxy beside them, which holds the client
	// certificate the operator issued into the backend's Secret.
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--ha_backend_connstring=127.0.0.1:23790") {
		t.Errorf("master args %q do not name the proxy to the managed etcd", args)
	}
	if ic := dep.Spec.Template.Spec.InitContainers; len(ic) != 1 || ic[0].Name != "etcd-proxy" || !slices.Contains(ic[0].Args, "--endpoints=https://"+endpoint) {
		t.Errorf("master init containers %+v, want the etcd proxy to https://%s", ic, endpoint)
	}
	var certs corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ha-etcd-tls"}, &certs); err != nil {
		t.Fatalf("the etcd's certificates: %v", err)
	}
	for _, k := range []string{"ca.crt", "ca.key", "server.crt", "server.key", "client.crt", "client.key"} {
		if len(certs.Data[k]) == 0 {
			t.Errorf("Secret ha-etcd-tls has no %s", k)
		}
	}
	if !metav1.IsControlledBy(&certs, getCB(t, ns, "ha")) {
		t.Error("Secret ha-etcd-tls is not the backend's")
	}
	if a := sts.Spec.Template.Annotations["hicache.io/etcd-ca"]; a == "" || dep.Spec.Template.Annotations["hicache.io/etcd-ca"] != a {
		t.Errorf("the etcd pods name CA %q, the masters %q: want one CA named on both", a, dep.Spec.Template.Annotations["hicache.io/etcd-ca"])
	}
	eventually(t, time.Minute, "status.etcd counts the Ready member and EtcdReady is True", func() (bool, string) {
		cb := getCB(t, ns, "ha")
		e := cb.Status.Etcd
		cond := meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionEtcdReady)
		ok := e != nil && e.Ready == 1 && e.Replicas == 1 && slices.Equal(e.Endpoints, []string{endpoint}) &&
			cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == cb.Generation &&
			cb.Status.Endpoints != nil && cb.Status.Endpoints.RPCAddress == "etcd://"+endpoint
		return ok, fmt.Sprintf("etcd %+v condition %+v endpoints %+v", e, cond, cb.Status.Endpoints)
	})
	eventually(t, 30*time.Second, "a Normal Event says the etcd's members are Ready", func() (bool, string) {
		var evs eventsv1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "CacheBackend" && e.Regarding.Name == "ha" && e.Reason == hicachev1alpha1.ReasonEtcdReady && e.Type == corev1.EventTypeNormal {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, strings.Join(seen, ", ")
	})
	var store appsv1.StatefulSet
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ha-store"}, &store); err != nil {
		t.Fatal(err)
	}
	if v, _ := envValue(store.Spec.Template.Spec.Containers[0], "MOONCAKE_MASTER"); v != "etcd://127.0.0.1:23790" {
		t.Errorf("store pods' MOONCAKE_MASTER %q, want the proxy etcd://127.0.0.1:23790", v)
	}

	// The members are fixed once the etcd runs.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCB(t, ns, "ha")
		cur.Spec.Mooncake.Managed.HA.Etcd.Managed.Replicas = ptr.To(int32(3))
		cur.Spec.Mooncake.Managed.HA.Etcd.Managed.Storage = hicachev1alpha1.EtcdStorage{Size: ptr.To(resource.MustParse("1Gi"))}
		return k8s.Update(ctx, cur)
	})
	if err == nil || !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "spec.mooncake.managed.ha.etcd.managed.replicas cannot change") ||
		!strings.Contains(err.Error(), "spec.mooncake.managed.ha.etcd.managed.storage cannot change") {
		t.Errorf("changing the etcd's members and storage: %v; want both refused, naming the fields", err)
	}

	// A backend that leaves HA runs no etcd any more.
	update(t, getCB(t, ns, "ha"), func(cb *hicachev1alpha1.CacheBackend) {
		cb.Spec.Mooncake.Managed.Replicas = ptr.To(int32(1))
		cb.Spec.Mooncake.Managed.HA = nil
	})
	eventually(t, 30*time.Second, "the etcd's objects are gone and its status and condition with them", func() (bool, string) {
		var left []string
		for _, o := range []struct {
			obj  client.Object
			name string
		}{{&appsv1.StatefulSet{}, "ha-etcd"}, {&corev1.Service{}, "ha-etcd"}, {&corev1.Service{}, "ha-etcd-peers"}, {&networkingv1.NetworkPolicy{}, "ha-etcd"}} {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.name}, o.obj)
			if err == nil && o.obj.GetDeletionTimestamp() == nil {
				left = append(left, fmt.Sprintf("%T %s", o.obj, o.name))
			}
		}
		cb := getCB(t, ns, "ha")
		return len(left) == 0 && cb.Status.Etcd == nil && meta.FindStatusCondition(cb.Status.Conditions, hicachev1alpha1.ConditionEtcdReady) == nil,
			fmt.Sprintf("left %v, status.etcd %+v", left, cb.Status.Etcd)
	})
	// The master Service and policy stay: only the etcd's objects went.
	for _, name := range []string{"ha-master"} {
		var svc corev1.Service
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			t.Errorf("Service %s after the etcd went: %v", name, err)
		}
	}
}
