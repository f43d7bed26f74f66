package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// Who uses what on a store: the one answer the three controllers share. The CacheFlush controller
// asks it right before executing a flush, the HiCacheDeployment controller before it asks for
// one and before it writes a namespace, the CacheBackend controller to list the namespaces in
// use. A store is every CacheBackend with one store ID, in any Kubernetes namespace; its users
// are the serving pods labelled with a namespace of one of those backends and the
// HiCacheDeployments whose current layout (status.cache) writes there.

const (
	// storeIndex indexes CacheBackends by store ID.
	storeIndex = "status.storeID"
	// writerIndex indexes HiCacheDeployments by what their current layout writes:
	// "<namespace>/<backend>/<l3 namespace>" and "<namespace>/<backend>/*".
	writerIndex = "status.cache.writes"
	// staleFlushIndex indexes HiCacheDeployments by the CacheFlushes their stale namespaces wait
	// for, "<namespace>/<name>".
	staleFlushIndex = "status.cache.staleNamespaces.flush"
)

// storeIDOf is the store a CacheBackend reaches (see store.ID), from its spec alone, so that a
// backend is known before its first probe.
func storeIDOf(cb *hicachev1alpha1.CacheBackend) string {
	m := cb.Spec.Mooncake
	switch {
	case m == nil:
		return ""
	case m.External != nil:
		return store.WithCluster(store.ID(m.External.RPCAddress, cb.Namespace, ""), haClusterID(cb))
	case m.Managed != nil:
		return store.WithCluster(store.ID(managedRPCAddress(cb), cb.Namespace, ""), haClusterID(cb))
	}
	return ""
}

// rpcAddressOf is the RPC address of a backend's store, as its spec (or, managed, the operator)
// spells it in the backend's namespace.
func rpcAddressOf(cb *hicachev1alpha1.CacheBackend) string {
	m := cb.Spec.Mooncake
	switch {
	case m == nil:
		return ""
	case m.External != nil:
		return m.External.RPCAddress
	case m.Managed != nil:
		return managedRPCAddress(cb)
	}
	return ""
}

// managedRPCAddress is where clients reach a managed master: its Service's RPC port, or with
// HA the etcd in which clients find the leader.
func managedRPCAddress(cb *hicachev1alpha1.CacheBackend) string {
	if managedHA(cb) != nil {
		return etcdAddress(haEtcdEndpoints(cb))
	}
	return fmt.Sprintf("%s.%s.svc:%d", masterName(cb.Name), cb.Namespace, cb.Spec.Mooncake.Managed.RPCPort)
}

// storeHash is a store ID short enough for a label value and a name.
func storeHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:12]
}

// writerKey is the writerIndex key of an L3 namespace of a backend; "*" is any namespace.
func writerKey(namespace, backend, l3 string) string {
	return namespace + "/" + backend + "/" + l3
}

// writerKeys are the writerIndex keys of a deployment.
func writerKeys(h *hicachev1alpha1.HiCacheDeployment) []string {
	c := h.Status.Cache
	if c == nil || c.Namespace == "" || c.Backend == "" {
		return nil
	}
	return []string{writerKey(h.Namespace, c.Backend, c.Namespace), writerKey(h.Namespace, c.Backend, "*")}
}

// storeScope is what a question about a store is about.
type storeScope struct {
	// store is the store ID.
	store string
	// namespace is one L3 namespace; "" is every object of the store (scope All, and Tenant: the
	// operator cannot tell which tenant a deployment writes, so every writer counts).
	namespace string
	// draining is a deployment that stopped its writers for this flush: what its status still
	// claims does not count (its pods do).
	draining types.UID
	// ignore is a deployment, "namespace/name", whose claim and pods do not count: the one asking.
	ignore string
}

// storeUse is who uses a scope of a store.
type storeUse struct {
	// deployments are the users, "namespace/name", sorted.
	deployments []string
	// pods is the number of serving pods that write the scope.
	pods int
	// podNamespaces are the Kubernetes namespaces of those pods, sorted, without duplicates.
	podNamespaces []string
}

