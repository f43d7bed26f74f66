package cachebackend

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	recon "github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// CacheBackendReconciler runs managed Mooncake masters and probes every backend's health and
// capacity.
type CacheBackendReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Options  storeuse.Options
	Admin    storeuse.StoreAdmin
	Clock    clock.PassiveClock
	// APIReader reads what the operator does not cache: the Secret of a managed etcd's
	// certificates.
	APIReader client.Reader

	// probes holds each backend's last probe, so that events between two polls reuse it.
	probes probeCache
	// probeNow wakes a backend whose probe was asked for (requestProbe).
	probeNow chan event.GenericEvent
	// writes remembers this reconciler's status writes until its cache holds them.
	writes *recon.StatusWrites
}

// +kubebuilder:rbac:groups=hicache.io,resources=cachebackends,verbs=get;list;watch
// +kubebuilder:rbac:groups=hicache.io,resources=cachebackends/status,verbs=patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// backendObs is what one reconcile of a CacheBackend observed.
type backendObs struct {
	// endpoints are where clients reach the store; deployed tells whether a master is there to
	// probe.
	endpoints *hicachev1alpha1.BackendEndpoints
	deployed  bool
	// probe is the master's last probe (zero when it was not probed).
	probe probeRecord
	// namespaces are the L3 namespaces written to the store, and by whom, within the status's
	// bound; namespaceCount counts them all.
	namespaces     []hicachev1alpha1.NamespaceUsage
	namespaceCount int32
	// authority is whether the operator may call an external backend's admin URL (nil for a
	// managed backend).
	authority *store.Authority
}

// backendScope is one reconcile of a CacheBackend.
type backendScope = recon.Scope[*hicachev1alpha1.CacheBackend, *backendObs]

// Reconcile brings one CacheBackend to its desired state and probes it.
func (r *CacheBackendReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cb hicachev1alpha1.CacheBackend
	if ok, err := recon.Load(ctx, r.Client, r.writes, req, &cb, func() { r.probes.forget(req.NamespacedName) }); !ok || cb.Spec.Mooncake == nil {
		return ctrl.Result{}, err
	}
	s := recon.NewScope(r.Client, r.writes, &cb, &backendObs{}, r.Clock.Now())
	return recon.KindSteps[*hicachev1alpha1.CacheBackend, *backendObs]{
		Phases: []recon.Phase[*backendScope]{
			{Name: "apply the etcd", Run: r.applyEtcd},
			{Name: "authorize the store", Run: r.authorizeStore},
			{Name: "apply the master", Run: r.applyMaster},
			{Name: "probe the master", Run: r.probeMaster},
			{Name: "roll the store pods", Run: r.rollStores},
			{Name: "list the namespaces in use", Run: r.listNamespaces},
		},
		// Every phase's error leaves the status unknown: nothing else is reported.
		Status: func(s *backendScope, _ error) {
			s.Obj.Status = *backendStatus(&s.Stored.Status, s.Obj, s.Obs, s.Now)
		},
		Announce: r.announce,
	}.Run(ctx, s)
}

// applyEtcd runs the etcd of a backend whose HA masters ask for a managed one, and counts its
// members; it removes one the backend no longer asks for.
func (r *CacheBackendReconciler) applyEtcd(ctx context.Context, s *backendScope) (recon.Step, error) {
	if err := r.reconcileEtcd(ctx, s.Obj, &s.Obj.Status); err != nil {
		return recon.Proceed, recon.StatusUnknown(fmt.Errorf("applying the managed etcd: %w", err))
	}
	return recon.Proceed, nil
}

