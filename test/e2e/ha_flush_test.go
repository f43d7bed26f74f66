package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// haBehindProxy is two masters with HA and the metadata log on a real etcd, which they reach
// through a proxy that can hold what they send; clients (the flush's too) find the leader in
// etcd itself. A CacheBackend "mooncake" in ns names them by etcd:// and, as its admin URL, the
// standby's, which survives the leader: the operator follows the leader.
type haBehindProxy struct {
	proxy           *mooncaketest.EtcdProxy
	ha              *mooncaketest.HA
	leader, standby *mooncaketest.Master
	held            atomic.Int64 // when the proxy started holding, in Unix nanoseconds
}

func startHABehindProxy(t *testing.T, ns string) *haBehindProxy {
	t.Helper()
	e := mooncaketest.StartEtcd(t)
	h := &haBehindProxy{proxy: mooncaketest.StartEtcdProxy(t, e)}
	cluster := "e2e." + ns
	h.ha = mooncaketest.StartHA(t, h.proxy.Etcd(), cluster, 2, true)
	h.leader = h.ha.Leader()
	for _, m := range h.ha.Masters {
		if m != h.leader {
			h.standby = m
		}
	}
	grantStore(t, "etcd://"+e.Endpoint, adminURLsOf(h.ha), ns)
	externalBackend(t, ns, "mooncake", "etcd://"+e.Endpoint, h.standby.AdminURL, testutil.ClusterID(cluster))
	return h
}

func adminOf(t *testing.T, m *mooncaketest.Master) *mooncake.Client {
	t.Helper()
	c, err := mooncake.NewClient(m.AdminURL, &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// holdFirstAttempt makes what the masters send etcd arrive 2.5 s late from the start of the
// first attempt of the flushes in ns (the masters' leader lease is 5 s), until the test ends.
func (h *haBehindProxy) holdFirstAttempt(t *testing.T, ns string) {
	t.Cleanup(flushRuns.hook(func(req storeuse.NamespaceFlushRequest) {
		if req.Flush.Namespace == ns && req.Attempt == 1 {
			h.held.Store(time.Now().UnixNano())
			h.proxy.Delay(2500 * time.Millisecond)
		}
	}, nil))
}

// killLeaderOnceVerified kills the leader, and drops what the proxy still holds of it, as soon as
// the operator has verified flush name's removal through the leader (it is Complete, or
// confirming the removal); it returns the next leader.
func (h *haBehindProxy) killLeaderOnceVerified(t *testing.T, ns, name string) *mooncaketest.Master {
	t.Helper()
	eventually(t, 90*time.Second, "the operator verifies the removal of "+name, func() (bool, string) {
		var f hicachev1alpha1.CacheFlush
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &f); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(f.Status.Conditions, hicachev1alpha1.ConditionComplete)
		return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == hicachev1alpha1.ReasonConfirmingRemoval), fmt.Sprintf("%+v", f.Status)
	})
	h.leader.Kill()
	h.proxy.Cut()
	t.Logf("leader killed %v after the masters' writes to etcd were held", time.Since(time.Unix(0, h.held.Load())).Round(time.Millisecond))
	next, took := h.ha.WaitLeader(t, h.leader, 60*time.Second)
	t.Logf("new leader %s served %v after the kill", next.RPCAddr, took.Round(100*time.Millisecond))
	return next
}

