package bolt

import (
	"context"
	"fmt"
	"strconv"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// getLock reads the record stored under normalised key k, or nil.
func (s *Store) getLock(tx *bbolt.Tx, k string) (*lockRecord, error) {
	v := tx.Bucket(bucketLocks).Get([]byte(k))
	if v == nil {
		return nil, nil
	}
	return s.decode(k, v)
}

// putLock writes r under its key in the current record format.
func (s *Store) putLock(tx *bbolt.Tx, r *lockRecord) error {
	v, err := s.encode(r)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketLocks).Put([]byte(r.Key), v)
}

// getByID resolves lockID through the index and re-verifies that the lock
// found still carries lockID (docs/design.md, "Ownership re-verified"): an index entry that outlived its
// lock must never let one holder act on another's lock.
func (s *Store) getByID(tx *bbolt.Tx, lockID string) (*lockRecord, error) {
	k := tx.Bucket(bucketIDs).Get([]byte(lockID))
	if k == nil {
		return nil, nil
	}
	r, err := s.getLock(tx, string(k))
	if err != nil || r == nil || r.LockID != lockID {
		return nil, err
	}
	return r, nil
}

// getCounter reads the fence counter of normalised key k (0 if never set).
func getCounter(tx *bbolt.Tx, k string) (int64, error) {
	v := tx.Bucket(bucketFences).Get([]byte(k))
	if v == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, lockstore.Errorf(lockstore.Internal, "decode", "bolt: corrupt fence counter: %v", err)
	}
	return n, nil
}

func putCounter(tx *bbolt.Tx, k string, n int64) error {
	return tx.Bucket(bucketFences).Put([]byte(k), strconv.AppendInt(nil, n, 10))
}

// deleteLock removes a lock and its index entry. Its fence counter stays.
func deleteLock(tx *bbolt.Tx, r *lockRecord) error {
	if err := tx.Bucket(bucketLocks).Delete([]byte(r.Key)); err != nil {
		return err
	}
	return tx.Bucket(bucketIDs).Delete([]byte(r.LockID))
}

// Acquire takes key for ttl if it is free, reclaiming an expired lock
// (its counter untouched). The fence is backend.NextFenceAt's, on the
// gateway's clock read inside the write transaction; when that refuses
// (overflow, a clock behind the counter) nothing is written.
func (s *Store) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	const op = "acquire"
	k, ttlMs, err := backend.PrecheckAcquire(ctx, key, ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	var res lockstore.AcquireResult
	var issued int64
	err = s.update(ctx, op, func(tx *bbolt.Tx) error {
		res, issued = lockstore.AcquireResult{}, 0
		now := s.nowMs()
		cur, err := s.getLock(tx, k)
		if err != nil {
			return err
		}
		if cur != nil {
			if backend.IsLive(cur.ExpiresAtMs, now) {
				res.Reason = lockstore.ReasonLocked
				return nil
			}
			if err := deleteLock(tx, cur); err != nil {
				return err
			}
		}
		n, err := getCounter(tx, k)
		if err != nil {
			return err
		}
		// An overflow error rolls the reclaim back too: nothing written.
		next, fence, err := backend.NextFenceAt(op, key, n, now, s.floor)
		if err != nil {
			return err
		}
		id, err := lockstore.NewLockID()
		if err != nil {
			return err
		}
		rec := lockRecord{LockID: id, ExpiresAtMs: now + ttlMs, AcquiredAtMs: now, Key: k, Fence: fence}
		if err := s.putLock(tx, &rec); err != nil {
			return err
		}
		if err := tx.Bucket(bucketIDs).Put([]byte(id), []byte(k)); err != nil {
			return err
		}
		if err := putCounter(tx, k, next); err != nil {
			return err
		}
		res = lockstore.AcquireResult{OK: true, LockID: id, Fence: fence, ExpiresAtMs: rec.ExpiresAtMs}
		issued = next
		return nil
	})
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(err, key, "")
	}
	backend.NoteFence(ctx, s.log, k, issued)
	return res, nil
}

// Release deletes the live lock lockID holds. Releasing an absent, expired
// or foreign lock is OK=false, not an error; an expired record found on
// the way is cleaned up (its counter untouched).
func (s *Store) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	const op = "release"
	if err := backend.PrecheckLockID(ctx, op, lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	var res lockstore.ReleaseResult
	err := s.update(ctx, op, func(tx *bbolt.Tx) error {
		res = lockstore.ReleaseResult{Detail: lockstore.DetailNotFound}
		r, err := s.resolve(tx, lockID)
		if err != nil || r == nil {
			return err
		}
		if err := deleteLock(tx, r); err != nil {
			return err
		}
		if !backend.IsLive(r.ExpiresAtMs, s.nowMs()) {
			res.Detail = lockstore.DetailExpired
			return nil
		}
		res = lockstore.ReleaseResult{OK: true}
		return nil
	})
	if err != nil {
		return lockstore.ReleaseResult{}, lockstore.WithKeyLockID(err, "", lockID)
	}
	return res, nil
}

