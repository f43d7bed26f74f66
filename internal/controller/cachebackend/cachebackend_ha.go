package cachebackend

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/store"
)

// Masters with HA: mooncake_master --enable_ha elects one serving master through etcd; the
// others are standbys. Clients reach the leader through an etcd:// address. This file holds the
// pure parts (flags, addresses, the members' roles, the StandbyAvailable condition) and the
// executor that asks each master pod its role and labels the leader (LabelMasterRole), so that
// the master Service, whose selector requires the label, reaches the leader only.

const masterRoleLeader = "leader"

// masterReplicas is the number of master pods: spec.mooncake.managed.replicas, 1 without HA.
func masterReplicas(cb *hicachev1alpha1.CacheBackend) int32 {
	m := cb.Spec.Mooncake.Managed
	if m.HA == nil || m.Replicas == nil || *m.Replicas < 1 {
		return 1
	}
	return *m.Replicas
}

// replicateMetadata is spec.mooncake.managed.ha.replicateMetadata, true by default.
func replicateMetadata(ha *hicachev1alpha1.MasterHA) bool {
	return ha.ReplicateMetadata == nil || *ha.ReplicateMetadata
}

// masterHAArgs are the flags that make a master an HA member.
func masterHAArgs(cb *hicachev1alpha1.CacheBackend) []string {
	ha := storeuse.ManagedHA(cb)
	if ha == nil {
		return nil
	}
	return []string{
		"--enable_ha=true",
		"--ha_backend_type=etcd",
		"--ha_backend_connstring=" + strings.Join(storeuse.HaClientEndpoints(cb), ";"),
		"--cluster_id=" + storeuse.HaClusterID(cb),
		"--enable_oplog=" + strconv.FormatBool(replicateMetadata(ha)),
	}
}

// masterTarget is one master pod the operator asks.
type masterTarget struct {
	Name, IP string
}

// observedMaster is a master pod and its answer (Err when it gave none).
type observedMaster struct {
	masterTarget
	Health storeuse.MasterHealth
	Err    error
}

// haView is what the members of one backend said, in one round of asking.
type haView struct {
	Members     []hicachev1alpha1.MasterMember
	Leader      string
	ViewVersion int64
	// LeaderPod is the pod that serves, "" when none does.
	LeaderPod string
	// LeaderIP is its address.
	LeaderIP string
	// Standbys counts the members that are ready to take over.
	Standbys int
}

// planHAView turns the members' answers into the status view: the serving member is the leader
// (when two claim it, which happens for a moment after a failover, the one of the highest view
// wins), a member that answers as a standby is one; the others are starting or unreachable. The
// leader comes first, then the names in order.
func planHAView(obs []observedMaster, rpcPort int32) haView {
	var v haView
	best := int64(-1)
	for _, o := range obs {
		if o.Err == nil && o.Health.Role == hicachev1alpha1.MasterLeader && o.Health.ViewVersion > best {
			best, v.LeaderPod, v.LeaderIP = o.Health.ViewVersion, o.Name, o.IP
		}
	}
	for _, o := range obs {
		m := hicachev1alpha1.MasterMember{Name: o.Name, Role: hicachev1alpha1.MasterUnreachable}
		if o.IP != "" {
			m.Address = net.JoinHostPort(o.IP, strconv.Itoa(int(rpcPort)))
		}
		if o.Err == nil {
			m.Role = o.Health.Role
			if m.Role == hicachev1alpha1.MasterLeader && o.Name != v.LeaderPod {
				m.Role = hicachev1alpha1.MasterStarting // a leader of an older view, about to step down
			}
			if o.Health.ViewVersion > v.ViewVersion {
				v.ViewVersion = o.Health.ViewVersion
			}
			if v.Leader == "" && o.Health.Leader != "" && o.Health.ViewVersion == best {
				v.Leader = o.Health.Leader
			}
		}
		if m.Role == hicachev1alpha1.MasterStandby {
			v.Standbys++
		}
		v.Members = append(v.Members, m)
	}
	if v.LeaderPod == "" {
		v.Leader = ""
	} else if v.Leader == "" {
		v.Leader = net.JoinHostPort(v.LeaderIP, strconv.Itoa(int(rpcPort)))
	}
	sort.SliceStable(v.Members, func(i, j int) bool {
		li, lj := v.Members[i].Name == v.LeaderPod, v.Members[j].Name == v.LeaderPod
		if li != lj {
			return li
		}
		return v.Members[i].Name < v.Members[j].Name
	})
	if len(v.Members) > 7 {
		v.Members = v.Members[:7]
	}
	return v
}

