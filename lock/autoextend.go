package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Auto-extend: keeping a held lock alive from the holder's side.
//
// The schedule rule. A backend sets a lock's expiry to its own now + ttl
// while it processes the request, and it cannot process the request before
// the holder sent it. So the lock is certainly held until
//
//	validUntil = sentAt + ttl
//
// measured on the holder's monotonic clock from the moment the acquire or
// extend request was sent. That bound uses only durations, so it is immune
// to skew between the holder's wall clock and the backend's time authority;
// the authoritative ExpiresAtMs is kept for reporting but never compared to
// the local wall clock (with a skewed clock that comparison would extend too
// late, or declare a healthy lock lost). The next extend is sent at
//
//	sentAt + ttl*fraction        (fraction 1/2 by default)
//
// which leaves the other half of the TTL for retries. If no extend has
// succeeded by validUntil - margin (margin ttl/10 by default, so the work
// has time to stop), the lock is declared lost.
//
// The lock is lost, and the lease's context is cancelled with a
// *LockLostError cause (errors.Is(cause, ErrLockLost)), the moment:
//   - an extend answers OK=false (the lock expired or was released);
//   - an extend fails with an error that retrying cannot fix
//     (InvalidArgument, AuthFailed, Internal);
//   - validUntil - margin passes without a successful extend. Transient
//     errors (ServiceUnavailable, NetworkTimeout, lockstore.RateLimited) are retried
//     until then, since the lock is still certainly held.

// ErrLockLost is the cause (context.Cause) of a lease's or Lock's context
// when the lock could no longer be proved held. Test with errors.Is; the
// cause itself is a *LockLostError saying why.
var ErrLockLost = errors.New("lock: lock lost")

// ErrKeepAliveStopped is the cause of a lease's context after Stop.
var ErrKeepAliveStopped = errors.New("lock: keep-alive stopped")

// LostReason says why a lock was declared lost.
type LostReason string

// Reasons for a lost lock.
const (
	// LostNotHeld: an extend answered OK=false, the lock is gone.
	LostNotHeld LostReason = "not-held"
	// LostExtendError: an extend failed with an error retrying cannot fix.
	LostExtendError LostReason = "extend-error"
	// LostExpired: no extend succeeded before the lock could expire (or,
	// without auto-extend, the TTL ran out).
	LostExpired LostReason = "expired"
)

// LockLostError is the cause of a cancelled lease context. It matches
// ErrLockLost under errors.Is and unwraps to the extend error, if any.
type LockLostError struct {
	Reason LostReason
	// Detail is the backend's best-effort detail of an OK=false extend
	// (DetailExpired / DetailNotFound), if any.
	Detail string
	// Err is the extend error that ended the lease, if any.
	Err error
}