// namespaces are the Kubernetes namespaces of every user, sorted, without duplicates.
func (u storeUse) namespaces() []string {
	set := map[string]bool{}
	for _, d := range u.deployments {
		ns, _, _ := strings.Cut(d, "/")
		set[ns] = true
	}
	for _, ns := range u.podNamespaces {
		set[ns] = true
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

func (u storeUse) inUse() bool { return len(u.deployments) > 0 || u.pods > 0 }

// maxNamed bounds how many users a message names.
const maxNamed = 5

// describe names the users in a bounded sentence fragment, with deployments of namespace from
// by name alone: "HiCacheDeployments dsv4, team-b/qwen3 (3 serving pods)".
func (u storeUse) describe(from string) string {
	names := make([]string, 0, min(len(u.deployments), maxNamed))
	for i, d := range u.deployments {
		if i == maxNamed {
			break
		}
		names = append(names, relativeName(d, from))
	}
	var b strings.Builder
	switch len(u.deployments) {
	case 0:
	case 1:
		b.WriteString("HiCacheDeployment " + names[0])
	default:
		b.WriteString("HiCacheDeployments " + strings.Join(names, ", "))
		if more := len(u.deployments) - len(names); more > 0 {
			fmt.Fprintf(&b, " and %d more", more)
		}
	}
	if u.pods > 0 {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "(%d serving pods)", u.pods)
	}
	return b.String()
}

// relativeName is namespace/name, or name alone in namespace from.
func relativeName(nsName, from string) string {
	if ns, name, ok := strings.Cut(nsName, "/"); ok && ns == from {
		return name
	}
	return nsName
}

// usersOf is the pure part of the answer: the users of a scope among the serving pods and the
// deployments found through the store's backends.
func usersOf(scope storeScope, pods []corev1.Pod, writers []hicachev1alpha1.HiCacheDeployment) storeUse {
	seen := map[string]bool{}
	var u storeUse
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue // its process ended: it writes nothing
		}
		if l := p.Labels[hicachev1alpha1.LabelCacheNamespace]; l == "" || (scope.namespace != "" && l != scope.namespace) {
			continue
		}
		d := p.Labels[hicachev1alpha1.LabelDeployment]
		if d != "" && p.Namespace+"/"+d == scope.ignore {
			continue
		}
		u.pods++
		if !slices.Contains(u.podNamespaces, p.Namespace) {
			u.podNamespaces = append(u.podNamespaces, p.Namespace)
			sort.Strings(u.podNamespaces)
		}
		if d != "" {
			seen[p.Namespace+"/"+d] = true
		}
	}
	for i := range writers {
		h := &writers[i]
		c := h.Status.Cache
		if c == nil || c.Namespace == "" || (scope.namespace != "" && c.Namespace != scope.namespace) {
			continue
		}
		if (scope.draining != "" && h.UID == scope.draining && drainingForFlush(h)) || h.Namespace+"/"+h.Name == scope.ignore {
			continue
		}
		seen[h.Namespace+"/"+h.Name] = true
	}
	for d := range seen {
		u.deployments = append(u.deployments, d)
	}
	sort.Strings(u.deployments)
	return u
}

// drainingForFlush tells whether a deployment stopped its writers to flush its namespace.
func drainingForFlush(h *hicachev1alpha1.HiCacheDeployment) bool {
	c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
	return c != nil && c.Reason == hicachev1alpha1.ReasonWaitingForFlush
}