// objectsOn is every object the master holds, readable or not (master_key_count counts every
// object's metadata), and the readable ones under prefix.
func objectsOn(t *testing.T, m *mooncaketest.Master, prefix string) (all, readable int64) {
	t.Helper()
	var s mooncake.Summary
	eventually(t, 30*time.Second, "the master's object count", func() (bool, string) {
		var err error
		s, err = adminOf(t, m).Summary(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	readable, _ = adminOf(t, m).CountKeysWithPrefix(context.Background(), prefix)
	return s.KeyCount, readable
}

// A flush whose removal the leader had acknowledged but not yet written to etcd when it died:
// the objects are back on the next leader. The leader is killed, with its log to etcd still
// held, as soon as the operator has verified the removal through it. The flush must not end
// Complete while the new leader holds objects of the namespace: it runs again against the new
// leader, and counts the objects once.
func TestFlushIsNotUndoneByAFailoverRightAfterIt(t *testing.T) {
	ns := newNamespace(t)
	h := startHABehindProxy(t, ns)
	const prefix = "ha-durable"
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s_%03d", prefix, i)
	}
	h.leader.PutKeys(t, keys, 4096)
	time.Sleep(2 * time.Second) // the puts reach etcd
	if all, _ := objectsOn(t, h.leader, ""); all != int64(len(keys)) {
		t.Fatalf("the leader holds %d objects, want %d", all, len(keys))
	}

	h.holdFirstAttempt(t, ns)
	cf := &hicachev1alpha1.CacheFlush{ObjectMeta: metav1.ObjectMeta{Name: "durable", Namespace: ns},
		Spec: hicachev1alpha1.CacheFlushSpec{BackendRef: hicachev1alpha1.LocalObjectReference{Name: "mooncake"},
			Scope: hicachev1alpha1.FlushScopeNamespace, Namespace: prefix, Reason: "a failover right after it"}}
	create(t, cf)
	next := h.killLeaderOnceVerified(t, ns, cf.Name)

	done := waitFlushComplete(t, ns, cf.Name)
	all, readable := objectsOn(t, next, prefix+"_")
	t.Logf("flush %+v; the new leader holds %d objects, %d readable", done.Status, all, readable)
	if all != 0 || readable != 0 {
		t.Fatalf("flush %s is Complete (%s), but the new leader holds %d objects of the flushed namespace (%d readable)",
			cf.Name, meta.FindStatusCondition(done.Status.Conditions, hicachev1alpha1.ConditionComplete).Message, all, readable)
	}
	if done.Status.Removed != int64(len(keys)) {
		t.Errorf("removed %d, want the %d objects counted once", done.Status.Removed, len(keys))
	}
	// It ran once more, against the new leader, and said so. (What that run removed, the
	// objects that came back, is logged above: all of them when the kill beat the held log.)
	if done.Status.RepeatedAfterFailover != 1 || done.Status.ViewVersion == 0 {
		t.Errorf("repeatedAfterFailover %d, viewVersion %d: want one run again, under the new leader's view",
			done.Status.RepeatedAfterFailover, done.Status.ViewVersion)
	}
	waitWarningEvent(t, ns, "CacheFlush", hicachev1alpha1.ReasonFlushRepeatedAfterFailover, "a Warning Event says the flush ran again after the failover")
	// And it stays flushed.
	time.Sleep(2 * time.Second)
	if all, _ := objectsOn(t, next, prefix+"_"); all != 0 {
		t.Errorf("%d objects on the new leader 2 s after the flush completed", all)
	}
}

// The promise of a Fixed namespace across a failover: its layout changes, the writers stop, the
// namespace is flushed, and the leader dies right after the removal, before it reached etcd.
// The new layout must not start while the namespace holds objects of the old one.
func TestFixedNamespaceIsEmptyWhenTheNewLayoutStartsAfterAFailover(t *testing.T) {
	ns := newNamespace(t)
	h := startHABehindProxy(t, ns)
	d, _ := readyFixedDeployment(t, ns, h)
	oldPods := rankPods(t, ns, "dsv4")

	h.holdFirstAttempt(t, ns)
	update(t, d, dspark)
	var name string
	eventually(t, 90*time.Second, "the flush of the fixed namespace", func() (bool, string) {
		fl := flushesOf(t, ns)
		if len(fl) == 0 {
			return false, "no flush"
		}
		name = fl[0].Name
		return true, ""
	})
	next := h.killLeaderOnceVerified(t, ns, name)

	waitReadyGroups(t, ns, "dsv4", 1)
	all, readable := objectsOn(t, next, "dsv4-fixed_")
	var complete []hicachev1alpha1.CacheFlush
	for _, f := range flushesOf(t, ns) {
		if meta.IsStatusConditionTrue(f.Status.Conditions, hicachev1alpha1.ConditionComplete) {
			complete = append(complete, f)
		}
	}
	t.Logf("the new layout runs; the new leader holds %d objects (%d readable of dsv4-fixed); %d complete flushes", all, readable, len(complete))
	if all != 0 || readable != 0 {
		t.Fatalf("the new layout started while the new leader holds %d objects of the old layout in the fixed namespace (%d readable)", all, readable)
	}
	for _, p := range rankPods(t, ns, "dsv4") {
		for _, o := range oldPods {
			if p.UID == o.UID {
				t.Errorf("pod %s survived the recreate", p.Name)
			}
		}
		for _, f := range complete {
			if p.CreationTimestamp.Before(f.Status.CompletionTime) {
				t.Errorf("pod %s was created at %s, before flush %s completed at %s", p.Name, p.CreationTimestamp, f.Name, f.Status.CompletionTime)
			}
		}
	}
}

// The recount: a Fixed namespace is flushed for a new layout, the flush completes, and only then
// the masters fail over, before the new layout starts. Here etcd is slower than the operator's
// durability window (the masters' writes reach it 2.5 s late, the window is 0.3 s), so the flush
// completes under the old leader while its removal has not reached etcd; the leader dies with it,
// and the new leader serves the old layout's objects again. The operator cannot start the new
// layout in between: the API server refuses the deployment's writes in the namespace (as a
// failing admission policy would) until the new leader's view is in the backend's status. The
// namespace must then be counted and flushed again through the new leader before the new layout
// starts.
func TestFixedNamespaceIsRecountedWhenTheMastersFailOverAfterItsFlush(t *testing.T) {
	recountAfterFailover(t, false)
}

// The same failover, with a backend whose status does not follow it by itself: the operator
// probes the backend every 10 minutes, so from the kill to the end of the test the backend's
// status names the dead leader and its view unless the operator asks the masters again. The
// deployment's writes are admitted again as soon as the new leader serves, whatever the status
// says. The new layout must not start on the status's old view: before it starts, the operator
// asks the master the status names which view serves (and has the backend probed at once when
// that does not confirm the flush's view), and the namespace is counted and flushed again
// through the new leader.
func TestFixedNamespaceIsRecountedWhenTheBackendsStatusLagsTheFailover(t *testing.T) {
	recountAfterFailover(t, true)
}

// recountAfterFailover is the recount's test; with statusLags, the backend is probed every 10
// minutes, and the deployment's writes are admitted again once the new leader serves, without
// waiting for the backend's status to name it.
func recountAfterFailover(t *testing.T, statusLags bool) {
	start := time.Now()
	ns := newNamespace(t)
	h := startHABehindProxy(t, ns)
	const window = 300 * time.Millisecond
	restartManagerWith(t, "", func(o *storeuse.Options) {
		o.FlushDurabilityWindow = window
		if statusLags {
			o.BackendPollInterval = 10 * time.Minute
		}
	})
	d, keys := readyFixedDeployment(t, ns, h)
	if all, _ := objectsOn(t, h.leader, "dsv4-fixed_"); all != int64(len(keys)) {
		t.Fatalf("the leader holds %d objects, want %d", all, len(keys))
	}

	// As the first flush's first attempt starts (the deployment's writers are stopped and its
	// status says it waits for the flush), the deployment's writes are refused, and the masters'
	// writes to etcd held. The recount's attempt is not held.
	type refusal struct {
		lift func() error
		err  error
	}
	var held atomic.Bool
	refused := make(chan refusal, 1)
	t.Cleanup(flushRuns.hook(func(req storeuse.NamespaceFlushRequest) {
		if req.Flush.Namespace != ns || req.Attempt != 1 || !held.CompareAndSwap(false, true) {
			return
		}
		lift, err := refuseDeploymentWrites(ns)
		refused <- refusal{lift, err}
		h.held.Store(time.Now().UnixNano())
		h.proxy.Delay(2500 * time.Millisecond)
	}, nil))
	var lift func() error
	t.Cleanup(func() {
		if lift == nil {
			select {
			case r := <-refused:
				lift = r.lift
			default:
			}
		}
		if lift != nil {
			_ = lift()
		}
	})
	update(t, d, dspark)

	// The flush completes under the old leader; the leader dies at once (looked at every 20 ms:
	// the removal is durable 2.5 s after it returned).
	var flushed hicachev1alpha1.CacheFlush
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var st []string
		for _, f := range flushesOf(t, ns) {
			if meta.IsStatusConditionTrue(f.Status.Conditions, hicachev1alpha1.ConditionComplete) {
				flushed = f
			}
			st = append(st, fmt.Sprintf("%s %+v", f.Name, f.Status))
		}
		if flushed.Name != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flush of the fixed namespace did not complete within 90s: %s", strings.Join(st, "; "))
		}
	}
	h.leader.Kill()
	h.proxy.Cut()
	killed := time.Now()
	if runs := flushRuns.of(flushed.UID); len(runs) > 0 {
		t.Logf("leader killed %v after the flush's removal returned", killed.Sub(runs[0].End).Round(time.Millisecond))
	}
	r := <-refused
	lift = r.lift
	if r.err != nil {
		t.Fatalf("refusing the deployment's writes: %v", r.err)
	}
	t.Logf("flush %s completed under view %d (removed %d); leader killed %v after the masters' writes to etcd were held",
		flushed.Name, flushed.Status.ViewVersion, flushed.Status.Removed, killed.Sub(time.Unix(0, h.held.Load())).Round(time.Millisecond))
	if flushed.Status.Removed != int64(len(keys)) || flushed.Status.ViewVersion == 0 {
		t.Fatalf("flush %s removed %d under view %d, want %d under the leader's view", flushed.Name, flushed.Status.Removed, flushed.Status.ViewVersion, len(keys))
	}
	next, took := h.ha.WaitLeader(t, h.leader, 60*time.Second)
	back, _ := objectsOn(t, next, "dsv4-fixed_")
	t.Logf("new leader %s served %v after the kill, holding %d objects of the flushed namespace", next.RPCAddr, took.Round(100*time.Millisecond), back)
	if back == 0 {
		t.Fatalf("the new leader holds none of the flushed objects: the removal reached etcd before the kill, and this run tests nothing")
	}
	if statusLags {
		b := getBackend(t, ns, "mooncake")
		t.Logf("the backend's status names view %d, leader %q, admin URL %s, as the writes are admitted again", b.Status.ViewVersion, b.Status.Leader, b.Status.Endpoints.AdminURL)
	} else {
		eventually(t, 60*time.Second, "the backend's status names the new leader's view", func() (bool, string) {
			b := getBackend(t, ns, "mooncake")
			return b.Status.ViewVersion > flushed.Status.ViewVersion, fmt.Sprintf("view %d, leader %q", b.Status.ViewVersion, b.Status.Leader)
		})
	}
	if len(groups(t, ns, "dsv4")) > 0 {
		t.Fatalf("the new layout's groups exist while the deployment's writes are refused")
	}
	if err := lift(); err != nil {
		t.Fatal(err)
	}
	lift = nil
	lifted := time.Now()

	waitReadyGroups(t, ns, "dsv4", 1)
	t.Logf("the new layout runs %v after the writes were admitted again (%v after the kill; the test took %v)",
		time.Since(lifted).Round(100*time.Millisecond), time.Since(killed).Round(100*time.Millisecond), time.Since(start).Round(time.Second))
	all, readable := objectsOn(t, next, "dsv4-fixed_")
	if all != 0 || readable != 0 {
		t.Fatalf("the new layout started while the new leader holds %d objects of the old layout in the fixed namespace (%d readable)", all, readable)
	}
	var recount *hicachev1alpha1.CacheFlush
	for _, f := range flushesOf(t, ns) {
		if f.Name != flushed.Name && meta.IsStatusConditionTrue(f.Status.Conditions, hicachev1alpha1.ConditionComplete) {
			recount = &f
		}
	}
	if recount == nil {
		t.Fatalf("no flush but %s completed: the namespace was not counted again after the failover", flushed.Name)
	}
	t.Logf("recount %s: %+v", recount.Name, recount.Status)
	if recount.Status.Removed != back || recount.Status.ViewVersion <= flushed.Status.ViewVersion || !strings.Contains(recount.Spec.Reason, "Counted and flushed again") {
		t.Errorf("recount %s removed %d under view %d (reason %q), want the %d objects that came back, under a view after %d",
			recount.Name, recount.Status.Removed, recount.Status.ViewVersion, recount.Spec.Reason, back, flushed.Status.ViewVersion)
	}
	for _, p := range rankPods(t, ns, "dsv4") {
		if p.CreationTimestamp.Before(recount.Status.CompletionTime) {
			t.Errorf("pod %s was created at %s, before the recount %s completed at %s", p.Name, p.CreationTimestamp, recount.Name, recount.Status.CompletionTime)
		}
	}
	waitWarningEvent(t, ns, "HiCacheDeployment", hicachev1alpha1.ReasonRecountAfterFailover, "a Warning Event on the deployment says the namespace is counted again")
	if b := getBackend(t, ns, "mooncake"); statusLags && b.Status.ViewVersion < recount.Status.ViewVersion {
		t.Errorf("the backend's status names view %d, older than the recount's %d: it did not follow the new leader", b.Status.ViewVersion, recount.Status.ViewVersion)
	}
}

