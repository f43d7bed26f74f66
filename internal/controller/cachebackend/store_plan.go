package cachebackend

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
)

// The rollout rules of the managed store pods live here, in one pure function: planStores reads
// what was observed of the store pods and of the master's segments and returns what to do;
// executeStorePlan does it, and decides nothing.
//
// A store pod holds a segment of the store's memory, and the objects in it go with the pod. So
// no store pod is deleted while it holds objects the master could move elsewhere:
//   - the store pods are a StatefulSet whose pods are replaced only when the operator deletes
//     them (OnDelete), one at a time;
//   - while any pod below spec replicas runs an older template, the StatefulSet runs one more
//     pod (a surge, in the new template), so that the store keeps its capacity and a drained
//     pod's objects have somewhere to go, even with one store pod;
//   - the pod to go next is asked to drain: the master moves its objects to the other segments
//     (a drain job); once its segment is DRAINED it is deleted (or, above the replicas wanted,
//     dropped by lowering the StatefulSet's replicas) and nothing it held is lost;
//   - a drain that has not finished after drainTimeoutSeconds is given up: the pod goes anyway
//     and what it still holds is lost (reported);
//   - nothing is drained while a store pod is missing, deleting or not Ready: one pod at a time;
//     an old pod that is not Ready and holds nothing is replaced at once;
//   - a pod with no other segment in service to take its objects, or whose segment the master
//     does not list, is replaced without a drain (reported).

// storeSegment is one segment the master lists for a store pod.
type storeSegment struct {
	name   string
	status string // mooncake.SegmentOK, SegmentDraining, SegmentDrained
	used   int64
}

// storePod is one observed store pod.
type storePod struct {
	name     string
	ordinal  int
	updated  bool // it runs the StatefulSet's current template
	ready    bool
	deleting bool
	segments []storeSegment
}

// storeObserved is what planStores decides from.
type storeObserved struct {
	// want is spec.mooncake.managed.store.replicas.
	want int
	// stsReplicas is the StatefulSet's spec.replicas now (-1 when it does not exist yet).
	stsReplicas int
	// pods are the store pods that exist.
	pods []storePod
	// segmentsKnown: the master answered its segment listing; without it nothing is drained or
	// removed.
	segmentsKnown bool
	// otherSegments counts the segments in service (OK) that belong to no store pod: serving
	// ranks that lend memory. They can take a drained pod's objects too.
	otherSegments int
	// rollout is the drain recorded in status, if any; job is its drain job as the master
	// reports it, when known.
	rollout *hicachev1alpha1.StoreRollout
	job     *mooncake.DrainJob
	now     time.Time
	timeout time.Duration
}

// storeActionKind is what the executor does to one pod ("" for nothing this time).
type storeActionKind string

const (
	// storeDrain asks the master to drain the pod's segments.
	storeDrain storeActionKind = "Drain"
	// storeDelete deletes the pod (the StatefulSet recreates it in the current template).
	storeDelete storeActionKind = "Delete"
)

// storePlan is what to do.
type storePlan struct {
	// replicas is the StatefulSet's spec.replicas to apply.
	replicas int
	action   storeActionKind
	pod      string
	// segments to drain (storeDrain).
	segments []string
	// lost is set when a pod is deleted while it may still hold objects: why, for an Event.
	lost string
	// rollout is the drain record to keep in status (nil: none).
	rollout *hicachev1alpha1.StoreRollout
	// requeue: poll again soon (a drain runs).
	requeue bool
	// current, reason and message are the StoresCurrent condition.
	current bool
	reason  string
	message string
}

const (
	rolloutRoll      = "Roll"
	rolloutScaleDown = "ScaleDown"
)

