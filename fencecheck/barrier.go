package fencecheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Barrier defaults.
const (
	// DefaultMaxWrite is how long after admission a barrier write counts as
	// finished when its completion never comes: long enough for an API's
	// slow write, short enough that a dead edge blocks the next fence for
	// seconds, not minutes.
	DefaultMaxWrite = 30 * time.Second
	// DefaultMaxWait is a barrier route's MaxWait when unset on a transport
	// that holds the client's connection anyway (the proxy, and so a route
	// table entry with an upstream): how long a write under a current fence
	// waits at the barrier for older writes of its key to finish. Long
	// enough for a typical API write (the older holder's writes in flight
	// at a handover); a write that finishes here wakes its key's waiters at
	// once. ext_proc's default is the check's timeout instead, since
	// Envoy's message timeout bounds the stream. Every route's MaxWait is
	// bounded by the gateway's cap (DefaultMaxWaitCap).
	DefaultMaxWait = 5 * time.Second
	// DefaultMaxWriteCap is the gateway's default bound on every barrier
	// route's MaxWrite, wherever the route came from (check.maxWriteCap,
	// given to Options.MaxWriteCap): an entry holds back every
	// newer fence on its key until it finishes or MaxWrite passes, so the
	// cap is the longest one dropped exchange can stall a key's next holder.
	DefaultMaxWriteCap = 5 * time.Minute
	// DefaultFinishTimeout bounds the store call that removes a finished
	// write's entry. It runs after the client has its response; failing it
	// only leaves the entry to expire at MaxWrite.
	DefaultFinishTimeout = 2 * time.Second
	// MaxRetryAfter caps a draining denial's Retry-After. The blocking
	// entries' deadlines are the worst case (MaxWrite after admission); an
	// API write usually ends long before, so a client told to come back
	// in 30 s would mostly wait for nothing.
	MaxRetryAfter = 5
	// DefaultMaxWaitCap is the gateway's default bound on every barrier
	// route's MaxWait (check.maxWaitCap, Options.MaxWaitCap): a waiting
	// write holds its client's connection, so no route may ask to hold one
	// for longer.
	DefaultMaxWaitCap = 30 * time.Second
	// DefaultBarrierMaxWaiters is how many barrier writes one Checker lets
	// wait at once (check.barrierMaxWaiters, Options.BarrierMaxWaiters):
	// the default listener's connection slots (1024), a quarter of them.
	// A waiter re-checks the store on a backoff that grows to pollMax
	// (jittered down to half), and at once when a write of its key
	// finishes here, so the cap also bounds what waiting costs the store:
	// past the first few re-checks, at most 20 calls a second per waiter.
	// One key, and one client, may hold an eighth of them (waiters.go).
	DefaultBarrierMaxWaiters = 256
)

// ErrMaxWriteOverCap: a barrier route's MaxWrite is above the gateway's
// cap (Options.MaxWriteCap). Its writes fail closed (503 unavailable):
// clamping would shorten how long the barrier waits for an abandoned
// write, silently weakening what the route asked for.
var ErrMaxWriteOverCap = errors.New("fencecheck: the route's maxWrite is above the gateway's cap (check.maxWriteCap)")

// ErrMaxWaitOverCap: a barrier route's MaxWait is above the gateway's cap
// (Options.MaxWaitCap). Its writes fail closed (503 unavailable), as for
// maxWrite: a route whose options the gateway will not honour is
// misconfigured, and is told so rather than silently given another wait.
var ErrMaxWaitOverCap = errors.New("fencecheck: the route's maxWait is above the gateway's cap (check.maxWaitCap)")

// The re-checks of a waiting write. A write that finishes on this gateway
// wakes its key's waiters at once (keyWake); one that finishes on another
// gateway sharing the store is only seen by asking the store again: soon at
// first (most API writes take milliseconds), then at most every pollMax,
// so that a long wait costs few store calls. Each sleep is jittered, so
// that the waiters of one key do not re-check in step.
const (
	pollMin = 5 * time.Millisecond
	pollMax = 100 * time.Millisecond
	// waitRetries is how many failed re-checks in a row a waiting write
	// rides out (each bounded by the check's timeout) before it fails
	// closed: a busy store's occasional slow call should not turn a write
	// that is only waiting into a 503.
	waitRetries = 2
)

// brokenWait selects a deliberately broken barrier wait, so that the tests
// can show each is caught; production Checkers have brokenNone.
type brokenWait int

