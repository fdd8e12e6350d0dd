package storetest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// The write barrier's cases (lockstore.WriteBarrier). They take a TB rather
// than *testing.T so that BarrierFailures can run them against a
// deliberately broken store with a recorder and report which cases caught
// it: a case that cannot fail proves nothing.

// TB is the part of *testing.T the write-barrier cases use. Fatalf must
// stop the calling goroutine (as testing.T's does); cases call it only from
// the goroutine that runs them.
type TB interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Context() context.Context
	Cleanup(func())
}

// barrierEnv is what a barrier case gets besides its TB: the suite (for
// margins and scale) and a way to open a store over a namespace that is
// closed when the case ends.
type barrierEnv struct {
	s    *suite
	open func(ns string) lockstore.Store
}

type barrierCase struct {
	name string
	fn   func(t TB, e *barrierEnv)
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
		{"validation", s.barrierValidation},
		{"bounded", s.barrierBounded},
	}
}

// barrierCases adapts the barrier cases to the suite's conformance run.
func (s *suite) barrierCases() []testCase {
	var out []testCase
	for _, c := range s.barrierCaseList() {
		out = append(out, testCase{name: "barrier_" + c.name, fn: func(t *testing.T) {
			c.fn(t, &barrierEnv{s: s, open: func(ns string) lockstore.Store { return s.openConsecutive(t, ns) }})
		}})
	}
	return out
}

// BarrierFailures runs every write-barrier case against the stores h opens,
// with a recorder in place of *testing.T, and returns the cases that failed
// (by name, as they appear under "conformance/barrier_<name>") with what
// they reported. A backend's test uses it to prove the cases catch a
// deliberately broken store. The barrier cases count fences one by one, so
// they open their stores with h.OpenFloorOff (the only Open they use, and
// required); it and h.SetFence get t; the cases run in parallel, like in
// Run.
func BarrierFailures(t *testing.T, h Harness) map[string][]string {
	t.Helper()
	if h.OpenFloorOff == nil {
		t.Fatal("storetest: BarrierFailures needs Harness.OpenFloorOff")
	}
	s := &suite{h: h, scale: h.ConcurrencyScale, margin: (baseClockMargin + h.ExtraClockMargin).Milliseconds()}
	if s.scale <= 0 || s.scale > 1 {
		s.scale = 1
	}
	var (
		mu     sync.Mutex
		failed = map[string][]string{}
		wg     sync.WaitGroup
	)
	for _, c := range s.barrierCaseList() {
		wg.Go(func() {
			r := newRecorder(t, "barrier_"+c.name)
			r.run(func() {
				c.fn(r, &barrierEnv{s: s, open: func(ns string) lockstore.Store {
					st := h.OpenFloorOff(t, ns)
					r.Cleanup(func() { _ = st.Close() })
					return st
				}})
			})
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

// recorder is a TB that records failures instead of reporting them.
type recorder struct {
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	msgs     []string
	cleanups []func()
}

func newRecorder(t *testing.T, name string) *recorder {
	c, cancel := context.WithCancel(t.Context())
	return &recorder{name: t.Name() + "/" + name, ctx: c, cancel: cancel}
}

func (r *recorder) Helper()                         {}
func (r *recorder) Name() string                    { return r.name }
func (r *recorder) Logf(format string, args ...any) {}
func (r *recorder) Context() context.Context        { return r.ctx }

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// Fatalf records and ends the case's goroutine, as testing.T's does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// run runs fn on its own goroutine (so Fatalf can end it), records a panic
// as a failure, then runs the cleanups last-first.
func (r *recorder) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				r.Errorf("panic: %v", p)
			}
		}()
		fn()
	}()
	<-done
	r.cancel()
	r.mu.Lock()
	cs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for _, f := range slices.Backward(cs) {
		f()
	}
}

func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// ---- helpers over TB ----

// fresh opens a store over a new namespace.
func (e *barrierEnv) fresh(t TB) (lockstore.Store, string) {
	t.Helper()
	ns := newNS(t)
	return e.openNS(t, ns), ns
}

func (e *barrierEnv) openNS(t TB, ns string) lockstore.Store {
	t.Helper()
	st := e.open(ns)
	if st == nil {
		t.Fatalf("Harness.Open(%q) returned nil", ns)
	}
	return st
}

func tctx(t TB) context.Context {
	c, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return c
}

func tAcquire(t TB, st lockstore.Store, key string, ttl time.Duration) lockstore.AcquireResult {
	t.Helper()
	r, err := st.Acquire(tctx(t), key, ttl)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", key, err)
	}
	if !r.OK || !lockstore.ValidFence(r.Fence) {
		t.Fatalf("Acquire(%s) = OK=%v fence %q, want a free key acquired", key, r.OK, r.Fence)
	}
	return r
}

func tRelease(t TB, st lockstore.Store, lockID string) {
	t.Helper()
	r, err := st.Release(tctx(t), lockID)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !r.OK {
		t.Fatalf("Release of a held lock: OK=false")
	}
}

