package firestore

import (
	"context"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// IsLocked reports whether key has a live lock. It only reads.
func (s *Store) IsLocked(ctx context.Context, key string) (bool, error) {
	info, err := s.lookupKey(ctx, "isLocked", key)
	return info != nil, err
}

// LookupKey returns the sanitised live lock on key, or nil.
func (s *Store) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	return s.lookupKey(ctx, "lookup", key)
}

func (s *Store) lookupKey(ctx context.Context, op, key string) (*lockstore.LockInfo, error) {
	nk, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return nil, err
	}
	lockID, err := lockDocID(nk)
	if err != nil {
		return nil, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer cancel()
	snap, err := s.locks.Doc(lockID).Get(ctx)
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, lockstore.WithKeyLockID(classify(ctx, op, err), nk, "")
	}
	nowMs := s.nowMs()
	l, ok, err := decodeLock(snap, op)
	if err != nil || !ok || !backend.IsLive(l.ExpiresAtMs, nowMs) || !keyIs(l, nk) {
		return nil, lockstore.WithKeyLockID(err, nk, "")
	}
	return sanitise(nk, l), nil
}

// keyIs reports whether the lock document l belongs to the normalised key
// nk. Keys that are not legal document IDs ('/' and the like) live under a
// hashed ID, and a user key may spell that very hash: the two then share a
// document. Reads must not report the other key's lock as this key's (the
// edge check would accept its fence); acquires already treat it as
// contention, and the shared counter still only grows.
func keyIs(l lockDoc, nk string) bool {
	k, err := lockstore.NormalizeKey(l.Key)
	return err == nil && k == nk
}

// LookupLockID returns the sanitised live lock lockID holds, or nil. It is
// a plain indexed query (docs/design.md, "Lookup is diagnostic") and never mutates:
// duplicates make it return nil without deleting anything.
func (s *Store) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	const op = "lookup"
	if err := backend.PrecheckLockID(ctx, op, lockID); err != nil {
		return nil, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer cancel()
	docs, err := s.locks.Where("lockId", "==", lockID).Documents(ctx).GetAll()
	if err != nil {
		return nil, lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	m, err := s.resolve(op, lockID, docs, s.nowMs(), false)
	if err != nil {
		return nil, lockstore.WithKeyLockID(err, "", lockID)
	}
	if m.live == nil {
		return nil, nil
	}
	return sanitise(m.lock.Key, m.lock), nil
}

// Inspect reads the lock and counter documents of key in one batched read
// (one BatchGetDocuments call, one consistent snapshot) and reports the
// live lock and the latest fence ever issued for the key.
func (s *Store) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	const op = "inspect"
	nk, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	lockID, fenceID, err := docIDs(nk)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	defer cancel()
	snaps, err := s.client.GetAll(ctx, []*firestore.DocumentRef{s.locks.Doc(lockID), s.fences.Doc(fenceID)})
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithKeyLockID(classify(ctx, op, err), nk, "")
	}
	// Read the clock after the read returns: a later "now" can only make
	// a lock look expired sooner, which is the safe side for the check.
	st := lockstore.KeyState{NowMs: s.nowMs()}
	l, held, err := decodeLock(snaps[0], op)
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithKeyLockID(err, nk, "")
	}
	latest, err := decodeCounter(snaps[1], op)
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithKeyLockID(err, nk, "")
	}
	if held && keyIs(l, nk) {
		if n, err := lockstore.ParseFence(l.Fence); err == nil && n > latest {
			latest = n
		}
		if backend.IsLive(l.ExpiresAtMs, st.NowMs) {
			st.Live = &lockstore.Lock{Key: nk, LockID: l.LockID, Fence: l.Fence, ExpiresAtMs: l.ExpiresAtMs, AcquiredAtMs: l.AcquiredAtMs}
		}
	}
	if latest > 0 {
		if st.LatestFence, err = lockstore.FormatFence(latest); err != nil {
			return lockstore.KeyState{}, lockstore.WithKeyLockID(err, nk, "")
		}
	}
	return st, nil
}

// CountHeld counts live lock documents with one aggregation query over the
// single-field expiresAtMs index.
func (s *Store) CountHeld(ctx context.Context) (int64, error) {
	const op = "countHeld"
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer cancel()
	nowMs := s.nowMs()
	// IsLive(exp, now) is exp > now - tolerance.
	q := s.locks.Where("expiresAtMs", ">", nowMs-lockstore.TimeToleranceMs)
	ar, err := q.NewAggregationQuery().WithCount("held").Get(ctx)
	if err != nil {
		return 0, classify(ctx, op, err)
	}
	var out struct {
		Held int64 `firestore:"held"`
	}
	if err := ar.DataTo(&out); err != nil {
		return 0, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "count result does not decode", Err: err}
	}
	return out.Held, nil
}
