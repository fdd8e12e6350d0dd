package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// TB is the part of *testing.T the cases use. *testing.T implements it, and
// so does BarrierFailures' recorder, which collects failures instead of
// reporting them. Fatalf and Skipf must stop the calling goroutine (as
// testing.T's do); cases call them only from the goroutine that runs them.
type TB interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Context() context.Context
	Cleanup(func())
}

// caseT is what a case runs with: its TB, the *testing.T the harness's
// functions are given, and the case's clock. Every helper of the suite
// takes it.
type caseT struct {
	TB
	testT *testing.T
	s     *suite
	// clock is the case's fake clock when the backend's time authority is
	// this process; nil: real time.
	clock *testutil.Clock
}

// newCaseT makes the caseT of one case run on tb, with its own fake clock where
// the backend takes one.
func (s *suite) newCaseT(tb TB, testT *testing.T) *caseT {
	t := &caseT{TB: tb, testT: testT, s: s}
	if s.fake {
		t.clock = testutil.NewClock(time.Now())
	}
	return t
}

// nowMs is the case's time: its fake clock, or this process's clock for a
// store on server time (which agrees with it within the tolerance).
func (t *caseT) nowMs() int64 {
	if t.clock != nil {
		return t.clock.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// sleepUntil moves the case's time to ms (Unix ms): the fake clock jumps
// there, real time is slept through.
func (t *caseT) sleepUntil(ms int64) {
	if t.clock != nil {
		if d := time.Duration(ms-t.nowMs()) * time.Millisecond; d > 0 {
			t.clock.Advance(d)
		}
		return
	}
	if d := time.Until(time.UnixMilli(ms)); d > 0 {
		time.Sleep(d)
	}
}

// sleep moves the case's time d forward.
func (t *caseT) sleep(d time.Duration) {
	if t.clock != nil {
		t.clock.Advance(d)
		return
	}
	time.Sleep(d)
}

// ctx returns a context bounded by opTimeout (real time) for one store
// call.
func ctx(t *caseT) context.Context {
	c, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return c
}

// openWith opens a store over ns as o asks (the case's clock added) and
// closes it when the case ends; a case that closes it earlier exercises
// Close's idempotency through this cleanup. A backend lacking a feature
// of o.Need skips the case; any other failure to open fails it.
func (s *suite) openWith(t *caseT, ns string, o Options) lockstore.Store {
	t.Helper()
	if t.clock != nil {
		o.Now = t.clock.Now
	}
	st, err := s.h.Open(t.testT, ns, o)
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatalf("Harness.Open(%q): %v", ns, err)
	}
	if st == nil {
		t.Fatalf("Harness.Open(%q) returned nil", ns)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if t.clock != nil {
		// The store must keep the case's time, or every wait the suite
		// skips would be a wait that never happened.
		ks, err := st.Inspect(ctx(t), "storetest-clock-probe")
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if want := t.nowMs(); ks.NowMs != want {
			t.Fatalf("Harness.Open(%q): the store's now is %d, the case's fake clock %d: a client-time store must read Options.Now", ns, ks.NowMs, want)
		}
	}
	return st
}

// open opens a store over ns with the backend's defaults.
func (s *suite) open(t *caseT, ns string) lockstore.Store {
	t.Helper()
	return s.openWith(t, ns, Options{})
}

// openConsecutive is open with backend.FloorOff.
func (s *suite) openConsecutive(t *caseT, ns string) lockstore.Store {
	t.Helper()
	return s.openWith(t, ns, Options{FenceFloor: backend.FloorOff})
}

// fresh opens a store over a new namespace.
func (s *suite) fresh(t *caseT) (lockstore.Store, string) {
	t.Helper()
	ns := newNS(t)
	return s.open(t, ns), ns
}

// freshConsecutive opens a store with backend.FloorOff over a new
// namespace, for the cases that count fences one by one.
func (s *suite) freshConsecutive(t *caseT) (lockstore.Store, string) {
	t.Helper()
	ns := newNS(t)
	return s.openConsecutive(t, ns), ns
}

// recorder is a TB that records failures instead of reporting them.
type recorder struct {
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	msgs     []string
	skipped  string
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

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

// Fatalf records and ends the case's goroutine, as testing.T's does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// Skipf records why the case did not run and ends its goroutine.
func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = fmt.Sprintf(format, args...)
	r.mu.Unlock()
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