const (
	brokenNone brokenWait = iota
	// brokenOldBudget waits at most one Timeout, whatever MaxWait says (the
	// behaviour before issue #20 item 7).
	brokenOldBudget
	// brokenNoWake ignores this process's wake-ups: waiters see a finish
	// only by polling.
	brokenNoWake
	// brokenNoWait admits a blocked write without waiting and without an
	// entry: a barrier that does not hold anything back.
	brokenNoWait
)

// admit is the barrier's step 3: Admit instead of Inspect, retried while
// older writes drain, within the route's wait budget. key is normalised.
func (c *Checker) admit(ctx context.Context, d Decision, r Request, key string, pc proofCheck) (Decision, error) {
	writeID, err := lockstore.NewLockID()
	if err != nil {
		d = c.unavailable(d)
		return d, fmt.Errorf("fencecheck: write id: %w", err)
	}
	maxWrite := r.MaxWrite
	if maxWrite <= 0 {
		maxWrite = DefaultMaxWrite
	}
	maxWait := r.MaxWait
	if maxWait <= 0 || c.broken == brokenOldBudget {
		maxWait = c.timeout
	}
	a := lockstore.WriteAdmission{
		Fence:       r.Fence,
		RequireLive: d.Policy == PolicyHolder,
		WriteID:     writeID,
		MaxWrite:    maxWrite,
		MaxInFlight: c.maxInFlight,
	}

	// The wait's budget is maxWait, from the first answer that found the
	// write blocked; each store call is bounded like a plain check's read.
	var (
		waitStart, waitEnd time.Time
		backoff            = c.pollMin
		sub                *wakeEntry // the key's wake-up, while waiting
		slot               bool       // holds one of the Checker's waiter slots
		client             = waiterClient(r.Peer)
		// last is the latest answer that found the write blocked;
		// failures counts the re-checks that failed since.
		last     lockstore.WriteAdmitResult
		failures int
	)
	defer func() {
		if sub != nil {
			c.wake.release(key, sub)
		}
		if slot {
			c.slots.give(key, client)
			c.waiters.Add(-1)
			c.m.waiters.Dec()
		}
	}()
	waited := func() time.Duration {
		if waitStart.IsZero() {
			return 0
		}
		return time.Since(waitStart)
	}
	draining := func(drainIn time.Duration) Decision {
		w := waited()
		c.observeWait(w)
		d.RetryAfter = retryAfter(drainIn, w)
		return c.negative(d, ReasonDraining)
	}
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		res, aerr := c.store.Admit(actx, key, a)
		cancel()
		took := time.Since(t0)
		retried := false // a failed re-check, answered with last
		if refusedInput(aerr) {
			// As in check: a key the backend refuses as input is a bad
			// request, not an outage.
			c.observeWait(waited())
			return c.negative(d, ReasonMalformed), nil
		}
		if aerr != nil {
			// The call may have registered the entry before it failed (a
			// deadline that ran out after the store wrote it): take it back,
			// best effort and briefly, or it would hold newer fences off as
			// draining until its maxWrite. A store that is down fails this
			// fast; the entry then expires on its own.
			c.abandonFailedAdmit(ctx, key, writeID)
			if attempt > 0 && ctx.Err() != nil {
				// The client left while the write waited: nothing to
				// decide, and nothing for an operator to see at warn.
				return draining(0), nil
			}
			if attempt > 0 && failures < waitRetries {
				// A re-check of a write already found blocked failed (a
				// store call past its timeout on a busy store): the write
				// is still not admitted, so waiting on is as safe as
				// refusing. Ask again on the backoff, under a fresh id
				// (the failed call's entry, if any, may not have been
				// taken back), within the same budget; only a store that
				// keeps failing fails the write closed.
				failures++
				c.log.LogAttrs(ctx, slog.LevelDebug, "fencecheck: a barrier re-check failed; retrying within the wait",
					slog.String("decisionId", d.DecisionID), slog.Any("error", aerr))
				if writeID, err = lockstore.NewLockID(); err != nil {
					d = c.unavailable(d)
					return d, fmt.Errorf("fencecheck: write id: %w", err)
				}
				a.WriteID = writeID
				res, aerr, retried = last, nil, true
			}
		}
		if aerr != nil {
			c.observeWait(waited())
			c.log.LogAttrs(ctx, slog.LevelWarn, "fencecheck: backend admit failed; failing closed",
				slog.String("decisionId", d.DecisionID),
				slog.String("keyHash", lockstore.HashKey(key)),
				slog.String("code", string(lockstore.CodeOf(aerr))),
				slog.Any("error", aerr))
			d = c.unavailable(d)
			if d.Allowed {
				return d, nil
			}
			return d, fmt.Errorf("fencecheck: admit: %w", aerr)
		}
		if !retried {
			failures = 0
		}
		d.Current = res.State.LatestFence
		ev := c.evaluate(d, r, pc, res.State)
		if res.Admitted {
			c.observeWait(waited())
			if !ev.Allowed || ev.WouldDeny {
				// The store admitted what the policy refuses (a lockId
				// proof it cannot see): take the entry back now rather
				// than let it block newer fences until MaxWrite.
				c.finishEntry(ctx, key, writeID, d.DecisionID)
				return ev, nil
			}
			ev.WriteID, ev.barrierKey, ev.Admitted = writeID, key, t0
			c.m.inflight.Inc()
			return ev, nil
		}
		if !ev.Allowed || ev.WouldDeny {
			// The fence does not match (or the proof does not): the same
			// denial as without the barrier, no waiting.
			c.observeWait(waited())
			return ev, nil
		}
		if res.Full {
			// The key has its cap of writes in flight. Waiting would
			// mostly wait for abandoned entries (a holder with a thousand
			// writes open is the abuse the cap is for): refuse at once.
			c.observeWait(waited())
			c.m.barrierFull.Inc()
			c.log.LogAttrs(ctx, slog.LevelWarn, "fencecheck: barrier key at its cap of writes in flight; refused",
				slog.String("decisionId", d.DecisionID), slog.String("keyHash", lockstore.HashKey(key)),
				slog.Int("maxInFlight", a.InFlightCap()))
			d.RetryAfter = 1
			return c.negative(d, ReasonTooManyWrites), nil
		}
		if res.Blocking == 0 {
			// A store that refuses a matching fence with nothing blocking
			// it broke its contract; never admit on a guess.
			c.observeWait(waited())
			c.log.LogAttrs(ctx, slog.LevelWarn, "fencecheck: the store refused a current fence with no write blocking it; failing closed",
				slog.String("decisionId", d.DecisionID), slog.String("keyHash", lockstore.HashKey(key)))
			d = c.unavailable(d)
			if d.Allowed {
				return d, nil
			}
			return d, errors.New("fencecheck: admit refused a matching fence without blocking writes")
		}

		// Older writes are in flight. How long until they count as
		// finished anyway, by the store's clock.
		last = res
		drainIn := time.Duration(res.BlockedUntilMs-res.State.NowMs) * time.Millisecond
		if d.Mode != ModeEnforce {
			// dry-run and warn promise never to affect traffic, so they
			// do not wait either: the would-deny is reported at once.
			return draining(drainIn), nil
		}
		if c.broken == brokenNoWait {
			ev.WriteID = ""
			return ev, nil
		}
		if attempt == 0 {
			waitStart = time.Now()
			waitEnd = waitStart.Add(maxWait)
			if ok, full := c.slots.take(key, client); !ok {
				// The gateway's waiters are all taken, or this key's or
				// this client's share of them (waiters.go): refuse now
				// rather than let waiting writes pile up behind a slow
				// API, or let one key or client take every slot.
				c.m.waitersFull.Inc()
				if full != waitersFullGateway {
					c.m.waitersShare.WithLabelValues(full).Inc()
				}
				return draining(drainIn), nil
			}
			slot = true
			c.waiters.Add(1)
			c.m.waiters.Inc()
			// Ask again at once, subscribed: a write that finished here
			// between that answer and the subscription woke no one.
			sub = c.wake.subscribe(key)
			continue
		}
		// Leave room for one more attempt as long as the last one took,
		// before both the budget and the caller's deadline.
		limit := time.Until(waitEnd) - took
		if dl, ok := ctx.Deadline(); ok {
			limit = min(limit, time.Until(dl)-2*took)
		}
		if limit <= 0 || ctx.Err() != nil {
			return draining(drainIn), nil
		}
		sleep := min(jitter(backoff), max(drainIn, time.Millisecond), limit)
		wake := sub.ch
		if c.broken == brokenNoWake {
			wake = nil
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			// The client left (or its deadline passed): stop waiting;
			// nothing was registered.
			t.Stop()
			return draining(drainIn), nil
		case <-wake:
			t.Stop()
		case <-t.C:
		}
		if sub.woken() {
			// Woken (or about to be): subscribe afresh before the next
			// store call, for the same reason as above.
			c.wake.release(key, sub)
			sub = c.wake.subscribe(key)
		}
		backoff = min(2*backoff, c.pollMax)
	}
}

