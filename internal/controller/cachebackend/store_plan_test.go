package cachebackend

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
)

var storeNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// spod is a store pod of the table: ordinal o, in the current template or not, Ready, with
// one segment of status st holding used bytes.
func spod(o int, updated bool, st string, used int64) storePod {
	p := storePod{name: "mc-store-" + string(rune('0'+o)), ordinal: o, updated: updated, ready: true}
	if st != "" {
		p.segments = []storeSegment{{name: "10.0.0." + string(rune('1'+o)) + ":1234" + string(rune('0'+o)), status: st, used: used}}
	}
	return p
}

func (p storePod) notReady() storePod { p.ready = false; return p }

func (p storePod) terminating() storePod {
	p.deleting = true
	return p
}

const (
	ok       = mooncake.SegmentOK
	draining = mooncake.SegmentDraining
	drained  = mooncake.SegmentDrained
	old      = false
	cur      = true
)

func record(pod string, age time.Duration, job string) *hicachev1alpha1.StoreRollout {
	return &hicachev1alpha1.StoreRollout{Pod: pod, Reason: rolloutRoll, JobID: job, StartTime: metav1.NewTime(storeNow.Add(-age))}
}

func TestPlanStores(t *testing.T) {
	type want struct {
		replicas int
		action   storeActionKind
		pod      string
		reason   string
		// message and lost must contain these words ("" for lost: nothing lost).
		message, lost string
		// rollout names the pod recorded as draining ("" for none).
		rollout string
	}
	tests := map[string]struct {
		in   storeObserved
		want want
	}{
		"a new backend: the StatefulSet is created with the replicas wanted": {
			in:   storeObserved{want: 2, stsReplicas: -1},
			want: want{replicas: 2, reason: hicachev1alpha1.ReasonStoreWaiting, message: "Scaling the store pods to 2"},
		},
		"pods not Ready yet: wait": {
			in:   storeObserved{want: 2, stsReplicas: 2, pods: []storePod{spod(0, cur, ok, 0), spod(1, cur, "", 0).notReady()}},
			want: want{replicas: 2, reason: hicachev1alpha1.ReasonStoreWaiting, message: "mc-store-1 to become Ready"},
		},
		"every pod current and Ready: nothing to do": {
			in:   storeObserved{want: 2, stsReplicas: 2, pods: []storePod{spod(0, cur, ok, 10), spod(1, cur, ok, 0)}},
			want: want{replicas: 2, reason: hicachev1alpha1.ReasonStoresCurrent, message: "All 2 store pods run the current template"},
		},
		"a new template: one surge pod first, nothing drained before it is Ready": {
			in:   storeObserved{want: 2, stsReplicas: 2, pods: []storePod{spod(0, old, ok, 10), spod(1, old, ok, 10)}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreWaiting, message: "Scaling the store pods to 3"},
		},
		"the surge pod is created but not Ready: wait": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, ok, 10), spod(2, cur, "", 0).notReady()}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreWaiting, message: "mc-store-2 to become Ready"},
		},
		"the surge pod is not created yet: wait": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, ok, 10)}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreWaiting, message: "store pod 2 of 3 to be created"},
		},
		"the surge pod is Ready: the emptiest old pod is drained": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, ok, 5), spod(2, cur, ok, 0)}},
			want: want{replicas: 3, action: storeDrain, pod: "mc-store-1", reason: hicachev1alpha1.ReasonStoreDraining, message: "Draining store pod mc-store-1 (roll)", rollout: "mc-store-1"},
		},
		"equally full old pods: the highest ordinal first": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, ok, 10), spod(2, cur, ok, 0)}},
			want: want{replicas: 3, action: storeDrain, pod: "mc-store-1", reason: hicachev1alpha1.ReasonStoreDraining, rollout: "mc-store-1"},
		},
		"a drain under way: wait and report its progress": {
			in: storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, draining, 5), spod(2, cur, ok, 5)},
				rollout: record("mc-store-1", time.Minute, "1-2"), job: &mooncake.DrainJob{ID: "1-2", Status: mooncake.DrainRunning, Succeeded: 7, MovedBytes: 7 << 20, Blocked: 1}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreDraining, message: "7 objects (7.0 MiB) moved so far, 1 blocked", rollout: "mc-store-1"},
		},
		"a drain the status lost (a failed write) is picked up from the master's segment status": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, draining, 5), spod(2, cur, ok, 5)}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreDraining, rollout: "mc-store-1"},
		},
		"drained: the pod is deleted, to come back in the new template": {
			in: storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, drained, 0), spod(2, cur, ok, 10)},
				rollout: record("mc-store-1", time.Minute, "1-2"), job: &mooncake.DrainJob{ID: "1-2", Status: mooncake.DrainSucceeded, Succeeded: 12}},
			want: want{replicas: 3, action: storeDelete, pod: "mc-store-1", reason: hicachev1alpha1.ReasonStoreReplacing, message: "drained: 12 objects moved"},
		},
		"the deleted pod terminates: wait": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, drained, 0).terminating(), spod(2, cur, ok, 10)}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreWaiting, message: "mc-store-1 to finish terminating"},
		},
		"the replacement is not Ready yet: the next old pod waits": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, cur, "", 0).notReady(), spod(2, cur, ok, 10)}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreWaiting, message: "mc-store-1 to become Ready"},
		},
		"a stale record of a pod replaced since is dropped": {
			in: storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, cur, ok, 0), spod(2, cur, ok, 10)},
				rollout: record("mc-store-1", time.Minute, "1-2")},
			want: want{replicas: 3, action: storeDrain, pod: "mc-store-0", reason: hicachev1alpha1.ReasonStoreDraining, rollout: "mc-store-0"},
		},
		"every pod below the replicas is current: the surge pod is drained": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, cur, ok, 10), spod(1, cur, ok, 10), spod(2, cur, ok, 10)}},
			want: want{replicas: 3, action: storeDrain, pod: "mc-store-2", reason: hicachev1alpha1.ReasonStoreDraining, message: "(scaledown)", rollout: "mc-store-2"},
		},
		"the surge pod is drained: the StatefulSet drops it": {
			in: storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, cur, ok, 10), spod(1, cur, ok, 10), spod(2, cur, drained, 0)},
				rollout: &hicachev1alpha1.StoreRollout{Pod: "mc-store-2", Reason: rolloutScaleDown, StartTime: metav1.NewTime(storeNow)}},
			want: want{replicas: 2, reason: hicachev1alpha1.ReasonStoreReplacing, message: "Removing store pod mc-store-2, drained"},
		},
		"a scale down drains from the top, one pod at a time": {
			in:   storeObserved{want: 1, stsReplicas: 3, pods: []storePod{spod(0, cur, ok, 10), spod(1, cur, ok, 10), spod(2, cur, ok, 10)}},
			want: want{replicas: 3, action: storeDrain, pod: "mc-store-2", reason: hicachev1alpha1.ReasonStoreDraining, rollout: "mc-store-2"},
		},
		"a scale down past an empty pod keeps the one below it that holds objects": {
			in:   storeObserved{want: 1, stsReplicas: 3, pods: []storePod{spod(0, cur, ok, 10), spod(1, cur, ok, 10), spod(2, cur, drained, 0)}},
			want: want{replicas: 2, reason: hicachev1alpha1.ReasonStoreReplacing, message: "Removing store pod mc-store-2"},
		},
		"a drain past its deadline: the pod goes anyway and what is left is reported lost": {
			in: storeObserved{want: 2, stsReplicas: 3, timeout: 5 * time.Minute, pods: []storePod{spod(0, old, ok, 10), spod(1, old, draining, 4096), spod(2, cur, ok, 10)},
				rollout: record("mc-store-1", 6*time.Minute, "1-2"), job: &mooncake.DrainJob{ID: "1-2", Status: mooncake.DrainRunning, Blocked: 3}},
			want: want{replicas: 3, action: storeDelete, pod: "mc-store-1", reason: hicachev1alpha1.ReasonStoreReplacing, lost: "did not finish within 5m0s: 0 objects moved, 3 could not be (read without a pause"},
		},
		"a surge pod past its deadline is dropped by the replicas": {
			in: storeObserved{want: 2, stsReplicas: 3, timeout: time.Minute, pods: []storePod{spod(0, cur, ok, 10), spod(1, cur, ok, 10), spod(2, cur, draining, 10)},
				rollout: &hicachev1alpha1.StoreRollout{Pod: "mc-store-2", Reason: rolloutScaleDown, StartTime: metav1.NewTime(storeNow.Add(-2 * time.Minute))}},
			want: want{replicas: 2, reason: hicachev1alpha1.ReasonStoreReplacing, lost: "did not finish within 1m0s"},
		},
		"a drain the master gave up (a failed job, a restarted master) is asked again": {
			in: storeObserved{want: 2, stsReplicas: 3, timeout: 5 * time.Minute, pods: []storePod{spod(0, old, ok, 10), spod(1, old, ok, 5), spod(2, cur, ok, 10)},
				rollout: record("mc-store-1", time.Minute, "1-2")},
			want: want{replicas: 3, action: storeDrain, pod: "mc-store-1", reason: hicachev1alpha1.ReasonStoreDraining, message: "again", rollout: "mc-store-1"},
		},
		"an old pod that is not Ready and holds nothing is replaced at once": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, "", 0).notReady(), spod(1, old, ok, 10), spod(2, cur, ok, 0)}},
			want: want{replicas: 3, action: storeDelete, pod: "mc-store-0", reason: hicachev1alpha1.ReasonStoreReplacing, message: "is not Ready and holds no objects"},
		},
		"a new pod that is not Ready stops the roll": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, ok, 10), spod(1, old, ok, 10), spod(2, cur, "", 0).notReady()}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreWaiting, message: "mc-store-2 to become Ready"},
		},
		"a pod whose segment the master does not list is replaced without a drain": {
			in:   storeObserved{want: 2, stsReplicas: 3, pods: []storePod{spod(0, old, "", 0), spod(1, old, ok, 10), spod(2, cur, ok, 0)}},
			want: want{replicas: 3, action: storeDelete, pod: "mc-store-0", reason: hicachev1alpha1.ReasonStoreReplacing, lost: "lists no segment of it"},
		},
		"with no other segment in service the pod is replaced without a drain": {
			in:   storeObserved{want: 0, stsReplicas: 1, pods: []storePod{spod(0, cur, ok, 10)}},
			want: want{replicas: 0, reason: hicachev1alpha1.ReasonStoreReplacing, lost: "no other segment is in service"},
		},
		"a serving rank's segment can take the objects of the last store pod": {
			in:   storeObserved{want: 0, stsReplicas: 1, otherSegments: 1, pods: []storePod{spod(0, cur, ok, 10)}},
			want: want{replicas: 1, action: storeDrain, pod: "mc-store-0", reason: hicachev1alpha1.ReasonStoreDraining, rollout: "mc-store-0"},
		},
		"one store pod rolls through its surge pod, so its objects survive": {
			in:   storeObserved{want: 1, stsReplicas: 2, pods: []storePod{spod(0, old, ok, 10), spod(1, cur, ok, 0)}},
			want: want{replicas: 2, action: storeDrain, pod: "mc-store-0", reason: hicachev1alpha1.ReasonStoreDraining, rollout: "mc-store-0"},
		},
		"an unreachable master: nothing is drained or removed": {
			in:   storeObserved{want: 1, stsReplicas: 3, segmentsKnown: false, pods: []storePod{spod(0, old, ok, 10), spod(1, cur, ok, 0), spod(2, cur, ok, 0)}},
			want: want{replicas: 3, reason: hicachev1alpha1.ReasonStoreWaiting, message: "does not list its segments"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := tc.in
			in.now = storeNow
			if in.timeout == 0 {
				in.timeout = 5 * time.Minute
			}
			if !strings.HasPrefix(name, "an unreachable master") {
				in.segmentsKnown = true
			}
			got := planStores(in)
			if got.replicas != tc.want.replicas || got.action != tc.want.action || got.pod != tc.want.pod || got.reason != tc.want.reason {
				t.Errorf("plan: replicas %d, %q %q, reason %s (%s); want replicas %d, %q %q, reason %s",
					got.replicas, got.action, got.pod, got.reason, got.message, tc.want.replicas, tc.want.action, tc.want.pod, tc.want.reason)
			}
			if got.current != (tc.want.reason == hicachev1alpha1.ReasonStoresCurrent) {
				t.Errorf("current = %v with reason %s", got.current, got.reason)
			}
			if !strings.Contains(got.message, tc.want.message) {
				t.Errorf("message %q, want it to say %q", got.message, tc.want.message)
			}
			if (got.lost == "") != (tc.want.lost == "") || !strings.Contains(got.lost, tc.want.lost) {
				t.Errorf("lost %q, want %q", got.lost, tc.want.lost)
			}
			rec := ""
			if got.rollout != nil {
				rec = got.rollout.Pod
			}
			if rec != tc.want.rollout {
				t.Errorf("rollout record of %q, want %q", rec, tc.want.rollout)
			}
			if got.action == storeDrain && len(got.segments) == 0 {
				t.Error("a drain of no segment")
			}
		})
	}
}

