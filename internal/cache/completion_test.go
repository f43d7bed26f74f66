package cache

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// resultsFor simulates the page writes a rank does for an operation of
// pages pages: one result per key suffix and page, all ok unless failPool
// names a pool whose writes fail.
func resultsFor(d RankDuty, pages int, failPool PoolName) []WriteResult {
	var out []WriteResult
	for _, w := range d.Writes {
		for pg := 0; pg < pages; pg++ {
			for _, s := range w.KeySuffixes {
				ok := w.Pool != failPool
				r := WriteResult{Pool: w.Pool, Key: fmt.Sprintf("page%d%s", pg, s), OK: ok}
				if !ok {
					r.Error = "put failed: no space"
				}
				out = append(out, r)
			}
		}
	}
	return out
}

func TestCompletedTokensAcrossTopologies(t *testing.T) {
	const tokens = 4 * 64
	layouts := map[string]struct{ tp, pp int }{}
	for _, tp := range []int{1, 8, 16} {
		for _, pp := range []int{1, 2} {
			layouts[fmt.Sprintf("TP%d PP%d", tp, pp)] = struct{ tp, pp int }{tp, pp}
		}
	}
	type scenario struct {
		topo     func(tp, pp int) *topoBuilder
		failPool PoolName
		// want returns the expected count for a rank.
		want func(d RankDuty) int
	}
	scenarios := map[string]scenario{
		"pure MLA, no sidecars: every rank reports the whole operation": {
			topo: func(tp, pp int) *topoBuilder { return mk("DeepSeekV4").TP(tp).PP(pp).Draft(DraftDSPARK) },
			want: func(RankDuty) int { return tokens },
		},
		"MLA with MHA draft on Mooncake, draft writes fail: ranks writing draft report 0": {
			topo:     func(tp, pp int) *topoBuilder { return mk("DeepSeekV32").TP(tp).PP(pp).Draft(DraftEAGLE3) },
			failPool: PoolDraft,
			want:     func(RankDuty) int { return 0 }, // every rank writes its draft shard
		},
		"MLA with MHA draft on Mooncake, all writes succeed: every rank reports in full": {
			topo: func(tp, pp int) *topoBuilder { return mk("DeepSeekV32").TP(tp).PP(pp).Draft(DraftEAGLE3) },
			want: func(RankDuty) int { return tokens },
		},
		"hybrid MLA, kv write fails on TP0: only TP0 reports 0": {
			topo:     func(tp, pp int) *topoBuilder { return mk("KimiK3").TP(tp).PP(pp) },
			failPool: PoolKV,
			want: func(d RankDuty) int {
				if d.TPRank == 0 {
					return 0
				}
				return tokens
			},
		},
		"hybrid MLA, mamba writes fail: every rank reports 0": {
			topo:     func(tp, pp int) *topoBuilder { return mk("KimiK3").TP(tp).PP(pp) },
			failPool: PoolMamba,
			want:     func(RankDuty) int { return 0 },
		},
	}
	for sname, sc := range scenarios {
		for lname, l := range layouts {
			t.Run(sname+"/"+lname, func(t *testing.T) {
				p := mustPlan(t, sc.topo(l.tp, l.pp).Obj(t))
				want, got := map[int]int{}, map[int]int{}
				for _, d := range p.Ranks() {
					want[d.GlobalRank] = sc.want(d)
					got[d.GlobalRank] = CompletedTokens(d, tokens, resultsFor(d, 4, sc.failPool))
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("completed tokens by rank (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestCompletedTokensFollowerCases(t *testing.T) {
	const tokens = 128
	mla := mustPlan(t, mk("DeepSeekV3").TP(8).Obj(t))
	sidecar := mustPlan(t, mk("DeepSeekV3").TP(8).Draft(DraftEAGLE3).Obj(t))
	pureFollower, sidecarFollower := mla.Ranks()[5], sidecar.Ranks()[5]

	cases := map[string]struct {
		duty    RankDuty
		results []WriteResult
		want    BackupOutcome
	}{
		"pure-MLA follower with no sidecars reports the whole operation": {
			duty: pureFollower,
			want: BackupOutcome{CompletedTokens: tokens, Vacuous: true, Reason: "no duties for this operation: vacuously complete"},
		},
		"follower whose sidecar writes fail reports 0": {
			duty: sidecarFollower,
			results: []WriteResult{
				{Pool: PoolDraft, Key: "h_5_draft_k", OK: true},
				{Pool: PoolDraft, Key: "h_5_draft_v", OK: false, Error: "timeout"},
			},
			want: BackupOutcome{
				Failed: []WriteResult{{Pool: PoolDraft, Key: "h_5_draft_v", OK: false, Error: "timeout"}},
				Reason: "1 of 2 writes failed (draft): reporting 0 tokens",
			},
		},
		"follower whose sidecar writes succeed reports the whole operation": {
			duty: sidecarFollower,
			results: []WriteResult{
				{Pool: PoolDraft, Key: "h_5_draft_k", OK: true},
				{Pool: PoolDraft, Key: "h_5_draft_v", OK: true},
			},
			want: BackupOutcome{CompletedTokens: tokens, Reason: "all 2 writes succeeded"},
		},
		"follower with a duty but no reported write is not complete": {
			duty: sidecarFollower,
			want: BackupOutcome{MissingPools: []PoolName{PoolDraft}, Reason: "no write reported for draft: reporting 0 tokens"},
		},
		"a rank without duties that reports a failed write is not vacuous": {
			duty:    pureFollower,
			results: []WriteResult{{Pool: PoolKV, OK: false, Error: "refused"}},
			want: BackupOutcome{
				Failed: []WriteResult{{Pool: PoolKV, OK: false, Error: "refused"}},
				Reason: "1 of 1 writes failed (kv): reporting 0 tokens",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := EvaluateBackup(tc.duty, tokens, tc.results)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("EvaluateBackup (-want +got):\n%s", diff)
			}
			if got.Healthy() != (got.CompletedTokens == tokens) {
				t.Errorf("Healthy() = %v but CompletedTokens = %d", got.Healthy(), got.CompletedTokens)
			}
			if n := CompletedTokens(tc.duty, tokens, tc.results); n != tc.want.CompletedTokens {
				t.Errorf("CompletedTokens = %d, want %d", n, tc.want.CompletedTokens)
			}
		})
	}
}

func TestCompletedTokensNegativeOperation(t *testing.T) {
	if got := CompletedTokens(RankDuty{}, -5, nil); got != 0 {
		t.Errorf("CompletedTokens with a negative operation size = %d, want 0", got)
	}
}
