package mooncake

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addCapturedSeeds adds every captured answer in testdata as a seed: each parser also meets the
// other endpoints' shapes.
func addCapturedSeeds(f *testing.F) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range paths {
		if strings.HasSuffix(p, ".md") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "{}", "null", "[]", `{"success":false}`, "\n\n", "a{b=\"c\"} 1 2 3"} {
		f.Add([]byte(s))
	}
}

func requireProtocolError(t *testing.T, err error, body []byte) {
	t.Helper()
	var pe *ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *ProtocolError", err, err)
	}
	if pe.Error() == "" {
		t.Fatal("empty error message")
	}
	requireNoAnswerText(t, err, body)
}

// requireNoAnswerText fails when an error message quotes the answer. Only answers of 32 bytes or
// more are checked: a shorter one may be a word of the message itself.
func requireNoAnswerText(t *testing.T, err error, body []byte) {
	t.Helper()
	if b := bytes.TrimSpace(body); len(b) >= 32 && strings.Contains(err.Error(), string(b)) {
		t.Fatalf("the message %q quotes the answer", err.Error())
	}
}

func FuzzParseHealth(f *testing.F) {
	addCapturedSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		h, err := ParseHealth(body)
		if err != nil {
			requireProtocolError(t, err, body)
			if h != (Health{}) {
				t.Fatalf("ParseHealth returned %+v with an error", h)
			}
		}
	})
}

func FuzzParseMetrics(f *testing.F) {
	addCapturedSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseMetrics(bytes.NewReader(body))
		if err != nil {
			requireProtocolError(t, err, body)
			return
		}
		for name, v := range map[string]int64{
			"capacity": s.CapacityBytes, "used": s.UsedBytes, "keys": s.KeyCount,
			"soft-pinned": s.SoftPinnedKeyCount, "clients": s.ActiveClients, "evicted": s.EvictedKeyCount,
		} {
			if v < 0 {
				t.Fatalf("%s = %d, negative", name, v)
			}
		}
		for tenant, u := range s.Tenants {
			if u.ChargedBytes < 0 || u.EffectiveQuotaBytes < 0 {
				t.Fatalf("tenant %q usage %+v is negative", tenant, u)
			}
		}
	})
}

func FuzzScanKeys(f *testing.F) {
	addCapturedSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var keys, total int
		rest := body
		err := ScanKeys(bytes.NewReader(body), func(k string) error {
			keys++
			total += len(k)
			if k == "" || strings.Contains(k, "\n") {
				t.Fatalf("ScanKeys yielded %q", k)
			}
			// Keys come out in input order.
			i := bytes.Index(rest, []byte(k))
			if i < 0 {
				t.Fatalf("ScanKeys yielded %q, which is not next in the input", k)
			}
			rest = rest[i+len(k):]
			return nil
		})
		if total > len(body) {
			t.Fatalf("ScanKeys yielded %d bytes of keys from %d bytes", total, len(body))
		}
		if err != nil {
			requireProtocolError(t, err, body)
		}
		if lines := bytes.Count(body, []byte("\n")) + 1; keys > lines {
			t.Fatalf("ScanKeys yielded %d keys from %d lines", keys, lines)
		}
	})
}

func FuzzParseRemoveAll(f *testing.F) {
	addCapturedSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := ParseRemoveAll(body)
		if err != nil {
			requireProtocolError(t, err, body)
			if n != 0 {
				t.Fatalf("ParseRemoveAll returned %d with an error", n)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseRemoveAll returned %d", n)
		}
	})
}

func FuzzParseTenantQuotas(f *testing.F) {
	addCapturedSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		q, err := ParseTenantQuotas(body)
		if err != nil {
			requireProtocolError(t, err, body)
			return
		}
		for i, e := range q {
			if e.TenantID == "" {
				t.Fatalf("entry %d has no tenant id", i)
			}
		}
	})
}

func FuzzParseErrorBody(f *testing.F) {
	addCapturedSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		code, ok := parseErrorBody(body)
		if !ok && code != 0 {
			t.Fatalf("parseErrorBody = %d, false", code)
		}
		he := &HTTPError{Method: "GET", URL: "http://m/x", StatusCode: 500, Code: code}
		if he.Error() == "" {
			t.Fatal("empty message")
		}
		requireNoAnswerText(t, he, body)
	})
}

func FuzzParseSegments(f *testing.F) {
	addCapturedSeeds(f)
	f.Add([]byte(`{"total_segments":1,"segments":[{"segment_name":"h:1","size_bytes":16777216}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseSegments(body)
		if err != nil {
			requireProtocolError(t, err, body)
			if s != nil {
				t.Fatalf("ParseSegments returned %+v with an error", s)
			}
			return
		}
		if s == nil {
			t.Fatal("ParseSegments returned nil and no error")
		}
		for i, sg := range s {
			if sg.Name == "" || sg.SizeBytes < 0 {
				t.Fatalf("segment %d is %+v", i, sg)
			}
		}
	})
}

func FuzzParseCreateDrainJob(f *testing.F) {
	addCapturedSeeds(f)
	f.Add([]byte(`{"success":true,"job_id":"1-2","status":"CREATED"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		id, err := ParseCreateDrainJob(body)
		if err != nil {
			requireProtocolError(t, err, body)
			if id != "" {
				t.Fatalf("ParseCreateDrainJob returned %q with an error", id)
			}
			return
		}
		if !jobIDPattern.MatchString(id) {
			t.Fatalf("ParseCreateDrainJob returned the job id %q", id)
		}
	})
}

func FuzzParseDrainJob(f *testing.F) {
	addCapturedSeeds(f)
	f.Add([]byte(`{"success":true,"job_id":"1-2","status_name":"RUNNING","segments":["h:1"],"succeeded_units":3,"failed_units":0,"blocked_units":0,"active_units":1,"migrated_bytes":4096}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := ParseDrainJob(body)
		if err != nil {
			requireProtocolError(t, err, body)
			if j.ID != "" || j.Segments != nil {
				t.Fatalf("ParseDrainJob returned %+v with an error", j)
			}
			return
		}
		if !jobIDPattern.MatchString(j.ID) {
			t.Fatalf("ParseDrainJob returned the job id %q", j.ID)
		}
		switch j.Status {
		case "", DrainCreated, DrainPlanning, DrainRunning, DrainSucceeded, DrainFailed, DrainCanceled:
		default:
			t.Fatalf("ParseDrainJob returned the status %q, not a known one", j.Status)
		}
		if j.Succeeded < 0 || j.Failed < 0 || j.Blocked < 0 || j.Active < 0 || j.MovedBytes < 0 {
			t.Fatalf("ParseDrainJob returned a negative count: %+v", j)
		}
	})
}