// refuseDeploymentWrites makes the API server refuse, in namespace ns, what a HiCacheDeployment's
// reconcile writes to start a layout: its status, its ConfigMaps and Services, new StatefulSets
// (a ValidatingAdmissionPolicy that denies them, as a failing policy or webhook would). Flushes,
// backends and pods are written as usual. It returns once the refusal is in effect, with the
// function that lifts it, which returns once writes are admitted again. It runs in the
// operator's goroutines too (a flush's hook): it reports, and does not fail the test.
func refuseDeploymentWrites(ns string) (lift func() error, err error) {
	ctx := context.Background()
	name := "refuse-deployment-writes-" + ns
	rule := func(group, resource string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: ops, Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource}}}}
	}
	add, upd := admissionregistrationv1.Create, admissionregistrationv1.Update
	pol := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				rule(hicachev1alpha1.GroupVersion.Group, "hicachedeployments/status", upd),
				rule("", "configmaps", add, upd),
				rule("", "services", add, upd),
				rule("apps", "statefulsets", add),
			}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "the test refuses the deployment's writes for now"}},
		}}
	bind := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}}}
	remove := func() error {
		var errs []error
		for _, o := range []client.Object{bind, pol} {
			if err := k8s.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	probe := func() error {
		return k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}, client.DryRunAll)
	}
	until := func(what string, done func() bool) error {
		for deadline := time.Now().Add(30 * time.Second); !done(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not within 30s", what)
			}
		}
		return nil
	}
	for _, o := range []client.Object{pol, bind} {
		if err := k8s.Create(ctx, o); err != nil {
			return remove, fmt.Errorf("creating %T %s: %w", o, name, err)
		}
	}
	if err := until("the API server refuses the deployment's writes", func() bool { return probe() != nil }); err != nil {
		return remove, err
	}
	return func() error {
		if err := remove(); err != nil {
			return err
		}
		return until("the API server admits the deployment's writes again", func() bool { return probe() == nil })
	}, nil
}

// waitWarningEvent waits for a Warning Event of reason about an object of kind in ns.
func waitWarningEvent(t *testing.T, ns, kind, reason, what string) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() (bool, string) {
		var evs eventsv1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == kind && e.Reason == reason && e.Type == "Warning" {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, strings.Join(seen, ", ")
	})
}

// readyFixedDeployment creates the DeepSeek-V4 deployment on the Fixed namespace "dsv4-fixed",
// waits for its group, and puts keys of six of its pages through the leader master, long enough
// before returning for them to reach etcd.
func readyFixedDeployment(t *testing.T, ns string, h *haBehindProxy) (*hicachev1alpha1.HiCacheDeployment, []string) {
	t.Helper()
	d := dsv4(ns)
	d.Spec.Storage.NamespaceStrategy = hicachev1alpha1.NamespaceFixed
	d.Spec.Storage.Namespace = "dsv4-fixed"
	create(t, d)
	waitReadyGroups(t, ns, "dsv4", 1)
	keys := pageKeys(t, ns, "dsv4", 6)
	h.leader.PutKeys(t, keys, 4096)
	time.Sleep(2 * time.Second) // the puts reach etcd
	return d, keys
}
