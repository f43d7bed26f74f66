package mooncake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
)

// Drain jobs: the master moves every object off some segments onto the others, so that the
// clients holding those segments can go without taking their objects along. Read from
// mooncake_master 0.3.13.post1 (master_admin_service.cpp, master_service.cpp):
//
//   - POST /api/v1/drain_jobs {"segments":[...],"target_segments":[...],"max_concurrency":N}
//     marks the segments DRAINING (no new object is placed there) and answers
//     {"success":true,"job_id":"A-B","status":"CREATED"}; a segment that is not OK (already
//     draining or drained) is refused with UNAVAILABLE_IN_CURRENT_STATUS.
//   - About once a second the master plans up to max_concurrency moves (each object to the
//     least used allocatable segment that does not hold it) and hands each to the client that
//     holds the source segment, which copies the object and frees its replica.
//   - An object under a read lease (read or probed within --default_kv_lease_ttl), being written
//     or hard-pinned is "blocked" and retried later; so is one no segment can take.
//   - When no object is left on a segment it becomes DRAINED and the job SUCCEEDED; a job whose
//     remaining objects all failed three times is FAILED and its segments are OK again.
//   - GET /api/v1/drain_jobs/query?job_id=ID answers the counts below. Jobs live in the
//     master's memory only: a restarted master knows none (JOB_NOT_FOUND).

// Paths of the drain job API.
const (
	PathDrainJobs     = "/api/v1/drain_jobs"
	PathDrainJobQuery = "/api/v1/drain_jobs/query"
)

// Segment statuses, as /get_segments_detail names them.
const (
	SegmentOK       = "OK"
	SegmentDraining = "DRAINING"
	SegmentDrained  = "DRAINED"
)

// Drain job statuses, as the query answers them in status_name.
const (
	DrainCreated   = "CREATED"
	DrainPlanning  = "PLANNING"
	DrainRunning   = "RUNNING"
	DrainSucceeded = "SUCCEEDED"
	DrainFailed    = "FAILED"
	DrainCanceled  = "CANCELED"
)

// mooncakeUnavailableInCurrentStatus is Mooncake's ErrorCode UNAVAILABLE_IN_CURRENT_STATUS.
const mooncakeUnavailableInCurrentStatus = -1010

// jobIDPattern is how the master writes a job's UUID: two unsigned 64-bit halves.
var jobIDPattern = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

// DrainJob is the answer of GET /api/v1/drain_jobs/query: numbers and known words only.
type DrainJob struct {
	// ID is the job's id.
	ID string
	// Status is one of the Drain* statuses ("" for a word this release does not know).
	Status string
	// Segments are the segments the job drains.
	Segments []string
	// Succeeded counts objects moved; Failed, failed attempts; Blocked, objects that cannot be
	// moved yet; Active, moves in flight.
	Succeeded, Failed, Blocked, Active int64
	// MovedBytes is the size of the objects moved.
	MovedBytes int64
}

// Finished reports whether the job has ended, one way or another.
func (j DrainJob) Finished() bool {
	return j.Status == DrainSucceeded || j.Status == DrainFailed || j.Status == DrainCanceled
}

// CreateDrainJob asks the master to move every object off the segments, at most maxConcurrency
// at a time (0: the master's default, 4), onto any other allocatable segment. It returns the
// job's id. It is not retried: the segments are DRAINING once a call succeeds, and a second one
// is refused.
func (c *Client) CreateDrainJob(ctx context.Context, segments []string, maxConcurrency int) (string, error) {
	if len(segments) == 0 {
		return "", fmt.Errorf("a drain job needs at least one segment")
	}
	req := struct {
		Segments       []string `json:"segments"`
		TargetSegments []string `json:"target_segments"`
		MaxConcurrency int      `json:"max_concurrency,omitempty"`
	}{Segments: segments, TargetSegments: []string{}, MaxConcurrency: maxConcurrency}
	payload, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	var body []byte
	u, err := c.send(ctx, http.MethodPost, PathDrainJobs, nil, payload, func(r io.Reader) error {
		var rerr error
		body, rerr = readLimited(r, maxJSONBody)
		return rerr
	})
	if err != nil {
		return "", err
	}
	id, err := ParseCreateDrainJob(body)
	return id, withURL(err, u)
}

