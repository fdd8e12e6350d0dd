package lock

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Backoff selects how the delay between acquire attempts grows.
type Backoff string

// Backoff strategies (docs/design.md, "Retries live in the helper").
const (
	// BackoffExponential doubles the base delay each attempt:
	// RetryDelay * 2^(attempt-1), attempt being 1-based. The default.
	BackoffExponential Backoff = "exponential"
	// BackoffFixed waits RetryDelay (before jitter) every time.
	BackoffFixed Backoff = "fixed"
)

// Jitter selects how much of the base delay is randomised, so that many
// waiters released at once do not retry in lockstep.
type Jitter string

// Jitter kinds (docs/design.md, "Retries live in the helper"). With r uniform in [0, 1):
const (
	JitterEqual Jitter = "equal" // base/2 + r*base/2: never less than half the base. The default.
	JitterFull  Jitter = "full"  // r*base
	JitterNone  Jitter = "none"  // base
)

// Retry defaults: SyncGuard's LOCK_DEFAULTS.
const (
	DefaultMaxRetries     = 10
	DefaultRetryDelay     = 100 * time.Millisecond
	DefaultAcquireTimeout = 5 * time.Second
)

// NoRetries, as RetryPolicy.MaxRetries, makes exactly one attempt. (Zero
// cannot say that: a zero RetryPolicy means "the defaults".)
const NoRetries = -1

// RetryPolicy is how AcquireWithRetry and Lock retry an acquire that met
// contention. Its zero value is SyncGuard's default: 10 retries (11 attempts),
// 100 ms base delay, exponential backoff, equal jitter, 5 s timeout.
//
// Only contention (an Acquired with OK=false) is retried. A system error
// ends the loop at once with that error: backends are single-attempt
// (docs/design.md, "Retries live in the helper"), and an error is a different answer from "someone holds it".
type RetryPolicy struct {
	// MaxRetries is the number of retries after the first attempt; 0 means
	// DefaultMaxRetries and NoRetries (any negative value) means none.
	MaxRetries int
	// RetryDelay is the base delay; 0 means DefaultRetryDelay.
	RetryDelay time.Duration
	// Timeout is the hard wall for the whole loop, measured from its start;
	// 0 means DefaultAcquireTimeout. Each attempt itself is bounded only by
	// the caller's context (an acquire cut short by our own timer could have
	// taken the lock on the backend and leave it orphaned until its TTL).
	Timeout time.Duration
	// Backoff is BackoffExponential (when empty) or BackoffFixed.
	Backoff Backoff
	// Jitter is JitterEqual (when empty), JitterFull or JitterNone.
	Jitter Jitter
	// Rand returns a number in [0, 1); nil means math/rand/v2's Float64.
	// Tests inject it to pin the jitter.
	Rand func() float64
}

// WithDefaults returns p with its zero fields filled. It is idempotent.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxRetries == 0 {
		p.MaxRetries = DefaultMaxRetries
	}
	if p.RetryDelay == 0 {
		p.RetryDelay = DefaultRetryDelay
	}
	if p.Timeout == 0 {
		p.Timeout = DefaultAcquireTimeout
	}
	if p.Backoff == "" {
		p.Backoff = BackoffExponential
	}
	if p.Jitter == "" {
		p.Jitter = JitterEqual
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return p
}

// Validate reports a negative duration or an unknown strategy as
// InvalidArgument. Zero fields are valid (they mean the defaults).
func (p RetryPolicy) Validate() error {
	switch {
	case p.RetryDelay < 0:
		return lockstore.Errorf(lockstore.InvalidArgument, "retry", "retry delay must not be negative, got %s", p.RetryDelay)
	case p.Timeout < 0:
		return lockstore.Errorf(lockstore.InvalidArgument, "retry", "acquire timeout must not be negative, got %s", p.Timeout)
	}
	switch p.Backoff {
	case "", BackoffExponential, BackoffFixed:
	default:
		return lockstore.Errorf(lockstore.InvalidArgument, "retry", "unknown backoff %q (want exponential or fixed)", p.Backoff)
	}
	switch p.Jitter {
	case "", JitterEqual, JitterFull, JitterNone:
	default:
		return lockstore.Errorf(lockstore.InvalidArgument, "retry", "unknown jitter %q (want equal, full or none)", p.Jitter)
	}
	return nil
}

