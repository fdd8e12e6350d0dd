package storetest

import (
	"sync"
	"testing"
)

// The write barrier's cases (lockstore.WriteBarrier): the list and the
// runner, BarrierFailures, which runs them against a deliberately broken
// store with a recorder in place of *testing.T and reports which cases
// caught it: a case that cannot fail proves nothing. The cases are in
// barrier_admit.go, barrier_race.go and barrier_store.go.

type barrierCase struct {
	name string
	fn   func(t *caseT)
}

func (s *suite) barrierCaseList() []barrierCase {
	return []barrierCase{
		{"admit_current", s.barrierAdmitCurrent},
		{"same_fence", s.barrierSameFence},
		{"newer_blocked", s.barrierNewerBlocked},
		{"expired_entry", s.barrierExpiredEntry},
		{"policy", s.barrierPolicy},
		{"stale_unknown", s.barrierStaleUnknown},
		{"finish_absent", s.barrierFinishAbsent},
		{"race_handover", s.barrierRaceHandover},
		{"acquire_keeps_entries", s.barrierAcquireKeepsEntries},
		{"untouched", s.barrierUntouched},
		{"survives_reopen", s.barrierSurvivesReopen},
		{"sweep", s.barrierSweep},
		{"sweep_counts", s.barrierSweepCounts},
		{"validation", s.barrierValidation},
		{"bounded", s.barrierBounded},
	}
}

// barrierCases adapts the barrier cases to the suite's conformance run.
func (s *suite) barrierCases() []testCase {
	var out []testCase
	for _, c := range s.barrierCaseList() {
		out = append(out, testCase{name: "barrier_" + c.name, fn: c.fn})
	}
	return out
}

// BarrierFailures runs every write-barrier case against the stores h opens,
// with a recorder in place of *testing.T, and returns the cases that failed
// (by name, as they appear under "conformance/barrier_<name>") with what
// they reported. A backend's test uses it to prove the cases catch a
// deliberately broken store. The barrier cases count fences one by one, so
// they open their stores with backend.FloorOff; h.Open gets t; the cases
// run in parallel, like in Run. A case the backend does not support
// (ErrNotSupported) is logged and not reported.
func BarrierFailures(t *testing.T, h Harness) map[string][]string {
	t.Helper()
	s := newSuite(t, h)
	var (
		mu     sync.Mutex
		failed = map[string][]string{}
		wg     sync.WaitGroup
	)
	for _, c := range s.barrierCaseList() {
		wg.Go(func() {
			r := newRecorder(t, "barrier_"+c.name)
			r.run(func() { c.fn(s.newCaseT(r, t)) })
			if r.skipped != "" {
				t.Logf("barrier_%s skipped: %s", c.name, r.skipped)
			}
			if msgs := r.messages(); len(msgs) > 0 {
				mu.Lock()
				failed[c.name] = msgs
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}