// storeBackends lists the CacheBackends of a store, oldest first.
func storeBackends(ctx context.Context, c client.Reader, id string) ([]hicachev1alpha1.CacheBackend, error) {
	var list hicachev1alpha1.CacheBackendList
	if err := c.List(ctx, &list, client.MatchingFields{storeIndex: id}); err != nil {
		return nil, fmt.Errorf("listing the CacheBackends of store %s: %w", id, err)
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool {
		a, b := &items[i], &items[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return items, nil
}

// storeUsers answers who uses a scope of a store, from the indexes.
func storeUsers(ctx context.Context, c client.Reader, scope storeScope) (storeUse, error) {
	if scope.store == "" {
		return storeUse{}, fmt.Errorf("no store ID to look up")
	}
	backends, err := storeBackends(ctx, c, scope.store)
	if err != nil {
		return storeUse{}, err
	}
	l3 := scope.namespace
	if l3 == "" {
		l3 = "*"
	}
	var pods []corev1.Pod
	var writers []hicachev1alpha1.HiCacheDeployment
	for i := range backends {
		b := &backends[i]
		labels := client.MatchingLabels{hicachev1alpha1.LabelBackend: b.Name}
		if scope.namespace != "" {
			labels[hicachev1alpha1.LabelCacheNamespace] = scope.namespace
		}
		var pl corev1.PodList
		if err := c.List(ctx, &pl, client.InNamespace(b.Namespace), labels); err != nil {
			return storeUse{}, fmt.Errorf("listing the serving pods of CacheBackend %s/%s: %w", b.Namespace, b.Name, err)
		}
		pods = append(pods, pl.Items...)
		var hl hicachev1alpha1.HiCacheDeploymentList
		if err := c.List(ctx, &hl, client.InNamespace(b.Namespace), client.MatchingFields{writerIndex: writerKey(b.Namespace, b.Name, l3)}); err != nil {
			return storeUse{}, fmt.Errorf("listing the HiCacheDeployments of CacheBackend %s/%s: %w", b.Namespace, b.Name, err)
		}
		writers = append(writers, hl.Items...)
	}
	return usersOf(scope, pods, writers), nil
}

// storeWriters lists the deployments whose current layout writes an L3 namespace of a store. They
// are the cache's own objects, not copies (every deployment of a store is one at scale): read them,
// never change them.
func storeWriters(ctx context.Context, c client.Reader, id, l3 string) ([]hicachev1alpha1.HiCacheDeployment, error) {
	backends, err := storeBackends(ctx, c, id)
	if err != nil {
		return nil, err
	}
	var out []hicachev1alpha1.HiCacheDeployment
	for i := range backends {
		b := &backends[i]
		var hl hicachev1alpha1.HiCacheDeploymentList
		if err := c.List(ctx, &hl, client.InNamespace(b.Namespace), client.MatchingFields{writerIndex: writerKey(b.Namespace, b.Name, l3)}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing the HiCacheDeployments of CacheBackend %s/%s: %w", b.Namespace, b.Name, err)
		}
		out = append(out, hl.Items...)
	}
	return out, nil
}

// registerIndexes adds the field indexes the controllers share; once per manager.
func registerIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &hicachev1alpha1.CacheBackend{}, storeIndex, func(o client.Object) []string {
		if id := storeIDOf(o.(*hicachev1alpha1.CacheBackend)); id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &hicachev1alpha1.HiCacheDeployment{}, writerIndex, func(o client.Object) []string {
		return writerKeys(o.(*hicachev1alpha1.HiCacheDeployment))
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &hicachev1alpha1.HiCacheDeployment{}, staleFlushIndex, func(o client.Object) []string {
		h := o.(*hicachev1alpha1.HiCacheDeployment)
		if h.Status.Cache == nil {
			return nil
		}
		var keys []string
		for _, s := range h.Status.Cache.StaleNamespaces {
			if s.Flush != "" {
				keys = append(keys, staleFlushKey(h.Namespace, &s))
			}
		}
		return keys
	})
}

// staleFlushKey is "<namespace>/<name>" of the flush a stale namespace waits for.
func staleFlushKey(hcdNamespace string, s *hicachev1alpha1.StaleNamespace) string {
	ns := s.FlushNamespace
	if ns == "" {
		ns = hcdNamespace
	}
	return ns + "/" + s.Flush
}
