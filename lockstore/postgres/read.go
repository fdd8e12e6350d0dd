package postgres

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// IsLocked reports whether key has a live lock. Read-only: expired rows are
// left for the next acquire to overwrite. One round trip.
func (s *Store) IsLocked(ctx context.Context, key string) (bool, error) {
	const op = "isLocked"
	nk, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return false, err
	}
	lockKey, _, err := storageKeys(nk)
	if err != nil {
		return false, lockstore.WithKeyLockID(err, key, "")
	}
	if err := s.checkOpen(op); err != nil {
		return false, err
	}
	var (
		nowMs int64
		exp   *int64
	)
	if err := s.pool.QueryRow(ctx, s.sql.isLocked, lockKey).Scan(&nowMs, &exp); err != nil {
		return false, lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	return exp != nil && backend.IsLive(*exp, nowMs), nil
}

// lockRow is a lock table row as the read statements return it (every
// column nullable because of the LEFT JOIN onto the clock).
type lockRow struct {
	nowMs      int64
	lockID     *string
	expiresAt  *int64
	acquiredAt *int64
	fence      *string
	userKey    *string
}

func (r *lockRow) dest() []any {
	return []any{&r.nowMs, &r.lockID, &r.expiresAt, &r.acquiredAt, &r.fence, &r.userKey}
}

func (r *lockRow) live() bool {
	return r.lockID != nil && r.expiresAt != nil && r.acquiredAt != nil && r.fence != nil &&
		backend.IsLive(*r.expiresAt, r.nowMs)
}

// info is the sanitised view: hashes, never the raw key or lockId.
func (r *lockRow) info(userKey string) *lockstore.LockInfo {
	return lockstore.Lock{Key: userKey, LockID: *r.lockID, Fence: *r.fence, ExpiresAtMs: *r.expiresAt, AcquiredAtMs: *r.acquiredAt}.Info()
}

// LookupKey returns the sanitised live lock on key, or nil. One round trip.
func (s *Store) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	const op = "lookup"
	nk, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return nil, err
	}
	lockKey, _, err := storageKeys(nk)
	if err != nil {
		return nil, lockstore.WithKeyLockID(err, key, "")
	}
	if err := s.checkOpen(op); err != nil {
		return nil, err
	}
	var r lockRow
	if err := s.pool.QueryRow(ctx, s.sql.lookupKey, lockKey).Scan(r.dest()...); err != nil {
		return nil, lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	if !r.live() {
		return nil, nil
	}
	return r.info(nk), nil
}

// LookupLockID returns the sanitised live lock lockID holds, or nil. One
// round trip through the unique lock_id index.
func (s *Store) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	const op = "lookup"
	if err := backend.PrecheckLockID(ctx, op, lockID); err != nil {
		return nil, err
	}
	if err := s.checkOpen(op); err != nil {
		return nil, err
	}
	var r lockRow
	if err := s.pool.QueryRow(ctx, s.sql.lookupLockID, lockID).Scan(r.dest()...); err != nil {
		return nil, lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	// Ownership verification after the indexed read (docs/design.md, "Backends").
	if !r.live() || *r.lockID != lockID || r.userKey == nil {
		return nil, nil
	}
	return r.info(*r.userKey), nil
}

// Inspect reads the live lock on key and the latest fence ever issued for it
// in one statement: one snapshot, one server clock reading, one round trip.
func (s *Store) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	const op = "inspect"
	nk, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	lockKey, fenceKey, err := storageKeys(nk)
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithKeyLockID(err, key, "")
	}
	if err := s.checkOpen(op); err != nil {
		return lockstore.KeyState{}, err
	}
	var (
		r       lockRow
		counter *int64
	)
	dest := append(r.dest()[:5], &counter) // no user_key column in inspect
	if err := s.pool.QueryRow(ctx, s.sql.inspect, lockKey, fenceKey).Scan(dest...); err != nil {
		return lockstore.KeyState{}, lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	ks := lockstore.KeyState{NowMs: r.nowMs}
	if r.live() {
		ks.Live = &lockstore.Lock{
			Key:          nk,
			LockID:       *r.lockID,
			Fence:        *r.fence,
			ExpiresAtMs:  *r.expiresAt,
			AcquiredAtMs: *r.acquiredAt,
		}
	}
	if counter != nil && *counter > 0 {
		// %015d, not FormatFence: a counter an operator pushed past
		// FenceMax must still be reported, not hidden.
		ks.LatestFence = fmt.Sprintf("%0*d", lockstore.FenceDigits, *counter)
	}
	if ks.Live != nil && ks.Live.Fence > ks.LatestFence {
		// Only if the counter row was tampered with; the contract says
		// LatestFence is at least the live fence.
		ks.LatestFence = ks.Live.Fence
	}
	return ks, nil
}

// CountHeld counts live locks (for the fencegate_locks_held gauge) with a
// range scan of the expires_at_ms index. One round trip.
func (s *Store) CountHeld(ctx context.Context) (int64, error) {
	const op = "countHeld"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, s.sql.countHeld).Scan(&n); err != nil {
		return 0, classify(ctx, op, err)
	}
	return n, nil
}
