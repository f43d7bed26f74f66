package hicachedeployment

import (
	"errors"
	"strings"
	"testing"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
)

func TestPlanLayoutStart(t *testing.T) {
	const url = "http://127.0.0.2:9003"
	leader := func(view int64) *storeuse.MasterHealth {
		return &storeuse.MasterHealth{Role: hicachev1alpha1.MasterLeader, ViewVersion: view}
	}
	cases := map[string]struct {
		obs  layoutStartObservation
		want layoutStartVerdict
		view int64
		why  string // a word the reason of a wait must hold
	}{
		"masters without HA: nothing to check": {
			obs: layoutStartObservation{AdminURL: url}, want: layoutStart,
		},
		"the leader of the flush's view serves: start": {
			obs: layoutStartObservation{FlushView: 2, AdminURL: url, Leader: leader(2)}, want: layoutStart,
		},
		"a newer leader serves where the status points (the status lags its failover): flush again under it": {
			obs: layoutStartObservation{FlushView: 2, AdminURL: url, Leader: leader(3)}, want: layoutRecount, view: 3,
		},
		"a standby that knows a newer view: the masters failed over, flush again": {
			obs:  layoutStartObservation{FlushView: 2, AdminURL: url, Leader: &storeuse.MasterHealth{Role: hicachev1alpha1.MasterStandby, ViewVersion: 4}},
			want: layoutRecount, view: 4,
		},
		"the master the status names is dead: wait, never start on the status's view": {
			obs:  layoutStartObservation{FlushView: 2, AdminURL: url, AskErr: errors.New("connection refused")},
			want: layoutWaitLeader, why: "connection refused",
		},
		"no admin URL at all": {
			obs: layoutStartObservation{FlushView: 2}, want: layoutWaitLeader, why: "is empty",
		},
		"a standby of the same view (an election under way): wait": {
			obs:  layoutStartObservation{FlushView: 2, AdminURL: url, Leader: &storeuse.MasterHealth{Role: hicachev1alpha1.MasterStandby, ViewVersion: 2}},
			want: layoutWaitLeader, why: "Standby",
		},
		"a master warming up after its election, at the flush's view: wait": {
			obs:  layoutStartObservation{FlushView: 2, AdminURL: url, Leader: &storeuse.MasterHealth{Role: hicachev1alpha1.MasterStarting, ViewVersion: 2}},
			want: layoutWaitLeader, why: "Starting",
		},
		"a leader of an older view, about to step down: wait": {
			obs: layoutStartObservation{FlushView: 5, AdminURL: url, Leader: leader(4)}, want: layoutWaitLeader, why: "older",
		},
		"the masters run without HA now (restarted empty): start": {
			obs: layoutStartObservation{FlushView: 2, AdminURL: url, Leader: leader(0)}, want: layoutStart,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := planLayoutStart(tc.obs)
			if got.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s (%+v)", got.Verdict, tc.want, got)
			}
			if tc.want == layoutRecount && got.View != tc.view {
				t.Errorf("flush again under view %d, want %d", got.View, tc.view)
			}
			if tc.want == layoutWaitLeader && (!strings.Contains(got.Why, tc.why) || !strings.Contains(got.Why, "adminURL") && tc.obs.Leader == nil) {
				t.Errorf("wait because %q, want a reason naming %q (and the spec field, when no master answers)", got.Why, tc.why)
			}
		})
	}
}
