package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds and fails tb (Fatalf, naming what it
// waited for) when bound passes or the test's context ends first. The poll
// starts at 1 ms and backs off to 50 ms, so a quick condition is seen at
// once and a slow one does not spin. Keep bounds generous: the machine may
// be loaded.
func WaitFor(tb testing.TB, bound time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(bound)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited %v for %s", bound, what)
		}
		select {
		case <-tb.Context().Done():
			tb.Fatalf("the test ended while waiting for %s", what)
		case <-time.After(pause):
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}
