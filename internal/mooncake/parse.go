package mooncake

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// MaxKeyLength bounds one line of /get_all_keys. SGLang keys are about 100 bytes.
const MaxKeyLength = 1 << 20

// maxMetricsLine bounds one line of /metrics.
const maxMetricsLine = 1 << 20

// Health is the answer of GET /health.
type Health struct {
	// Status is "ok" whenever the admin server answers.
	Status string `json:"status"`
	// Role is "leader", "standby", ... (HA role; "leader" without HA).
	Role string `json:"role"`
	// HAState is "serving" when the master serves requests.
	HAState string `json:"ha_state"`
	// ServiceReady is true when the metadata service accepts clients.
	ServiceReady bool `json:"service_ready"`
	// LeaderAddress is the leader's address under HA, empty otherwise.
	LeaderAddress string `json:"leader_address"`
	// ViewVersion is the HA view version, nil without HA.
	ViewVersion *uint64 `json:"view_version"`
}

// Ready reports whether the master answers and its service accepts clients.
func (h Health) Ready() bool { return h.Status == "ok" && h.ServiceReady }

// HealthState is what a health answer means, as one of a few known words. The answer's own
// strings (status, role, ha_state, leader_address) are the server's text and are not shown.
type HealthState string

// Health states.
const (
	// HealthServing: the master answers and its service accepts clients.
	HealthServing HealthState = "Serving"
	// HealthStandby: an HA standby, which answers but does not serve.
	HealthStandby HealthState = "Standby"
	// HealthNotServing: the master answers but its service is not ready (starting, or in a
	// state this release does not know).
	HealthNotServing HealthState = "NotServing"
)

// State classifies the answer.
func (h Health) State() HealthState {
	switch {
	case h.Ready():
		return HealthServing
	case h.Role == "standby" || h.HAState == "standby":
		return HealthStandby
	}
	return HealthNotServing
}

// Summary is what the master's Prometheus /metrics says about the store as a whole.
type Summary struct {
	// CapacityBytes is the memory all mounted segments offer (master_total_capacity_bytes).
	CapacityBytes int64
	// UsedBytes is the memory allocated to objects (master_allocated_bytes).
	UsedBytes int64
	// KeyCount is the number of objects of every tenant (master_key_count).
	KeyCount int64
	// SoftPinnedKeyCount is the number of soft-pinned objects (master_soft_pin_key_count).
	SoftPinnedKeyCount int64
	// ActiveClients is the number of clients with a live heartbeat (master_active_clients).
	ActiveClients int64
	// EvictedKeyCount is the number of objects evicted since start (master_evicted_key_count).
	EvictedKeyCount int64
	// SegmentCount is the number of mounted memory segments (the distinct segment labels of
	// segment_total_capacity_bytes).
	SegmentCount int64
	// Tenants holds per-tenant quota usage; it is empty when multi-tenancy is off.
	Tenants map[string]TenantUsage
}

// TenantUsage is one tenant's quota and charge, from the mooncake_tenant_quota_* metrics.
type TenantUsage struct {
	// EffectiveQuotaBytes is the quota the master enforces (mooncake_tenant_quota_effective_bytes).
	EffectiveQuotaBytes int64
	// ChargedBytes is the memory charged to the tenant (mooncake_tenant_quota_charged_bytes).
	ChargedBytes int64
}

// TenantQuota is one entry of GET /api/v1/tenant_quotas.
type TenantQuota struct {
	TenantID            string `json:"tenant_id"`
	RequestedQuotaBytes uint64 `json:"requested_quota_bytes"`
	EffectiveQuotaBytes uint64 `json:"effective_quota_bytes"`
	ChargedBytes        uint64 `json:"charged_bytes"`
	AdmissionClosed     bool   `json:"admission_closed"`
	OverQuota           bool   `json:"over_quota"`
	HasExplicitPolicy   bool   `json:"has_explicit_policy"`
}

