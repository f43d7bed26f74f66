package e2e

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/cacheflush"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/mooncake/flushjob"
)

// flushRuns records every namespace flush the operators of this process execute, around the
// real runners: which flush, when, for how long. Tests can also route a namespace's flushes to
// Jobs, and hook in before or after the real run.
var flushRuns = &runLog{jobs: map[string]bool{}}

// flushRun is one execution of the flush script.
type flushRun struct {
	Flush      types.UID
	Name       string
	Backend    string // namespace/backend
	Attempt    int32
	Start, End time.Time
}

type runLog struct {
	mu   sync.Mutex
	runs []flushRun
	jobs map[string]bool // Kubernetes namespaces whose flushes run as Jobs
	// before and after run around the real script (nil: nothing); after may return an error in
	// place of the script's outcome. after runs after each check on a Job too.
	before func(req storeuse.NamespaceFlushRequest)
	after  func(ctx context.Context, req storeuse.NamespaceFlushRequest) error
}

// useJobs runs the namespace flushes of CacheFlushes in ns as Jobs, until the test ends.
func (l *runLog) useJobs(ns string) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs[ns] = true
	return func() { l.mu.Lock(); delete(l.jobs, ns); l.mu.Unlock() }
}

// hook sets the functions run before and after the real script; the returned func clears them.
func (l *runLog) hook(before func(storeuse.NamespaceFlushRequest), after func(context.Context, storeuse.NamespaceFlushRequest) error) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.before, l.after = before, after
	return func() { l.mu.Lock(); l.before, l.after = nil, nil; l.mu.Unlock() }
}

// of is the runs of one flush.
func (l *runLog) of(uid types.UID) []flushRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []flushRun
	for _, r := range l.runs {
		if r.Flush == uid {
			out = append(out, r)
		}
	}
	return out
}

func (l *runLog) runner(local cacheflush.LocalFlusher, job cacheflush.JobFlusher) storeuse.NamespaceFlusher {
	return recordingFlusher{log: l, local: local, job: job}
}

type recordingFlusher struct {
	log   *runLog
	local cacheflush.LocalFlusher
	job   cacheflush.JobFlusher
}

func (f recordingFlusher) Method(cf *hicachev1alpha1.CacheFlush) string {
	f.log.mu.Lock()
	defer f.log.mu.Unlock()
	if f.log.jobs[cf.Namespace] {
		return hicachev1alpha1.MethodJob
	}
	return hicachev1alpha1.MethodLocal
}

func (f recordingFlusher) FlushNamespace(ctx context.Context, req storeuse.NamespaceFlushRequest) (flushjob.Result, bool, error) {
	f.log.mu.Lock()
	before, after := f.log.before, f.log.after
	f.log.mu.Unlock()
	if f.Method(req.Flush) == hicachev1alpha1.MethodJob {
		res, done, err := f.job.FlushNamespace(ctx, req)
		if after != nil {
			if herr := after(ctx, req); herr != nil {
				return flushjob.Result{}, true, herr
			}
		}
		return res, done, err
	}
	if before != nil {
		before(req)
	}
	run := flushRun{Flush: req.Flush.UID, Name: req.Flush.Name, Backend: req.Flush.Namespace + "/" + req.Backend.Name, Attempt: req.Attempt, Start: time.Now()}
	res, done, err := f.local.FlushNamespace(ctx, req)
	run.End = time.Now()
	f.log.mu.Lock()
	f.log.runs = append(f.log.runs, run)
	f.log.mu.Unlock()
	if after != nil {
		if herr := after(ctx, req); herr != nil {
			return flushjob.Result{}, true, herr
		}
	}
	return res, done, err
}
