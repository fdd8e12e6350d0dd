package fencecheck

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/lockstore"
)

// barrierStore scripts Admit's answers: the decision rules are about what
// fencecheck makes of a store's answer. The transports' tests (proxy,
// authz ext_proc) run the barrier against the real bolt store.
type barrierStore struct {
	stateStore
	mu       sync.Mutex
	answers  []lockstore.WriteAdmitResult // one per Admit; the last repeats
	admitErr error
	admits   []lockstore.WriteAdmission
	finished []string
	// unblock, when set, makes Admit answer admitted once closed.
	unblock chan struct{}
}

func (b *barrierStore) Admit(_ context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.admits = append(b.admits, a)
	if b.admitErr != nil {
		return lockstore.WriteAdmitResult{}, b.admitErr
	}
	if b.unblock != nil {
		select {
		case <-b.unblock:
			return lockstore.WriteAdmitResult{State: b.state, Admitted: true}, nil
		default:
		}
	}
	r := b.answers[min(len(b.admits), len(b.answers))-1]
	return r, nil
}

func (b *barrierStore) Finish(_ context.Context, key, writeID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finished = append(b.finished, writeID)
	return nil
}

func (b *barrierStore) counts() (admits, finished int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.admits), len(b.finished)
}

func blocked(st lockstore.KeyState, untilMs int64) lockstore.WriteAdmitResult {
	return lockstore.WriteAdmitResult{State: st, Blocking: 1, BlockedUntilMs: untilMs}
}

func TestBarrierAdmitted(t *testing.T) {
	st := live(f5, idA)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{{State: st, Admitted: true}}}
	reg := prometheus.NewRegistry()
	c := New(b, Options{Registerer: reg})
	d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true, MaxWrite: 7 * time.Second})
	if err != nil || !d.Allowed || d.WriteID == "" {
		t.Fatalf("want admitted with a write id, got %+v %v", d, err)
	}
	if b.reads.Load() != 0 {
		t.Errorf("Inspect called %d times; the barrier's one store call is Admit", b.reads.Load())
	}
	a := b.admits[0]
	if a.Fence != f5 || !a.RequireLive || a.MaxWrite != 7*time.Second || a.WriteID != d.WriteID {
		t.Errorf("admission %+v", a)
	}
	if got := testutil.ToFloat64(c.m.inflight); got != 1 {
		t.Errorf("inflight = %v, want 1", got)
	}
	if err := c.Finish(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	if len(b.finished) != 1 || b.finished[0] != d.WriteID {
		t.Errorf("finished %v, want %s", b.finished, d.WriteID)
	}
	if got := testutil.ToFloat64(c.m.inflight); got != 0 {
		t.Errorf("inflight after Finish = %v, want 0", got)
	}
}

func TestBarrierDefaultMaxWriteAndLatest(t *testing.T) {
	st := expired(f5)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{{State: st, Admitted: true}}}
	c := New(b, Options{})
	d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true, Policy: PolicyLatest})
	if err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if a := b.admits[0]; a.RequireLive || a.MaxWrite != DefaultMaxWrite {
		t.Errorf("admission %+v", a)
	}
}

func TestBarrierDenialsDoNotWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     lockstore.KeyState
		req    Request
		reason Reason
	}{
		{"stale", live(f5, idA), Request{Fence: f4}, ReasonStale},
		{"unknown", live(f5, idA), Request{Fence: f6}, ReasonUnknown},
		{"not held", expired(f5), Request{Fence: f5}, ReasonNotHeld},
		// A matching fence whose proof is wrong is refused at once, even
		// while older writes block it: no point waiting to say wrong-owner.
		{"wrong owner while blocked", live(f5, idA), Request{Fence: f5, LockID: idB}, ReasonWrongOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans := lockstore.WriteAdmitResult{State: tc.st}
			if tc.reason == ReasonWrongOwner {
				ans = blocked(tc.st, tc.st.NowMs+10_000)
			}
			b := &barrierStore{stateStore: stateStore{state: tc.st}, answers: []lockstore.WriteAdmitResult{ans}}
			r := tc.req
			r.Key, r.Write, r.Barrier = "k", true, true
			d, err := New(b, Options{}).Check(t.Context(), r)
			if err != nil || d.Allowed || d.Reason != tc.reason {
				t.Fatalf("want %s, got %+v %v", tc.reason, d, err)
			}
			if n, _ := b.counts(); n != 1 {
				t.Errorf("%d Admit calls, want 1", n)
			}
		})
	}
}

