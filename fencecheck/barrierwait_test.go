package fencecheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/internal/testutil/redistest"
	"github.com/fencegate/fencegate/lockstore"
)

// The barrier's wait (issue #20 item 7) against real stores: a waiter is
// woken when the blocking write finishes here, sees a finish at another
// gateway by re-checking, gives up at its maxWait with a Retry-After from
// what it observed, stops when its client leaves, and never lets two fences
// overlap. Each rule is also run against a deliberately broken Checker
// (brokenWait) and must catch it.

// waitStore is a real store for these tests; open returns two handles on
// the same data (for Redis, two connections: two gateways; bolt allows one
// process one handle, so both are the same store).
type waitStore struct {
	name string
	open func(t *testing.T) (a, b lockstore.Store)
}

func waitStores() []waitStore {
	return []waitStore{
		{"bolt", func(t *testing.T) (lockstore.Store, lockstore.Store) {
			s := locktest.OpenBolt(t)
			return s, s
		}},
		{"redis", func(t *testing.T) (lockstore.Store, lockstore.Store) {
			prefix := fmt.Sprintf("fencecheck-wait-%d", time.Now().UnixNano())
			return redistest.Open(t, prefix), redistest.Open(t, prefix)
		}},
	}
}

// admitted is a barrier write admitted under fence through c; it fails the
// test otherwise.
func admitted(t *testing.T, c *Checker, key, fence string) Decision {
	t.Helper()
	d, err := c.Check(t.Context(), Request{Key: key, Write: true, Fence: fence, Barrier: true, MaxWrite: time.Minute})
	if err != nil || !d.Allowed || d.WriteID == "" {
		t.Fatalf("admit %s: %+v %v", fence, d, err)
	}
	return d
}

type checkResult struct {
	d   Decision
	err error
	at  time.Time
}

// waitingWrite starts a barrier write under fence through c with maxWait,
// and returns its result when it comes.
func waitingWrite(ctx context.Context, c *Checker, key, fence string, maxWait time.Duration) chan checkResult {
	ch := make(chan checkResult, 1)
	go func() {
		d, err := c.Check(ctx, Request{Key: key, Write: true, Fence: fence, Barrier: true, MaxWrite: time.Minute, MaxWait: maxWait})
		ch <- checkResult{d, err, time.Now()}
	}()
	return ch
}

// Generous bounds for a shared, loaded machine under -race.
const (
	// blockedFor is how long the older write stays in flight.
	blockedFor = 400 * time.Millisecond
	// promptly is how soon after the older write's Finish the waiter must
	// be admitted when it is woken: far below the lengthened poll.
	promptly = 250 * time.Millisecond
	// slowPoll replaces pollMin and pollMax where a wake-up must be told
	// from a poll: a waiter that only polls sleeps 1.5–3 s (jittered) after
	// its first re-check, so it sees a Finish at blockedFor a second later
	// at least.
	slowPoll = 3 * time.Second
)

// admittedAfterFinish runs W1 (admitted through a) in flight for
// blockedFor, W2 under a newer fence through b waiting with maxWait 10 s,
// then finishes W1 and says what went wrong, if anything: W2 must not be
// answered before W1's Finish, and must then be admitted within within.
func admittedAfterFinish(t *testing.T, sa, sb lockstore.Store, a, b *Checker, within time.Duration) error {
	const key = "acct"
	l1 := locktest.Acquire(t, sa, key, time.Minute)
	w1 := admitted(t, a, key, l1.Fence)
	l2 := locktest.HandOver(t, sb, l1, key, time.Minute)
	w2 := waitingWrite(t.Context(), b, key, l2.Fence, 10*time.Second)
	select {
	case r := <-w2:
		_ = a.Finish(t.Context(), w1)
		if r.d.WriteID != "" {
			_ = b.Finish(t.Context(), r.d)
		}
		return fmt.Errorf("W2 answered while W1 was in flight: %+v %v", r.d, r.err)
	case <-time.After(blockedFor):
	}
	finished := time.Now()
	if err := a.Finish(t.Context(), w1); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-w2:
		if r.d.WriteID != "" {
			defer func() { _ = b.Finish(t.Context(), r.d) }()
		}
		if r.err != nil || !r.d.Allowed || r.d.WriteID == "" {
			return fmt.Errorf("W2 after W1 finished: %+v %v, want admitted", r.d, r.err)
		}
		if took := r.at.Sub(finished); took > within {
			return fmt.Errorf("W2 admitted %v after W1 finished, want within %v", took, within)
		}
		return nil
	case <-time.After(within + slowPoll):
		r := <-w2
		if r.d.WriteID != "" {
			_ = b.Finish(t.Context(), r.d)
		}
		return fmt.Errorf("W2 not answered %v after W1 finished", within+slowPoll)
	}
}