func (e *LockLostError) Error() string {
	s := "lock: lock lost: " + string(e.Reason)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the extend error, if any.
func (e *LockLostError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLockLost) true.
func (e *LockLostError) Is(target error) bool { return target == ErrLockLost }

// Held is a lock the caller holds: what Lock hands its function and what
// KeepAlive keeps alive. Copies share the current expiry, so a Held given
// to a function sees every extend made for it.
type Held struct {
	Key    string // the key as the caller gave it
	LockID string // the holder's secret handle; never log it
	Fence  string // the fence the acquire issued
	Proof  string // the gateway's signed write proof for Fence, when it gave one (Acquired.Proof)
	state  *heldState
}

// heldState is the part of a Held that auto-extend moves forward.
type heldState struct {
	mu          sync.Mutex
	expiresAtMs int64     // authoritative, from the backend
	validUntil  time.Time // local monotonic bound (the schedule rule); zero if unknown
}

// NewHeld describes a lock taken by an acquire of key for ttl that returned
// r and was sent at sentAt (read time.Now() just before sending). A zero
// sentAt means "unknown": KeepAlive then extends at once to learn a bound.
func NewHeld(key string, r Acquired, sentAt time.Time, ttl time.Duration) Held {
	st := &heldState{expiresAtMs: r.ExpiresAtMs}
	if !sentAt.IsZero() && ttl > 0 {
		st.validUntil = sentAt.Add(ttl)
	}
	return Held{Key: key, LockID: r.LockID, Fence: r.Fence, Proof: r.Proof, state: st}
}

// ExpiresAtMs is the current authoritative expiry (the backend's clock),
// updated by every successful extend; 0 if unknown.
func (h Held) ExpiresAtMs() int64 {
	if h.state == nil {
		return 0
	}
	h.state.mu.Lock()
	defer h.state.mu.Unlock()
	return h.state.expiresAtMs
}

// ValidUntil is the local instant before which the lock cannot have expired
// (see the schedule rule), updated by every successful extend; zero if
// unknown.
func (h Held) ValidUntil() time.Time {
	if h.state == nil {
		return time.Time{}
	}
	h.state.mu.Lock()
	defer h.state.mu.Unlock()
	return h.state.validUntil
}

func (h Held) update(expiresAtMs int64, validUntil time.Time) {
	h.state.mu.Lock()
	defer h.state.mu.Unlock()
	h.state.expiresAtMs = expiresAtMs
	h.state.validUntil = validUntil
}

// KeepAliveOption tunes KeepAlive (and Lock's WithAutoExtend).
type KeepAliveOption func(*keepAliveConfig)

type keepAliveConfig struct {
	fraction float64
	margin   time.Duration // <0: default ttl/10
	logger   *slog.Logger
	onExtend func(Held)
}

// ExtendAt sets when the next extend is sent, as a fraction of the TTL after
// the previous request was sent; it must be in (0, 1). Default 0.5.
func ExtendAt(fraction float64) KeepAliveOption {
	return func(c *keepAliveConfig) { c.fraction = fraction }
}

// LossMargin sets how long before the lock could expire the lease gives up
// and cancels its context, so the work has time to stop. It must be in
// [0, ttl*(1-fraction)). Default ttl/10.
func LossMargin(d time.Duration) KeepAliveOption {
	return func(c *keepAliveConfig) { c.margin = d }
}

// KeepAliveLogger sets the logger for a lost lock (Warn, with the key's hash
// only) and retried extends (Debug). nil means slog.Default().
func KeepAliveLogger(l *slog.Logger) KeepAliveOption {
	return func(c *keepAliveConfig) { c.logger = l }
}

// OnExtend registers a callback run, on the keep-alive goroutine, after each
// successful extend (for metrics or a CLI's status line). It must not block.
func OnExtend(fn func(Held)) KeepAliveOption {
	return func(c *keepAliveConfig) { c.onExtend = fn }
}

func newKeepAliveConfig(ttl time.Duration, opts []KeepAliveOption) (keepAliveConfig, error) {
	c := keepAliveConfig{fraction: 0.5, margin: -1}
	for _, o := range opts {
		o(&c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if !(c.fraction > 0 && c.fraction < 1) {
		return c, lockstore.Errorf(lockstore.InvalidArgument, "keepalive", "extend fraction must be in (0, 1), got %v", c.fraction)
	}
	if c.margin < 0 {
		c.margin = ttl / 10
	}
	if slack := time.Duration(float64(ttl) * (1 - c.fraction)); c.margin >= slack {
		return c, lockstore.Errorf(lockstore.InvalidArgument, "keepalive",
			"loss margin %s leaves no time to extend (ttl %s, extend at %v)", c.margin, ttl, c.fraction)
	}
	return c, nil
}

// Lease keeps one held lock alive in the background. Like etcd's
// concurrency.Session, its liveness is a channel: Done closes the moment the
// lock can no longer be proved held (or the lease is stopped, or its parent
// context ends). The goroutine is owned by the Lease: Stop ends it.
type Lease struct {
	held   Held
	ctx    context.Context
	cancel context.CancelCauseFunc
	exited chan struct{}
	once   sync.Once
}

// KeepAlive extends h's lock with ttl (each extend sets the expiry to the
// backend's now + ttl) on the schedule described at the top of this file,
// until Stop is called, ctx ends or the lock is lost. It does not release
// the lock: the caller does that after Stop.
//
// If h does not know when its request was sent (zero ValidUntil), the first
// extend is sent at once.
func KeepAlive(ctx context.Context, l Locker, h Held, ttl time.Duration, opts ...KeepAliveOption) (*Lease, error) {
	if _, err := lockstore.ValidateTTL(ttl); err != nil {
		return nil, err
	}
	if err := lockstore.ValidateLockID(h.LockID); err != nil {
		return nil, err
	}
	cfg, err := newKeepAliveConfig(ttl, opts)
	if err != nil {
		return nil, err
	}
	if h.state == nil {
		h.state = &heldState{}
	}
	lctx, cancel := context.WithCancelCause(ctx)
	ls := &Lease{held: h, ctx: lctx, cancel: cancel, exited: make(chan struct{})}
	go ls.run(l, ttl, cfg)
	return ls, nil
}

// Context is cancelled when the lock is lost (cause: a *LockLostError),
// after Stop (cause: ErrKeepAliveStopped), or when KeepAlive's ctx ends.
// Run the protected work under it.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Done is Context().Done().
func (ls *Lease) Done() <-chan struct{} { return ls.ctx.Done() }

// Lost returns the *LockLostError if the lock was lost, else nil.
func (ls *Lease) Lost() error {
	var le *LockLostError
	if errors.As(context.Cause(ls.ctx), &le) {
		return le
	}
	return nil
}

// Held is the lock this lease keeps alive, with its current expiry.
func (ls *Lease) Held() Held { return ls.held }

// Stop ends the keep-alive and waits for its goroutine to exit, cancelling
// an extend in flight. It does not release the lock. It is idempotent.
func (ls *Lease) Stop() {
	ls.once.Do(func() { ls.cancel(ErrKeepAliveStopped) })
	<-ls.exited
}

func (ls *Lease) run(l Locker, ttl time.Duration, cfg keepAliveConfig) {
	defer close(ls.exited)
	h := ls.held
	log := cfg.logger.With("keyHash", lockstore.HashKey(h.Key))
	lose := func(e *LockLostError) {
		ls.cancel(e)
		log.Warn("lock lost", "reason", string(e.Reason), "detail", e.Detail, "code", string(lockstore.CodeOf(e.Err)))
	}
	// The first extend goes out at sentAt+ttl*fraction, which is
	// validUntil - ttl*(1-fraction); with no bound known, right away.
	validUntil := h.ValidUntil()
	next := time.Now()
	if !validUntil.IsZero() {
		next = validUntil.Add(-time.Duration(float64(ttl) * (1 - cfg.fraction)))
	}
	// Retry pause after a transient failure: short against the TTL, so
	// several tries fit before the loss deadline.
	retryBase := max(ttl/16, 10*time.Millisecond)

	for {
		lossAt := time.Time{}
		if !validUntil.IsZero() {
			lossAt = validUntil.Add(-cfg.margin)
		}
		// Wait for the next extend, unless the loss deadline comes first.
		wake := next
		if !lossAt.IsZero() && lossAt.Before(wake) {
			wake = lossAt
		}
		if err := sleepCtx(ls.ctx, time.Until(wake)); err != nil {
			return
		}
		if !lossAt.IsZero() && !time.Now().Before(lossAt) {
			lose(&LockLostError{Reason: LostExpired})
			return
		}

		// No extend answer after lossAt is any use: the work has been
		// told to stop by then.
		actx, acancel := ls.ctx, context.CancelFunc(func() {})
		if !lossAt.IsZero() {
			actx, acancel = context.WithDeadline(ls.ctx, lossAt)
		}
		sent := time.Now()
		r, err := l.Extend(actx, h.LockID, ttl)
		acancel()

		switch {
		case ls.ctx.Err() != nil:
			return // stopped or parent ended; not a loss
		case err == nil && r.OK:
			validUntil = sent.Add(ttl)
			h.update(r.ExpiresAtMs, validUntil)
			next = sent.Add(time.Duration(float64(ttl) * cfg.fraction))
			if cfg.onExtend != nil {
				cfg.onExtend(h)
			}
		case err == nil:
			lose(&LockLostError{Reason: LostNotHeld, Detail: r.Detail})
			return
		case retryableExtend(err):
			if validUntil.IsZero() {
				// Without a known bound we cannot tell how long to keep
				// trying: treat the lock as unproven and give up.
				lose(&LockLostError{Reason: LostExtendError, Err: err})
				return
			}
			log.Debug("extend failed, retrying", "code", string(lockstore.CodeOf(err)))
			d := retryBase/2 + time.Duration(rand.Float64()*float64(retryBase/2))
			next = time.Now().Add(d)
		default:
			lose(&LockLostError{Reason: LostExtendError, Err: err})
			return
		}
	}
}

// retryableExtend reports whether an extend error may pass on retry.
func retryableExtend(err error) bool {
	switch lockstore.CodeOf(err) {
	case lockstore.ServiceUnavailable, lockstore.NetworkTimeout, lockstore.RateLimited:
		return true
	}
	return false
}

// String describes the lease for debugging without its secrets.
func (ls *Lease) String() string {
	return fmt.Sprintf("lock.Lease{keyHash=%s fence=%s}", lockstore.HashKey(ls.held.Key), ls.held.Fence)
}