// An admitted write whose lockId proof fails is denied, and its entry is
// removed at once rather than blocking newer fences until maxWrite.
func TestBarrierWrongOwnerAfterAdmitFinishes(t *testing.T) {
	st := live(f5, idA)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{{State: st, Admitted: true}}}
	c := New(b, Options{})
	d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, LockID: idB, Barrier: true})
	if err != nil || d.Allowed || d.Reason != ReasonWrongOwner || d.WriteID != "" {
		t.Fatalf("want wrong-owner without a write id, got %+v %v", d, err)
	}
	if len(b.finished) != 1 || b.finished[0] != b.admits[0].WriteID {
		t.Errorf("entry not finished: %v", b.finished)
	}
	if got := testutil.ToFloat64(c.m.inflight); got != 0 {
		t.Errorf("inflight = %v", got)
	}
}

func TestBarrierDraining(t *testing.T) {
	st := live(f5, idA)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{blocked(st, st.NowMs+2_500)}}
	reg := prometheus.NewRegistry()
	c := New(b, Options{Timeout: 60 * time.Millisecond, Registerer: reg})
	d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true})
	if err != nil || d.Allowed || d.Reason != ReasonDraining || d.Status != 429 {
		t.Fatalf("want draining 429, got %+v %v", d, err)
	}
	if d.RetryAfter != 1 {
		t.Errorf("RetryAfter = %d, want 1 (waited 60 ms, so 1 s, sooner than the deadline's 2.5 s)", d.RetryAfter)
	}
	if n, _ := b.counts(); n < 2 {
		t.Errorf("%d Admit calls: the check should retry within its budget", n)
	}
	if got := testutil.CollectAndCount(reg, "fencegate_barrier_wait_seconds"); got != 1 {
		t.Errorf("wait histogram series = %d", got)
	}
	if got := testutil.ToFloat64(c.m.decisions.WithLabelValues(decisionDeny, string(ReasonDraining), string(ModeEnforce))); got != 1 {
		t.Errorf("draining decisions = %v", got)
	}
}

// TestBarrierRetryAfterBounds: Retry-After is the time already waited (at
// least 1 s) or the blocking deadline when sooner, rounded up, within
// [1, MaxRetryAfter]. The rule before issue #20 item 7 (the deadline alone)
// answers 5 to a write that waited 150 ms behind a 30 s maxWrite.
func TestBarrierRetryAfterBounds(t *testing.T) {
	for _, tc := range []struct {
		drainIn, waited time.Duration
		want            int
	}{
		{0, 0, 1},
		{-time.Second, time.Second, 1},
		{time.Millisecond, 3 * time.Second, 1},
		{time.Second, 0, 1},
		{1001 * time.Millisecond, 4 * time.Second, 2},
		{30 * time.Second, 150 * time.Millisecond, 1},
		{30 * time.Second, 2500 * time.Millisecond, 3},
		{30 * time.Second, 5 * time.Second, MaxRetryAfter},
		{time.Hour, time.Hour, MaxRetryAfter},
	} {
		if got := retryAfter(tc.drainIn, tc.waited); got != tc.want {
			t.Errorf("retryAfter(%v, %v) = %d, want %d", tc.drainIn, tc.waited, got, tc.want)
		}
	}
}

// A write blocked at first is admitted once the older write finishes within
// the budget.
func TestBarrierWaitsThenAdmits(t *testing.T) {
	st := live(f5, idA)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{blocked(st, st.NowMs+30_000)},
		unblock: make(chan struct{})}
	c := New(b, Options{Timeout: 10 * time.Second})
	go func() {
		// Unblock after the first refusal was seen.
		for {
			if n, _ := b.counts(); n > 0 {
				close(b.unblock)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true})
	if err != nil || !d.Allowed || d.WriteID == "" {
		t.Fatalf("want admitted after the wait, got %+v %v", d, err)
	}
}

