package controllers

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/etcdtls"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// The certificates of a managed etcd and the proxy that carries the pods' plaintext etcd client
// over mutual TLS. The Secret (<backend>-etcd-tls) holds the CA's key too: no pod mounts that
// key (each volume names the items it needs), and only the operator writes the Secret. The
// planner (etcdtls.PlanRenewal) runs at every reconcile of the backend: it renews the leaves two
// thirds into their life, the CA likewise (a new CA rolls the members and the proxies' pods).

// etcdTLSHosts are the names the members serve under: each member's peer name, the client
// Service, and loopback.
func etcdTLSHosts(cb *hicachev1alpha1.CacheBackend) etcdtls.Hosts {
	return etcdtls.Hosts{
		DNS: []string{
			fmt.Sprintf("*.%s.%s.svc", etcdPeersName(cb.Name), cb.Namespace),
			fmt.Sprintf("%s.%s.svc", etcdName(cb.Name), cb.Namespace),
			"localhost",
		},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
}

// etcdSecretVolume is the etcd's Secret as a volume of the CA certificate and the given items.
// The files are readable by any user of the pod: the pods of the masters, the stores and the
// ranks set no fsGroup, and their proxy runs as a user that does not own them. Only the items
// named are there, never the CA's key.
func etcdSecretVolume(cb *hicachev1alpha1.CacheBackend, name string, keys ...string) corev1.Volume {
	items := []corev1.KeyToPath{{Key: etcdtls.KeyCACert, Path: etcdtls.KeyCACert}}
	for _, k := range keys {
		items = append(items, corev1.KeyToPath{Key: k, Path: k})
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: etcdTLSName(cb.Name), Items: items, DefaultMode: ptr.To(int32(0o444))}}}
}

// buildEtcdTLSSecret is the Secret of the bundle, the backend's.
func buildEtcdTLSSecret(cb *hicachev1alpha1.CacheBackend, b etcdtls.Bundle) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: etcdTLSName(cb.Name), Namespace: cb.Namespace,
			Labels: backendLabels(cb, "etcd"), OwnerReferences: backendOwner(cb)},
		Type: corev1.SecretTypeOpaque,
		Data: b,
	}
}

// apiReader reads what the operator does not cache (Secrets), by name.
func (r *CacheBackendReconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// reconcileEtcdTLS makes sure the backend's etcd Secret holds certificates the planner accepts,
// issuing or renewing them, and returns them. A Secret of that name that is not the backend's is
// refused: the operator does not take over certificates someone else made.
func (r *CacheBackendReconciler) reconcileEtcdTLS(ctx context.Context, cb *hicachev1alpha1.CacheBackend) (etcdtls.Bundle, error) {
	var cur corev1.Secret
	err := r.apiReader().Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: etcdTLSName(cb.Name)}, &cur)
	found := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the etcd's Secret %s: %w", etcdTLSName(cb.Name), err)
	}
	if found && !metav1.IsControlledBy(&cur, cb) {
		return nil, fmt.Errorf("secret %s exists and is not this backend's, so the operator does not keep the managed etcd's certificates in it: delete it or rename the backend", etcdTLSName(cb.Name))
	}
	old := etcdtls.Bundle(cur.Data)
	now := r.now()
	hosts := etcdTLSHosts(cb)
	plan := etcdtls.PlanRenewal(old, hosts, now)
	if plan.Reason == "" {
		return old, nil
	}
	b, err := etcdtls.Issue(rand.Reader, old, plan, cb.Namespace+"."+cb.Name+" etcd", hosts, now)
	if err != nil {
		return nil, err
	}
	desired := buildEtcdTLSSecret(cb, b)
	if !found {
		if err := r.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("creating the etcd's Secret %s: %w", desired.Name, err)
		}
	} else {
		before := cur.DeepCopy()
		cur.Data = b
		if err := r.Patch(ctx, &cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, fmt.Errorf("renewing the certificates in the etcd's Secret %s: %w", desired.Name, err)
		}
	}
	if r.Recorder != nil {
		verb := "Renewed"
		if !found {
			verb = "Issued"
		}
		what := "the server and client certificates"
		if plan.NewCA {
			what = "a CA and " + what
		}
		r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonEtcdCertificates, "IssueEtcdCertificates",
			"%s %s of the managed etcd in Secret %s (%s)", verb, what, desired.Name, plan.Reason)
	}
	return b, nil
}

