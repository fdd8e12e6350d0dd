package lockserver

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// DefaultOpTimeout bounds one store call made for a request. Stores have
// their own network timeouts, but not every failure trips them (a frozen
// server accepts bytes and never answers; some client libraries retry until
// their context ends), and a request without a deadline must not wait
// forever: past the bound the caller gets NetworkTimeout (504).
const DefaultOpTimeout = 5 * time.Second

// boundedLocks gives every single lock operation its own deadline (the
// caller's, if sooner). A waiting acquire is bounded per attempt, and its
// whole wait by waitMs. It wraps only the lock operations: what they wrap
// stays reachable through Unwrap (lockstore.As).
type boundedLocks struct {
	lockstore.Locks
	d time.Duration
}

// Unwrap returns the bounded lock operations (lockstore.As).
func (b boundedLocks) Unwrap() any { return b.Locks }

func (b boundedLocks) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Locks.Acquire(ctx, key, ttl)
}

func (b boundedLocks) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Locks.Release(ctx, lockID)
}

func (b boundedLocks) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Locks.Extend(ctx, lockID, ttl)
}

func (b boundedLocks) IsLocked(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Locks.IsLocked(ctx, key)
}

func (b boundedLocks) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Locks.LookupKey(ctx, key)
}

func (b boundedLocks) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Locks.LookupLockID(ctx, lockID)
}