// authorizeStore stops the reconcile of an external backend whose admin URL is not provably its
// store's (storeAuthority.authorize): nothing is probed, flushed or counted, the status publishes no
// endpoints and its conditions say why.
func (r *CacheBackendReconciler) authorizeStore(ctx context.Context, s *backendScope) (recon.Step, error) {
	ext := s.Obj.Spec.Mooncake.External
	if ext == nil {
		return recon.Proceed, nil
	}
	a := r.Options.Authority(r.Client).Authorize(ctx, s.Obj, ext.AdminURL)
	s.Obs.authority = &a
	if a.Allowed {
		return recon.Proceed, nil
	}
	r.probes.forget(client.ObjectKeyFromObject(s.Obj))
	return recon.StopFor(r.Options.BackendPollInterval), nil
}

// applyMaster applies a managed master's children; the endpoints of either kind follow from
// the spec.
func (r *CacheBackendReconciler) applyMaster(ctx context.Context, s *backendScope) (recon.Step, error) {
	endpoints, deployed, err := r.reconcileMaster(ctx, s.Obj)
	if err != nil {
		return recon.Proceed, recon.StatusUnknown(err)
	}
	s.Obs.endpoints, s.Obs.deployed = endpoints, deployed
	return recon.Proceed, nil
}

// probeMaster asks the admin API (of the leader, for an HA backend), at most once per poll
// interval and never for longer than the probe deadline: a backend whose admin URL hangs holds a
// worker for the deadline, then waits for its next poll like any other. An HA backend's clients
// follow the leader it found.
func (r *CacheBackendReconciler) probeMaster(ctx context.Context, s *backendScope) (recon.Step, error) {
	cb, key := s.Obj, client.ObjectKeyFromObject(s.Obj)
	interval := r.Options.BackendPollInterval
	if !s.Obs.deployed {
		r.probes.forget(key)
		return recon.ProceedWithin(interval), nil
	}
	endpoints := s.Obs.endpoints
	pods, err := r.haTargets(ctx, cb)
	if err != nil {
		return recon.Proceed, recon.StatusUnknown(err)
	}
	requeue := interval
	last, ok := r.probes.get(key)
	// A probe that found no serving leader of masters with HA stands only until haRequeue's
	// next look, not for the whole poll interval: the status follows the next leader as soon as
	// it serves.
	if reuse, after := reuseProbe(last, ok, endpoints.AdminURL, cb.Generation, s.Now, haRequeue(cb, last, interval)); reuse && last.PodsKey == podsKey(pods) {
		s.Obs.probe, requeue = last, after
	} else {
		pctx, cancel := context.WithTimeout(ctx, r.Options.ProbeTimeout)
		s.Obs.probe = r.probeOnce(pctx, cb, endpoints, pods)
		cancel()
		if s.Obs.probe.Err != nil && ctx.Err() != nil {
			return recon.StopFor(0), nil // the manager is stopping: no verdict on the backend
		}
		r.probes.put(key, s.Obs.probe)
	}
	cb.Status.Endpoints = endpoints // the leader's admin URL, once followed, is the endpoints'
	if err := r.followLeader(ctx, cb, &cb.Status, s.Obs.probe, pods); err != nil {
		return recon.Proceed, recon.StatusUnknown(err)
	}
	return recon.ProceedWithin(haRequeue(cb, s.Obs.probe, requeue)), nil
}

// rollStores runs the store pods, rolled one at a time after the master has drained them; it
// writes their part of the status.
func (r *CacheBackendReconciler) rollStores(ctx context.Context, s *backendScope) (recon.Step, error) {
	after, err := r.reconcileStores(ctx, s.Obj, s.Obs.endpoints, s.Obs.deployed && s.Obs.probe.Err == nil, &s.Obj.Status, s.Now)
	if err != nil {
		return recon.Proceed, recon.StatusUnknown(err)
	}
	return recon.ProceedWithin(after), nil
}

// listNamespaces lists who uses which namespace of the store.
func (r *CacheBackendReconciler) listNamespaces(ctx context.Context, s *backendScope) (recon.Step, error) {
	var err error
	s.Obs.namespaces, s.Obs.namespaceCount, err = r.namespaceUsage(ctx, s.Obj)
	if err != nil {
		return recon.Proceed, recon.StatusUnknown(fmt.Errorf("listing the namespaces in use: %w", err))
	}
	return recon.Proceed, nil
}