// TestBarrierWaiterWokenOnFinish: on one gateway, a waiter is admitted
// within promptly of the blocking write's Finish, though its poll is
// lengthened to slowPoll: it was woken. The wait before issue #20 item 7
// (one check.timeout) refused it long before; a waiter that only polls is
// admitted a poll later.
func TestBarrierWaiterWokenOnFinish(t *testing.T) {
	for _, st := range waitStores() {
		for _, tc := range []struct {
			name   string
			broken brokenWait
		}{
			{"correct", brokenNone},
			{"broken: old budget (check.timeout)", brokenOldBudget},
			{"broken: no wake-up, polls only", brokenNoWake},
		} {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				s, _ := st.open(t)
				c := New(s, Options{Timeout: 150 * time.Millisecond})
				c.pollMin, c.pollMax, c.broken = slowPoll, slowPoll, tc.broken
				err := admittedAfterFinish(t, s, s, c, c, promptly)
				if tc.broken == brokenNone && err != nil {
					t.Fatal(err)
				}
				if tc.broken != brokenNone && err == nil {
					t.Fatal("the broken wait was not caught")
				}
				if err != nil {
					t.Logf("caught: %v", err)
				}
				if n := c.wake.size(); n != 0 {
					t.Errorf("%d keys left in the wake-up map", n)
				}
				if n := c.waiters.Load(); n != 0 {
					t.Errorf("%d waiters left", n)
				}
			})
		}
	}
}

// TestBarrierWaiterAcrossGateways: two Checkers over one store (two
// gateways: over bolt, two Checkers on the one handle a process may hold;
// over Redis, two connections): W1 in flight at A, W2 waiting at B is
// admitted once A finishes W1, within a poll (pollMax, jittered) and a
// margin. B is never woken by A (wake-ups are a Checker's own), so this is
// the re-check. The old budget refuses W2 first.
func TestBarrierWaiterAcrossGateways(t *testing.T) {
	for _, st := range waitStores() {
		for _, tc := range []struct {
			name   string
			broken brokenWait
		}{
			{"correct", brokenNone},
			{"broken: old budget (check.timeout)", brokenOldBudget},
		} {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				sa, sb := st.open(t)
				a := New(sa, Options{Timeout: 150 * time.Millisecond})
				b := New(sb, Options{Timeout: 150 * time.Millisecond})
				b.broken = tc.broken
				err := admittedAfterFinish(t, sa, sb, a, b, pollMax+promptly)
				if tc.broken == brokenNone && err != nil {
					t.Fatal(err)
				}
				if tc.broken != brokenNone && err == nil {
					t.Fatal("the broken wait was not caught")
				}
			})
		}
	}
}

