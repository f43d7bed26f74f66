package cachebackend

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/etcdtls"
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
			fmt.Sprintf("%s.%s.svc", storeuse.EtcdName(cb.Name), cb.Namespace),
			"localhost",
		},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
}

// buildEtcdTLSSecret is the Secret of the bundle, the backend's.
func buildEtcdTLSSecret(cb *hicachev1alpha1.CacheBackend, b etcdtls.Bundle) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: storeuse.EtcdTLSName(cb.Name), Namespace: cb.Namespace,
			Labels: storeuse.BackendLabels(cb, "etcd"), OwnerReferences: storeuse.BackendOwner(cb)},
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
	err := r.apiReader().Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: storeuse.EtcdTLSName(cb.Name)}, &cur)
	found := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the etcd's Secret %s: %w", storeuse.EtcdTLSName(cb.Name), err)
	}
	if found && !metav1.IsControlledBy(&cur, cb) {
		return nil, fmt.Errorf("secret %s exists and is not this backend's, so the operator does not keep the managed etcd's certificates in it: delete it or rename the backend", storeuse.EtcdTLSName(cb.Name))
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
	if storeuse.ManagedEtcd(cb) == nil {
		return "", nil
	}
	var s corev1.Secret
	if err := r.apiReader().Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: storeuse.EtcdTLSName(cb.Name)}, &s); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if len(s.Data[etcdtls.KeyCACert]) == 0 {
		return "", nil
	}
	return etcdtls.CAFingerprint(s.Data), nil
}