// backendStatus is the status of a CacheBackend given what one reconcile observed at now (its
// store pods' part is in cb's status already). The probe time moves only when something else
// changed from the stored status: a probe that found what the last one did costs no write.
func backendStatus(stored *hicachev1alpha1.CacheBackendStatus, cb *hicachev1alpha1.CacheBackend, obs *backendObs, now time.Time) *hicachev1alpha1.CacheBackendStatus {
	st := cb.Status.DeepCopy()
	st.ObservedGeneration = cb.Generation
	st.Endpoints = obs.endpoints
	st.StoreID = storeuse.StoreIDOf(cb)
	setBackendConditions(st, cb.Generation, now, obs.deployed, obs.probe)
	if a := obs.authority; a != nil {
		set := recon.ConditionsOf(&st.Conditions, cb.Generation, now).Set
		if a.Allowed {
			set(hicachev1alpha1.ConditionStoreAuthorized, true, a.Reason, a.Message)
		} else {
			msg := "Refused: " + a.Message
			st.Endpoints = nil
			for _, c := range []string{hicachev1alpha1.ConditionStoreAuthorized, hicachev1alpha1.ConditionMasterReachable,
				hicachev1alpha1.ConditionServiceReady, hicachev1alpha1.ConditionReady} {
				set(c, false, hicachev1alpha1.ReasonStoreRefused, msg)
			}
		}
	}
	setHAStatus(st, cb, obs.deployed, obs.probe, metav1.NewTime(now))
	setEtcdCondition(st, cb, now)
	st.Namespaces, st.NamespaceCount = obs.namespaces, obs.namespaceCount
	was, is := stored.DeepCopy(), st.DeepCopy()
	was.LastProbeTime, is.LastProbeTime = nil, nil
	if !equality.Semantic.DeepEqual(*was, *is) {
		st.LastProbeTime = ptr.To(metav1.NewTime(now))
	}
	return st
}

// announce emits an Event when the backend becomes ready or stops being ready, when its
// namespace lists reach their bound, when its HA masters elected another leader, and when its
// managed etcd loses or regains members.
func (r *CacheBackendReconciler) announce(s *backendScope) {
	old := meta.FindStatusCondition(s.Stored.Status.Conditions, hicachev1alpha1.ConditionReady)
	cur := meta.FindStatusCondition(s.Obj.Status.Conditions, hicachev1alpha1.ConditionReady)
	if old != nil && cur != nil && old.Status != cur.Status {
		typ := corev1.EventTypeNormal
		if cur.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(s.Obj, nil, typ, cur.Reason, "Probe", "%s", cur.Message)
	}
	if msg := truncatedUsage(&s.Obj.Status); msg != "" && truncatedUsage(&s.Stored.Status) == "" {
		r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeNormal, hicachev1alpha1.ReasonListTruncated, "ListNamespaces", "%s", msg)
	}
	if msg, changed := leaderChange(&s.Stored.Status, &s.Obj.Status); changed {
		r.Recorder.Eventf(s.Obj, nil, corev1.EventTypeWarning, hicachev1alpha1.ReasonLeaderChanged, "Failover", "%s", msg)
	}
	if typ, reason, msg, changed := etcdChange(&s.Stored.Status, &s.Obj.Status); changed {
		r.Recorder.Eventf(s.Obj, nil, typ, reason, "Etcd", "%s", msg)
	}
}

