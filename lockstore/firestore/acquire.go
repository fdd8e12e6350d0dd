package firestore

import (
	"context"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Acquire tries once to take the lock on key for ttl. A plain read that
// finds a live lock answers "locked" (see lockedNow); otherwise one
// transaction reads the lock and counter documents together and, if the
// lock is absent or expired, writes the next fence to the counter and a new
// lock document (see acquireTx).
func (s *Store) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	const op = "acquire"
	nk, ttlMs, err := backend.PrecheckAcquire(ctx, key, ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockID, fenceID, err := docIDs(nk)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	defer cancel()
	id, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	a := acquisition{key: key, nk: nk, id: id, ttlMs: ttlMs,
		lockRef: s.locks.Doc(lockID), fenceRef: s.fences.Doc(fenceID)}

	switch locked, err := s.lockedNow(ctx, a.lockRef); {
	case err != nil:
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(err, nk, "")
	case locked:
		return lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}, nil
	}

	unlock, err := s.inflight.lock(ctx, op, lockID)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(err, nk, "")
	}
	defer unlock()
	var (
		res    lockstore.AcquireResult
		issued int64
	)
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		// The library may run us more than once: each attempt starts clean.
		res, issued, err = s.acquireTx(ctx, tx, a)
		return err
	}, firestore.MaxAttempts(s.cfg.MaxAttempts))
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), nk, "")
	}
	// After the commit, so a retried transaction does not warn twice.
	backend.NoteFence(ctx, s.log, nk, issued)
	return res, nil
}

// acquisition is what one Acquire call writes, decided before its
// transaction runs.
type acquisition struct {
	key, nk           string // the caller's key and its NFC form
	id                string // the new lockId
	ttlMs             int64
	lockRef, fenceRef *firestore.DocumentRef
}

// lockedNow is Acquire's contention fast path: a plain (strongly
// consistent, lock-free) read that finds a live lock answers "locked"
// without a transaction. Inside a read-write transaction the same read
// would take a shared lock on the holder's document — Firestore's
// transactions are pessimistic — and a crowd of waiters polling a held key
// would then stall the holder's own Extend and Release behind lock waits.
// The clock is read after the read returns, so a lock live at that instant
// was live when read: "locked" is a true answer for a moment inside this
// call. A free or expired key falls through to the transaction, which
// decides.
func (s *Store) lockedNow(ctx context.Context, lockRef *firestore.DocumentRef) (bool, error) {
	const op = "acquire"
	snap, err := lockRef.Get(ctx)
	switch {
	case status.Code(err) == codes.NotFound:
		return false, nil
	case err != nil:
		return false, classify(ctx, op, err)
	}
	cur, held, err := decodeLock(snap, op)
	if err != nil {
		return false, err
	}
	return held && backend.IsLive(cur.ExpiresAtMs, s.nowMs()), nil
}

// acquireTx is one attempt of Acquire's transaction. It returns the result
// and the fence number it issued (0 when the key was locked).
func (s *Store) acquireTx(ctx context.Context, tx *firestore.Transaction, a acquisition) (lockstore.AcquireResult, int64, error) {
	const op = "acquire"
	if err := checkpoint(ctx, op); err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	// The time authority is read inside the transaction (docs/design.md, "Authoritative expiry"), so a
	// retried attempt computes its expiry afresh.
	nowMs := s.nowMs()
	snaps, err := tx.GetAll([]*firestore.DocumentRef{a.lockRef, a.fenceRef})
	if err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	if err := checkpoint(ctx, op); err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	cur, held, err := decodeLock(snaps[0], op)
	if err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	if held && backend.IsLive(cur.ExpiresAtMs, nowMs) {
		return lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}, 0, nil
	}
	last, err := decodeCounter(snaps[1], op)
	if err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	// The lock document carries a copy of its fence. Should a counter ever
	// go missing while a lock document survives, continuing from the larger
	// of the two keeps fences strictly increasing.
	if held {
		if n, err := lockstore.ParseFence(cur.Fence); err == nil && n > last {
			last = n
		}
	}
	// The floor reads the clock again, after the reads: they may have
	// waited on the lock of a transaction that raised the counter to the
	// floor of a later instant than nowMs.
	next, fence, err := backend.NextFenceAt(op, a.key, last, max(nowMs, s.nowMs()), s.cfg.FenceFloor)
	if err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	if err := checkpoint(ctx, op); err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	if err := tx.Set(a.fenceRef, counterDoc{Fence: fence, KeyDebug: a.nk}); err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	exp := nowMs + a.ttlMs
	if err := tx.Set(a.lockRef, lockDoc{LockID: a.id, ExpiresAtMs: exp, AcquiredAtMs: nowMs, Key: a.nk, Fence: fence}); err != nil {
		return lockstore.AcquireResult{}, 0, err
	}
	return lockstore.AcquireResult{OK: true, LockID: a.id, Fence: fence, ExpiresAtMs: exp}, next, nil
}
