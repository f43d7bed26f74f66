package mooncake_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/mooncake"
)

// A drain job moves every object off one client's segment onto another's: the segment ends
// DRAINED and empty, the job SUCCEEDED with one move per object that was there, and every key
// is still in the store. A second drain of the same segment is refused as busy.
func TestDrainJobMovesASegmentsObjects(t *testing.T) {
	m, c := startMaster(t)
	const size = 64 << 10
	first := sglangKeys("hc-abc", "m", 8) // 24 objects, all in the first client's segment
	m.PutKeys(t, first, size)
	segs, err := c.Segments(ctx(t))
	if err != nil || len(segs) != 1 {
		t.Fatalf("Segments = %v, %v; want the first client's one", segs, err)
	}
	source := segs[0].Name
	m.PutKeys(t, sglangKeys("hc-abd", "m", 2), size) // a second segment, with room
	before := listKeys(t, c)
	segs, err = c.Segments(ctx(t))
	if err != nil || len(segs) != 2 {
		t.Fatalf("Segments = %v, %v; want two", segs, err)
	}
	var onSource int64
	for _, s := range segs {
		if s.Name == source {
			onSource = s.UsedBytes / size
		}
	}
	if onSource < int64(len(first)) {
		t.Fatalf("%d objects on the first segment, want at least %d", onSource, len(first))
	}

	id, err := c.CreateDrainJob(ctx(t), []string{source}, 16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateDrainJob(ctx(t), []string{source}, 16); !mooncake.IsSegmentBusy(err) {
		t.Errorf("a second drain of a draining segment: %v, want the master's UNAVAILABLE_IN_CURRENT_STATUS", err)
	}
	var job mooncake.DrainJob
	deadline := time.Now().Add(90 * time.Second)
	for {
		job, err = c.QueryDrainJob(ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if job.Finished() || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if job.Status != mooncake.DrainSucceeded || job.Succeeded != onSource || job.MovedBytes != onSource*size || !slices.Equal(job.Segments, []string{source}) {
		t.Fatalf("drain job %+v; want SUCCEEDED with %d objects (%d bytes) moved off %s", job, onSource, onSource*size, source)
	}
	segs, err = c.Segments(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s.Name == source && (s.Status != mooncake.SegmentDrained || s.UsedBytes != 0) {
			t.Errorf("drained segment %+v; want DRAINED and empty", s)
		}
	}
	if after := listKeys(t, c); !slices.Equal(before, after) {
		t.Errorf("%d keys after the drain, %d before", len(after), len(before))
	}

	if _, err := c.QueryDrainJob(ctx(t), "12-34"); err == nil {
		t.Error("querying a job the master does not know succeeded")
	} else if he := (*mooncake.HTTPError)(nil); !errors.As(err, &he) {
		t.Errorf("querying an unknown job: %v, want an *HTTPError", err)
	}
}