// setBackendConditions sets Ready, MasterReachable and ServiceReady, and the store's figures,
// from what the probe found. Messages are the operator's own sentences with the probe's parsed
// facts; a probe error's message never quotes the store's answer.
func setBackendConditions(st *hicachev1alpha1.CacheBackendStatus, generation int64, now time.Time, deployed bool, rec probeRecord) {
	set := recon.ConditionsOf(&st.Conditions, generation, now).Set
	ep := st.Endpoints
	switch {
	case !deployed:
		msg := "The managed Mooncake master has no available pod yet"
		set(hicachev1alpha1.ConditionMasterReachable, false, hicachev1alpha1.ReasonMasterNotDeployed, msg)
		set(hicachev1alpha1.ConditionServiceReady, false, hicachev1alpha1.ReasonMasterNotDeployed, msg)
		set(hicachev1alpha1.ConditionReady, false, hicachev1alpha1.ReasonMasterNotDeployed, msg)
	case rec.Err != nil:
		msg := fmt.Sprintf("The Mooncake master's admin API at %s fails its probe: %v", ep.AdminURL, rec.Err)
		set(hicachev1alpha1.ConditionMasterReachable, false, hicachev1alpha1.ReasonMasterUnreachable, msg)
		set(hicachev1alpha1.ConditionServiceReady, false, hicachev1alpha1.ReasonMasterUnreachable, "Unknown while the master is unreachable")
		set(hicachev1alpha1.ConditionReady, false, hicachev1alpha1.ReasonMasterUnreachable, msg)
	default:
		p := rec.Probe
		set(hicachev1alpha1.ConditionMasterReachable, true, hicachev1alpha1.ReasonMasterReachable,
			fmt.Sprintf("The admin API at %s answers", ep.AdminURL))
		st.KeyCount, st.CapacityBytes, st.UsedBytes, st.SegmentCount = p.KeyCount, p.CapacityBytes, p.UsedBytes, p.SegmentCount
		st.Usage = usage(p.UsedBytes, p.CapacityBytes)
		switch {
		case p.ServiceReady:
			set(hicachev1alpha1.ConditionServiceReady, true, hicachev1alpha1.ReasonServiceReady, "The master reports service_ready")
			set(hicachev1alpha1.ConditionReady, true, hicachev1alpha1.ReasonHealthy,
				fmt.Sprintf("Mooncake master at %s is ready with %d objects", ep.RPCAddress, p.KeyCount))
		default:
			msg := fmt.Sprintf("The master at %s answers but its service is not ready yet (service_ready is false)", ep.AdminURL)
			if p.Standby {
				msg = fmt.Sprintf("The master at %s answers but is an HA standby, which does not serve: point the backend at the leader", ep.AdminURL)
			}
			set(hicachev1alpha1.ConditionServiceReady, false, hicachev1alpha1.ReasonServiceNotReady, msg)
			set(hicachev1alpha1.ConditionReady, false, hicachev1alpha1.ReasonServiceNotReady, msg)
		}
	}
}

// probeRecord is one probe of a backend's admin API and what it depended on.
type probeRecord struct {
	AdminURL   string
	Generation int64
	At         time.Time
	Probe      storeuse.BackendProbe
	Err        error
	// PodsKey names the master pods asked (HA only); HA is what they answered.
	PodsKey string
	HA      *haView
	// LeaderAdminURL is the admin API of the leader an external backend's adminURL led to, ""
	// when the adminURL is the leader's.
	LeaderAdminURL string
}

// reuseProbe decides whether the last probe still stands: it does while it is younger than the
// poll interval and asked the same URL for the same generation of the spec, so that the events
// between two polls (a Deployment's status, a HiCacheDeployment's namespace) cost no probe. It
// returns when the next probe is due.
func reuseProbe(last probeRecord, ok bool, adminURL string, generation int64, now time.Time, interval time.Duration) (bool, time.Duration) {
	if !ok || last.AdminURL != adminURL || last.Generation != generation {
		return false, interval
	}
	age := now.Sub(last.At)
	if age < 0 || age >= interval {
		return false, interval
	}
	return true, interval - age
}

// reprobeAfter is how old a backend's last probe must be for requestProbe to drop it: requests
// from many deployments at once cost one probe a second at most.
const reprobeAfter = time.Second