// The drain record keeps its start across reconciles (the deadline counts from it) and takes
// the job's progress.
func TestPlanStoresKeepsTheDrainsStart(t *testing.T) {
	rec := record("mc-store-1", 2*time.Minute, "1-2")
	in := storeObserved{want: 2, stsReplicas: 3, segmentsKnown: true, now: storeNow, timeout: 5 * time.Minute,
		pods:    []storePod{spod(0, old, ok, 10), spod(1, old, draining, 5), spod(2, cur, ok, 5)},
		rollout: rec, job: &mooncake.DrainJob{ID: "1-2", Succeeded: 3, MovedBytes: 300, Blocked: 2}}
	got := planStores(in)
	if got.rollout == nil || !got.rollout.StartTime.Equal(&rec.StartTime) || got.rollout.JobID != "1-2" ||
		got.rollout.MovedObjects != 3 || got.rollout.MovedBytes != 300 || got.rollout.BlockedObjects != 2 {
		t.Fatalf("rollout %+v; want the record's start and job with the job's counts", got.rollout)
	}
	if rec.MovedObjects != 0 {
		t.Error("the planner changed its input")
	}
	if !got.requeue {
		t.Error("a running drain is not polled")
	}
	// Another job's counts are not taken.
	in.job = &mooncake.DrainJob{ID: "9-9", Succeeded: 50}
	if got := planStores(in); got.rollout.MovedObjects != 0 {
		t.Errorf("took the counts of job 9-9 for the drain of job 1-2: %+v", got.rollout)
	}
	// The segments asked to drain are the pod's, in service.
	in = storeObserved{want: 1, stsReplicas: 2, segmentsKnown: true, now: storeNow, timeout: time.Minute,
		pods: []storePod{spod(0, old, ok, 1), spod(1, cur, ok, 0)}}
	in.pods[0].segments = append(in.pods[0].segments, storeSegment{name: "10.0.0.1:999", status: drained})
	if got := planStores(in); !slices.Equal(got.segments, []string{in.pods[0].segments[0].name}) {
		t.Errorf("drains %v, want only the segment in service", got.segments)
	}
}