func TestBarrierDryRunDoesNotWait(t *testing.T) {
	st := live(f5, idA)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{blocked(st, st.NowMs+1000)}}
	d, err := New(b, Options{Timeout: 10 * time.Second}).Check(t.Context(),
		Request{Key: "k", Write: true, Fence: f5, Barrier: true, Mode: ModeDryRun})
	if err != nil || !d.Allowed || !d.WouldDeny || d.Reason != ReasonDraining || d.WriteID != "" {
		t.Fatalf("want would-deny draining, allowed, got %+v %v", d, err)
	}
	if n, _ := b.counts(); n != 1 {
		t.Errorf("%d Admit calls, want 1", n)
	}
}

func TestBarrierFailsClosed(t *testing.T) {
	t.Run("admit error", func(t *testing.T) {
		b := &barrierStore{admitErr: errors.New("store down")}
		d, err := New(b, Options{}).Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true})
		if err == nil || d.Allowed || d.Status != 503 {
			t.Fatalf("%+v %v", d, err)
		}
		// The failed call may have registered the entry before it failed
		// (its deadline ran out after the store wrote it): it is taken
		// back, or it would hold newer fences off until its maxWrite.
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.admits) != 1 || len(b.finished) != 1 || b.finished[0] != b.admits[0].WriteID {
			t.Fatalf("admits %+v, finished %v: want the failed admit's entry taken back", b.admits, b.finished)
		}
	})
	t.Run("refused without blocking", func(t *testing.T) {
		st := live(f5, idA)
		b := &barrierStore{answers: []lockstore.WriteAdmitResult{{State: st}}}
		d, err := New(b, Options{}).Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true})
		if err == nil || d.Allowed || d.Status != 503 {
			t.Fatalf("%+v %v", d, err)
		}
	})
	t.Run("route error", func(t *testing.T) {
		c := New(&stateStore{state: live(f5, idA)}, Options{})
		bad := errors.New("barrier asked of ext_authz")
		d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, RouteError: bad})
		if !errors.Is(err, bad) || d.Allowed || d.Status != 503 {
			t.Fatalf("%+v %v", d, err)
		}
		d, err = c.Check(t.Context(), Request{Key: "k", Write: false, RouteError: bad})
		if err != nil || !d.Allowed {
			t.Fatalf("a read passes whatever the route: %+v %v", d, err)
		}
	})
}

func TestBarrierAbandon(t *testing.T) {
	st := live(f5, idA)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{{State: st, Admitted: true}}}
	c := New(b, Options{})
	d, _ := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true})
	c.Abandon(t.Context(), d)
	if _, f := b.counts(); f != 0 {
		t.Errorf("Abandon must leave the entry to expire, but %d were finished", f)
	}
	if got := testutil.ToFloat64(c.m.abandoned); got != 1 {
		t.Errorf("abandoned = %v", got)
	}
	if got := testutil.ToFloat64(c.m.inflight); got != 0 {
		t.Errorf("inflight = %v", got)
	}
}

// TestBarrierSkippedWithoutStoreWork: reads, policy off and input denials
// never reach Admit, barrier or not.
func TestBarrierSkippedWithoutStoreWork(t *testing.T) {
	b := &barrierStore{}
	c := New(b, Options{})
	for _, r := range []Request{
		{Key: "k", Write: false, Barrier: true},
		{Key: "k", Write: true, Policy: PolicyOff, Barrier: true},
		{Key: "k", Write: true, Barrier: true},
		{Key: "k", Write: true, Fence: "5", Barrier: true},
	} {
		d, err := c.Check(t.Context(), r)
		if err != nil || d.WriteID != "" {
			t.Fatalf("%+v: %+v %v", r, d, err)
		}
	}
	if n, _ := b.counts(); n != 0 {
		t.Fatalf("%d Admit calls, want 0", n)
	}
}

