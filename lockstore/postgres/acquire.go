package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Acquire takes key for ttl in one transaction: the advisory lock on the
// storage key, the fence counter's insert-if-absent, then one statement that
// checks the holder, moves the counter to the next fence (the clock floor's
// rule, backend.NextFenceAt, on the server's clock) and writes the lock with an expiry computed from the server's
// now(). The three statements go out as one pgx batch, which pgx sends as a
// pipeline closed by a single Sync, so PostgreSQL runs them in one implicit
// transaction and the whole acquire is one network round trip.
func (s *Store) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	const op = "acquire"
	nk, ttlMs, err := backend.PrecheckAcquire(ctx, key, ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockKey, fenceKey, err := storageKeys(nk)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(err, key, "")
	}
	if err := s.checkOpen(op); err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockID, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.AcquireResult{}, err
	}

	var (
		free            bool
		issued, expires *int64
		prior           *int64
		floor           int64
	)
	b := &pgx.Batch{}
	b.Queue(s.sql.acquireLock, lockKey)
	b.Queue(s.sql.acquireInit, fenceKey)
	b.Queue(s.sql.acquire, lockKey, fenceKey, lockID, ttlMs, nk, lockstore.FenceMax, s.cfg.FenceFloor == backend.FloorClock).
		QueryRow(func(row pgx.Row) error { return row.Scan(&free, &issued, &expires, &prior, &floor) })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}

	switch {
	case !free:
		return lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}, nil
	case issued == nil && prior != nil:
		// The guarded UPDATE matched nothing, so nothing was written; the
		// rule that refused it is backend.NextFenceAt's.
		if _, _, err := backend.NextFenceAt(op, key, *prior, floor/backend.FloorPerMs+backend.FloorEpochMs, s.cfg.FenceFloor); err != nil {
			return lockstore.AcquireResult{}, err
		}
		return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
			Msg: "postgres: acquire issued no fence although the key was free and the counter allows one"}
	case issued == nil || expires == nil:
		return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
			Msg: "postgres: acquire wrote no lock although the key was free (counter row missing?)"}
	}
	fence, err := lockstore.FormatFence(*issued)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(err, key, "")
	}
	backend.NoteFence(ctx, s.log, nk, *issued)
	return lockstore.AcquireResult{OK: true, LockID: lockID, Fence: fence, ExpiresAtMs: *expires}, nil
}
