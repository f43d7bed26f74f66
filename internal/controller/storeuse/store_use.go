package storeuse

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
	// StaleFlushIndex indexes HiCacheDeployments by the CacheFlushes their stale namespaces wait
	// for, "<namespace>/<name>".
	StaleFlushIndex = "status.cache.staleNamespaces.flush"
)

// StoreIDOf is the store a CacheBackend reaches (see store.ID), from its spec alone, so that a
// backend is known before its first probe.
func StoreIDOf(cb *hicachev1alpha1.CacheBackend) string {
	m := cb.Spec.Mooncake
	switch {
	case m == nil:
		return ""
	case m.External != nil:
		return store.WithCluster(store.ID(m.External.RPCAddress, cb.Namespace, ""), HaClusterID(cb))
	case m.Managed != nil:
		return store.WithCluster(store.ID(ManagedRPCAddress(cb), cb.Namespace, ""), HaClusterID(cb))
	}
	return ""
}

// RPCAddressOf is the RPC address of a backend's store, as its spec (or, managed, the operator)
// spells it in the backend's namespace.
func RPCAddressOf(cb *hicachev1alpha1.CacheBackend) string {
	m := cb.Spec.Mooncake
	switch {
	case m == nil:
		return ""
	case m.External != nil:
		return m.External.RPCAddress
	case m.Managed != nil:
		return ManagedRPCAddress(cb)
	}
	return ""
}

// ManagedRPCAddress is where clients reach a managed master: its Service's RPC port, or with
// HA the etcd in which clients find the leader.
func ManagedRPCAddress(cb *hicachev1alpha1.CacheBackend) string {
	if ManagedHA(cb) != nil {
		return etcdAddress(HaEtcdEndpoints(cb))
	}
	return fmt.Sprintf("%s.%s.svc:%d", MasterName(cb.Name), cb.Namespace, cb.Spec.Mooncake.Managed.RPCPort)
}

// StoreHash is a store ID short enough for a label value and a name.
func StoreHash(id string) string {
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

// StoreScope is what a question about a store is about.
type StoreScope struct {
	// Store is the store ID.
	Store string
	// Namespace is one L3 namespace; "" is every object of the store (scope All, and Tenant: the
	// operator cannot tell which tenant a deployment writes, so every writer counts).
	Namespace string
	// Draining is a deployment that stopped its writers for this flush: what its status still
	// claims does not count (its pods do).
	Draining types.UID
	// Ignore is a deployment, "namespace/name", whose claim and pods do not count: the one asking.
	Ignore string
}

// StoreUse is who uses a scope of a store.
type StoreUse struct {
	// Deployments are the users, "namespace/name", sorted.
	Deployments []string
	// Pods is the number of serving pods that write the scope.
	Pods int
	// PodNamespaces are the Kubernetes namespaces of those pods, sorted, without duplicates.
	PodNamespaces []string
}

// Namespaces are the Kubernetes namespaces of every user, sorted, without duplicates.
func (u StoreUse) Namespaces() []string {
	set := map[string]bool{}
	for _, d := range u.Deployments {
		ns, _, _ := strings.Cut(d, "/")
		set[ns] = true
	}
	for _, ns := range u.PodNamespaces {
		set[ns] = true
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

func (u StoreUse) InUse() bool { return len(u.Deployments) > 0 || u.Pods > 0 }

// maxNamed bounds how many users a message names.
const maxNamed = 5

// Describe names the users in a bounded sentence fragment, with deployments of namespace from
// by name alone: "HiCacheDeployments dsv4, team-b/qwen3 (3 serving pods)".
func (u StoreUse) Describe(from string) string {
	names := make([]string, 0, min(len(u.Deployments), maxNamed))
	for i, d := range u.Deployments {
		if i == maxNamed {
			break
		}
		names = append(names, RelativeName(d, from))
	}
	var b strings.Builder
	switch len(u.Deployments) {
	case 0:
	case 1:
		b.WriteString("HiCacheDeployment " + names[0])
	default:
		b.WriteString("HiCacheDeployments " + strings.Join(names, ", "))
		if more := len(u.Deployments) - len(names); more > 0 {
			fmt.Fprintf(&b, " and %d more", more)
		}
	}
	if u.Pods > 0 {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "(%d serving pods)", u.Pods)
	}
	return b.String()
}

// RelativeName is namespace/name, or name alone in namespace from.
func RelativeName(nsName, from string) string {
	if ns, name, ok := strings.Cut(nsName, "/"); ok && ns == from {
		return name
	}
	return nsName
}

// UsersOf is the pure part of the answer: the users of a scope among the serving pods and the
// deployments found through the store's backends.
func UsersOf(scope StoreScope, pods []corev1.Pod, writers []hicachev1alpha1.HiCacheDeployment) StoreUse {
	seen := map[string]bool{}
	var u StoreUse
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue // its process ended: it writes nothing
		}
		if l := p.Labels[hicachev1alpha1.LabelCacheNamespace]; l == "" || (scope.Namespace != "" && l != scope.Namespace) {
			continue
		}
		d := p.Labels[hicachev1alpha1.LabelDeployment]
		if d != "" && p.Namespace+"/"+d == scope.Ignore {
			continue
		}
		u.Pods++
		if !slices.Contains(u.PodNamespaces, p.Namespace) {
			u.PodNamespaces = append(u.PodNamespaces, p.Namespace)
			sort.Strings(u.PodNamespaces)
		}
		if d != "" {
			seen[p.Namespace+"/"+d] = true
		}
	}
	for i := range writers {
		h := &writers[i]
		c := h.Status.Cache
		if c == nil || c.Namespace == "" || (scope.Namespace != "" && c.Namespace != scope.Namespace) {
			continue
		}
		if (scope.Draining != "" && h.UID == scope.Draining && drainingForFlush(h)) || h.Namespace+"/"+h.Name == scope.Ignore {
			continue
		}
		seen[h.Namespace+"/"+h.Name] = true
	}
	for d := range seen {
		u.Deployments = append(u.Deployments, d)
	}
	sort.Strings(u.Deployments)
	return u
}