// planStores decides the next step of the store pods' rollout.
func planStores(in storeObserved) storePlan {
	pods := slices.Clone(in.pods)
	slices.SortFunc(pods, func(a, b storePod) int { return cmp.Compare(a.ordinal, b.ordinal) })
	byName := map[string]*storePod{}
	for i := range pods {
		byName[pods[i].name] = &pods[i]
	}

	rolling := false
	for _, p := range pods {
		if p.ordinal < in.want && !p.updated {
			rolling = true
		}
	}
	base := in.want
	if rolling {
		base = in.want + 1
	}

	// The StatefulSet keeps every pod above base that still holds objects: scale down removes
	// the highest ordinals, so it is lowered only past pods that are drained.
	replicas := base
	if !in.segmentsKnown {
		replicas = max(base, in.stsReplicas)
	} else {
		for i := len(pods) - 1; i >= 0; i-- {
			p := pods[i]
			if p.ordinal < base {
				break
			}
			if !holdsNothing(p) && !timedOut(in, p.name) {
				replicas = p.ordinal + 1
				break
			}
		}
	}
	plan := storePlan{replicas: replicas}
	excess := func(p storePod) bool { return p.ordinal >= base }
	reason := func(p storePod) string {
		if excess(p) {
			return rolloutScaleDown
		}
		return rolloutRoll
	}

	if !in.segmentsKnown {
		// The backend's own poll looks again; the master's segments are asked once it answers.
		return plan.notCurrent(hicachev1alpha1.ReasonStoreWaiting, "The Mooncake master does not list its segments: no store pod is drained or replaced until it does")
	}

	// The drain under way, recorded or seen in the master, goes on first.
	var draining *storePod
	if in.rollout != nil {
		draining = byName[in.rollout.Pod]
	}
	// A pod is in a drain when the master drains it or has drained it: it holds nothing and
	// lends nothing until it is replaced.
	drained := func(p storePod) bool { return len(p.segments) > 0 && holdsNothing(p) }
	inDrain := func(p storePod) bool { return segmentsIn(p, mooncake.SegmentDraining) > 0 || drained(p) }
	if draining != nil && !excess(*draining) && draining.updated && !inDrain(*draining) {
		draining = nil // the record names a pod that was replaced since
	}
	if draining == nil {
		for i := range pods {
			if inDrain(pods[i]) {
				draining = &pods[i]
				break
			}
		}
	}
	if draining != nil && !draining.deleting {
		return plan.continueDrain(in, *draining, reason(*draining))
	}

	// One pod at a time: wait for every pod to exist and be Ready, except that an old pod that
	// is not Ready and holds nothing is replaced at once.
	for _, p := range pods {
		if p.deleting {
			return plan.waiting(fmt.Sprintf("Waiting for store pod %s to finish terminating", p.name))
		}
	}
	for _, p := range pods {
		if !p.ready && !p.updated && !excess(p) && holdsNothing(p) {
			plan.action, plan.pod = storeDelete, p.name
			return plan.notCurrent(hicachev1alpha1.ReasonStoreReplacing, fmt.Sprintf("Replacing store pod %s, which runs an older template, is not Ready and holds no objects", p.name))
		}
	}
	have := map[int]bool{}
	for _, p := range pods {
		have[p.ordinal] = true
		if p.ordinal < replicas && !p.ready {
			return plan.waiting(fmt.Sprintf("Waiting for store pod %s to become Ready", p.name))
		}
	}
	for o := range min(replicas, max(in.stsReplicas, 0)) {
		if !have[o] {
			return plan.waiting(fmt.Sprintf("Waiting for store pod %d of %d to be created", o, replicas))
		}
	}
	if in.stsReplicas != replicas {
		return plan.waiting(fmt.Sprintf("Scaling the store pods to %d", replicas))
	}

	// The next pod to go: above the replicas wanted first (from the top), then the old ones, the
	// emptiest first.
	var next *storePod
	for i := len(pods) - 1; i >= 0; i-- {
		if excess(pods[i]) && !holdsNothing(pods[i]) {
			next = &pods[i]
			break
		}
	}
	if next == nil {
		for i := range pods {
			p := &pods[i]
			if excess(*p) || p.updated {
				continue
			}
			if next == nil || used(*p) < used(*next) || (used(*p) == used(*next) && p.ordinal > next.ordinal) {
				next = p
			}
		}
	}
	if next == nil {
		plan.current, plan.reason = true, hicachev1alpha1.ReasonStoresCurrent
		plan.message = fmt.Sprintf("All %d store pods run the current template", in.want)
		return plan
	}
	return plan.startDrain(in, *next, reason(*next), pods)
}