// TestBarrierMaxWaitExhausted: the blocking write stays in flight; the
// waiter is refused 429 draining once its maxWait has passed (not more
// than one store call's time before),
// with Retry-After from the time it waited (1.2 s → 2), not from the
// blocking write's deadline (a minute away: the old rule's 5).
func TestBarrierMaxWaitExhausted(t *testing.T) {
	for _, st := range waitStores() {
		t.Run(st.name, func(t *testing.T) {
			s, _ := st.open(t)
			reg := prometheus.NewRegistry()
			c := New(s, Options{Timeout: 150 * time.Millisecond, Registerer: reg})
			const key, maxWait = "acct", 1200 * time.Millisecond
			l1 := locktest.Acquire(t, s, key, time.Minute)
			w1 := admitted(t, c, key, l1.Fence)
			defer func() { _ = c.Finish(context.Background(), w1) }()
			l2 := locktest.HandOver(t, s, l1, key, time.Minute)
			start := time.Now()
			r := <-waitingWrite(t.Context(), c, key, l2.Fence, maxWait)
			took := time.Since(start)
			if r.err != nil || r.d.Allowed || r.d.Reason != ReasonDraining || r.d.Status != 429 || r.d.WriteID != "" {
				t.Fatalf("want 429 draining, got %+v %v", r.d, r.err)
			}
			// The wait stops when one more store call would not fit in
			// the budget: up to one call's time (≤ check.timeout) early.
			if took < maxWait-150*time.Millisecond || took > maxWait+time.Second {
				t.Errorf("refused after %v, want just after maxWait %v", took, maxWait)
			}
			if r.d.RetryAfter != 2 {
				t.Errorf("Retry-After %d, want 2 (1.2 s waited, rounded up)", r.d.RetryAfter)
			}
			if h := DenialHeaders(r.d); h[len(h)-1] != [2]string{"retry-after", "2"} {
				t.Errorf("denial headers %v", h)
			}
			if n := promtest.CollectAndCount(reg, "fencegate_barrier_wait_seconds"); n != 1 {
				t.Errorf("wait histogram series %d", n)
			}
			if g := promtest.ToFloat64(c.m.waiters); g != 0 {
				t.Errorf("fencegate_barrier_waiters = %v after the wait", g)
			}
		})
	}
}

// TestBarrierClientLeavesWhileWaiting: the waiter's context is cancelled
// mid-wait: it returns at once, refused, and registered nothing — a newer
// fence is admitted as soon as W1 finishes, which an entry under W2's fence
// would prevent.
func TestBarrierClientLeavesWhileWaiting(t *testing.T) {
	for _, st := range waitStores() {
		t.Run(st.name, func(t *testing.T) {
			s, _ := st.open(t)
			c := New(s, Options{Timeout: 150 * time.Millisecond})
			const key = "acct"
			l1 := locktest.Acquire(t, s, key, time.Minute)
			w1 := admitted(t, c, key, l1.Fence)
			l2 := locktest.HandOver(t, s, l1, key, time.Minute)
			ctx, cancel := context.WithCancel(t.Context())
			w2 := waitingWrite(ctx, c, key, l2.Fence, 20*time.Second)
			time.Sleep(200 * time.Millisecond)
			cancel()
			left := time.Now()
			select {
			case r := <-w2:
				if r.d.Allowed || r.d.WriteID != "" {
					t.Fatalf("W2 after its client left: %+v", r.d)
				}
				if took := r.at.Sub(left); took > promptly {
					t.Errorf("W2 returned %v after its client left", took)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("W2 still waiting 5 s after its client left")
			}
			if n := c.waiters.Load(); n != 0 || c.wake.size() != 0 {
				t.Errorf("waiters %d, wake-up keys %d after the client left", n, c.wake.size())
			}
			if err := c.Finish(t.Context(), w1); err != nil {
				t.Fatal(err)
			}
			l3 := locktest.HandOver(t, s, l2, key, time.Minute)
			d, err := c.Check(t.Context(), Request{Key: key, Write: true, Fence: l3.Fence, Barrier: true, MaxWait: time.Millisecond})
			if err != nil || !d.Allowed {
				t.Fatalf("a newer fence after W1 finished: %+v %v (W2 left an entry?)", d, err)
			}
			_ = c.Finish(t.Context(), d)
		})
	}
}

// TestBarrierWaiterCap: with one waiter slot taken, a second write that
// would wait is refused draining at once and counted.
func TestBarrierWaiterCap(t *testing.T) {
	s, _ := waitStores()[0].open(t)
	reg := prometheus.NewRegistry()
	c := New(s, Options{Timeout: 150 * time.Millisecond, BarrierMaxWaiters: 1, Registerer: reg})
	const key = "acct"
	l1 := locktest.Acquire(t, s, key, time.Minute)
	w1 := admitted(t, c, key, l1.Fence)
	l2 := locktest.HandOver(t, s, l1, key, time.Minute)
	first := waitingWrite(t.Context(), c, key, l2.Fence, 10*time.Second)
	testutil.WaitFor(t, 10*time.Second, "the first waiter", func() bool { return c.waiters.Load() == 1 })
	start := time.Now()
	r := <-waitingWrite(t.Context(), c, key, l2.Fence, 10*time.Second)
	if r.d.Allowed || r.d.Reason != ReasonDraining || time.Since(start) > time.Second {
		t.Fatalf("second waiter: %+v after %v, want draining at once", r.d, time.Since(start))
	}
	if n := promtest.ToFloat64(c.m.waitersFull); n != 1 {
		t.Errorf("fencegate_barrier_waiters_full_total = %v", n)
	}
	_ = c.Finish(t.Context(), w1)
	if r := <-first; !r.d.Allowed {
		t.Fatalf("first waiter after W1 finished: %+v %v", r.d, r.err)
	} else {
		_ = c.Finish(t.Context(), r.d)
	}
}

// TestBarrierMaxWaitCap: a MaxWait above the gateway's cap fails closed.
func TestBarrierMaxWaitCap(t *testing.T) {
	st := live(f5, idA)
	b := &barrierStore{stateStore: stateStore{state: st}, answers: []lockstore.WriteAdmitResult{{State: st, Admitted: true}}}
	c := New(b, Options{MaxWaitCap: time.Second})
	d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true, MaxWait: 2 * time.Second})
	if !errors.Is(err, ErrMaxWaitOverCap) || d.Allowed || d.Status != 503 {
		t.Fatalf("want fail closed above the cap, got %+v %v", d, err)
	}
	if n, _ := b.counts(); n != 0 {
		t.Errorf("%d Admit calls above the cap", n)
	}
	if d, err := c.Check(t.Context(), Request{Key: "k", Write: true, Fence: f5, Barrier: true, MaxWait: time.Second}); err != nil || !d.Allowed {
		t.Fatalf("at the cap: %+v %v", d, err)
	}
}