// retries is the number of retries p allows (after WithDefaults).
func (p RetryPolicy) retries() int { return max(p.MaxRetries, 0) }

// Delay is the wait after the attempt-th failed attempt (1-based), before
// clamping to the time left: SyncGuard's formula with p's backoff and jitter.
// Zero fields take their defaults. A delay too large for a Duration
// saturates instead of wrapping.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	p = p.WithDefaults()
	base := float64(p.RetryDelay)
	if p.Backoff == BackoffExponential && attempt > 1 {
		base *= math.Pow(2, float64(attempt-1))
	}
	r := p.Rand()
	// A misbehaving injected source must not produce a negative or
	// oversized delay.
	if !(r >= 0) { // also catches NaN
		r = 0
	} else if r > 1 {
		r = 1
	}
	var d float64
	switch p.Jitter {
	case JitterFull:
		d = r * base
	case JitterNone:
		d = base
	default:
		d = base/2 + r*(base/2)
	}
	if d >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// AcquireWithRetry acquires key for ttl, retrying contention under policy p:
// at most p.MaxRetries+1 attempts, sleeping Delay(attempt) after each failed
// one, each sleep clamped so the loop ends by p.Timeout.
//
// When attempts or time run out, it returns the last (OK=false) result and
// an *Error with Code AcquisitionTimeout (the HTTP API maps that to its 409
// "locked" answer for waitMs). A system error from l ends the loop with that
// error. Cancelling ctx ends it with Aborted, ctx's deadline with
// NetworkTimeout (ContextError), even in the middle of a sleep.
func AcquireWithRetry(ctx context.Context, l Locker, key string, ttl time.Duration, p RetryPolicy) (Acquired, error) {
	r, _, err := acquireWithRetry(ctx, l, key, ttl, p)
	return r, err
}

// acquireWithRetry is AcquireWithRetry that also returns when the winning
// attempt was sent, the start of the auto-extend clock.
func acquireWithRetry(ctx context.Context, l Locker, key string, ttl time.Duration, p RetryPolicy) (Acquired, time.Time, error) {
	if err := p.Validate(); err != nil {
		return Acquired{}, time.Time{}, err
	}
	p = p.WithDefaults()
	start := time.Now()
	timeout := func(attempts int, last Acquired) (Acquired, time.Time, error) {
		return last, time.Time{}, &lockstore.Error{Code: lockstore.AcquisitionTimeout, Op: "acquire", Key: key,
			Msg: fmt.Sprintf("not acquired after %d attempt(s) in %s", attempts, time.Since(start).Round(time.Millisecond))}
	}
	var last Acquired
	for attempt := 1; ; attempt++ {
		if err := lockstore.ContextError(ctx, "acquire"); err != nil {
			return last, time.Time{}, lockstore.WithKeyLockID(err, key, "")
		}
		sent := time.Now()
		r, err := l.Acquire(ctx, key, ttl)
		if err != nil {
			// A driver's own wording of a cancelled call must not decide
			// the code; the context's state does.
			if cerr := lockstore.ContextError(ctx, "acquire"); cerr != nil {
				cerr.Err = err
				return last, time.Time{}, lockstore.WithKeyLockID(cerr, key, "")
			}
			return last, time.Time{}, err
		}
		if r.OK {
			return r, sent, nil
		}
		last = r
		if attempt > p.retries() {
			return timeout(attempt, last)
		}
		// Clamp the sleep to the wall. A sleep that was clamped is followed
		// by one last attempt at the wall (the next clamp is then 0); checking
		// the wall again before that attempt would waste the sleep.
		d := min(p.Delay(attempt), p.Timeout-time.Since(start))
		if d <= 0 {
			return timeout(attempt, last)
		}
		if err := sleepCtx(ctx, d); err != nil {
			return last, time.Time{}, lockstore.WithKeyLockID(lockstore.ContextError(ctx, "acquire"), key, "")
		}
	}
}

// sleepCtx waits d or until ctx is done, whichever is first; it returns
// ctx.Err() in the second case.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