// RequestProbe has a backend probed at once instead of at its next poll: a deployment about to
// start a new layout asked the masters, and they did not confirm the leader view of the
// backend's status. It never blocks: when the wake-up cannot be queued, the next poll probes.
func (r *CacheBackendReconciler) RequestProbe(key client.ObjectKey) {
	if last, ok := r.probes.get(key); ok && r.Clock != nil && r.Clock.Now().Sub(last.At) < reprobeAfter {
		return
	}
	r.probes.forget(key)
	if r.probeNow == nil {
		return
	}
	select {
	case r.probeNow <- event.GenericEvent{Object: &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
	default:
	}
}

// probeCache holds the last probe of each backend. Reconciles of one backend never run at once;
// of different backends they do.
type probeCache struct {
	mu   sync.Mutex
	last map[types.NamespacedName]probeRecord
}

func (c *probeCache) get(k types.NamespacedName) (probeRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.last[k]
	return r, ok
}

func (c *probeCache) put(k types.NamespacedName, r probeRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[types.NamespacedName]probeRecord{}
	}
	c.last[k] = r
}

func (c *probeCache) forget(k types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.last, k)
}

func usage(used, capacity int64) string {
	if capacity <= 0 {
		return resource.NewQuantity(used, resource.BinarySI).String()
	}
	return fmt.Sprintf("%s/%s (%d%%)", resource.NewQuantity(used, resource.BinarySI), resource.NewQuantity(capacity, resource.BinarySI), used*100/capacity)
}

// reconcileMaster applies a managed master's children and returns the endpoints clients use,
// and whether a master is there to probe.
func (r *CacheBackendReconciler) reconcileMaster(ctx context.Context, cb *hicachev1alpha1.CacheBackend) (*hicachev1alpha1.BackendEndpoints, bool, error) {
	m := cb.Spec.Mooncake
	ep := storeuse.SpecEndpoints(cb)
	if m.External != nil {
		return ep, true, nil
	}
	image := m.Managed.Image
	if image == "" {
		image = r.Options.DefaultMooncakeImage
	}
	a := recon.Applier{Client: r.Client}
	objs := []client.Object{buildMasterService(cb), BuildMasterNetworkPolicy(cb, r.Options.OperatorNamespace)}
	if m.Managed.Store != nil {
		objs = append(objs, BuildStoreNetworkPolicy(cb))
	}
	for _, o := range objs {
		if _, err := a.ApplyIfChanged(ctx, o, newEmpty(o)); err != nil {
			return nil, false, err
		}
	}
	dep := BuildMasterDeployment(cb, image)
	ca, err := r.etcdCAFingerprint(ctx, cb)
	if err != nil {
		return nil, false, fmt.Errorf("reading the etcd's certificates: %w", err)
	}
	storeuse.AddEtcdProxyWithCA(&dep.Spec.Template, cb, storeuse.ManagedEtcdImage(cb, r.Options.DefaultEtcdImage), ca)
	if _, err := a.ApplyIfChanged(ctx, dep, &appsv1.Deployment{}); err != nil {
		return nil, false, err
	}
	ep.RPCAddress = storeuse.ManagedRPCAddress(cb)
	ep.AdminURL = fmt.Sprintf("http://%s.%s.svc:%d", storeuse.MasterName(cb.Name), cb.Namespace, m.Managed.AdminPort)
	ep.MetricsPort = m.Managed.AdminPort
	var cur appsv1.Deployment
	if err := r.Get(ctx, client.ObjectKeyFromObject(dep), &cur); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading Deployment %s: %w", dep.Name, err)
	}
	return ep, cur.Status.AvailableReplicas > 0, nil
}

func newEmpty(o client.Object) client.Object {
	switch o.(type) {
	case *corev1.Service:
		return &corev1.Service{}
	case *networkingv1.NetworkPolicy:
		return &networkingv1.NetworkPolicy{}
	}
	return nil
}

