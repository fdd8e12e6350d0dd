package api

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

// boundedStore gives every single store call its own deadline (the
// caller's, if sooner). A waiting acquire is bounded per attempt, and its
// whole wait by waitMs.
type boundedStore struct {
	lockstore.Store
	d time.Duration
}

func (b boundedStore) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Store.Acquire(ctx, key, ttl)
}

func (b boundedStore) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Store.Release(ctx, lockID)
}

func (b boundedStore) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Store.Extend(ctx, lockID, ttl)
}

func (b boundedStore) IsLocked(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Store.IsLocked(ctx, key)
}

func (b boundedStore) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Store.LookupKey(ctx, key)
}

func (b boundedStore) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Store.Admit(ctx, key, a)
}

func (b boundedStore) Finish(ctx context.Context, key, writeID string) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Store.Finish(ctx, key, writeID)
}

func (b boundedStore) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return b.Store.LookupLockID(ctx, lockID)
}