// jitter spreads d over [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func (c *Checker) observeWait(waited time.Duration) {
	if waited > 0 {
		c.m.barrierWait.Observe(waited.Seconds())
	}
}

// retryAfter is a draining denial's Retry-After in whole seconds, from what
// is known when the write gives up: drainIn, the time until the blocking
// writes count as finished even without a response (their maxWrite
// deadlines, by the store's clock), and waited, how long this write already
// waited while they were in flight. A write in flight for that long is
// likely to end within about as long again (the same guess as an
// exponential backoff's), so the answer is waited (at least 1 s), or
// drainIn when that is sooner; rounded up, at least 1, at most
// MaxRetryAfter. The deadline alone is the worst case: a 30 s maxWrite
// would send every client away for the cap even when the blocking write
// ends 100 ms later.
func retryAfter(drainIn, waited time.Duration) int {
	d := min(drainIn, max(waited, time.Second))
	s := int((d + time.Second - 1) / time.Second)
	return min(max(s, 1), MaxRetryAfter)
}

// Finish reports that the write d admitted under the barrier has finished:
// the edge has the upstream's complete response. It removes the write's
// in-flight entry, so a newer fence may be admitted at once, and wakes the
// writes of this Checker waiting on the key. A Decision
// without a WriteID is a no-op. Call it once per admitted write, with a
// context that outlives the client (context.WithoutCancel): the store call
// is bounded by the Checker's FinishTimeout. An error leaves the entry to
// expire at MaxWrite; it is counted and logged here, and the caller need
// not act on it.
func (c *Checker) Finish(ctx context.Context, d Decision) error {
	if d.WriteID == "" {
		return nil
	}
	c.m.inflight.Dec()
	return c.finishEntry(ctx, d.barrierKey, d.WriteID, d.DecisionID)
}

