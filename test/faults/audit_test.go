package faults

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// auditEvent is the part of an API server audit event (Metadata level) the tests read.
type auditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int32 `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
}

// object is "resource/name", with "/subresource" for a subresource.
func (e auditEvent) object() string {
	if e.ObjectRef == nil {
		return ""
	}
	o := e.ObjectRef.Resource + "/" + e.ObjectRef.Name
	if e.ObjectRef.Subresource != "" {
		o += "/" + e.ObjectRef.Subresource
	}
	return o
}

func (e auditEvent) code() int32 {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// write tells whether the request could change an object.
func (e auditEvent) write() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// created tells whether the request made a new object: a create, or a server-side apply (a
// patch) that answered 201.
func (e auditEvent) created() bool {
	return (e.Verb == "create" || e.Verb == "patch") && e.code() == 201 && e.ObjectRef != nil && e.ObjectRef.Subresource == ""
}

// auditMark is the audit log's length now: auditSince(mark) reads what comes after.
func auditMark(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(cluster.AuditLogPath())
	if err != nil {
		t.Fatalf("the API server's audit log: %v", err)
	}
	return fi.Size()
}

// auditSince reads the audit events of namespace ns (every namespace: "") logged after mark.
func auditSince(t *testing.T, mark int64, ns string) []auditEvent {
	t.Helper()
	f, err := os.Open(cluster.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(mark, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	var events []auditEvent
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && bytes.HasSuffix(line, []byte("\n")) {
			var e auditEvent
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				t.Fatalf("an audit event: %v: %s", jerr, line)
			}
			if ns == "" || e.ObjectRef != nil && e.ObjectRef.Namespace == ns {
				events = append(events, e)
			}
		}
		if err == io.EOF {
			return events
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// byUsers keeps the events of these users.
func byUsers(events []auditEvent, users ...string) []auditEvent {
	var out []auditEvent
	for _, e := range events {
		if slices.Contains(users, e.User.Username) {
			out = append(out, e)
		}
	}
	return out
}

// creations counts, per object, the requests that created it; Events and Leases, which are
// records rather than work, are left out.
func creations(events []auditEvent) map[string]int {
	m := map[string]int{}
	for _, e := range events {
		if e.created() && e.ObjectRef.Resource != "events" && e.ObjectRef.Resource != "leases" {
			m[e.object()]++
		}
	}
	return m
}

// createdTwice lists the objects created more than once, with how often.
func createdTwice(events []auditEvent) []string {
	var out []string
	for o, n := range creations(events) {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", o, n))
		}
	}
	slices.Sort(out)
	return out
}

// deletions counts, per object, the requests that deleted it.
func deletions(events []auditEvent) map[string]int {
	m := map[string]int{}
	for _, e := range events {
		if e.Verb == "delete" && e.code() < 300 {
			m[e.object()]++
		}
	}
	return m
}

// uncertainDeletions counts, by object, the deletes of events the API server answered with a
// 5xx code: they may or may not have taken effect.
func uncertainDeletions(events []auditEvent) map[string]int {
	m := map[string]int{}
	for _, e := range events {
		if e.Verb == "delete" && e.code() >= 500 {
			m[e.object()]++
		}
	}
	return m
}

// writesOf counts the write requests of events, and lists them by verb and object.
func writesOf(events []auditEvent) (int, string) {
	n, byObject := 0, map[string]int{}
	for _, e := range events {
		if e.write() {
			n++
			byObject[e.Verb+" "+e.object()]++
		}
	}
	var parts []string
	for k, v := range byObject {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, v))
	}
	slices.Sort(parts)
	return n, strings.Join(parts, ", ")
}

// firstWrite is the time of the first write request in events (zero when none).
func firstWrite(events []auditEvent) time.Time {
	for _, e := range events {
		if e.write() && e.ObjectRef != nil && e.ObjectRef.Resource != "leases" && e.ObjectRef.Resource != "events" {
			return e.StageTimestamp.Time
		}
	}
	return time.Time{}
}

// requestsTo lists the requests to one object ("resource/name"): time, user, verb and answer.
func requestsTo(events []auditEvent, object string) string {
	var parts []string
	for _, e := range events {
		if e.object() == object {
			parts = append(parts, fmt.Sprintf("%s %s %s %d", e.StageTimestamp.Format("15:04:05.000"), e.User.Username, e.Verb, e.code()))
		}
	}
	return strings.Join(parts, "; ")
}