// TestBarrierHandoffNoOverlap: holders hand keys over while their writes
// are in flight (each holder starts its writes, lets them be decided, then
// releases; the next acquires at once), through one Checker on a real
// store. The API sees no two fences of a key in flight at once and no
// backward commit, and the live holders' writes wait rather than being
// refused. A barrier that admits without waiting is caught.
func TestBarrierHandoffNoOverlap(t *testing.T) {
	for _, st := range waitStores() {
		for _, tc := range []struct {
			name   string
			broken brokenWait
		}{
			{"correct", brokenNone},
			{"broken: admits without waiting", brokenNoWait},
		} {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				s, _ := st.open(t)
				c := New(s, Options{Timeout: 150 * time.Millisecond})
				c.broken = tc.broken
				var a testutil.WriteLedger
				const keys, holders, writesPer = 3, 4, 4
				var refused, total atomic.Int64
				var wg sync.WaitGroup
				for k := range keys {
					key := fmt.Sprintf("handoff/%d", k)
					wg.Go(func() {
						var inflight sync.WaitGroup
						for range holders {
							l := locktest.Acquire(t, s, key, time.Minute)
							var decided sync.WaitGroup
							for range writesPer {
								decided.Add(1)
								inflight.Go(func() {
									total.Add(1)
									d, err := c.Check(context.Background(), Request{Key: key, Write: true, Fence: l.Fence, Barrier: true, MaxWrite: time.Minute, MaxWait: 10 * time.Second})
									decided.Done()
									if err != nil || !d.Allowed {
										refused.Add(1)
										return
									}
									end := a.Begin(key, l.Fence)
									time.Sleep(time.Duration(10+rand.N(40)) * time.Millisecond)
									end()
									_ = c.Finish(context.Background(), d)
								})
							}
							decided.Wait()
							// Hand over with the writes still in flight.
							if r, err := s.Release(context.Background(), l.LockID); err != nil || !r.OK {
								t.Errorf("release: %+v %v", r, err)
								return
							}
						}
						inflight.Wait()
					})
				}
				wg.Wait()
				overlaps, backwards := a.Counts()
				t.Logf("%d writes, %d refused, %d overlaps, %d backward commits", total.Load(), refused.Load(), overlaps, backwards)
				switch tc.broken {
				case brokenNone:
					if overlaps != 0 || backwards != 0 {
						t.Fatalf("%d overlaps, %d backward commits; want none", overlaps, backwards)
					}
					if refused.Load() != 0 {
						t.Errorf("%d of %d live holders' writes refused; want none within a 10 s maxWait", refused.Load(), total.Load())
					}
				default:
					if overlaps == 0 {
						t.Fatal("the broken barrier was not caught: no overlap")
					}
				}
			})
		}
	}
}