// continueDrain follows the drain of p.
func (plan storePlan) continueDrain(in storeObserved, p storePod, why string) storePlan {
	rec := in.rollout
	if rec == nil || rec.Pod != p.name {
		rec = &hicachev1alpha1.StoreRollout{Pod: p.name, Reason: why, StartTime: metav1.NewTime(in.now)}
	} else {
		rec = rec.DeepCopy()
	}
	if j := in.job; j != nil && j.ID == rec.JobID {
		rec.MovedObjects, rec.MovedBytes, rec.BlockedObjects = j.Succeeded, j.MovedBytes, j.Blocked
	}
	plan.rollout = rec
	left := segmentsIn(p, mooncake.SegmentOK) + segmentsIn(p, mooncake.SegmentDraining)
	switch {
	case left == 0:
		// Drained: delete it, or let the lower replicas drop it.
		plan.rollout = nil
		if p.ordinal >= plan.replicas {
			return plan.notCurrent(hicachev1alpha1.ReasonStoreReplacing, fmt.Sprintf("Removing store pod %s, drained: %d objects moved to other segments", p.name, rec.MovedObjects))
		}
		plan.action, plan.pod = storeDelete, p.name
		return plan.notCurrent(hicachev1alpha1.ReasonStoreReplacing, fmt.Sprintf("Replacing store pod %s, drained: %d objects moved to other segments", p.name, rec.MovedObjects))
	case timedOut(in, p.name):
		plan.rollout = nil
		// The master reports no usage of a draining segment: its drain job's counts say what
		// was moved and what could not be.
		plan.lost = fmt.Sprintf("its drain did not finish within %s: %d objects moved, %d could not be (read without a pause of the master's lease TTL, being written, or with no segment to take them)",
			in.timeout, rec.MovedObjects, rec.BlockedObjects)
		if p.ordinal >= plan.replicas {
			return plan.notCurrent(hicachev1alpha1.ReasonStoreReplacing, fmt.Sprintf("Removing store pod %s: %s", p.name, plan.lost))
		}
		plan.action, plan.pod = storeDelete, p.name
		return plan.notCurrent(hicachev1alpha1.ReasonStoreReplacing, fmt.Sprintf("Replacing store pod %s: %s", p.name, plan.lost))
	case segmentsIn(p, mooncake.SegmentDraining) == 0:
		// The master gave the drain up (a failed job puts its segments back in service, a
		// restarted master knows no job): ask again until the deadline.
		plan.action, plan.pod, plan.segments = storeDrain, p.name, segmentNames(p, mooncake.SegmentOK)
		rec.JobID = ""
		plan.requeue = true
		return plan.notCurrent(hicachev1alpha1.ReasonStoreDraining, fmt.Sprintf("Draining store pod %s again: the master stopped its earlier drain", p.name))
	}
	plan.requeue = true
	return plan.notCurrent(hicachev1alpha1.ReasonStoreDraining, fmt.Sprintf("Draining store pod %s (%s): %d objects (%s) moved so far, %d blocked", p.name, strings.ToLower(why), rec.MovedObjects, byteString(rec.MovedBytes), rec.BlockedObjects))
}

// startDrain asks for p's drain, or replaces it at once when nothing could take its objects.
func (plan storePlan) startDrain(in storeObserved, p storePod, why string, pods []storePod) storePlan {
	if len(p.segments) == 0 {
		if p.ordinal >= plan.replicas {
			return plan.notCurrent(hicachev1alpha1.ReasonStoreReplacing, fmt.Sprintf("Removing store pod %s", p.name))
		}
		plan.action, plan.pod = storeDelete, p.name
		plan.lost = "the master lists no segment of it, so it cannot be drained"
		return plan.notCurrent(hicachev1alpha1.ReasonStoreReplacing, fmt.Sprintf("Replacing store pod %s: %s", p.name, plan.lost))
	}
	targets := in.otherSegments
	for _, o := range pods {
		if o.name != p.name {
			targets += segmentsIn(o, mooncake.SegmentOK)
		}
	}
	if targets == 0 {
		plan.lost = "no other segment is in service to take its objects"
		if why == rolloutScaleDown {
			plan.replicas = p.ordinal // the pod is the highest that holds objects: drop it
		} else {
			plan.action, plan.pod = storeDelete, p.name
		}
		return plan.notCurrent(hicachev1alpha1.ReasonStoreReplacing, fmt.Sprintf("Replacing store pod %s without a drain: %s", p.name, plan.lost))
	}
	plan.action, plan.pod, plan.segments = storeDrain, p.name, segmentNames(p, mooncake.SegmentOK)
	plan.rollout = &hicachev1alpha1.StoreRollout{Pod: p.name, Reason: why, StartTime: metav1.NewTime(in.now)}
	plan.requeue = true
	return plan.notCurrent(hicachev1alpha1.ReasonStoreDraining, fmt.Sprintf("Draining store pod %s (%s): the master moves its objects to the other segments", p.name, strings.ToLower(why)))
}

func (plan storePlan) waiting(msg string) storePlan {
	return plan.notCurrent(hicachev1alpha1.ReasonStoreWaiting, msg)
}

func (plan storePlan) notCurrent(reason, msg string) storePlan {
	plan.current, plan.reason, plan.message = false, reason, msg
	return plan
}

// timedOut reports whether the recorded drain of the named pod is past its deadline.
func timedOut(in storeObserved, pod string) bool {
	r := in.rollout
	return r != nil && r.Pod == pod && in.now.Sub(r.StartTime.Time) >= in.timeout
}

// holdsNothing: the master lists no segment of the pod that could hold an object.
func holdsNothing(p storePod) bool {
	return segmentsIn(p, mooncake.SegmentOK)+segmentsIn(p, mooncake.SegmentDraining) == 0
}

func segmentsIn(p storePod, status string) int {
	n := 0
	for _, s := range p.segments {
		if s.status == status {
			n++
		}
	}
	return n
}

func segmentNames(p storePod, status string) []string {
	var out []string
	for _, s := range p.segments {
		if s.status == status {
			out = append(out, s.name)
		}
	}
	return out
}

func used(p storePod) int64 {
	var n int64
	for _, s := range p.segments {
		n += s.used
	}
	return n
}

func byteString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
