package fencecheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
)

// ErrMaxWriteOverCap: a barrier route's MaxWrite is above the gateway's
// cap (Options.MaxWriteCap). Its writes fail closed (503 unavailable):
// clamping would shorten how long the barrier waits for an abandoned
// write, silently weakening what the route asked for.
var ErrMaxWriteOverCap = errors.New("fencecheck: the route's maxWrite is above the gateway's cap (check.maxWriteCap)")

// Backoff between Admit attempts while older writes drain: short at first
// (most API writes take milliseconds), growing so that a long wait costs
// few store calls.
const (
	drainBackoffMin = 5 * time.Millisecond
	drainBackoffMax = 40 * time.Millisecond
)

// admit is the barrier's step 3: Admit instead of Inspect, retried while
// older writes drain, within the check's budget. key is normalised.
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
	a := lockstore.WriteAdmission{
		Fence:       r.Fence,
		RequireLive: d.Policy == PolicyHolder,
		WriteID:     writeID,
		MaxWrite:    maxWrite,
		MaxInFlight: c.maxInFlight,
	}

	// The wait's budget is the check's timeout, from the first answer on;
	// each attempt is bounded like a plain check's read.
	var (
		waitEnd time.Time
		waited  time.Duration
		backoff = drainBackoffMin
	)
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		res, aerr := c.store.Admit(actx, key, a)
		cancel()
		took := time.Since(t0)
		if refusedInput(aerr) {
			// As in check: a key the backend refuses as input is a bad
			// request, not an outage.
			c.observeWait(waited)
			return c.negative(d, ReasonMalformed), nil
		}
		if aerr != nil {
			c.observeWait(waited)
			// The call may have registered the entry before it failed (a
			// deadline that ran out after the store wrote it): take it back,
			// best effort and briefly, or it would hold newer fences off as
			// draining until its maxWrite. A store that is down fails this
			// fast; the entry then expires on its own.
			c.abandonFailedAdmit(ctx, key, writeID)
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
		d.Current = res.State.LatestFence
		ev := c.evaluate(d, r, pc, res.State)
		if res.Admitted {
			c.observeWait(waited)
			if !ev.Allowed || ev.WouldDeny {
				// The store admitted what the policy refuses (a lockId
				// proof it cannot see): take the entry back now rather
				// than let it block newer fences until MaxWrite.
				c.finishEntry(ctx, key, writeID, d.DecisionID)
				return ev, nil
			}
			ev.WriteID, ev.barrierKey = writeID, key
			c.m.inflight.Inc()
			return ev, nil
		}
		if !ev.Allowed || ev.WouldDeny {
			// The fence does not match (or the proof does not): the same
			// denial as without the barrier, no waiting.
			c.observeWait(waited)
			return ev, nil
		}
		if res.Full {
			// The key has its cap of writes in flight. Waiting would
			// mostly wait for abandoned entries (a holder with a thousand
			// writes open is the abuse the cap is for): refuse at once.
			c.observeWait(waited)
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
			c.observeWait(waited)
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
		drainIn := time.Duration(res.BlockedUntilMs-res.State.NowMs) * time.Millisecond
		if attempt == 0 {
			waitEnd = time.Now().Add(c.timeout)
		}
		if d.Mode != ModeEnforce {
			// dry-run and warn promise never to affect traffic, so they
			// do not wait either: the would-deny is reported at once.
			d.RetryAfter = retryAfter(drainIn)
			return c.negative(d, ReasonDraining), nil
		}
		sleep := min(backoff, max(drainIn, time.Millisecond))
		// Leave room for one more attempt as long as the last one took,
		// before both the budget and the caller's deadline.
		limit := time.Until(waitEnd) - took
		if dl, ok := ctx.Deadline(); ok {
			limit = min(limit, time.Until(dl)-2*took)
		}
		if sleep > limit || ctx.Err() != nil {
			c.observeWait(waited)
			d.RetryAfter = retryAfter(drainIn)
			return c.negative(d, ReasonDraining), nil
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			c.observeWait(waited + time.Since(t0) - took)
			d.RetryAfter = retryAfter(drainIn)
			return c.negative(d, ReasonDraining), nil
		case <-t.C:
		}
		waited += time.Since(t0) - took
		backoff = min(2*backoff, drainBackoffMax)
	}
}

func (c *Checker) observeWait(waited time.Duration) {
	if waited > 0 {
		c.m.barrierWait.Observe(waited.Seconds())
	}
}

// retryAfter is a draining denial's Retry-After in whole seconds: the time
// until the blocking writes' deadlines, rounded up, at least 1, at most
// MaxRetryAfter.
func retryAfter(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return min(max(s, 1), MaxRetryAfter)
}

// Finish reports that the write d admitted under the barrier has finished:
// the edge has the upstream's complete response. It removes the write's
// in-flight entry, so a newer fence may be admitted at once. A Decision
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
// admitted write, and never together with Finish.
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
	if err := c.store.Finish(fctx, key, writeID); err != nil {
		c.log.LogAttrs(ctx, slog.LevelDebug, "fencecheck: could not take back the entry of a failed admit; it expires at its maxWrite",
			slog.String("keyHash", lockstore.HashKey(key)), slog.Any("error", err))
	}
}

func (c *Checker) finishEntry(ctx context.Context, key, writeID, decisionID string) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.finishTimeout)
	err := c.store.Finish(fctx, key, writeID)
	cancel()
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
