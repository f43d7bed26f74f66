package hicachedeployment

import (
	"fmt"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

// Before a new layout writes a namespace a flush emptied on masters with HA, the operator asks
// the masters which leader view serves: the backend's status.viewVersion is only as recent as
// the backend's last probe (one per --backend-poll-interval), and a failover between that probe
// and the new layout's start would go unseen by it (right after the operator restarts, or by
// timing). A view asked of the masters at that moment holds across a restart of the operator:
// it depends on nothing the operator remembers. A probe newer than the flush's completion would
// not do: the masters can fail over after any probe.

// layoutStartVerdict is what the check before a new layout starts found.
type layoutStartVerdict int

const (
	// layoutStart: the leader of the flush's view serves: the removal is older than the
	// durability window under a leader that still serves, and the new layout starts.
	layoutStart layoutStartVerdict = iota
	// layoutRecount: the masters serve a newer view than the flush ran under: they failed over
	// since, the removal may be undone, and the namespace is counted and flushed again through
	// the new leader (View).
	layoutRecount
	// layoutWaitLeader: no serving leader answered, or it answered a view the flush did not
	// run under and that is not newer: look again before starting.
	layoutWaitLeader
)

func (v layoutStartVerdict) String() string {
	return [...]string{"Start", "Recount", "WaitLeader"}[v]
}

// layoutStartObservation is what planLayoutStart decides from.
type layoutStartObservation struct {
	// FlushView is the view the completed flush ran and confirmed its removal under (0: masters
	// without HA).
	FlushView int64
	// AdminURL is the backend's admin URL, as its status names it: where the flush runs.
	AdminURL string
	// Leader is what the master there says of itself now; nil when it did not answer (AskErr).
	Leader *storeuse.MasterHealth
	AskErr error
}

// layoutStartPlan is the check's verdict: the view to flush again under (layoutRecount), or why
// the new layout waits (layoutWaitLeader).
type layoutStartPlan struct {
	Verdict layoutStartVerdict
	View    int64
	Why     string
}

// planLayoutStart decides whether a new layout may start on a namespace that a completed flush
// emptied. Without HA there is no view to check. A newer view decides at once, even from a
// standby (it knows the view the masters elected): the namespace is flushed again. Otherwise the
// new layout starts only once the leader of the flush's own view answers that it serves.
func planLayoutStart(o layoutStartObservation) layoutStartPlan {
	if o.FlushView == 0 {
		return layoutStartPlan{Verdict: layoutStart}
	}
	if o.Leader == nil && o.AdminURL == "" {
		return layoutStartPlan{Verdict: layoutWaitLeader, Why: "the CacheBackend's status.endpoints.adminURL is empty: no master to ask"}
	}
	if o.Leader == nil {
		why := fmt.Sprintf("the master at %s (the CacheBackend's status.endpoints.adminURL) does not answer", o.AdminURL)
		if o.AskErr != nil {
			why += fmt.Sprintf(" (%v)", o.AskErr)
		}
		return layoutStartPlan{Verdict: layoutWaitLeader, Why: why}
	}
	l := o.Leader
	switch {
	case l.ViewVersion > o.FlushView:
		return layoutStartPlan{Verdict: layoutRecount, View: l.ViewVersion}
	case l.Role != hicachev1alpha1.MasterLeader:
		return layoutStartPlan{Verdict: layoutWaitLeader, Why: fmt.Sprintf(
			"the master at %s is %s, not the serving leader (the masters are electing one, or the backend's status has not followed the new leader yet)", o.AdminURL, l.Role)}
	case l.ViewVersion == 0:
		// The masters run without HA now: they restarted, and started empty.
		return layoutStartPlan{Verdict: layoutStart}
	case l.ViewVersion < o.FlushView:
		return layoutStartPlan{Verdict: layoutWaitLeader, Why: fmt.Sprintf(
			"the leader at %s serves view %d, older than the view %d the flush ran under (the backend's status names a master that is about to step down)", o.AdminURL, l.ViewVersion, o.FlushView)}
	}
	return layoutStartPlan{Verdict: layoutStart}
}