// QueryDrainJob calls GET /api/v1/drain_jobs/query for one job.
func (c *Client) QueryDrainJob(ctx context.Context, id string) (DrainJob, error) {
	if !jobIDPattern.MatchString(id) {
		return DrainJob{}, fmt.Errorf("%q is not a drain job id of the Mooncake master", id)
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	var body []byte
	u, err := c.send(ctx, http.MethodGet, PathDrainJobQuery, url.Values{"job_id": {id}}, nil, func(r io.Reader) error {
		var rerr error
		body, rerr = readLimited(r, maxJSONBody)
		return rerr
	})
	if err != nil {
		return DrainJob{}, err
	}
	j, err := ParseDrainJob(body)
	return j, withURL(err, u)
}

// IsSegmentBusy reports whether err is the master's refusal of a drain job because a segment is
// not OK (already draining or drained).
func IsSegmentBusy(err error) bool {
	he, ok := err.(*HTTPError)
	return ok && he.Code == mooncakeUnavailableInCurrentStatus
}

// ParseCreateDrainJob decodes {"success":true,"job_id":"A-B","status":"CREATED",...}.
func ParseCreateDrainJob(body []byte) (string, error) {
	var raw struct {
		Success *bool  `json:"success"`
		JobID   string `json:"job_id"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return "", &ProtocolError{Reason: "the drain job answer is not the expected JSON object", Answer: describeAnswer(body), Err: err}
	}
	if raw.Success == nil || !*raw.Success || !jobIDPattern.MatchString(raw.JobID) {
		return "", &ProtocolError{Reason: "the drain job answer has no success and job id", Answer: describeAnswer(body)}
	}
	return raw.JobID, nil
}

// ParseDrainJob decodes the answer of GET /api/v1/drain_jobs/query.
func ParseDrainJob(body []byte) (DrainJob, error) {
	var raw struct {
		Success    *bool    `json:"success"`
		JobID      string   `json:"job_id"`
		StatusName string   `json:"status_name"`
		Segments   []string `json:"segments"`
		Succeeded  *int64   `json:"succeeded_units"`
		Failed     int64    `json:"failed_units"`
		Blocked    int64    `json:"blocked_units"`
		Active     int64    `json:"active_units"`
		MovedBytes int64    `json:"migrated_bytes"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return DrainJob{}, &ProtocolError{Reason: "the drain job query answer is not the expected JSON object", Answer: describeAnswer(body), Err: err}
	}
	if raw.Success == nil || !*raw.Success || raw.Succeeded == nil || !jobIDPattern.MatchString(raw.JobID) {
		return DrainJob{}, &ProtocolError{Reason: "the drain job query answer has no success, job id or succeeded_units", Answer: describeAnswer(body)}
	}
	if *raw.Succeeded < 0 || raw.Failed < 0 || raw.Blocked < 0 || raw.Active < 0 || raw.MovedBytes < 0 {
		return DrainJob{}, &ProtocolError{Reason: "the drain job query answer has a negative count", Answer: describeAnswer(body)}
	}
	j := DrainJob{ID: raw.JobID, Segments: raw.Segments, Succeeded: *raw.Succeeded, Failed: raw.Failed,
		Blocked: raw.Blocked, Active: raw.Active, MovedBytes: raw.MovedBytes}
	switch raw.StatusName {
	case DrainCreated, DrainPlanning, DrainRunning, DrainSucceeded, DrainFailed, DrainCanceled:
		j.Status = raw.StatusName
	}
	return j, nil
}

// send is stream with a JSON request body.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, payload []byte, read func(io.Reader) error) (string, error) {
	if payload == nil {
		return c.stream(ctx, method, path, q, read)
	}
	return c.streamBody(ctx, method, path, q, bytes.NewReader(payload), read)
}