// resolve finds lockID's lock for a mutation, dropping an index entry that
// no longer leads to it.
func (s *Store) resolve(tx *bbolt.Tx, lockID string) (*lockRecord, error) {
	r, err := s.getByID(tx, lockID)
	if err != nil {
		return nil, err
	}
	if r == nil && tx.Bucket(bucketIDs).Get([]byte(lockID)) != nil {
		return nil, tx.Bucket(bucketIDs).Delete([]byte(lockID))
	}
	return r, nil
}

// Extend sets the live lock's expiry to now+ttl (replacing, not adding)
// and returns it. An expired lock is never resurrected: OK=false, and its
// record is cleaned up.
func (s *Store) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	const op = "extend"
	ttlMs, err := backend.PrecheckExtend(ctx, lockID, ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	var res lockstore.ExtendResult
	err = s.update(ctx, op, func(tx *bbolt.Tx) error {
		res = lockstore.ExtendResult{Detail: lockstore.DetailNotFound}
		r, err := s.resolve(tx, lockID)
		if err != nil || r == nil {
			return err
		}
		now := s.nowMs()
		if !backend.IsLive(r.ExpiresAtMs, now) {
			res.Detail = lockstore.DetailExpired
			return deleteLock(tx, r)
		}
		r.ExpiresAtMs = now + ttlMs
		if err := s.putLock(tx, r); err != nil {
			return err
		}
		res = lockstore.ExtendResult{OK: true, ExpiresAtMs: r.ExpiresAtMs}
		return nil
	})
	if err != nil {
		return lockstore.ExtendResult{}, lockstore.WithKeyLockID(err, "", lockID)
	}
	return res, nil
}

// IsLocked reports whether key has a live lock. Read-only.
func (s *Store) IsLocked(ctx context.Context, key string) (bool, error) {
	li, err := s.LookupKey(ctx, key)
	return li != nil, err
}

// LookupKey returns the sanitised live lock on key, or nil. Read-only.
func (s *Store) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	const op = "lookup"
	k, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return nil, err
	}
	var info *lockstore.LockInfo
	err = s.view(ctx, op, func(tx *bbolt.Tx) error {
		r, err := s.getLock(tx, k)
		if err == nil && r != nil && backend.IsLive(r.ExpiresAtMs, s.nowMs()) {
			info = r.info()
		}
		return err
	})
	if err != nil {
		return nil, lockstore.WithKeyLockID(err, key, "")
	}
	return info, nil
}

// LookupLockID returns the sanitised live lock lockID holds, or nil.
func (s *Store) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	const op = "lookup"
	if err := backend.PrecheckLockID(ctx, op, lockID); err != nil {
		return nil, err
	}
	var info *lockstore.LockInfo
	err := s.view(ctx, op, func(tx *bbolt.Tx) error {
		r, err := s.getByID(tx, lockID)
		if err == nil && r != nil && backend.IsLive(r.ExpiresAtMs, s.nowMs()) {
			info = r.info()
		}
		return err
	})
	if err != nil {
		return nil, lockstore.WithKeyLockID(err, "", lockID)
	}
	return info, nil
}

// Inspect reads the live lock on key and the key's latest issued fence in
// one read transaction, so the two are consistent with each other.
func (s *Store) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	const op = "inspect"
	k, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	var ks lockstore.KeyState
	err = s.view(ctx, op, func(tx *bbolt.Tx) error {
		ks = lockstore.KeyState{NowMs: s.nowMs()}
		n, err := getCounter(tx, k)
		if err != nil {
			return err
		}
		if n > 0 {
			if ks.LatestFence, err = lockstore.FormatFence(n); err != nil {
				return err
			}
		}
		r, err := s.getLock(tx, k)
		if err == nil && r != nil && backend.IsLive(r.ExpiresAtMs, ks.NowMs) {
			ks.Live = &lockstore.Lock{Key: k, LockID: r.LockID, Fence: r.Fence,
				ExpiresAtMs: r.ExpiresAtMs, AcquiredAtMs: r.AcquiredAtMs}
		}
		return err
	})
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithKeyLockID(err, key, "")
	}
	return ks, nil
}

// CountHeld counts live locks. It scans the locks bucket, which holds only
// current and not-yet-reclaimed locks, so it stays small.
func (s *Store) CountHeld(ctx context.Context) (int64, error) {
	var n int64
	err := s.view(ctx, "count", func(tx *bbolt.Tx) error {
		now := s.nowMs()
		return tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
			r, err := s.decode(string(k), v)
			if err != nil {
				return err
			}
			if backend.IsLive(r.ExpiresAtMs, now) {
				n++
			}
			return nil
		})
	})
	return n, err
}

// setFence seeds key's fence counter (tests and the overflow case).
func (s *Store) setFence(key string, n int64) error {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("bolt: negative fence counter %d", n)
	}
	return s.update(context.Background(), "set-fence", func(tx *bbolt.Tx) error { return putCounter(tx, k, n) })
}