// now is the reconciler's clock, or the wall clock.
func (r *CacheBackendReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

// etcdCAFingerprint names the CA of the backend's managed etcd as its Secret holds it now, ""
// without a managed etcd or before the Secret exists (the etcd phase, which runs first, makes
// it).
func (r *CacheBackendReconciler) etcdCAFingerprint(ctx context.Context, cb *hicachev1alpha1.CacheBackend) (string, error) {
	if managedEtcd(cb) == nil {
		return "", nil
	}
	var s corev1.Secret
	if err := r.apiReader().Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: etcdTLSName(cb.Name)}, &s); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if len(s.Data[etcdtls.KeyCACert]) == 0 {
		return "", nil
	}
	return etcdtls.CAFingerprint(s.Data), nil
}

// managedEtcdImage is the image of a backend's managed etcd: its members and the proxies.
func managedEtcdImage(cb *hicachev1alpha1.CacheBackend, def string) string {
	if e := managedEtcd(cb); e != nil && e.Image != "" {
		return e.Image
	}
	return def
}

// etcdProxyContainer is etcd's gRPC proxy as a sidecar (an init container that keeps running,
// started before the pod's containers): plaintext on the pod's loopback, mutual TLS with the
// client certificate to the client Service. It writes nothing, and needs a few MiB.
func etcdProxyContainer(cb *hicachev1alpha1.CacheBackend, image string) corev1.Container {
	_, sec := restrictedSecurity()
	sec.ReadOnlyRootFilesystem = ptr.To(true)
	return corev1.Container{
		Name:    "etcd-proxy",
		Image:   image,
		Command: []string{etcdBinary},
		Args: []string{"grpc-proxy", "start",
			fmt.Sprintf("--endpoints=https://%s", managedEtcdEndpoints(cb)[0]),
			"--cert=" + etcdClientTLSMount + "/" + etcdtls.KeyClientCert,
			"--key=" + etcdClientTLSMount + "/" + etcdtls.KeyClientKey,
			"--cacert=" + etcdClientTLSMount + "/" + etcdtls.KeyCACert,
			"--listen-addr=" + etcdProxyAddress,
			// The proxy dials its own advertised address: the loopback one.
			"--advertise-client-url=" + etcdProxyAddress,
		},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
		SecurityContext: sec,
		VolumeMounts:    []corev1.VolumeMount{{Name: "etcd-client-tls", MountPath: etcdClientTLSMount, ReadOnly: true}},
	}
}

// addEtcdProxy gives a pod of a backend with a managed etcd the proxy and the client
// certificate; a pod of any other backend is left as it is. caFingerprint names the CA, so that
// a new one restarts the pod ("" leaves the pod unannotated).
func addEtcdProxy(tmpl *corev1.PodTemplateSpec, cb *hicachev1alpha1.CacheBackend, image, caFingerprint string) {
	if cb == nil || managedEtcd(cb) == nil {
		return
	}
	tmpl.Spec.InitContainers = append([]corev1.Container{etcdProxyContainer(cb, image)}, tmpl.Spec.InitContainers...)
	tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, etcdSecretVolume(cb, "etcd-client-tls", etcdtls.KeyClientCert, etcdtls.KeyClientKey))
	if caFingerprint != "" {
		if tmpl.Annotations == nil {
			tmpl.Annotations = map[string]string{}
		}
		tmpl.Annotations[annotationEtcdCA] = caFingerprint
	}
}

// EtcdProxyAddress is the address a pod that runs the proxy to a managed etcd gives its
// Mooncake client: etcd://127.0.0.1:23790.
var EtcdProxyAddress = etcdAddress([]string{etcdProxyAddress})

// AddEtcdProxy gives a pod template of one's own the proxy to cb's managed etcd and the client
// certificate, as the operator gives its own pods: the pod's Mooncake client is then given
// EtcdProxyAddress. The pod must carry the backend's label (hicache.io/backend) for the etcd's
// NetworkPolicy to admit it. A backend without a managed etcd leaves the template as it is.
func AddEtcdProxy(tmpl *corev1.PodTemplateSpec, cb *hicachev1alpha1.CacheBackend, image string) {
	addEtcdProxy(tmpl, cb, managedEtcdImage(cb, image), "")
}

// podRPCAddress is the RPC address a pod of the backend is given: with a managed etcd the
// proxy beside it (etcd://127.0.0.1:23790), else the address clients use (managedRPCAddress, or
// an external backend's).
func podRPCAddress(cb *hicachev1alpha1.CacheBackend, rpcAddress string) string {
	if cb != nil && managedEtcd(cb) != nil && store.IsEtcd(rpcAddress) {
		return EtcdProxyAddress
	}
	return rpcAddress
}

// haClientEndpoints are the etcd endpoints the masters are given: the proxy beside them for a
// managed etcd, else the spec's.
func haClientEndpoints(cb *hicachev1alpha1.CacheBackend) []string {
	if managedEtcd(cb) != nil {
		return []string{etcdProxyAddress}
	}
	return haEtcdEndpoints(cb)
}
