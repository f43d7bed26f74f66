// Package testutil holds what the test suites against the local control plane share.
package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every 200 ms until it holds, and fails the test with what and the last
// reason cond gave when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last seen: %s", what, timeout, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
