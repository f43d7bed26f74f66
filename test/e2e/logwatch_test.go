package e2e

import (
	"bytes"
	"sync"
)

// logRecorder is a sink of the operator's log that keeps what is logged while a test records.
type logRecorder struct {
	mu        sync.Mutex
	recording int
	buf       bytes.Buffer
}

// operatorLog sees every line the operator in this process logs, at every level.
var operatorLog = &logRecorder{}

func (w *logRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.recording > 0 {
		w.buf.Write(p)
	}
	return len(p), nil
}

// record keeps the log from now on; stop returns what was logged in between.
func (w *logRecorder) record() (stop func() []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recording++
	start := w.buf.Len()
	return func() []byte {
		w.mu.Lock()
		defer w.mu.Unlock()
		out := bytes.Clone(w.buf.Bytes()[start:])
		if w.recording--; w.recording == 0 {
			w.buf.Reset()
		}
		return out
	}
}
