package storeuse

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// +kubebuilder:rbac:groups=hicache.io,resources=clustercachestoregrants,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch

// storeAuthority decides whether the operator may call an admin URL for a CacheBackend: the pure
// rule of store.Authorize over the grants of the manager's flag and of the ClusterCacheStoreGrant
// objects (read from the manager's cache, which watches them), then, when the rule rests on a
// Service of the backend's own namespace, the proof that this Service reaches pods of that
// namespace alone (serviceProof).
type storeAuthority struct {
	// reader reads ClusterCacheStoreGrants, Services, their EndpointSlices and pods.
	reader client.Reader
	// flagGrants are the manager's --store-grant.
	flagGrants []store.Grant
	// objects says the grants of ClusterCacheStoreGrant objects are read (false: only the
	// flag's, for a manager that may not list cluster-scoped objects).
	objects bool
}

// Grants are every grant in force: the flag's, then the objects'.
func (a *storeAuthority) Grants(ctx context.Context) ([]store.Grant, error) {
	out := slices.Clone(a.flagGrants)
	if a == nil || !a.objects || a.reader == nil {
		return out, nil
	}
	var list hicachev1alpha1.ClusterCacheStoreGrantList
	if err := a.reader.List(ctx, &list); err != nil {
		return out, fmt.Errorf("listing ClusterCacheStoreGrants: %w", err)
	}
	for i := range list.Items {
		out = append(out, grantOf(&list.Items[i]))
	}
	return out, nil
}

// grantOf is a ClusterCacheStoreGrant as store.Authorize reads grants.
func grantOf(g *hicachev1alpha1.ClusterCacheStoreGrant) store.Grant {
	return store.Grant{
		Name:                        "ClusterCacheStoreGrant " + g.Name,
		RPCAddress:                  g.Spec.RPCAddress,
		AdminURLs:                   slices.Clone(g.Spec.AdminURLs),
		Namespaces:                  slices.Clone(g.Spec.Namespaces),
		AllowCrossNamespaceOverride: g.Spec.AllowCrossNamespaceOverride,
	}
}

// Authorize decides whether the operator may call adminURL as the admin API of cb's store: a
// managed backend's admin URLs are the operator's own (its master's Service in the backend's
// namespace, or its pods' IPs), an external backend's only what its RPC address provably names
// or a cluster administrator's grant lists. Every admin call (probe, leader following, flush,
// count, drain) is made only after it allowed that URL. Grants that cannot be read refuse what
// only a grant would allow.
func (a *storeAuthority) Authorize(ctx context.Context, cb *hicachev1alpha1.CacheBackend, adminURL string) store.Authority {
	m := cb.Spec.Mooncake
	switch {
	case m == nil:
		return store.Authority{Reason: store.AuthorityBadAdminURL, Message: "spec.mooncake is not set"}
	case m.External == nil:
		return store.Authority{Allowed: true, Reason: "Managed", Message: "The operator runs this master"}
	}
	grants, gerr := a.Grants(ctx)
	v := store.Authorize(m.External.RPCAddress, adminURL, cb.Namespace, "", grants)
	if !v.Allowed && gerr != nil {
		v.Message += fmt.Sprintf(" (the grants could not be read: %v)", gerr)
	}
	if !v.Allowed || v.Service == "" {
		return v
	}
	var svc corev1.Service
	err := a.reader.Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: v.Service}, &svc)
	var found *corev1.Service
	switch {
	case err == nil:
		found = &svc
	case !apierrors.IsNotFound(err):
		return store.Authority{Reason: store.AuthorityServiceRefused, Message: fmt.Sprintf(
			"reading Service %s/%s, which spec.mooncake.external names: %v", cb.Namespace, v.Service, err)}
	}
	var slicesOf discoveryv1.EndpointSliceList
	if err := a.reader.List(ctx, &slicesOf, client.InNamespace(cb.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: v.Service}); err != nil {
		return store.Authority{Reason: store.AuthorityServiceRefused, Message: fmt.Sprintf(
			"listing the EndpointSlices of Service %s/%s: %v", cb.Namespace, v.Service, err)}
	}
	podIPs := func(name string) ([]string, error) {
		var p corev1.Pod
		if err := a.reader.Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: name}, &p); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, err
		}
		var ips []string
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return ips, nil
	}
	if why := serviceProof(found, slicesOf.Items, podIPs); why != "" {
		return store.Authority{Reason: store.AuthorityServiceRefused, Message: fmt.Sprintf(
			"spec.mooncake.external names Service %s of namespace %s, but %s: the operator calls a Service's admin URL only when the Service selects pods of its own namespace; give the Service a selector of the master's pods (type ClusterIP, no hand-written EndpointSlices), or ask a cluster administrator for a ClusterCacheStoreGrant that lists store %s, the admin URL %s and namespace %s",
			v.Service, cb.Namespace, why, store.ID(m.External.RPCAddress, cb.Namespace, ""), adminURL, cb.Namespace)}
	}
	v.Message += " (type " + string(serviceType(found)) + ", with a selector; its EndpointSlices are the endpoint controller's)"
	return v
}

