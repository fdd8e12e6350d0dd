package lockserver

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

// The operations below are the transport-neutral core the HTTP and gRPC
// handlers share: input validation, key-scope checks and the store calls.
// Authentication and the per-operation scope check happen in the transport
// before the request body is read.

// maxTTLMs keeps ttlMs * time.Millisecond inside a time.Duration.
const maxTTLMs = math.MaxInt64 / int64(time.Millisecond)

// authorizeOp checks that p may call op. A nil p means auth is off.
func authorizeOp(p *auth.Principal, op auth.Operation) error {
	if p == nil || p.CanDo(op) {
		return nil
	}
	return &apiError{code: lockstore.AuthFailed, forbidden: true, wwwAuth: "insufficient_scope",
		msg: fmt.Sprintf("token %q may not call %s", p.Name, op)}
}

// authorizeKey normalises key (so the scope check sees what the store will
// see) and checks p's prefixes cover it.
func authorizeKey(p *auth.Principal, key string) (string, error) {
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return "", err
	}
	if p != nil && !p.CanUseKey(nk) {
		return "", &apiError{code: lockstore.AuthFailed, forbidden: true, wwwAuth: "insufficient_scope",
			msg: fmt.Sprintf("token %q has no scope for this key", p.Name)}
	}
	return nk, nil
}

// ttlFrom turns an optional ttlMs into a duration; absent means the
// default (or an error when required).
func ttlFrom(ms *int64, required bool) (time.Duration, error) {
	if ms == nil {
		if required {
			return 0, invalidArgument("ttlMs is required")
		}
		return lockstore.DefaultTTL, nil
	}
	if *ms <= 0 {
		return 0, invalidArgument("ttlMs must be a positive integer")
	}
	if *ms > maxTTLMs {
		return 0, invalidArgument("ttlMs is too large")
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// waitFrom validates waitMs against the server's cap. Over the cap is an
// error, not a clamp: a client that asked for 60 s and got a 409 after 30 s
// would draw the wrong conclusion.
func (s *Server) waitFrom(ms *int64) (time.Duration, error) {
	if ms == nil || *ms == 0 {
		return 0, nil
	}
	if *ms < 0 {
		return 0, invalidArgument("waitMs must not be negative")
	}
	if *ms > s.maxWait.Milliseconds() {
		return 0, invalidArgument(fmt.Sprintf("waitMs must be at most %d", s.maxWait.Milliseconds()))
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

func validLockID(id string) error {
	if id == "" {
		return invalidArgument("lockId is required")
	}
	return lockstore.ValidateLockID(id)
}

func (s *Server) acquireLock(ctx context.Context, p *auth.Principal, key string, ttlMs, waitMs *int64) (lockstore.AcquireResult, error) {
	ttl, err := ttlFrom(ttlMs, false)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	wait, err := s.waitFrom(waitMs)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	nk, err := authorizeKey(p, key)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	if wait == 0 {
		return s.noteFence(s.store.Acquire(ctx, nk, ttl))
	}
	// Retry on contention until wait has passed, with SyncGuard's
	// exponential backoff and equal jitter (the zero RetryPolicy's
	// strategy). The attempt count is unbounded: waitMs is a time budget,
	// not a retry count. ctx is the request's, so a client that goes away
	// stops the loop (Aborted) at once, mid-sleep included.
	res, err := lock.AcquireWithRetry(ctx, lock.FromStore(s.store), nk, ttl, lock.RetryPolicy{
		MaxRetries: math.MaxInt,
		Timeout:    wait,
	})
	if lockstore.CodeOf(err) == lockstore.AcquisitionTimeout && ctx.Err() == nil {
		// docs/api.md: when waitMs runs out the answer is the same "locked" as
		// an immediate attempt, not an error.
		return lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}, nil
	}
	return s.noteFence(res.AcquireResult, err)
}

func (s *Server) release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	if err := validLockID(lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	return s.store.Release(ctx, lockID)
}

func (s *Server) extend(ctx context.Context, lockID string, ttlMs *int64) (lockstore.ExtendResult, error) {
	if err := validLockID(lockID); err != nil {
		return lockstore.ExtendResult{}, err
	}
	ttl, err := ttlFrom(ttlMs, true)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	return s.store.Extend(ctx, lockID, ttl)
}

// lookup takes exactly one of key or lockID (nil = absent). A lookup by
// lockId is authorised by operation only: the lockId is the capability.
func (s *Server) lookup(ctx context.Context, p *auth.Principal, key, lockID *string) (*lockstore.LockInfo, error) {
	switch {
	case key != nil && lockID != nil:
		return nil, invalidArgument("lookup takes exactly one of key and lockId, not both")
	case key != nil:
		nk, err := authorizeKey(p, *key)
		if err != nil {
			return nil, err
		}
		return s.store.LookupKey(ctx, nk)
	case lockID != nil:
		if err := validLockID(*lockID); err != nil {
			return nil, err
		}
		return s.store.LookupLockID(ctx, *lockID)
	default:
		return nil, invalidArgument("lookup takes exactly one of key and lockId")
	}
}

func (s *Server) isLocked(ctx context.Context, p *auth.Principal, key string) (bool, error) {
	nk, err := authorizeKey(p, key)
	if err != nil {
		return false, err
	}
	return s.store.IsLocked(ctx, nk)
}

// errAuditOff answers /v1/audit when no AuditLog was configured: 501, since
// retrying will not help.
var errAuditOff = &apiError{code: lockstore.ServiceUnavailable, httpStatus: 501,
	msg: "the audit log is not configured on this server"}

// audit queries the audit trail. Without a key filter the token must cover
// every key, since events of any key come back.
func (s *Server) audit(ctx context.Context, p *auth.Principal, key *string, sinceMs int64, limit int) ([]lockstore.AuditEvent, error) {
	if s.auditLog == nil {
		return nil, errAuditOff
	}
	q := lockstore.AuditQuery{SinceMs: sinceMs, Limit: limit}
	if key != nil {
		nk, err := authorizeKey(p, *key)
		if err != nil {
			return nil, err
		}
		q.Key = nk
	} else if p != nil && !p.CanUseAllKeys() {
		return nil, &apiError{code: lockstore.AuthFailed, forbidden: true, wwwAuth: "insufficient_scope",
			msg: fmt.Sprintf("token %q is limited to key prefixes; pass key=", p.Name)}
	}
	qctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	events, err := s.auditLog.QueryAudit(qctx, q)
	if err != nil {
		return nil, err
	}
	if events == nil {
		events = []lockstore.AuditEvent{}
	}
	return events, nil
}