// Abandon reports that the upstream exchange of the write d admitted under
// the barrier failed (an upstream error or timeout, or a stream that ended
// without a response): the edge cannot tell whether the API committed, so
// the entry stays until MaxWrite after admission, and newer fences wait for
// it. A Decision without a WriteID is a no-op. Call it at most once per
// admitted write, and never together with Finish. It wakes no waiter: the
// entry still blocks them, and each sleeps no longer than until the
// blocking entries' deadlines.
func (c *Checker) Abandon(ctx context.Context, d Decision) {
	if d.WriteID == "" {
		return
	}
	c.m.inflight.Dec()
	c.m.abandoned.Inc()
	// Debug, not info: a client makes a write abandoned by leaving, so one
	// line each would let anyone flood the logs; the count is in
	// fencegate_barrier_abandoned_total.
	c.log.LogAttrs(ctx, slog.LevelDebug, "fencecheck: barrier write abandoned; newer fences wait until its maxWrite",
		slog.String("decisionId", d.DecisionID))
}

// failedAdmitCleanup bounds taking back the entry of an Admit that failed:
// it delays that request's fail-closed 503 by at most this much.
const failedAdmitCleanup = 50 * time.Millisecond

// abandonFailedAdmit removes writeID's entry, if the failed Admit left one.
// Failure is expected (the store may be down) and only logged at debug.
func (c *Checker) abandonFailedAdmit(ctx context.Context, key, writeID string) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failedAdmitCleanup)
	defer cancel()
	err := c.store.Finish(fctx, key, writeID)
	c.wake.wake(key)
	if err != nil {
		c.log.LogAttrs(ctx, slog.LevelDebug, "fencecheck: could not take back the entry of a failed admit; it expires at its maxWrite",
			slog.String("keyHash", lockstore.HashKey(key)), slog.Any("error", err))
	}
}

func (c *Checker) finishEntry(ctx context.Context, key, writeID, decisionID string) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.finishTimeout)
	err := c.store.Finish(fctx, key, writeID)
	cancel()
	// Wake this process's waiters on the key whatever the answer: they ask
	// the store themselves (a failed Finish leaves the entry to expire).
	c.wake.wake(key)
	if err != nil {
		c.m.finishErrors.Inc()
		c.log.LogAttrs(ctx, slog.LevelWarn, "fencecheck: removing a finished barrier write failed; it expires at its maxWrite",
			slog.String("decisionId", decisionID),
			slog.String("keyHash", lockstore.HashKey(key)),
			slog.String("code", string(lockstore.CodeOf(err))),
			slog.Any("error", err))
		return fmt.Errorf("fencecheck: finish: %w", err)
	}
	return nil
}