// masterArgs are mooncake_master's flags for a managed backend.
func masterArgs(m *hicachev1alpha1.ManagedMooncake) []string {
	args := []string{
		"--rpc_port=" + strconv.Itoa(int(m.RPCPort)),
		"--rpc_address=$(POD_IP)",
		"--metrics_port=" + strconv.Itoa(int(m.AdminPort)),
		"--enable_metric_reporting=true",
	}
	if m.EvictionHighWatermarkRatio != "" {
		args = append(args, "--eviction_high_watermark_ratio="+m.EvictionHighWatermarkRatio)
	}
	if m.EvictionRatio != "" {
		args = append(args, "--eviction_ratio="+m.EvictionRatio)
	}
	if m.LeaseTTLMillis > 0 {
		args = append(args, "--default_kv_lease_ttl="+strconv.FormatInt(m.LeaseTTLMillis, 10))
	}
	return args
}

func BuildMasterDeployment(cb *hicachev1alpha1.CacheBackend, image string) *appsv1.Deployment {
	m := cb.Spec.Mooncake.Managed
	labels := storeuse.BackendLabels(cb, "master")
	podSec, sec := storeuse.RestrictedSecurity()
	nodeSelector, tolerations := storeuse.BackendPlacement(cb)
	probe := func(initial int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("admin")}},
			InitialDelaySeconds: initial, PeriodSeconds: 10, TimeoutSeconds: 3, FailureThreshold: 3,
		}
	}
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: storeuse.MasterName(cb.Name), Namespace: cb.Namespace,
			Labels: labels, OwnerReferences: storeuse.BackendOwner(cb)},
		Spec: appsv1.DeploymentSpec{
			// One master, replaced by stopping it first; or HA members (cachebackend_ha.go).
			Replicas: ptr.To(masterReplicas(cb)),
			Strategy: masterStrategy(cb),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: podSec,
					NodeSelector:    nodeSelector,
					Tolerations:     tolerations,
					Affinity:        masterAffinity(cb),
					Containers: []corev1.Container{{
						Name:    "master",
						Image:   image,
						Command: []string{"mooncake_master"},
						Args:    append(masterArgs(m), masterHAArgs(cb)...),
						Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
						Ports: []corev1.ContainerPort{
							{Name: "rpc", ContainerPort: m.RPCPort, Protocol: corev1.ProtocolTCP},
							{Name: "admin", ContainerPort: m.AdminPort, Protocol: corev1.ProtocolTCP},
						},
						LivenessProbe:   probe(10),
						ReadinessProbe:  probe(2),
						Resources:       m.Resources,
						SecurityContext: sec,
					}},
				},
			},
		},
	}
}