// ParseHealth decodes a /health body. Unknown fields are ignored; a body without "status" or
// "service_ready" is not a Mooncake health answer.
func ParseHealth(body []byte) (Health, error) {
	var raw struct {
		Status        *string `json:"status"`
		Role          string  `json:"role"`
		HAState       string  `json:"ha_state"`
		ServiceReady  *bool   `json:"service_ready"`
		LeaderAddress *string `json:"leader_address"`
		ViewVersion   *uint64 `json:"view_version"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return Health{}, &ProtocolError{Reason: "the health answer is not the expected JSON object", Answer: describeAnswer(body), Err: err}
	}
	if raw.Status == nil || raw.ServiceReady == nil {
		return Health{}, &ProtocolError{Reason: `the health answer has no "status" or no "service_ready" field`, Answer: describeAnswer(body)}
	}
	h := Health{Status: *raw.Status, Role: raw.Role, HAState: raw.HAState, ServiceReady: *raw.ServiceReady, ViewVersion: raw.ViewVersion}
	if raw.LeaderAddress != nil {
		h.LeaderAddress = *raw.LeaderAddress
	}
	return h, nil
}

// ParseRemoveAll decodes the answer of POST /api/v1/remove_all: {"success":true,"removed_count":N}.
func ParseRemoveAll(body []byte) (int64, error) {
	var raw struct {
		Success      *bool  `json:"success"`
		RemovedCount *int64 `json:"removed_count"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return 0, &ProtocolError{Reason: "the remove_all answer is not the expected JSON object", Answer: describeAnswer(body), Err: err}
	}
	switch {
	case raw.Success == nil || raw.RemovedCount == nil:
		return 0, &ProtocolError{Reason: `the remove_all answer has no "success" or no "removed_count" field`, Answer: describeAnswer(body)}
	case !*raw.Success:
		return 0, &ProtocolError{Reason: "the master reported remove_all as unsuccessful", Answer: describeAnswer(body)}
	case *raw.RemovedCount < 0:
		return 0, &ProtocolError{Reason: "the master reported a negative removed_count", Answer: describeAnswer(body)}
	}
	return *raw.RemovedCount, nil
}

// ParseTenantQuotas decodes the answer of GET /api/v1/tenant_quotas (without tenant_id).
func ParseTenantQuotas(body []byte) ([]TenantQuota, error) {
	var raw struct {
		Success *bool         `json:"success"`
		Data    []TenantQuota `json:"data"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, &ProtocolError{Reason: "the tenant quota answer is not the expected JSON object", Answer: describeAnswer(body), Err: err}
	}
	if raw.Success == nil || !*raw.Success {
		return nil, &ProtocolError{Reason: `the tenant quota answer lacks "success":true`, Answer: describeAnswer(body)}
	}
	for i, q := range raw.Data {
		if q.TenantID == "" {
			return nil, &ProtocolError{Reason: fmt.Sprintf("tenant quota entry %d has no tenant_id", i), Answer: describeAnswer(body)}
		}
	}
	if raw.Data == nil {
		raw.Data = []TenantQuota{}
	}
	return raw.Data, nil
}

// Segment is one memory segment a client has mounted, from GET /get_segments_detail.
type Segment struct {
	// Name is the segment's name: the client's local hostname and port.
	Name string `json:"segment_name"`
	// SizeBytes is the memory the client lends to the store.
	SizeBytes int64 `json:"size_bytes"`
	// UsedBytes is the memory allocated to objects in it.
	UsedBytes int64 `json:"allocator_used_bytes"`
	// Protocol is the transfer protocol of the client (tcp, rdma).
	Protocol string `json:"protocol"`
	// Status is "OK" for a segment in service.
	Status string `json:"status"`
}

// ParseSegments decodes the answer of GET /get_segments_detail:
// {"total_segments":N,"segments":[{"segment_name":...,"size_bytes":...},...]}.
func ParseSegments(body []byte) ([]Segment, error) {
	var raw struct {
		Total    *int      `json:"total_segments"`
		Segments []Segment `json:"segments"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, &ProtocolError{Reason: "the segment listing is not the expected JSON object", Answer: describeAnswer(body), Err: err}
	}
	if raw.Total == nil {
		return nil, &ProtocolError{Reason: `the segment listing has no "total_segments" field`, Answer: describeAnswer(body)}
	}
	if *raw.Total != len(raw.Segments) {
		return nil, &ProtocolError{Reason: fmt.Sprintf("the segment listing counts %d segments but lists %d", *raw.Total, len(raw.Segments)), Answer: describeAnswer(body)}
	}
	for i, sg := range raw.Segments {
		if sg.Name == "" || sg.SizeBytes < 0 {
			return nil, &ProtocolError{Reason: fmt.Sprintf("segment %d has no name or a negative size", i), Answer: describeAnswer(body)}
		}
	}
	if raw.Segments == nil {
		raw.Segments = []Segment{}
	}
	return raw.Segments, nil
}