// handover releases the live lock r and acquires key again: the new
// holder's fence must be r's plus one.
func handover(t TB, st lockstore.Store, key string, r lockstore.AcquireResult) lockstore.AcquireResult {
	t.Helper()
	tRelease(t, st, r.LockID)
	n := tAcquire(t, st, key, time.Minute)
	if n.Fence != fenceT(t, fenceNumT(t, r.Fence)+1) {
		t.Fatalf("fence after handover = %s, want %s + 1", n.Fence, r.Fence)
	}
	return n
}

func tInspect(t TB, st lockstore.Store, key string) lockstore.KeyState {
	t.Helper()
	ks, err := st.Inspect(tctx(t), key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return ks
}

func fenceT(t TB, n int64) string {
	t.Helper()
	f, err := lockstore.FormatFence(n)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return f
}

func fenceNumT(t TB, f string) int64 {
	t.Helper()
	n, err := lockstore.ParseFence(f)
	if err != nil {
		t.Fatalf("fence %q: %v", f, err)
	}
	return n
}

func writeID(t TB) string {
	t.Helper()
	id, err := lockstore.NewLockID()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return id
}

// adm is an admission with a fresh write id.
func adm(t TB, fence string, requireLive bool, maxWrite time.Duration) lockstore.WriteAdmission {
	return lockstore.WriteAdmission{Fence: fence, RequireLive: requireLive, WriteID: writeID(t), MaxWrite: maxWrite}
}

// admitFresh admits a write with a fresh id, for goroutines other than the
// case's own (which must not call Fatalf).
func admitFresh(ctx context.Context, st lockstore.Store, key, fence string, requireLive bool) (lockstore.WriteAdmitResult, string, error) {
	id, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.WriteAdmitResult{}, "", err
	}
	r, err := st.Admit(ctx, key, lockstore.WriteAdmission{Fence: fence, RequireLive: requireLive, WriteID: id, MaxWrite: time.Minute})
	return r, id, err
}

func admit(t TB, st lockstore.Store, key string, a lockstore.WriteAdmission) lockstore.WriteAdmitResult {
	t.Helper()
	r, err := st.Admit(tctx(t), key, a)
	if err != nil {
		t.Fatalf("Admit(fence %s, requireLive %v): %v", a.Fence, a.RequireLive, err)
	}
	if r.Admitted && r.Full {
		t.Errorf("Admit: Admitted and Full at once")
	}
	if r.Admitted && (r.Blocking != 0 || r.BlockedUntilMs != 0) {
		t.Errorf("Admit: Admitted with Blocking=%d BlockedUntilMs=%d, want 0 and 0", r.Blocking, r.BlockedUntilMs)
	}
	if r.Blocking == 0 && r.BlockedUntilMs != 0 {
		t.Errorf("Admit: Blocking=0 with BlockedUntilMs=%d, want 0", r.BlockedUntilMs)
	}
	if r.Blocking > 0 && r.BlockedUntilMs <= r.State.NowMs {
		t.Errorf("Admit: Blocking=%d with BlockedUntilMs=%d not after the store's now %d (expired entries must not block)",
			r.Blocking, r.BlockedUntilMs, r.State.NowMs)
	}
	return r
}

// wantAdmitted asserts the admission was registered.
func wantAdmitted(t TB, what string, r lockstore.WriteAdmitResult) {
	t.Helper()
	if !r.Admitted {
		t.Fatalf("%s: Admitted=false (Blocking=%d, state live=%v latest=%q), want admitted",
			what, r.Blocking, liveFence(r.State), r.State.LatestFence)
	}
}

// wantRefused asserts the admission was refused with `blocking` blocking
// entries (0: the fence did not match).
func wantRefused(t TB, what string, r lockstore.WriteAdmitResult, blocking int) {
	t.Helper()
	if r.Admitted {
		t.Fatalf("%s: Admitted=true (state live=%v latest=%q), want refused with Blocking=%d",
			what, liveFence(r.State), r.State.LatestFence, blocking)
	}
	if r.Blocking != blocking {
		t.Fatalf("%s: Blocking=%d, want %d", what, r.Blocking, blocking)
	}
	if r.Full {
		t.Fatalf("%s: Full=true, want refused for the fence or older writes", what)
	}
}

func liveFence(ks lockstore.KeyState) string {
	if ks.Live == nil {
		return "none"
	}
	return ks.Live.Fence
}