// endpointSliceController is the manager label of the EndpointSlices Kubernetes writes for a
// Service's selector.
const endpointSliceController = "endpointslice-controller.k8s.io"

// serviceProof says why a Service of a backend's own namespace is not provably backed by that
// namespace's pods alone ("" when it is): a Service's DNS name resolves to what an ExternalName
// names (anywhere), a Service without a selector reaches whatever EndpointSlices someone wrote
// (another namespace's pod IPs, the API server, a node), and one with a selector also reaches a
// hand-written EndpointSlice that carries its name. So every EndpointSlice of the Service must be
// the endpoint controller's, and every address in it the IP of the pod of the backend's namespace
// its targetRef names (labels and references can be written by whoever may write the slice; the
// pod's IP, from its status, cannot). svc nil: the Service does not exist. podIPs gives the IPs
// of a pod of the namespace (none when there is no such pod).
func serviceProof(svc *corev1.Service, eps []discoveryv1.EndpointSlice, podIPs func(name string) ([]string, error)) string {
	if svc == nil {
		return "no such Service exists (one created later under that name could point anywhere until the operator looks)"
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return fmt.Sprintf("it is of type ExternalName (%q): its name resolves to whatever that names", svc.Spec.ExternalName)
	}
	if len(svc.Spec.Selector) == 0 {
		return "it has no selector: its endpoints are whatever EndpointSlices or Endpoints someone wrote, in reach of any address"
	}
	var bad []string
	for _, s := range eps {
		if by := s.Labels[discoveryv1.LabelManagedBy]; by != endpointSliceController {
			bad = append(bad, fmt.Sprintf("EndpointSlice %s is managed by %q, not written by Kubernetes from the selector", s.Name, by))
			continue
		}
		for _, e := range s.Endpoints {
			ref := e.TargetRef
			if ref == nil || ref.Kind != "Pod" || (ref.Namespace != "" && ref.Namespace != svc.Namespace) {
				bad = append(bad, fmt.Sprintf("EndpointSlice %s has addresses %v that name no pod of namespace %s", s.Name, e.Addresses, svc.Namespace))
				continue
			}
			ips, err := podIPs(ref.Name)
			if err != nil {
				bad = append(bad, fmt.Sprintf("reading pod %s of EndpointSlice %s: %v", ref.Name, s.Name, err))
				continue
			}
			for _, ip := range e.Addresses {
				if !slices.Contains(ips, ip) {
					bad = append(bad, fmt.Sprintf("EndpointSlice %s has address %s, which is not pod %s's (%v)", s.Name, ip, ref.Name, ips))
				}
			}
		}
	}
	if len(bad) > 0 {
		return strings.Join(bad, "; ")
	}
	return ""
}

func serviceType(svc *corev1.Service) corev1.ServiceType {
	if svc.Spec.Type == "" {
		return corev1.ServiceTypeClusterIP
	}
	return svc.Spec.Type
}