// setStandbyCondition says whether the backend has a standby ready to take over. A managed
// backend without HA never has one; an external backend's masters are not the operator's to
// count, so it gets no such condition.
func setStandbyCondition(st *hicachev1alpha1.CacheBackendStatus, cb *hicachev1alpha1.CacheBackend, v *haView, now metav1.Time) {
	if cb.Spec.Mooncake == nil || cb.Spec.Mooncake.Managed == nil {
		meta.RemoveStatusCondition(&st.Conditions, hicachev1alpha1.ConditionStandbyAvailable)
		return
	}
	c := metav1.Condition{Type: hicachev1alpha1.ConditionStandbyAvailable, ObservedGeneration: cb.Generation, LastTransitionTime: now}
	switch {
	case storeuse.ManagedHA(cb) == nil:
		c.Status, c.Reason = metav1.ConditionFalse, hicachev1alpha1.ReasonSingleMaster
		c.Message = "The backend runs one master without HA: when it fails or restarts, every object is lost and clients wait for it; set spec.mooncake.managed.replicas and spec.mooncake.managed.ha to run standbys"
	case v == nil || v.Standbys == 0:
		c.Status, c.Reason = metav1.ConditionFalse, hicachev1alpha1.ReasonNoStandby
		c.Message = fmt.Sprintf("No master is a ready standby (%d of %d asked): a failure of the leader stops the store until a master is elected; check the master pods and their etcd", 0, masterReplicas(cb))
		if v != nil {
			c.Message = fmt.Sprintf("No master is a ready standby (%d answered of %d): a failure of the leader stops the store until a master is elected; check the master pods and their etcd", answered(v.Members), masterReplicas(cb))
		}
	default:
		c.Status, c.Reason = metav1.ConditionTrue, hicachev1alpha1.ReasonStandbyReady
		c.Message = fmt.Sprintf("%d standby master(s) ready to take over from the leader %s", v.Standbys, v.LeaderPod)
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

func answered(ms []hicachev1alpha1.MasterMember) int {
	n := 0
	for _, m := range ms {
		if m.Role != hicachev1alpha1.MasterUnreachable {
			n++
		}
	}
	return n
}

// adminURLAt is adminURL with its host replaced by host (same scheme and port): the admin API
// of another master of the same deployment. It returns "" when adminURL has no usable form.
func adminURLAt(adminURL, host string) string {
	u, err := url.Parse(adminURL)
	if err != nil || u.Host == "" || host == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	u.Host = net.JoinHostPort(host, port)
	return u.String()
}

// leaderHost is the host of a leader RPC address the masters reported, when it is one.
func leaderHost(leader string) string {
	h, _, err := net.SplitHostPort(leader)
	if err != nil {
		return ""
	}
	return h
}

// masterPods lists the backend's master pods that have an address to ask.
func (r *CacheBackendReconciler) masterPods(ctx context.Context, cb *hicachev1alpha1.CacheBackend) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(cb.Namespace), client.MatchingLabels(storeuse.BackendLabels(cb, "master"))); err != nil {
		return nil, err
	}
	out := pods.Items[:0]
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// podsKey names the master pods and their addresses: a probe of other pods is not reused.
func podsKey(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		b.WriteString(p.Name + "=" + p.Status.PodIP + ";")
	}
	return b.String()
}

// askMasters asks every master pod its role, side by side, within ctx.
func (r *CacheBackendReconciler) askMasters(ctx context.Context, pods []corev1.Pod, adminPort int32) []observedMaster {
	out := make([]observedMaster, len(pods))
	done := make(chan struct{}, len(pods))
	for i := range pods {
		out[i].masterTarget = masterTarget{Name: pods[i].Name, IP: pods[i].Status.PodIP}
		go func(i int) {
			defer func() { done <- struct{}{} }()
			u := "http://" + net.JoinHostPort(out[i].IP, strconv.Itoa(int(adminPort)))
			out[i].Health, out[i].Err = r.Admin.MasterHealth(ctx, u)
		}(i)
	}
	for range pods {
		<-done
	}
	return out
}