func finish(t TB, st lockstore.Store, key, id string) {
	t.Helper()
	if err := st.Finish(tctx(t), key, id); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

// wantSameState asserts an Admit's state is what Inspect reads.
func wantSameState(t TB, what string, got, want lockstore.KeyState) {
	t.Helper()
	if got.LatestFence != want.LatestFence {
		t.Errorf("%s: State.LatestFence = %q, Inspect says %q", what, got.LatestFence, want.LatestFence)
	}
	switch {
	case (got.Live == nil) != (want.Live == nil):
		t.Errorf("%s: State.Live = %v, Inspect.Live = %v", what, got.Live, want.Live)
	case got.Live != nil && *got.Live != *want.Live:
		t.Errorf("%s: State.Live differs from Inspect's (fence %s vs %s, expiresAtMs %d vs %d)", what,
			got.Live.Fence, want.Live.Fence, got.Live.ExpiresAtMs, want.Live.ExpiresAtMs)
	}
	if d := got.NowMs - want.NowMs; d > 0 || d < -opTimeout.Milliseconds() {
		t.Errorf("%s: State.NowMs = %d, Inspect's later NowMs = %d", what, got.NowMs, want.NowMs)
	}
}

// checkDeadline asserts BlockedUntilMs is admission time + maxWrite by a
// clock that agrees with ours within the tolerance.
func checkDeadline(t TB, what string, gotMs, beforeMs, afterMs int64, maxWrite time.Duration) {
	t.Helper()
	lo := beforeMs + maxWrite.Milliseconds() - lockstore.TimeToleranceMs
	hi := afterMs + maxWrite.Milliseconds() + lockstore.TimeToleranceMs
	if gotMs < lo || gotMs > hi {
		t.Fatalf("%s: BlockedUntilMs=%d, want admission time + %s within the tolerance: [%d, %d]", what, gotMs, maxWrite, lo, hi)
	}
}

// ---- cases ----

// barrierAdmitCurrent: the live holder's fence is admitted under both
// policies, and the state returned is Inspect's.
func (s *suite) barrierAdmitCurrent(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "current"
	a := tAcquire(t, st, key, time.Minute)
	for _, live := range []bool{true, false} {
		r := admit(t, st, key, adm(t, a.Fence, live, time.Minute))
		wantAdmitted(t, fmt.Sprintf("Admit(current fence, requireLive=%v)", live), r)
		wantSameState(t, "Admit", r.State, tInspect(t, st, key))
		if r.State.Live == nil || r.State.Live.LockID != a.LockID || r.State.LatestFence != a.Fence {
			t.Errorf("Admit: State = live %v latest %q, want the lock just acquired with fence %s",
				liveFence(r.State), r.State.LatestFence, a.Fence)
		}
	}
}

// barrierSameFence: writes under one fence never block each other, and
// re-registering a write id replaces its entry instead of adding one.
func (s *suite) barrierSameFence(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "same"
	a := tAcquire(t, st, key, time.Minute)
	w1 := adm(t, a.Fence, true, time.Minute)
	w2 := adm(t, a.Fence, true, time.Minute)
	wantAdmitted(t, "Admit(first write)", admit(t, st, key, w1))
	wantAdmitted(t, "Admit(second write, same fence)", admit(t, st, key, w2))
	wantAdmitted(t, "Admit(first write again, same id)", admit(t, st, key, w1))

	b := handover(t, st, key, a)
	r := admit(t, st, key, adm(t, b.Fence, true, time.Minute))
	wantRefused(t, "Admit(newer fence) with two writes in flight", r, 2)
}

// barrierNewerBlocked: an unfinished write under the older fence keeps the
// newer fence out, with its deadline reported; Finish lets it in, one
// entry at a time.
func (s *suite) barrierNewerBlocked(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "blocked"
	const maxWrite = time.Minute
	a := tAcquire(t, st, key, time.Minute)
	w1 := adm(t, a.Fence, true, maxWrite)
	w2 := adm(t, a.Fence, false, 30*time.Second)
	before := nowMs()
	wantAdmitted(t, "Admit(w1)", admit(t, st, key, w1))
	after := nowMs()
	wantAdmitted(t, "Admit(w2)", admit(t, st, key, w2))

	b := handover(t, st, key, a)
	for _, live := range []bool{true, false} {
		r := admit(t, st, key, adm(t, b.Fence, live, maxWrite))
		wantRefused(t, fmt.Sprintf("Admit(newer fence, requireLive=%v) with two older writes in flight", live), r, 2)
		checkDeadline(t, "Admit(newer fence)", r.BlockedUntilMs, before, after, maxWrite)
		wantSameState(t, "Admit(newer fence)", r.State, tInspect(t, st, key))
		if r.State.Live == nil || r.State.Live.Fence != b.Fence {
			t.Errorf("refused Admit: State.Live fence %s, want the new holder's %s", liveFence(r.State), b.Fence)
		}
	}

	finish(t, st, key, w1.WriteID)
	r := admit(t, st, key, adm(t, b.Fence, true, maxWrite))
	wantRefused(t, "Admit(newer fence) after one of two older writes finished", r, 1)
	checkDeadline(t, "Admit(newer fence) blocked by w2 only", r.BlockedUntilMs, before, nowMs(), 30*time.Second)
	finish(t, st, key, w2.WriteID)
	n1 := adm(t, b.Fence, true, maxWrite)
	wantAdmitted(t, "Admit(newer fence) after both older writes finished", admit(t, st, key, n1))
	// Same or newer-fence entries never block.
	wantAdmitted(t, "Admit(newer fence) beside its own write", admit(t, st, key, adm(t, b.Fence, false, maxWrite)))
}

// barrierExpiredEntry: an entry past its deadline counts as finished even
// though Finish never came.
func (s *suite) barrierExpiredEntry(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "expired"
	const maxWrite = 1500 * time.Millisecond
	a := tAcquire(t, st, key, time.Minute)
	before := nowMs()
	wantAdmitted(t, "Admit(older)", admit(t, st, key, adm(t, a.Fence, true, maxWrite)))
	after := nowMs()
	b := handover(t, st, key, a)
	r := admit(t, st, key, adm(t, b.Fence, true, time.Minute))
	if r.Admitted {
		// Only a machine loaded enough to spend 1.5 s on a handover gets
		// here; the entry then has to have expired.
		if nowMs() < after+maxWrite.Milliseconds()-lockstore.TimeToleranceMs {
			t.Fatalf("Admit(newer fence) admitted while the older write was in flight")
		}
		return
	}
	wantRefused(t, "Admit(newer fence) with the older write in flight", r, 1)
	checkDeadline(t, "Admit(newer fence)", r.BlockedUntilMs, before, after, maxWrite)

	sleepUntil(r.BlockedUntilMs + e.s.margin)
	r = admit(t, st, key, adm(t, b.Fence, true, time.Minute))
	wantAdmitted(t, "Admit(newer fence) after the older entry's deadline", r)
}

// barrierPolicy: after a release the last fence is still the latest, so
// the "latest" policy admits it and the "holder" policy does not.
func (s *suite) barrierPolicy(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "policy"
	a := tAcquire(t, st, key, time.Minute)
	tRelease(t, st, a.LockID)

	r := admit(t, st, key, adm(t, a.Fence, true, time.Minute))
	wantRefused(t, "Admit(released fence, requireLive)", r, 0)
	if r.State.Live != nil || r.State.LatestFence != a.Fence {
		t.Errorf("State = live %s latest %q, want no live lock and latest %s", liveFence(r.State), r.State.LatestFence, a.Fence)
	}
	wantSameState(t, "refused Admit", r.State, tInspect(t, st, key))
	wantAdmitted(t, "Admit(released fence, latest policy)", admit(t, st, key, adm(t, a.Fence, false, time.Minute)))
}

// barrierStaleUnknown: a fence that is not current — older, never issued,
// or on a key never locked — is refused with Blocking 0 and registers
// nothing that could block a later fence.
func (s *suite) barrierStaleUnknown(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "stale"
	a := tAcquire(t, st, key, time.Minute)
	b := handover(t, st, key, a)
	future := fenceT(t, fenceNumT(t, b.Fence)+4)
	for _, live := range []bool{true, false} {
		wantRefused(t, fmt.Sprintf("Admit(stale fence, requireLive=%v)", live), admit(t, st, key, adm(t, a.Fence, live, time.Minute)), 0)
		wantRefused(t, fmt.Sprintf("Admit(never-issued fence, requireLive=%v)", live), admit(t, st, key, adm(t, future, live, time.Minute)), 0)
		r := admit(t, st, "never-locked", adm(t, fenceT(t, 1), live, time.Minute))
		wantRefused(t, fmt.Sprintf("Admit(key never locked, requireLive=%v)", live), r, 0)
		if r.State.Live != nil || r.State.LatestFence != "" {
			t.Errorf("Admit(key never locked): State = live %s latest %q, want empty", liveFence(r.State), r.State.LatestFence)
		}
	}
	// A registered stale entry would block the current fence now.
	cur := adm(t, b.Fence, true, time.Minute)
	wantAdmitted(t, "Admit(current fence) after refused stale admissions", admit(t, st, key, cur))
	finish(t, st, key, cur.WriteID)
	// A registered never-issued fence would block a fence issued later.
	last := b
	for fenceNumT(t, last.Fence) <= fenceNumT(t, future) {
		last = handover(t, st, key, last)
	}
	wantAdmitted(t, "Admit(fence issued after the refused never-issued one)", admit(t, st, key, adm(t, last.Fence, true, time.Minute)))
	// The key never locked got no fence from the refused admissions.
	if f := tAcquire(t, st, "never-locked", time.Minute).Fence; f != fenceT(t, 1) {
		t.Errorf("first fence of a key only ever admitted against = %s, want %s", f, fenceT(t, 1))
	}
}

// barrierFinishAbsent: Finish of an absent, already finished or foreign
// write id is not an error, and removes only its own entry.
func (s *suite) barrierFinishAbsent(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "finish"
	finish(t, st, "never-used", writeID(t))
	a := tAcquire(t, st, key, time.Minute)
	w := adm(t, a.Fence, true, time.Minute)
	wantAdmitted(t, "Admit", admit(t, st, key, w))
	finish(t, st, key, writeID(t))        // someone else's id
	finish(t, st, "other-key", w.WriteID) // right id, wrong key
	b := handover(t, st, key, a)
	wantRefused(t, "Admit(newer fence) after Finish of other ids", admit(t, st, key, adm(t, b.Fence, true, time.Minute)), 1)
	finish(t, st, key, w.WriteID)
	finish(t, st, key, w.WriteID) // twice: idempotent
	wantAdmitted(t, "Admit(newer fence) after Finish", admit(t, st, key, adm(t, b.Fence, true, time.Minute)))
}

// barrierRaceHandover: writers under fence F keep asking while the lock
// changes hands to F+1 and the new holder's writers ask too. Writes under F
// never finish during the race, so a store that ever admits both fences
// let F+1 in while an F write was in flight. Afterwards, finishing the F
// writes lets F+1 in.
func (s *suite) barrierRaceHandover(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	rounds := max(2, int(4*s.scale))
	const older, newer = 4, 2
	attempts := max(10, int(50*s.scale))
	for round := range rounds {
		key := fmt.Sprintf("race-%d", round)
		a := tAcquire(t, st, key, time.Minute)
		f1 := fenceT(t, fenceNumT(t, a.Fence)+1)

		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			handedOff = make(chan struct{})
			errs      = make(chan string, older+newer+1)
			mu        sync.Mutex
			olderIDs  []string
			newerIn   atomic.Int64
		)
		for range older {
			wg.Go(func() {
				<-start
				for range attempts {
					r, id, err := admitFresh(t.Context(), st, key, a.Fence, true)
					if err != nil {
						errs <- fmt.Sprintf("Admit(older): %v", err)
						return
					}
					if r.Admitted {
						mu.Lock()
						olderIDs = append(olderIDs, id)
						mu.Unlock()
						continue
					}
					if r.Blocking != 0 {
						errs <- fmt.Sprintf("Admit(older) blocked by %d entries; nothing older than F exists", r.Blocking)
					}
					return // the handover happened: F is stale from now on
				}
			})
		}
		wg.Go(func() {
			defer close(handedOff)
			<-start
			if rel, err := st.Release(t.Context(), a.LockID); err != nil || !rel.OK {
				errs <- fmt.Sprintf("Release during the race = %+v, %v", rel, err)
				return
			}
			if r, err := st.Acquire(t.Context(), key, time.Minute); err != nil || !r.OK || r.Fence != f1 {
				errs <- fmt.Sprintf("Acquire during the race = OK=%v fence %s, %v; want fence %s", r.OK, r.Fence, err, f1)
			}
		})
		for range newer {
			wg.Go(func() {
				<-handedOff
				for range attempts {
					r, _, err := admitFresh(t.Context(), st, key, f1, true)
					if err != nil {
						errs <- fmt.Sprintf("Admit(newer): %v", err)
						return
					}
					if r.Admitted {
						newerIn.Add(1)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for m := range errs {
			t.Errorf("round %d: %s", round, m)
		}
		if n := newerIn.Load(); n > 0 && len(olderIDs) > 0 {
			t.Fatalf("round %d: %d writes under the newer fence were admitted while %d writes under the older fence were in flight",
				round, n, len(olderIDs))
		}
		t.Logf("round %d: %d older admitted, %d newer admitted", round, len(olderIDs), newerIn.Load())
		for _, id := range olderIDs {
			finish(t, st, key, id)
		}
		wantAdmitted(t, fmt.Sprintf("round %d: Admit(newer) after the older writes finished", round),
			admit(t, st, key, adm(t, f1, true, time.Minute)))
	}
}

// barrierAcquireKeepsEntries: writes admitted while the lock changes hands
// (and while other callers contend for it) are all still there afterwards:
// the new fence is blocked by exactly as many entries as were admitted.
func (s *suite) barrierAcquireKeepsEntries(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "keep"
	const writers = 6
	a := tAcquire(t, st, key, time.Minute)
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		admitted atomic.Int64
		errs     = make(chan string, writers+4)
	)
	for range writers {
		wg.Go(func() {
			<-start
			r, _, err := admitFresh(t.Context(), st, key, a.Fence, false)
			if err != nil {
				errs <- fmt.Sprintf("Admit: %v", err)
				return
			}
			if r.Admitted {
				admitted.Add(1)
			}
		})
	}
	for range 3 {
		wg.Go(func() { // contenders: refused while the lock is held
			<-start
			if _, err := st.Acquire(t.Context(), "keep-other", time.Minute); err != nil {
				errs <- fmt.Sprintf("Acquire(other key): %v", err)
			}
			if _, err := st.Acquire(t.Context(), key, time.Minute); err != nil {
				errs <- fmt.Sprintf("Acquire(contended): %v", err)
			}
		})
	}
	wg.Go(func() {
		<-start
		if rel, err := st.Release(t.Context(), a.LockID); err != nil || !rel.OK {
			errs <- fmt.Sprintf("Release = %+v, %v", rel, err)
			return
		}
		// A contender may win the key between the release and this acquire;
		// the entries must survive whoever holds it.
		for range 50 {
			r, err := st.Acquire(t.Context(), key, time.Minute)
			if err != nil {
				errs <- fmt.Sprintf("Acquire: %v", err)
				return
			}
			if r.OK {
				return
			}
			runtime.Gosched()
		}
	})
	close(start)
	wg.Wait()
	close(errs)
	for m := range errs {
		t.Errorf("%s", m)
	}
	latest := tInspect(t, st, key).LatestFence
	if latest <= a.Fence {
		t.Fatalf("LatestFence after the handover = %q, want above %s", latest, a.Fence)
	}
	n := int(admitted.Load())
	r := admit(t, st, key, adm(t, latest, false, time.Minute))
	if n == 0 {
		wantAdmitted(t, "Admit(newer fence), no older write admitted", r)
		return
	}
	wantRefused(t, fmt.Sprintf("Admit(newer fence) after %d older writes were admitted around acquires", n), r, n)
}

// barrierUntouched: Admit and Finish, whatever they decide, leave locks and
// fence counters as they were.
func (s *suite) barrierUntouched(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key, free = "untouched", "untouched-free"
	a := tAcquire(t, st, key, time.Minute)
	ksBefore := tInspect(t, st, key)
	infoBefore, err := st.LookupKey(tctx(t), key)
	if err != nil || infoBefore == nil {
		t.Fatalf("LookupKey = %v, %v", infoBefore, err)
	}

	w := adm(t, a.Fence, true, time.Minute)
	wantAdmitted(t, "Admit(current)", admit(t, st, key, w))
	next := fenceT(t, fenceNumT(t, a.Fence)+1)
	wantRefused(t, "Admit(next fence, not issued)", admit(t, st, key, adm(t, next, false, time.Minute)), 0)
	wantRefused(t, "Admit(free key)", admit(t, st, free, adm(t, fenceT(t, 1), false, time.Minute)), 0)
	finish(t, st, key, w.WriteID)
	finish(t, st, free, writeID(t))

	ksAfter := tInspect(t, st, key)
	if ksAfter.LatestFence != ksBefore.LatestFence || ksAfter.Live == nil || *ksAfter.Live != *ksBefore.Live {
		t.Fatalf("Inspect after Admit/Finish = live %v latest %q, want unchanged (live %v latest %q)",
			ksAfter.Live, ksAfter.LatestFence, ksBefore.Live, ksBefore.LatestFence)
	}
	infoAfter, err := st.LookupKey(tctx(t), key)
	if err != nil || infoAfter == nil || *infoAfter != *infoBefore {
		t.Fatalf("LookupKey after Admit/Finish = %v, %v; want %v", infoAfter, err, infoBefore)
	}
	if locked, err := st.IsLocked(tctx(t), free); err != nil || locked {
		t.Fatalf("IsLocked(free key) after Admit = %v, %v; want false", locked, err)
	}
	if ks := tInspect(t, st, free); ks.Live != nil || ks.LatestFence != "" {
		t.Fatalf("Inspect(free key) after Admit = live %s latest %q, want empty", liveFence(ks), ks.LatestFence)
	}
	if b := handover(t, st, key, a); b.Fence != next {
		t.Fatalf("fence after Admit/Finish = %s, want %s", b.Fence, next)
	}
	if f := tAcquire(t, st, free, time.Minute).Fence; f != fenceT(t, 1) {
		t.Fatalf("first fence of the free key = %s, want %s", f, fenceT(t, 1))
	}
}

// barrierSweep: SweepBarrier removes an entry past its deadline (the store
// reports it, unless it expires entries itself) and leaves an unexpired
// entry of another key, and every lock and fence counter, as they were.
func (s *suite) barrierSweep(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	sw, ok := st.(lockstore.BarrierSweeper)
	if !ok {
		t.Fatalf("the store (%T) does not implement lockstore.BarrierSweeper", st)
	}
	const expiring, live = "sweep-expiring", "sweep-live"
	const maxWrite = 1500 * time.Millisecond
	x := tAcquire(t, st, expiring, time.Minute)
	l := tAcquire(t, st, live, time.Minute)
	wantAdmitted(t, "Admit(live key)", admit(t, st, live, adm(t, l.Fence, true, time.Minute)))
	wantAdmitted(t, "Admit(expiring key)", admit(t, st, expiring, adm(t, x.Fence, true, maxWrite)))
	after := nowMs()
	ksX, ksL := tInspect(t, st, expiring), tInspect(t, st, live)

	// Past the deadline on any clock within the tolerance of ours (a
	// backend may add the tolerance to deadlines, as Firestore does).
	sleepUntil(after + maxWrite.Milliseconds() + 2*lockstore.TimeToleranceMs + e.s.margin)
	removed, err := sw.SweepBarrier(tctx(t), 1000)
	if err != nil {
		t.Fatalf("SweepBarrier: %v", err)
	}
	if removed > 1000 || removed < 0 {
		t.Fatalf("SweepBarrier(limit 1000) removed %d", removed)
	}
	if removed == 0 && !e.s.h.BarrierExpiresItself {
		t.Fatalf("SweepBarrier removed 0 entries, want the expired one")
	}
	if _, err := sw.SweepBarrier(tctx(t), 0); err == nil {
		t.Errorf("SweepBarrier(limit 0) succeeded, want InvalidArgument")
	} else {
		wantCodeTB(t, "SweepBarrier(limit 0)", err, lockstore.InvalidArgument)
	}

	for _, k := range []struct {
		key  string
		want lockstore.KeyState
	}{{expiring, ksX}, {live, ksL}} {
		got := tInspect(t, st, k.key)
		if got.LatestFence != k.want.LatestFence || got.Live == nil || *got.Live != *k.want.Live {
			t.Fatalf("Inspect(%s) after the sweep = live %v latest %q, want unchanged (live %v latest %q)",
				k.key, got.Live, got.LatestFence, k.want.Live, k.want.LatestFence)
		}
	}
	// The live entry still blocks a newer fence; the expired one does not.
	b := handover(t, st, live, l)
	wantRefused(t, "Admit(newer fence) beside an unexpired entry after the sweep",
		admit(t, st, live, adm(t, b.Fence, true, time.Minute)), 1)
	y := handover(t, st, expiring, x)
	wantAdmitted(t, "Admit(newer fence) after the sweep", admit(t, st, expiring, adm(t, y.Fence, true, time.Minute)))
}

// barrierBounded: a key's writes in flight are capped (MaxInFlight): past
// the cap a matching, unblocked fence is refused with Full and nothing is
// registered; entries past their deadline do not count; re-registering a
// write id in flight is not one more; Finish makes room; the cap is per key;
// a fence that does not match or is blocked is never reported Full.
func (s *suite) barrierBounded(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key, other = "bounded", "bounded-other"
	const capN = 48
	const short = 1500 * time.Millisecond
	a := tAcquire(t, st, key, time.Minute)
	capped := func(fence string, maxWrite time.Duration) lockstore.WriteAdmission {
		w := adm(t, fence, true, maxWrite)
		w.MaxInFlight = capN
		return w
	}
	wantFull := func(what string, r lockstore.WriteAdmitResult) {
		t.Helper()
		if r.Admitted || !r.Full || r.Blocking != 0 {
			t.Fatalf("%s: Admitted=%v Full=%v Blocking=%d, want refused as Full with nothing blocking", what, r.Admitted, r.Full, r.Blocking)
		}
	}
	notFull := func(what string, r lockstore.WriteAdmitResult) {
		t.Helper()
		if r.Full {
			t.Fatalf("%s: Full=true, want Full only for a matching, unblocked fence", what)
		}
	}

	// capN abandoned writes that expire: once past their deadline they
	// must not count against the cap.
	for i := range capN {
		r := admit(t, st, key, capped(a.Fence, short))
		notFull(fmt.Sprintf("Admit #%d of %d (short)", i+1, capN), r)
		wantAdmitted(t, fmt.Sprintf("Admit #%d of %d (short)", i+1, capN), r)
	}
	sleepUntil(nowMs() + short.Milliseconds() + 2*lockstore.TimeToleranceMs + e.s.margin)

	var first lockstore.WriteAdmission
	for i := range capN {
		w := capped(a.Fence, time.Minute)
		if i == 0 {
			first = w
		}
		r := admit(t, st, key, w)
		notFull(fmt.Sprintf("Admit #%d of %d after the first %d expired", i+1, capN, capN), r)
		wantAdmitted(t, fmt.Sprintf("Admit #%d of %d after the first %d expired", i+1, capN, capN), r)
	}
	wantFull("Admit past the cap", admit(t, st, key, capped(a.Fence, time.Minute)))
	wantFull("Admit past the cap, policy latest", admit(t, st, key, lockstore.WriteAdmission{
		Fence: a.Fence, WriteID: writeID(t), MaxWrite: time.Minute, MaxInFlight: capN}))
	wantAdmitted(t, "Admit(a write id already in flight) at the cap", admit(t, st, key, first))
	finish(t, st, key, first.WriteID)
	wantAdmitted(t, "Admit after one Finish at the cap", admit(t, st, key, capped(a.Fence, time.Minute)))
	wantFull("Admit past the cap again", admit(t, st, key, capped(a.Fence, time.Minute)))

	// Another key has its own cap.
	o := tAcquire(t, st, other, time.Minute)
	wantAdmitted(t, "Admit on another key while the first is at its cap", admit(t, st, other, capped(o.Fence, time.Minute)))
	// The cap is the admission's: the default (DefaultMaxInFlight) lets
	// one more in.
	wantAdmitted(t, "Admit with the default cap", admit(t, st, key, adm(t, a.Fence, true, time.Minute)))

	// The refused admissions registered nothing: the newer fence is
	// blocked by exactly the capN+1 admitted, unexpired writes, and a
	// stale or blocked fence is not Full.
	b := handover(t, st, key, a)
	r := admit(t, st, key, capped(b.Fence, time.Minute))
	notFull("Admit(newer fence) behind writes at the cap", r)
	wantRefused(t, "Admit(newer fence) behind writes at the cap", r, capN+1)
	r = admit(t, st, key, capped(a.Fence, time.Minute))
	notFull("Admit(stale fence) at the cap", r)
	wantRefused(t, "Admit(stale fence) at the cap", r, 0)
}

// barrierSurvivesReopen: in-flight entries live in the store, so a gateway
// restart does not forget them.
func (s *suite) barrierSurvivesReopen(t TB, e *barrierEnv) {
	ns := newNS(t)
	st := e.openNS(t, ns)
	const key = "reopen"
	a := tAcquire(t, st, key, time.Minute)
	w := adm(t, a.Fence, true, time.Minute)
	wantAdmitted(t, "Admit", admit(t, st, key, w))
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	st2 := e.openNS(t, ns)
	b := handover(t, st2, key, a)
	wantRefused(t, "Admit(newer fence) after reopen", admit(t, st2, key, adm(t, b.Fence, true, time.Minute)), 1)
	finish(t, st2, key, w.WriteID)
	wantAdmitted(t, "Admit(newer fence) after reopen and Finish", admit(t, st2, key, adm(t, b.Fence, true, time.Minute)))
}

// barrierValidation: malformed keys, fences, write ids and maxWrite fail
// with InvalidArgument before any I/O (an already cancelled context would
// otherwise say Aborted); a well-formed call with a dead context is
// Aborted or NetworkTimeout and registers nothing.
func (s *suite) barrierValidation(t TB, e *barrierEnv) {
	st, _ := e.fresh(t)
	const key = "valid"
	a := tAcquire(t, st, key, time.Minute)
	good := adm(t, a.Fence, true, time.Minute)

	var calls []op
	for _, k := range badKeys {
		calls = append(calls,
			op{"Admit/key=" + k.name, func(c context.Context) error { _, err := st.Admit(c, k.key, good); return err }},
			op{"Finish/key=" + k.name, func(c context.Context) error { return st.Finish(c, k.key, good.WriteID) }})
	}
	for _, f := range []struct{ name, fence string }{
		{"empty", ""}, {"short", "42"}, {"16-digits", "0000000000000001"}, {"letter", "00000000000000a"},
		{"plus", "+00000000000001"}, {"space", " 00000000000001"},
	} {
		bad := good
		bad.Fence = f.fence
		calls = append(calls, op{"Admit/fence=" + f.name, func(c context.Context) error { _, err := st.Admit(c, key, bad); return err }})
	}
	for _, l := range badLockIDs {
		bad := good
		bad.WriteID = l.id
		calls = append(calls,
			op{"Admit/writeId=" + l.name, func(c context.Context) error { _, err := st.Admit(c, key, bad); return err }},
			op{"Finish/writeId=" + l.name, func(c context.Context) error { return st.Finish(c, key, l.id) }})
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"zero", 0}, {"negative", -time.Second}, {"500us", 500 * time.Microsecond}, {"over-limit", lockstore.MaxWriteLimit + time.Millisecond}} {
		bad := good
		bad.MaxWrite = d.d
		calls = append(calls, op{"Admit/maxWrite=" + d.name, func(c context.Context) error { _, err := st.Admit(c, key, bad); return err }})
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range calls {
		wantCodeTB(t, c.name, c.do(tctx(t)), lockstore.InvalidArgument)
		wantCodeTB(t, c.name+" (cancelled ctx: validation comes before I/O)", c.do(cancelled), lockstore.InvalidArgument)
	}
	_, err := st.Admit(cancelled, key, good)
	wantCodeTB(t, "Admit(cancelled)", err, lockstore.Aborted)
	_, err = st.Admit(expired, key, good)
	wantCodeTB(t, "Admit(expired deadline)", err, lockstore.NetworkTimeout)
	wantCodeTB(t, "Finish(cancelled)", st.Finish(cancelled, key, good.WriteID), lockstore.Aborted)
	wantCodeTB(t, "Finish(expired deadline)", st.Finish(expired, key, good.WriteID), lockstore.NetworkTimeout)

	// Nothing was registered: the next fence is not blocked.
	b := handover(t, st, key, a)
	wantAdmitted(t, "Admit(newer fence) after rejected admissions", admit(t, st, key, adm(t, b.Fence, true, time.Minute)))
}

func wantCodeTB(t TB, what string, err error, code lockstore.Code) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %s", what, code)
		return
	}
	if got := lockstore.CodeOf(err); got != code {
		t.Errorf("%s: code %s (%v), want %s", what, got, err, code)
	}
}
