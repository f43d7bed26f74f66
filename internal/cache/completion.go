package cache

import (
	"fmt"
	"slices"
	"strings"
)

// WriteResult is the outcome of one page write (one L3 object put, or the
// exists-check that made the put unnecessary) done by a rank during one
// backup operation.
type WriteResult struct {
	Pool PoolName `json:"pool"`
	Key  string   `json:"key,omitempty"`
	OK   bool     `json:"ok"`
	// Error describes a failed write, in the backend's words.
	Error string `json:"error,omitempty"`
}

// BackupOutcome is a rank's verdict on one backup operation.
type BackupOutcome struct {
	// CompletedTokens is the number the rank reports (see CompletedTokens).
	CompletedTokens int `json:"completedTokens"`
	// Vacuous is true when the rank had no duties: it succeeded by having
	// nothing to write. A vacuous rank is healthy.
	Vacuous bool `json:"vacuous,omitempty"`
	// Failed lists the writes that failed.
	Failed []WriteResult `json:"failed,omitempty"`
	// MissingPools are pools the rank must write but reported no result for.
	MissingPools []PoolName `json:"missingPools,omitempty"`
	// Reason explains the verdict.
	Reason string `json:"reason"`
}

// Healthy reports whether the rank did all it had to do.
func (o BackupOutcome) Healthy() bool { return len(o.Failed) == 0 && len(o.MissingPools) == 0 }

// CompletedTokens is the completion rule of a backup operation: the number
// of tokens a rank reports as backed up, given its duties and the result of
// every page write it did for an operation of operationTokens tokens.
//
//   - A rank with no duties (a follower of a rank-replicated model with no
//     rank-sharded sidecars) has vacuously succeeded: it reports the whole
//     operation. Reporting 0 here would make a healthy rank look failed.
//   - A rank with duties reports the whole operation only if every one of its
//     writes succeeded and every pool it must write has a result; otherwise 0.
//
// What the number is for: accounting for the writes a rank owns — the health
// of a rank's L3 writes and the backed-up-tokens metric (an alert on a rank's
// backup failures must look at ranks with duties, never at vacuous ones).
//
// What it is not: a gate on restore. Restoring from L3 is a separate
// prefetch that queries the keys themselves on every rank (hits are
// MIN-reduced across ranks); a follower finds rank 0's replicated objects
// whatever it reported for its backups. A wrong restore comes from stale
// objects under an unchanged key, which only namespacing or a flush prevents.
func CompletedTokens(d RankDuty, operationTokens int, results []WriteResult) int {
	return EvaluateBackup(d, operationTokens, results).CompletedTokens
}

// EvaluateBackup applies the completion rule (see CompletedTokens) and says why.
func EvaluateBackup(d RankDuty, operationTokens int, results []WriteResult) BackupOutcome {
	if operationTokens < 0 {
		operationTokens = 0
	}
	var failed []WriteResult
	reported := map[PoolName]bool{}
	for _, r := range results {
		reported[r.Pool] = true
		if !r.OK {
			failed = append(failed, r)
		}
	}
	if !d.HasDuties() && len(failed) == 0 {
		return BackupOutcome{
			CompletedTokens: operationTokens,
			Vacuous:         true,
			Reason:          "no duties for this operation: vacuously complete",
		}
	}
	var missing []PoolName
	for _, w := range d.Writes {
		if !reported[w.Pool] {
			missing = append(missing, w.Pool)
		}
	}
	if len(failed) == 0 && len(missing) == 0 {
		return BackupOutcome{
			CompletedTokens: operationTokens,
			Reason:          fmt.Sprintf("all %d writes succeeded", len(results)),
		}
	}
	var why []string
	if len(failed) > 0 {
		pools := make([]PoolName, 0, len(failed))
		for _, f := range failed {
			if !slices.Contains(pools, f.Pool) {
				pools = append(pools, f.Pool)
			}
		}
		why = append(why, fmt.Sprintf("%d of %d writes failed (%s)", len(failed), len(results), joinPools(pools)))
	}
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("no write reported for %s", joinPools(missing)))
	}
	return BackupOutcome{
		CompletedTokens: 0,
		Failed:          failed,
		MissingPools:    missing,
		Reason:          strings.Join(why, "; ") + ": reporting 0 tokens",
	}
}