// parseErrorBody extracts the error code of Mooncake's JSON error shape, {"success":false,
// "error_code":N,"error_message":"..."}; ok is also true for the simpler {"success":false,
// "error":"..."} (code 0). The messages are not kept: they are the server's text.
func parseErrorBody(body []byte) (code int, ok bool) {
	var raw struct {
		Success   *bool   `json:"success"`
		ErrorCode *int    `json:"error_code"`
		Error     *string `json:"error"`
	}
	if json.Unmarshal(body, &raw) != nil || raw.Success == nil || *raw.Success {
		return 0, false
	}
	switch {
	case raw.ErrorCode != nil:
		return *raw.ErrorCode, true
	case raw.Error != nil:
		return 0, true
	}
	return 0, false
}

// ScanKeys reads a /get_all_keys body (one key per line) and calls fn for each non-empty line,
// holding one line in memory at a time. It stops at the first error of fn and returns it.
func ScanKeys(r io.Reader, fn func(key string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxKeyLength+1)
	for sc.Scan() {
		line := sc.Bytes() // without its "\n" or "\r\n"
		if len(line) == 0 {
			continue
		}
		if err := fn(string(line)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &ProtocolError{Reason: fmt.Sprintf("a line of the key list is longer than %d bytes", MaxKeyLength)}
		}
		return err
	}
	return nil
}

// metric names read by ParseMetrics.
const (
	metricCapacity       = "master_total_capacity_bytes"
	metricAllocated      = "master_allocated_bytes"
	metricKeyCount       = "master_key_count"
	metricSoftPinned     = "master_soft_pin_key_count"
	metricActiveClients  = "master_active_clients"
	metricEvictedKeys    = "master_evicted_key_count"
	metricTenantQuota    = "mooncake_tenant_quota_effective_bytes"
	metricTenantCharged  = "mooncake_tenant_quota_charged_bytes"
	metricSegmentCap     = "segment_total_capacity_bytes"
	labelTenantID        = "tenant_id"
	labelSegment         = "segment"
	errNotMooncakeMetric = "the metrics do not look like a Mooncake master's"
)