// labelLeader puts hicachev1alpha1.LabelMasterRole on the leader pod and takes it off every other, so that the
// master Service reaches the leader alone.
func (r *CacheBackendReconciler) labelLeader(ctx context.Context, pods []corev1.Pod, leader string) error {
	for i := range pods {
		p := &pods[i]
		has := p.Labels[hicachev1alpha1.LabelMasterRole] == masterRoleLeader
		want := p.Name == leader
		if has == want {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		if want {
			if p.Labels == nil {
				p.Labels = map[string]string{}
			}
			p.Labels[hicachev1alpha1.LabelMasterRole] = masterRoleLeader
		} else {
			delete(p.Labels, hicachev1alpha1.LabelMasterRole)
		}
		if err := r.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// haTargets are the master pods to ask, nil for a backend without managed HA.
func (r *CacheBackendReconciler) haTargets(ctx context.Context, cb *hicachev1alpha1.CacheBackend) ([]corev1.Pod, error) {
	if storeuse.ManagedHA(cb) == nil {
		return nil, nil
	}
	return r.masterPods(ctx, cb)
}

// errNoLeader is the probe's verdict when no master of a managed HA backend serves.
type errNoLeader struct{ answered, asked int }

func (e errNoLeader) Error() string {
	return fmt.Sprintf("none of the %d master pods serves (%d answered): they are electing a leader, which takes about 10 s, or cannot reach their etcd", e.asked, e.answered)
}

// probeOnce probes a backend: its admin URL, or with managed HA every master pod and then the
// leader; an external etcd:// backend whose admin URL names a standby is probed at the leader the
// standby names (same scheme and port).
// The record's time is when the probe ended, set on the named result so that every return has it
// (reuseProbe reuses a record younger than the poll interval).
func (r *CacheBackendReconciler) probeOnce(ctx context.Context, cb *hicachev1alpha1.CacheBackend, ep *hicachev1alpha1.BackendEndpoints, pods []corev1.Pod) (rec probeRecord) {
	rec = probeRecord{AdminURL: ep.AdminURL, Generation: cb.Generation, PodsKey: podsKey(pods)}
	defer func() { rec.At = r.Clock.Now() }()
	target := ep.AdminURL
	if m := cb.Spec.Mooncake.Managed; m != nil && m.HA != nil {
		v := planHAView(r.askMasters(ctx, pods, m.AdminPort), m.RPCPort)
		rec.HA = &v
		if v.LeaderIP == "" {
			rec.Err = errNoLeader{answered: answered(v.Members), asked: len(pods)}
			return rec
		}
		target = adminURLAt(ep.AdminURL, v.LeaderIP)
		rec.Probe, rec.Err = r.Admin.Probe(ctx, target)
		return rec
	}
	rec.Probe, rec.Err = r.Admin.Probe(ctx, target)
	if rec.Err == nil && rec.Probe.Standby && store.IsEtcd(ep.RPCAddress) {
		if u := adminURLAt(ep.AdminURL, leaderHost(rec.Probe.Leader)); u != "" && u != target {
			// The leader's address is the masters' word: it is called only when it is
			// provably this store's too.
			if a := r.Options.Authority(r.Client).Authorize(ctx, cb, u); !a.Allowed {
				rec.Err = fmt.Errorf("the standby names the leader at %s, which the operator does not call: %s", u, a.Message)
				return rec
			}
			rec.LeaderAdminURL = u
			rec.Probe, rec.Err = r.Admin.Probe(ctx, u)
		}
	}
	return rec
}

// followLeader points the status at the leader: an external backend's admin URL at the leader's
// when its own names a standby, and with managed HA the leader label on the serving pod.
func (r *CacheBackendReconciler) followLeader(ctx context.Context, cb *hicachev1alpha1.CacheBackend, st *hicachev1alpha1.CacheBackendStatus, rec probeRecord, pods []corev1.Pod) error {
	if rec.LeaderAdminURL != "" && rec.Err == nil {
		st.Endpoints.AdminURL = rec.LeaderAdminURL
	}
	if rec.HA == nil {
		return nil
	}
	return r.labelLeader(ctx, pods, rec.HA.LeaderPod)
}

// haRequeueAfter is how soon a backend with HA but no leader is asked again: an election takes
// about 10 s, and clients wait for it.
const haRequeueAfter = 2 * time.Second

// haRequeue shortens the wait for the next probe while a backend with HA has no serving leader:
// a managed one none of whose master pods serves, or an external one on etcd:// whose admin URL
// (and the leader it names) does not serve. The status then follows the next leader within
// haRequeueAfter of its election, whatever the poll interval.
func haRequeue(cb *hicachev1alpha1.CacheBackend, rec probeRecord, requeue time.Duration) time.Duration {
	noLeader := storeuse.ManagedHA(cb) != nil && (rec.HA == nil || rec.HA.LeaderPod == "")
	if ext := cb.Spec.Mooncake.External; ext != nil && store.IsEtcd(ext.RPCAddress) && (rec.Err != nil || !rec.Probe.ServiceReady) {
		noLeader = true
	}
	if noLeader && requeue > haRequeueAfter {
		return haRequeueAfter
	}
	return requeue
}

// setHAStatus writes the masters, the leader and the StandbyAvailable condition.
func setHAStatus(st *hicachev1alpha1.CacheBackendStatus, cb *hicachev1alpha1.CacheBackend, deployed bool, rec probeRecord, now metav1.Time) {
	switch {
	case !deployed:
		st.Masters, st.Leader, st.ViewVersion = nil, "", 0
	case rec.HA != nil:
		// While no master serves (an election), the last leader and its view stand, so that
		// the next leader is seen as a change.
		st.Masters = rec.HA.Members
		if rec.HA.LeaderPod != "" {
			st.Leader, st.ViewVersion = rec.HA.Leader, rec.HA.ViewVersion
		}
	case rec.Err == nil:
		st.Masters, st.Leader, st.ViewVersion = nil, rec.Probe.Leader, rec.Probe.ViewVersion
	default:
		// The master does not answer: what it last said stands, so that the leader's change is
		// seen when it answers again.
		st.Masters = nil
	}
	var v *haView
	if deployed {
		v = rec.HA
	}
	setStandbyCondition(st, cb, v, now)
}

// masterStrategy replaces a lone master by stopping it first (two masters without HA would be
// two stores); HA members one at a time, a new one started before an old one stops, so that a
// standby is there to take over.
func masterStrategy(cb *hicachev1alpha1.CacheBackend) appsv1.DeploymentStrategy {
	if storeuse.ManagedHA(cb) == nil {
		return appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	}
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
	}}
}

// masterAffinity spreads HA members over nodes where it can: a node that fails takes one master.
func masterAffinity(cb *hicachev1alpha1.CacheBackend) *corev1.Affinity {
	if storeuse.ManagedHA(cb) == nil {
		return nil
	}
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: storeuse.BackendLabels(cb, "master")},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}}
}

// masterServiceSelector selects the master pods, with HA only the leader.
func masterServiceSelector(cb *hicachev1alpha1.CacheBackend) map[string]string {
	sel := storeuse.BackendLabels(cb, "master")
	if storeuse.ManagedHA(cb) != nil {
		sel[hicachev1alpha1.LabelMasterRole] = masterRoleLeader
	}
	return sel
}

// leaderChange says, for the Event of a failover, whether the masters' leader view moved from
// what the status last recorded, and what a user should know about it. A first view (no leader
// recorded before) is not a failover.
func leaderChange(old, now *hicachev1alpha1.CacheBackendStatus) (string, bool) {
	if old.ViewVersion == 0 || now.ViewVersion == 0 || old.ViewVersion == now.ViewVersion || now.Leader == "" {
		return "", false
	}
	return fmt.Sprintf("The masters elected a new leader at %s (view %d, was %s at view %d). The cache may be cold: "+
		"objects written before the failover can be unreadable, and objects removed just before it can be back "+
		"(a CacheFlush that had not confirmed its removal runs again against the new leader); "+
		"status.keyCount is the new leader's count", now.Leader, now.ViewVersion, orNone(old.Leader), old.ViewVersion), true
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
