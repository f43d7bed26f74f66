package mooncake

import (
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

func TestParseHealth(t *testing.T) {
	tests := map[string]struct {
		body    string
		want    Health
		wantErr bool
	}{
		"captured from 0.3.13.post1": {
			body: string(readTestdata(t, "health.json")),
			want: Health{Status: "ok", Role: "leader", HAState: "serving", ServiceReady: true},
		},
		"HA leader view and unknown fields": {
			body: `{"status":"ok","role":"leader","ha_state":"serving","service_ready":true,"leader_address":"10.0.0.5:50051","view_version":7,"build":"x"}`,
			want: Health{Status: "ok", Role: "leader", HAState: "serving", ServiceReady: true, LeaderAddress: "10.0.0.5:50051", ViewVersion: ptr(uint64(7))},
		},
		"standby, not ready": {
			body: `{"status":"ok","role":"standby","ha_state":"standby","service_ready":false}`,
			want: Health{Status: "ok", Role: "standby", HAState: "standby"},
		},
		"not JSON":                {body: "404 Not Found", wantErr: true},
		"array":                   {body: `[]`, wantErr: true},
		"no status":               {body: `{"service_ready":true}`, wantErr: true},
		"no service_ready":        {body: `{"status":"ok"}`, wantErr: true},
		"service_ready is string": {body: `{"status":"ok","service_ready":"yes"}`, wantErr: true},
		"empty":                   {body: ``, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseHealth([]byte(tc.body))
			if tc.wantErr {
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("ParseHealth(%q) error = %v, want a *ProtocolError", tc.body, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseHealth: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseHealth (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthReady(t *testing.T) {
	tests := map[string]struct {
		h    Health
		want bool
	}{
		"ok and ready":     {Health{Status: "ok", ServiceReady: true}, true},
		"ok, not ready":    {Health{Status: "ok"}, false},
		"ready, bad state": {Health{Status: "degraded", ServiceReady: true}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.h.Ready(); got != tc.want {
				t.Errorf("Ready() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseMetrics(t *testing.T) {
	tests := map[string]struct {
		body    string
		want    Summary
		wantErr string
	}{
		// The captures' states are described in testdata/README.md.
		"captured, empty store": {
			body: string(readTestdata(t, "metrics_empty.txt")),
			want: Summary{},
		},
		"captured, one 16 MiB segment with 10 keys of 4 KiB": {
			body: string(readTestdata(t, "metrics_with_keys.txt")),
			want: Summary{CapacityBytes: 16 << 20, UsedBytes: 10 * 4096, KeyCount: 10, ActiveClients: 1, SegmentCount: 1},
		},
		"captured, two tenants, 3 keys of 100 bytes left in default": {
			body: string(readTestdata(t, "metrics_multitenant.txt")),
			want: Summary{
				CapacityBytes: 32 << 20, UsedBytes: 300, KeyCount: 3, ActiveClients: 2, SegmentCount: 2,
				Tenants: map[string]TenantUsage{
					"default": {EffectiveQuotaBytes: 16 << 20, ChargedBytes: 300},
					"t1":      {EffectiveQuotaBytes: 16 << 20},
				},
			},
		},
		"labels with escapes, timestamps, float values": {
			body: "# HELP x\nmaster_total_capacity_bytes 1.6e+07 1700000000000\nmaster_allocated_bytes{} 5\n" +
				"master_key_count 3\nmooncake_tenant_quota_charged_bytes{tenant_id=\"a\\\"b\\\\c\",x=\"y\"} 9\n" +
				"master_key_count{shard=\"1\"} 99\n",
			want: Summary{CapacityBytes: 16000000, UsedBytes: 5, KeyCount: 3, Tenants: map[string]TenantUsage{`a"b\c`: {ChargedBytes: 9}}},
		},
		"missing key count": {
			body:    "master_total_capacity_bytes 1\nmaster_allocated_bytes 0\n",
			wantErr: "missing master_key_count",
		},
		"not metrics at all": {
			body:    "404 Not Found",
			wantErr: "not a Prometheus sample",
		},
		"negative count": {
			body:    "master_total_capacity_bytes 1\nmaster_allocated_bytes -1\nmaster_key_count 0\n",
			wantErr: "unusable value",
		},
		"NaN count": {
			body:    "master_total_capacity_bytes NaN\nmaster_allocated_bytes 0\nmaster_key_count 0\n",
			wantErr: "unusable value",
		},
		"unterminated label set": {
			body:    "master_key_count{a=\"b\" 1\n",
			wantErr: "not a Prometheus sample",
		},
		"bad timestamp": {
			body:    "master_key_count 1 soon\n",
			wantErr: "not a Prometheus sample",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseMetrics(strings.NewReader(tc.body))
			if tc.wantErr != "" {
				var pe *ProtocolError
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseMetrics error = %v, want a *ProtocolError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMetrics: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseMetrics (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScanKeys(t *testing.T) {
	captured := readTestdata(t, "get_all_keys.txt")
	tests := map[string]struct {
		body    string
		want    []string
		wantErr string
	}{
		"captured SGLang keys": {
			body: string(captured),
			want: strings.Fields(string(captured)),
		},
		"empty list": {body: "", want: nil},
		"CRLF and blank lines, no final newline": {
			body: "a\r\n\r\n\nb\nc",
			want: []string{"a", "b", "c"},
		},
		"line longer than MaxKeyLength": {
			body:    "ok\n" + strings.Repeat("k", MaxKeyLength+1) + "\n",
			want:    []string{"ok"},
			wantErr: "longer than",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			err := ScanKeys(strings.NewReader(tc.body), func(k string) error {
				got = append(got, k)
				return nil
			})
			if tc.wantErr != "" {
				var pe *ProtocolError
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ScanKeys error = %v, want a *ProtocolError containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("ScanKeys: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		})
	}
	if n := len(strings.Fields(string(captured))); n != 10 {
		t.Errorf("testdata/get_all_keys.txt has %d keys, the README says 10", n)
	}
}

func TestScanKeysStopsAtCallbackError(t *testing.T) {
	stop := errors.New("enough")
	var seen int
	err := ScanKeys(strings.NewReader("a\nb\nc\n"), func(string) error {
		seen++
		if seen == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 2 {
		t.Fatalf("ScanKeys = %v after %d keys, want the callback's error after 2", err, seen)
	}
}

func TestParseRemoveAll(t *testing.T) {
	tests := map[string]struct {
		body    string
		want    int64
		wantErr bool
	}{
		"captured":                {body: string(readTestdata(t, "remove_all.json")), want: 10},
		"zero":                    {body: `{"success":true,"removed_count":0}`, want: 0},
		"unsuccessful":            {body: `{"success":false,"removed_count":3}`, wantErr: true},
		"no count":                {body: `{"success":true}`, wantErr: true},
		"negative":                {body: `{"success":true,"removed_count":-1}`, wantErr: true},
		"error shape":             {body: string(readTestdata(t, "tenant_quotas_disabled_409.json")), wantErr: true},
		"count is not an integer": {body: `{"success":true,"removed_count":1.5}`, wantErr: true},
		"plain text":              {body: "404 Not Found", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseRemoveAll([]byte(tc.body))
			if tc.wantErr {
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("ParseRemoveAll(%q) = %d, %v; want a *ProtocolError", tc.body, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseRemoveAll(%q) = %d, %v; want %d", tc.body, got, err, tc.want)
			}
		})
	}
}

func TestParseTenantQuotas(t *testing.T) {
	tests := map[string]struct {
		body    string
		want    []TenantQuota
		wantErr bool
	}{
		"captured, two tenants": {
			body: string(readTestdata(t, "tenant_quotas_multitenant.json")),
			want: []TenantQuota{
				{TenantID: "default", RequestedQuotaBytes: 1 << 30, EffectiveQuotaBytes: 16 << 20, ChargedBytes: 300, HasExplicitPolicy: true},
				{TenantID: "t1", RequestedQuotaBytes: 1 << 30, EffectiveQuotaBytes: 16 << 20, HasExplicitPolicy: true},
			},
		},
		"no tenants":        {body: `{"success":true,"data":[]}`, want: []TenantQuota{}},
		"captured 409 body": {body: string(readTestdata(t, "tenant_quotas_disabled_409.json")), wantErr: true},
		"entry without id":  {body: `{"success":true,"data":[{"charged_bytes":1}]}`, wantErr: true},
		"negative quota":    {body: `{"success":true,"data":[{"tenant_id":"a","charged_bytes":-1}]}`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseTenantQuotas([]byte(tc.body))
			if tc.wantErr {
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("ParseTenantQuotas = %v, %v; want a *ProtocolError", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseTenantQuotas (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSegments(t *testing.T) {
	tests := map[string]struct {
		body    string
		want    []Segment
		wantErr bool
	}{
		"captured, one client segment": {
			body: string(readTestdata(t, "segments_detail.json")),
			want: []Segment{{Name: "127.0.0.1:12584", SizeBytes: 16 << 20, UsedBytes: 40960, Protocol: "tcp", Status: "OK"}},
		},
		"no segments":        {body: `{"total_segments":0,"segments":[]}`, want: []Segment{}},
		"count disagrees":    {body: `{"total_segments":2,"segments":[{"segment_name":"a:1","size_bytes":1}]}`, wantErr: true},
		"no count":           {body: `{"segments":[]}`, wantErr: true},
		"segment lacks name": {body: `{"total_segments":1,"segments":[{"size_bytes":1}]}`, wantErr: true},
		"captured 400 body":  {body: string(readTestdata(t, "segments_status_400.json")), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSegments([]byte(tc.body))
			if tc.wantErr {
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("ParseSegments = %v, %v; want a *ProtocolError", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseSegments (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrorBody(t *testing.T) {
	type result struct {
		Code int
		OK   bool
	}
	tests := map[string]struct {
		body string
		want result
	}{
		"captured 409":        {string(readTestdata(t, "tenant_quotas_disabled_409.json")), result{-1011, true}},
		"captured 400":        {string(readTestdata(t, "segments_status_400.json")), result{-600, true}},
		"simple error shape":  {`{"success":false,"error":"bad job"}`, result{0, true}},
		"captured plain 404":  {string(readTestdata(t, "notfound_404.txt")), result{}},
		"a success":           {string(readTestdata(t, "remove_all.json")), result{}},
		"failure, no details": {`{"success":false}`, result{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got result
			got.Code, got.OK = parseErrorBody([]byte(tc.body))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseErrorBody (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tests := map[string]struct {
		err  error
		want []string
	}{
		"unreachable": {
			err:  &UnreachableError{Method: "GET", URL: "http://m:9003/health", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}},
			want: []string{"cannot reach", "http://m:9003/health", "connection refused", "--metrics_port"},
		},
		"not HTTP, quoted by net/http": {
			err:  &UnreachableError{Method: "GET", URL: "http://m:50051/health", Err: errors.New(`net/http: HTTP/1.x transport connection broken: malformed HTTP response "SECRET"`)},
			want: []string{"http://m:50051/health", "not HTTP", "--rpc_port"},
		},
		"timeout": {
			err:  &UnreachableError{Method: "GET", URL: "http://m:9003/health", Timeout: true, Err: errors.New("deadline")},
			want: []string{"timed out waiting for"},
		},
		"plain 404 from an old master": {
			err:  &HTTPError{Method: "POST", URL: "http://m:9003/api/v1/remove_all", StatusCode: 404},
			want: []string{"HTTP 404", "0.3.12.post1 or newer"},
		},
		"Mooncake error": {
			err:  &HTTPError{Method: "GET", URL: "u", StatusCode: 409, Code: -1011},
			want: []string{"HTTP 409", "Mooncake error code -1011"},
		},
		"standby": {
			err:  &HTTPError{Method: "GET", URL: "u", StatusCode: 503, Code: -1011},
			want: []string{"HA standby"},
		},
		"redirect": {
			err:  &HTTPError{Method: "GET", URL: "http://m:9003/health", StatusCode: 302},
			want: []string{"HTTP 302", "redirects are not followed"},
		},
		"protocol": {
			err:  &ProtocolError{URL: "http://m/metrics", Reason: "missing master_key_count", Answer: describeAnswer([]byte("<html>x</html>"))},
			want: []string{"http://m/metrics", "missing master_key_count", "an HTML page, 14 bytes", "admin port"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			msg := tc.err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestValidateTenantID(t *testing.T) {
	tests := map[string]struct {
		id      string
		wantErr bool
	}{
		"plain":         {"tenant-a", false},
		"all allowed":   {"A.z_0~9-", false},
		"reserved":      {"_internal", true},
		"space":         {"a b", true},
		"ampersand":     {"a&force=false", true},
		"percent":       {"a%20b", true},
		"non-ASCII":     {"mandant-ä", true},
		"too long":      {strings.Repeat("a", 257), true},
		"longest valid": {strings.Repeat("a", 256), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := validateTenantID(tc.id)
			if (err != nil) != tc.wantErr {
				t.Fatalf("validateTenantID(%q) = %v, want error %v", tc.id, err, tc.wantErr)
			}
		})
	}
}

func TestNewClient(t *testing.T) {
	hc := &http.Client{}
	tests := map[string]struct {
		url     string
		hc      *http.Client
		opts    []Option
		want    string
		wantErr bool
	}{
		"plain":            {url: "http://m:9003", hc: hc, want: "http://m:9003"},
		"trailing slash":   {url: "http://m:9003/", hc: hc, want: "http://m:9003"},
		"path prefix":      {url: "https://proxy/mooncake/", hc: hc, want: "https://proxy/mooncake"},
		"no scheme":        {url: "m:9003", hc: hc, wantErr: true},
		"query":            {url: "http://m:9003/?x=1", hc: hc, wantErr: true},
		"no http client":   {url: "http://m:9003", wantErr: true},
		"zero timeout":     {url: "http://m:9003", hc: hc, opts: []Option{WithRequestTimeout(0)}, wantErr: true},
		"not a URL at all": {url: "http://[::1", hc: hc, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := NewClient(tc.url, tc.hc, tc.opts...)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("NewClient(%q) succeeded, want an error", tc.url)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.AdminURL(); got != tc.want {
				t.Errorf("AdminURL() = %q, want %q", got, tc.want)
			}
			if got, want := c.url(PathHealth, nil).String(), tc.want+PathHealth; got != want {
				t.Errorf("health URL = %q, want %q", got, want)
			}
		})
	}
}

func TestParseDrainJobs(t *testing.T) {
	created := `{"success":true,"job_id":"4272827531265161503-12470691383768981909","status":"CREATED","error_code":0,"error_message":""}`
	if id, err := ParseCreateDrainJob([]byte(created)); err != nil || id != "4272827531265161503-12470691383768981909" {
		t.Errorf("ParseCreateDrainJob = %q, %v", id, err)
	}
	// Seen from mooncake_master 0.3.13.post1 while a drain ran.
	running := `{"success":true,"job_id":"4272827531265161503-12470691383768981909","type":0,"type_name":"DRAIN","status":2,"status_name":"RUNNING","created_at_ms_epoch":1796134295767,"last_updated_at_ms_epoch":1796134297047,"segments":["127.0.0.1:13678"],"succeeded_units":4,"failed_units":1,"blocked_units":2,"active_units":4,"migrated_bytes":1048576,"message":"Drain job running","error_code":0,"error_message":""}`
	want := DrainJob{ID: "4272827531265161503-12470691383768981909", Status: DrainRunning, Segments: []string{"127.0.0.1:13678"},
		Succeeded: 4, Failed: 1, Blocked: 2, Active: 4, MovedBytes: 1 << 20}
	got, err := ParseDrainJob([]byte(running))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseDrainJob (-want +got):\n%s", diff)
	}
	if got.Finished() {
		t.Error("a RUNNING job is not finished")
	}
	for name, tc := range map[string]struct {
		body          string
		query, create bool // which parsers must refuse it
	}{
		"not json":          {`Drain job running`, true, true},
		"failure":           {`{"success":false,"error_code":-1010,"error_message":"x"}`, true, true},
		"bad id":            {`{"success":true,"job_id":"<script>","status_name":"RUNNING","succeeded_units":0}`, true, true},
		"no counts":         {`{"success":true,"job_id":"1-2","status_name":"RUNNING"}`, true, false},
		"negative count":    {`{"success":true,"job_id":"1-2","status_name":"RUNNING","succeeded_units":-1}`, true, false},
		"create without id": {`{"success":true,"status":"CREATED"}`, true, true},
	} {
		t.Run(name, func(t *testing.T) {
			var pe *ProtocolError
			if _, err := ParseDrainJob([]byte(tc.body)); tc.query && !errors.As(err, &pe) {
				t.Errorf("ParseDrainJob: %v; want a *ProtocolError", err)
			}
			if _, err := ParseCreateDrainJob([]byte(tc.body)); tc.create && !errors.As(err, &pe) {
				t.Errorf("ParseCreateDrainJob: %v; want a *ProtocolError", err)
			}
		})
	}
	unknown, err := ParseDrainJob([]byte(`{"success":true,"job_id":"1-2","status_name":"SOMETHING_NEW","succeeded_units":0}`))
	if err != nil || unknown.Status != "" {
		t.Errorf("a status this release does not know: %+v, %v; want an empty status", unknown, err)
	}
}