// ParseMetrics reads Prometheus text exposition from a master's /metrics, line by line, and
// returns the store summary. The capacity, allocated-bytes and key-count metrics are required;
// other metrics, comments and unknown series are ignored.
func ParseMetrics(r io.Reader) (Summary, error) {
	var s Summary
	targets := map[string]*int64{
		metricCapacity:      &s.CapacityBytes,
		metricAllocated:     &s.UsedBytes,
		metricKeyCount:      &s.KeyCount,
		metricSoftPinned:    &s.SoftPinnedKeyCount,
		metricActiveClients: &s.ActiveClients,
		metricEvictedKeys:   &s.EvictedKeyCount,
	}
	seen := map[string]bool{}
	segments := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMetricsLine)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return Summary{}, &ProtocolError{Reason: fmt.Sprintf("line %d of the metrics is not a Prometheus sample", lineNo), Err: err}
		}
		switch name {
		case metricSegmentCap:
			if seg, ok := labels[labelSegment]; ok {
				segments[seg] = true
			}
			continue
		case metricTenantQuota, metricTenantCharged:
			tenant, ok := labels[labelTenantID]
			if !ok {
				continue // an aggregate series without a tenant label
			}
			n, err := toCount(value)
			if err != nil {
				return Summary{}, &ProtocolError{Reason: fmt.Sprintf("metric %s on line %d has an unusable value", name, lineNo), Err: err}
			}
			if s.Tenants == nil {
				s.Tenants = map[string]TenantUsage{}
			}
			u := s.Tenants[tenant]
			if name == metricTenantQuota {
				u.EffectiveQuotaBytes = n
			} else {
				u.ChargedBytes = n
			}
			s.Tenants[tenant] = u
			continue
		}
		dst, ok := targets[name]
		if !ok || len(labels) != 0 {
			continue
		}
		n, err := toCount(value)
		if err != nil {
			return Summary{}, &ProtocolError{Reason: fmt.Sprintf("metric %s on line %d has an unusable value", name, lineNo), Err: err}
		}
		*dst = n
		seen[name] = true
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Summary{}, &ProtocolError{Reason: fmt.Sprintf("a line of the metrics is longer than %d bytes", maxMetricsLine)}
		}
		return Summary{}, err
	}
	var missing []string
	for _, m := range []string{metricCapacity, metricAllocated, metricKeyCount} {
		if !seen[m] {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		return Summary{}, &ProtocolError{Reason: fmt.Sprintf("%s: missing %s", errNotMooncakeMetric, strings.Join(missing, ", "))}
	}
	s.SegmentCount = int64(len(segments))
	return s, nil
}

// parseSample splits one Prometheus text sample: name{labels} value [timestamp].
func parseSample(line string) (name string, labels map[string]string, value float64, err error) {
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return "", nil, 0, errors.New("no value after the metric name")
	}
	name = line[:i]
	if !validMetricName(name) {
		return "", nil, 0, errors.New("invalid metric name")
	}
	rest := line[i:]
	if rest[0] == '{' {
		labels, rest, err = parseLabels(rest[1:])
		if err != nil {
			return "", nil, 0, err
		}
	}
	fields := strings.Fields(rest)
	if len(fields) != 1 && len(fields) != 2 {
		return "", nil, 0, errors.New("expected a value and an optional timestamp")
	}
	value, err = strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, errors.New("invalid value")
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return "", nil, 0, errors.New("invalid timestamp")
		}
	}
	return name, labels, value, nil
}

func validMetricName(s string) bool {
	for i, c := range s {
		switch {
		case c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// parseLabels reads `name="value",...}` and returns the labels and what follows the brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return nil, "", errors.New("unterminated label set")
		}
		if s[0] == '}' {
			return labels, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, "", errors.New("label without a value")
		}
		lname := strings.TrimSpace(s[:eq])
		if !validMetricName(lname) || strings.ContainsRune(lname, ':') {
			return nil, "", errors.New("invalid label name")
		}
		s = strings.TrimLeft(s[eq+1:], " \t")
		if s == "" || s[0] != '"' {
			return nil, "", errors.New("label value is not quoted")
		}
		var val bytes.Buffer
		j := 1
		for ; j < len(s); j++ {
			c := s[j]
			if c == '"' {
				break
			}
			if c == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					val.WriteByte('\n')
				case '\\', '"':
					val.WriteByte(s[j])
				default:
					val.WriteByte('\\')
					val.WriteByte(s[j])
				}
				continue
			}
			val.WriteByte(c)
		}
		if j >= len(s) {
			return nil, "", errors.New("unterminated label value")
		}
		labels[lname] = val.String()
		s = strings.TrimLeft(s[j+1:], " \t")
		if s != "" && s[0] == ',' {
			s = s[1:]
		}
	}
}

// toCount converts a sample value to a non-negative integer count of bytes or objects.
func toCount(v float64) (int64, error) {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return 0, fmt.Errorf("%v is not a count", v)
	case v < 0:
		return 0, fmt.Errorf("%v is negative", v)
	case v >= math.MaxInt64:
		return 0, fmt.Errorf("%v overflows a 64-bit count", v)
	}
	return int64(v), nil
}