// drainingForFlush tells whether a deployment stopped its writers to flush its namespace.
func drainingForFlush(h *hicachev1alpha1.HiCacheDeployment) bool {
	c := meta.FindStatusCondition(h.Status.Conditions, hicachev1alpha1.ConditionCacheLayoutCurrent)
	return c != nil && c.Reason == hicachev1alpha1.ReasonWaitingForFlush
}

// StoreBackends lists the CacheBackends of a store, oldest first.
func StoreBackends(ctx context.Context, c client.Reader, id string) ([]hicachev1alpha1.CacheBackend, error) {
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

// StoreUsers answers who uses a scope of a store, from the indexes.
func StoreUsers(ctx context.Context, c client.Reader, scope StoreScope) (StoreUse, error) {
	if scope.Store == "" {
		return StoreUse{}, fmt.Errorf("no store ID to look up")
	}
	backends, err := StoreBackends(ctx, c, scope.Store)
	if err != nil {
		return StoreUse{}, err
	}
	l3 := scope.Namespace
	if l3 == "" {
		l3 = "*"
	}
	var pods []corev1.Pod
	var writers []hicachev1alpha1.HiCacheDeployment
	for i := range backends {
		b := &backends[i]
		labels := client.MatchingLabels{hicachev1alpha1.LabelBackend: b.Name}
		if scope.Namespace != "" {
			labels[hicachev1alpha1.LabelCacheNamespace] = scope.Namespace
		}
		var pl corev1.PodList
		if err := c.List(ctx, &pl, client.InNamespace(b.Namespace), labels); err != nil {
			return StoreUse{}, fmt.Errorf("listing the serving pods of CacheBackend %s/%s: %w", b.Namespace, b.Name, err)
		}
		pods = append(pods, pl.Items...)
		var hl hicachev1alpha1.HiCacheDeploymentList
		if err := c.List(ctx, &hl, client.InNamespace(b.Namespace), client.MatchingFields{writerIndex: writerKey(b.Namespace, b.Name, l3)}); err != nil {
			return StoreUse{}, fmt.Errorf("listing the HiCacheDeployments of CacheBackend %s/%s: %w", b.Namespace, b.Name, err)
		}
		writers = append(writers, hl.Items...)
	}
	return UsersOf(scope, pods, writers), nil
}

// StoreWriters lists the deployments whose current layout writes an L3 namespace of a store. They
// are the cache's own objects, not copies (every deployment of a store is one at scale): read them,
// never change them.
func StoreWriters(ctx context.Context, c client.Reader, id, l3 string) ([]hicachev1alpha1.HiCacheDeployment, error) {
	backends, err := StoreBackends(ctx, c, id)
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

// RegisterIndexes adds the field indexes the controllers share; once per manager.
func RegisterIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &hicachev1alpha1.CacheBackend{}, storeIndex, func(o client.Object) []string {
		if id := StoreIDOf(o.(*hicachev1alpha1.CacheBackend)); id != "" {
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
	return idx.IndexField(ctx, &hicachev1alpha1.HiCacheDeployment{}, StaleFlushIndex, func(o client.Object) []string {
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

// BoundedName cuts a name to max characters, replacing the cut part by a hash of the whole so
// that two long names stay distinct.
func BoundedName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:max-len(suffix)], "-.") + suffix
}

func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