// TestBarrierFull: a store answering Full (the key has its cap of writes in
// flight) is refused at once as too-many-writes (429, Retry-After 1), with
// the cap the Checker was given passed down and the refusal counted; a
// Checker that treated Full as anything else (admitted, draining and
// waiting, unavailable) fails here.
func TestBarrierFull(t *testing.T) {
	st := live(f5, idA)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{{State: st, Full: true}}}
	reg := prometheus.NewRegistry()
	c := New(b, Options{Registerer: reg, BarrierMaxInFlight: 17})
	d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true})
	if err != nil || d.Allowed || d.Reason != ReasonTooManyWrites || d.Status != 429 || d.RetryAfter != 1 || d.WriteID != "" {
		t.Fatalf("want 429 too-many-writes, Retry-After 1, got %+v %v", d, err)
	}
	if n, _ := b.counts(); n != 1 {
		t.Errorf("%d Admit calls, want 1 (no waiting on a full key)", n)
	}
	if a := b.admits[0]; a.MaxInFlight != 17 {
		t.Errorf("admission MaxInFlight = %d, want the Checker's 17", a.MaxInFlight)
	}
	if got := testutil.ToFloat64(c.m.barrierFull); got != 1 {
		t.Errorf("fencegate_barrier_full_total = %v, want 1", got)
	}
	if h := DenialHeaders(d); h[len(h)-1] != [2]string{"retry-after", "1"} {
		t.Errorf("denial headers %v, want a retry-after of 1", h)
	}
	if New(b, Options{}).maxInFlight != 0 {
		t.Error("the zero Options must leave the cap to the store's default")
	}
}

// stepStore answers Admit from a script: each step an answer or an error;
// the last step repeats.
type stepStore struct {
	stateStore
	mu       sync.Mutex
	steps    []func() (lockstore.WriteAdmitResult, error)
	admits   int
	finished int
}

func (s *stepStore) Admit(context.Context, string, lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admits++
	return s.steps[min(s.admits, len(s.steps))-1]()
}

func (s *stepStore) Finish(context.Context, string, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished++
	return nil
}

// TestBarrierWaitRidesOutFailedRechecks: a write already found blocked
// whose re-checks fail (a busy store's call past its timeout) waits on, up
// to waitRetries failures in a row, and is admitted when the store answers
// again; one more failure in a row fails it closed (503), never admitted.
func TestBarrierWaitRidesOutFailedRechecks(t *testing.T) {
	st := live(f5, idA)
	blockedAns := func() (lockstore.WriteAdmitResult, error) { return blocked(st, st.NowMs+30_000), nil }
	failed := func() (lockstore.WriteAdmitResult, error) {
		return lockstore.WriteAdmitResult{}, &lockstore.Error{Code: lockstore.NetworkTimeout, Op: "admit"}
	}
	admittedAns := func() (lockstore.WriteAdmitResult, error) {
		return lockstore.WriteAdmitResult{State: st, Admitted: true}, nil
	}
	for _, tc := range []struct {
		name    string
		steps   []func() (lockstore.WriteAdmitResult, error)
		allowed bool
	}{
		{"failures within the retries, then admitted", []func() (lockstore.WriteAdmitResult, error){blockedAns, blockedAns, failed, failed, blockedAns, failed, admittedAns}, true},
		{"one failure too many in a row", []func() (lockstore.WriteAdmitResult, error){blockedAns, blockedAns, failed, failed, failed, admittedAns}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stepStore{steps: tc.steps}
			d, err := New(s, Options{Timeout: 50 * time.Millisecond}).Check(t.Context(),
				Request{Key: "k", Write: true, Fence: f5, Barrier: true, MaxWait: 5 * time.Second})
			if tc.allowed && (err != nil || !d.Allowed || d.WriteID == "") {
				t.Fatalf("want admitted, got %+v %v", d, err)
			}
			if !tc.allowed && (err == nil || d.Allowed || d.Status != 503 || d.WriteID != "") {
				t.Fatalf("want 503 unavailable, got %+v %v", d, err)
			}
		})
	}
}