func buildMasterService(cb *hicachev1alpha1.CacheBackend) *corev1.Service {
	m := cb.Spec.Mooncake.Managed
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: storeuse.MasterName(cb.Name), Namespace: cb.Namespace,
			Labels: storeuse.BackendLabels(cb, "master"), OwnerReferences: storeuse.BackendOwner(cb)},
		Spec: corev1.ServiceSpec{
			Selector: masterServiceSelector(cb),
			Ports: []corev1.ServicePort{
				{Name: "rpc", Port: m.RPCPort, TargetPort: intstr.FromString("rpc"), Protocol: corev1.ProtocolTCP},
				{Name: "admin", Port: m.AdminPort, TargetPort: intstr.FromString("admin"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// namespaceUsage lists the namespaces written to this backend's store, through any backend of it,
// and by whom (see storeWriters).
func (r *CacheBackendReconciler) namespaceUsage(ctx context.Context, cb *hicachev1alpha1.CacheBackend) ([]hicachev1alpha1.NamespaceUsage, int32, error) {
	id := storeuse.StoreIDOf(cb)
	if id == "" {
		return nil, 0, nil
	}
	writers, err := storeuse.StoreWriters(ctx, r.Client, id, "*")
	if err != nil {
		return nil, 0, err
	}
	list, count := namespaceUsageOf(writers, cb.Namespace)
	return list, count, nil
}

// namespaceUsageOf groups the writers of a store by the namespace they write, naming each
// deployment relative to the backend's namespace from. The lists stay within the status's bounds
// (the first namespaces and names in order); the counts say how many there are in all.
func namespaceUsageOf(writers []hicachev1alpha1.HiCacheDeployment, from string) ([]hicachev1alpha1.NamespaceUsage, int32) {
	by := map[string][]string{}
	for i := range writers {
		h := &writers[i]
		by[h.Status.Cache.Namespace] = append(by[h.Status.Cache.Namespace], storeuse.RelativeName(h.Namespace+"/"+h.Name, from))
	}
	if len(by) == 0 {
		return nil, 0
	}
	out := make([]hicachev1alpha1.NamespaceUsage, 0, len(by))
	for ns, names := range by {
		sort.Strings(names)
		names = slices.Compact(names)
		u := hicachev1alpha1.NamespaceUsage{Namespace: ns, Deployments: names, DeploymentCount: int32(len(names))}
		if len(names) > hicachev1alpha1.MaxListedDeployments {
			u.Deployments = names[:hicachev1alpha1.MaxListedDeployments]
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	count := int32(len(out))
	if len(out) > hicachev1alpha1.MaxListedNamespaces {
		out = out[:hicachev1alpha1.MaxListedNamespaces]
	}
	return out, count
}

// truncatedUsage says in words which of the namespace lists reached their bound ("" when none).
func truncatedUsage(st *hicachev1alpha1.CacheBackendStatus) string {
	var parts []string
	if int(st.NamespaceCount) > len(st.Namespaces) {
		parts = append(parts, fmt.Sprintf("%d namespaces are in use and status.namespaces lists the first %d (status.namespaceCount has them all)",
			st.NamespaceCount, len(st.Namespaces)))
	}
	n, most := 0, ""
	for _, u := range st.Namespaces {
		if int(u.DeploymentCount) > len(u.Deployments) {
			n++
			if most == "" {
				most = fmt.Sprintf("namespace %s is used by %d HiCacheDeployments", u.Namespace, u.DeploymentCount)
			}
		}
	}
	if n > 0 {
		s := most
		if n > 1 {
			s += fmt.Sprintf(" (and %d more namespaces by more than %d)", n-1, hicachev1alpha1.MaxListedDeployments)
		}
		parts = append(parts, s+fmt.Sprintf("; status.namespaces[].deployments names the first %d (deploymentCount has them all)", hicachev1alpha1.MaxListedDeployments))
	}
	return strings.Join(parts, "; ")
}

// namespaceUseChanged tells whether an update of a HiCacheDeployment changes what a backend of its
// store lists or decides about it: the backend it refers to or writes to, the namespace and layout
// it writes, the stale namespaces it left, its deletion. Its other status changes (ready groups,
// conditions, what a stale namespace waits for) wake no backend. Creations and deletions always do.
func namespaceUseChanged(old, cur *hicachev1alpha1.HiCacheDeployment) bool {
	if old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() || backendRefOf(old) != backendRefOf(cur) {
		return true
	}
	a, b := old.Status.Cache, cur.Status.Cache
	if a == nil {
		a = &hicachev1alpha1.CacheStatus{}
	}
	if b == nil {
		b = &hicachev1alpha1.CacheStatus{}
	}
	if a.Namespace != b.Namespace || a.Backend != b.Backend || a.LayoutHash != b.LayoutHash {
		return true
	}
	return !slices.EqualFunc(a.StaleNamespaces, b.StaleNamespaces, func(x, y hicachev1alpha1.StaleNamespace) bool {
		return x.Namespace == y.Namespace && x.Backend == y.Backend && x.LayoutHash == y.LayoutHash
	})
}

// backendRefOf is the CacheBackend a deployment's spec names, "" without storage.
func backendRefOf(h *hicachev1alpha1.HiCacheDeployment) string {
	if h.Spec.Storage == nil {
		return ""
	}
	return h.Spec.Storage.BackendRef.Name
}

// backendUseDelay is how long a backend waits, after a deployment's use of its store changed,
// before it lists the store's use again: the changes of that time are listed at once.
const backendUseDelay = time.Second

// enqueueAfter is h with every request it adds delayed by d: requests for one object within d
// are one.
func enqueueAfter(d time.Duration, h handler.EventHandler) handler.EventHandler {
	delayed := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return delayedQueue{q, d}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, delayed(q))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, delayed(q))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, delayed(q))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, delayed(q))
		},
	}
}

