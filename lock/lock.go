package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// DefaultReleaseTimeout bounds the release Lock makes after its function
// returns: long enough for one round trip to a slow backend, short enough
// that a dead backend does not hold the caller (the lock expires by TTL).
const DefaultReleaseTimeout = 5 * time.Second

// LockOption tunes Lock.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl            time.Duration
	retry          RetryPolicy
	autoExtend     bool
	keepAlive      []KeepAliveOption
	onReleaseError func(error, Held)
	releaseTimeout time.Duration
}

// WithTTL sets the lock's TTL (default DefaultTTL, 30 s). It must be a
// positive whole number of milliseconds.
func WithTTL(ttl time.Duration) LockOption { return func(c *lockConfig) { c.ttl = ttl } }

// WithRetry sets how contention is retried (default: the zero RetryPolicy,
// SyncGuard's defaults).
func WithRetry(p RetryPolicy) LockOption { return func(c *lockConfig) { c.retry = p } }

// WithAutoExtend keeps the lock alive while the function runs (see
// KeepAlive for the schedule), cancelling the function's context with a
// *LockLostError cause the moment the lock is lost.
func WithAutoExtend(opts ...KeepAliveOption) LockOption {
	return func(c *lockConfig) {
		c.autoExtend = true
		c.keepAlive = append(c.keepAlive, opts...)
	}
}

// WithReleaseErrorHandler receives the error of a failed release with the
// lock it concerned. Without it, release errors are ignored: the lock
// expires by its TTL. The handler runs on the caller's goroutine; a panic
// in it is swallowed.
func WithReleaseErrorHandler(fn func(err error, h Held)) LockOption {
	return func(c *lockConfig) { c.onReleaseError = fn }
}

// WithReleaseTimeout bounds the final release (default
// DefaultReleaseTimeout).
func WithReleaseTimeout(d time.Duration) LockOption {
	return func(c *lockConfig) { c.releaseTimeout = d }
}

// Lock runs fn while holding the lock on key: SyncGuard's lock() helper.
//
// It acquires with retry (WithRetry; AcquisitionTimeout when contention
// outlasts the policy), runs fn, and always releases, even when fn fails or
// panics (the panic then continues). The release uses ctx if it is still
// live, else a fresh context detached from ctx's cancellation, bounded by
// the release timeout either way.
//
// fn's context is cancelled when Lock's ctx is, and, with a *LockLostError
// cause (errors.Is(context.Cause(ctx), ErrLockLost)), when the lock can no
// longer be proved held: without WithAutoExtend, once the TTL (less a
// tenth, for the work to stop) has run out; with it, when an extend fails
// (see KeepAlive).
//
// The result is fn's error; a release error never replaces it (it goes to
// the WithReleaseErrorHandler callback). If the lock was lost while fn ran,
// the result also matches ErrLockLost: on its own when fn returned nil (the
// work was not protected to the end), joined to fn's error otherwise.
func Lock(ctx context.Context, l Locker, key string, fn func(ctx context.Context, h Held) error, opts ...LockOption) (err error) {
	cfg := lockConfig{ttl: lockstore.DefaultTTL, releaseTimeout: DefaultReleaseTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if fn == nil {
		return lockstore.Errorf(lockstore.InvalidArgument, "lock", "fn must not be nil")
	}
	if _, err := lockstore.ValidateTTL(cfg.ttl); err != nil {
		return err
	}
	if cfg.releaseTimeout <= 0 {
		return lockstore.Errorf(lockstore.InvalidArgument, "lock", "release timeout must be positive, got %s", cfg.releaseTimeout)
	}
	// Check the keep-alive options before taking the lock, so a bad option
	// is not discovered while holding it.
	if cfg.autoExtend {
		if _, err := newKeepAliveConfig(cfg.ttl, cfg.keepAlive); err != nil {
			return err
		}
	}

	r, sent, err := acquireWithRetry(ctx, l, key, cfg.ttl, cfg.retry)
	if err != nil {
		return err
	}
	h := NewHeld(key, r, sent, cfg.ttl)

	var (
		fnCtx context.Context
		stop  func()
		lost  func() error
	)
	if cfg.autoExtend {
		lease, kerr := KeepAlive(ctx, l, h, cfg.ttl, cfg.keepAlive...)
		if kerr != nil {
			// Unreachable after the checks above short of a backend
			// handing back a malformed lockId; don't keep the lock.
			release(ctx, l, h, cfg)
			return kerr
		}
		fnCtx, stop, lost = lease.Context(), lease.Stop, lease.Lost
	} else {
		c, cancel := context.WithDeadlineCause(ctx, h.ValidUntil().Add(-cfg.ttl/10),
			&LockLostError{Reason: LostExpired})
		fnCtx, stop = c, cancel
		lost = func() error {
			var le *LockLostError
			if errors.As(context.Cause(c), &le) {
				return le
			}
			return nil
		}
	}

	// Deferred so that it runs when fn panics too; the panic then goes on
	// unwinding with its original stack.
	defer func() {
		lostErr := lost() // read before stop, which cancels with another cause
		stop()
		release(ctx, l, h, cfg)
		if lostErr != nil {
			if err == nil {
				err = lostErr
			} else if !errors.Is(err, ErrLockLost) {
				err = fmt.Errorf("%w (%w)", err, lostErr)
			}
		}
	}()
	return fn(fnCtx, h)
}

// release drops h's lock, routing a failure to the configured handler.
func release(ctx context.Context, l Locker, h Held, cfg lockConfig) {
	base := ctx
	if ctx.Err() != nil {
		base = context.WithoutCancel(ctx)
	}
	rctx, cancel := context.WithTimeout(base, cfg.releaseTimeout)
	defer cancel()
	// OK=false (already expired or released) is not an error: the lock is
	// gone either way, and a loss has already been reported through fn's
	// context.
	_, err := l.Release(rctx, h.LockID)
	if err == nil || cfg.onReleaseError == nil {
		return
	}
	if cerr := lockstore.ContextError(rctx, "release"); cerr != nil {
		cerr.Err = err
		err = cerr
	}
	func() {
		defer func() { _ = recover() }() // the callback must not break the release path
		cfg.onReleaseError(err, h)
	}()
}