// delayedQueue adds every request after d.
type delayedQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	d time.Duration
}

func (q delayedQueue) Add(r reconcile.Request) { q.AddAfter(r, q.d) }

// SetupWithManager registers the controller.
func (r *CacheBackendReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	var err error
	if r.writes, err = recon.NewStatusWrites(context.Background(), mgr.GetCache(), &hicachev1alpha1.CacheBackend{}); err != nil {
		return err
	}
	log := mgr.GetLogger().WithValues("controller", "cachebackend")
	// A deployment's use wakes every backend of its store: each lists the whole store's use. On an
	// update the old object is mapped too, so that the backend a deployment leaves is woken.
	hcdToBackend := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		hcd := o.(*hicachev1alpha1.HiCacheDeployment)
		backend := ""
		if hcd.Status.Cache != nil && hcd.Status.Cache.Backend != "" {
			backend = hcd.Status.Cache.Backend
		} else if hcd.Spec.Storage != nil {
			backend = hcd.Spec.Storage.BackendRef.Name
		}
		if backend == "" {
			return nil
		}
		own := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: hcd.Namespace, Name: backend}}
		var cb hicachev1alpha1.CacheBackend
		if err := mgr.GetClient().Get(ctx, own.NamespacedName, &cb); err != nil {
			if !apierrors.IsNotFound(err) {
				log.Error(err, "Reading the CacheBackend of a deployment failed: only it is woken, not the other backends of its store", "hiCacheDeployment", klog.KObj(o))
			}
			return []reconcile.Request{own}
		}
		backends, err := storeuse.StoreBackends(ctx, mgr.GetClient(), storeuse.StoreIDOf(&cb))
		if err != nil {
			log.Error(err, "Listing the backends of a store failed: only the deployment's own backend is woken", "hiCacheDeployment", klog.KObj(hcd))
		}
		if len(backends) == 0 {
			return []reconcile.Request{own}
		}
		reqs := make([]reconcile.Request, 0, len(backends))
		for i := range backends {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&backends[i])})
		}
		return reqs
	})
	// A backend lists who uses its store; a thousand deployments claiming their namespace within
	// a minute are a thousand changes of that list. Within backendUseDelay they are one reconcile
	// and one status write.
	hcdToBackend = enqueueAfter(backendUseDelay, hcdToBackend)
	r.probeNow = make(chan event.GenericEvent, 64)
	return ctrl.NewControllerManagedBy(mgr).
		// Probes of different backends run side by side: one whose admin URL hangs holds one
		// worker for at most the probe deadline.
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.BackendWorkers, RateLimiter: recon.RetryLimiter()}).
		For(&hicachev1alpha1.CacheBackend{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.Deployment{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&hicachev1alpha1.HiCacheDeployment{}, hcdToBackend, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return namespaceUseChanged(e.ObjectOld.(*hicachev1alpha1.HiCacheDeployment), e.ObjectNew.(*hicachev1alpha1.HiCacheDeployment))
			},
		})).
		WatchesRawSource(source.Channel(r.probeNow, &handler.EnqueueRequestForObject{})).
		Named("cachebackend").
		Complete(r)
}
