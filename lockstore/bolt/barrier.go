package bolt

import (
	"context"
	"encoding/json"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
)

// bucketWrites holds the write barrier's in-flight entries: normalised key
// → JSON object {writeId: {fence, deadlineMs}}. A key whose entries have
// all finished or expired has no record. Locks and counters live in other
// buckets, so nothing here can touch them.
var bucketWrites = []byte("write_barrier")

var _ lockstore.WriteBarrier = (*Store)(nil)

// getWrites reads key k's in-flight entries (an empty map if none).
func getWrites(tx *bbolt.Tx, k string) (map[string]lockstore.WriteEntry, error) {
	entries := map[string]lockstore.WriteEntry{}
	v := tx.Bucket(bucketWrites).Get([]byte(k))
	if v == nil {
		return entries, nil
	}
	if err := json.Unmarshal(v, &entries); err != nil {
		return nil, lockstore.Errorf(lockstore.Internal, "decode", "bolt: corrupt write barrier record: %v", err)
	}
	return entries, nil
}

// putWrites stores key k's entries, deleting the record when none is left.
func putWrites(tx *bbolt.Tx, k string, entries map[string]lockstore.WriteEntry) error {
	b := tx.Bucket(bucketWrites)
	if len(entries) == 0 {
		return b.Delete([]byte(k))
	}
	v, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	return b.Put([]byte(k), v)
}

// keyState reads key k's state at now exactly as Inspect does.
func (s *Store) keyState(tx *bbolt.Tx, k string, now int64) (lockstore.KeyState, error) {
	ks := lockstore.KeyState{NowMs: now}
	n, err := getCounter(tx, k)
	if err != nil {
		return ks, err
	}
	if n > 0 {
		if ks.LatestFence, err = lockstore.FormatFence(n); err != nil {
			return ks, err
		}
	}
	r, err := s.getLock(tx, k)
	if err != nil {
		return ks, err
	}
	if r != nil && lockstore.IsLive(r.ExpiresAtMs, now) {
		ks.Live = &lockstore.HeldLock{LockID: r.LockID, Fence: r.Fence,
			ExpiresAtMs: r.ExpiresAtMs, AcquiredAtMs: r.AcquiredAtMs}
	}
	return ks, nil
}

// Admit reads key's state and applies the barrier rule in one read-write
// transaction, so no acquire, release or other admission can come between
// the read and the registration.
func (s *Store) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	k, maxMs, err := lockstore.BeginAdmit(ctx, key, a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var res lockstore.WriteAdmitResult
	err = s.update(ctx, op, func(tx *bbolt.Tx) error {
		res = lockstore.WriteAdmitResult{} // the group commit may run this twice
		ks, err := s.keyState(tx, k, s.nowMs())
		if err != nil {
			return err
		}
		entries, err := getWrites(tx, k)
		if err != nil {
			return err
		}
		var changed bool
		res, changed = a.Apply(entries, ks, maxMs)
		if changed {
			return putWrites(tx, k, entries)
		}
		return nil
	})
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithContext(err, key, "")
	}
	return res, nil
}

// Finish removes entry writeID of key; an absent entry is not an error.
// Expired entries found on the way are dropped too.
func (s *Store) Finish(ctx context.Context, key, writeID string) error {
	const op = "finish"
	k, err := lockstore.BeginFinish(ctx, key, writeID)
	if err != nil {
		return err
	}
	err = s.update(ctx, op, func(tx *bbolt.Tx) error {
		entries, err := getWrites(tx, k)
		if err != nil || len(entries) == 0 {
			return err
		}
		now := s.nowMs()
		n := len(entries)
		delete(entries, writeID)
		for id, e := range entries {
			if e.DeadlineMs <= now {
				delete(entries, id)
			}
		}
		if len(entries) == n {
			return nil
		}
		return putWrites(tx, k, entries)
	})
	if err != nil {
		return lockstore.WithContext(err, key, "")
	}
	return nil
}

var _ lockstore.BarrierSweeper = (*Store)(nil)

// SweepBarrier removes expired entries in one read-write transaction. It
// visits at most limit key records, continuing where the previous sweep
// stopped and wrapping at the end of the bucket, so a bucket of live
// entries costs each call a bounded scan; it stops early once limit
// entries are removed. A record left with no entry is deleted.
func (s *Store) SweepBarrier(ctx context.Context, limit int) (int, error) {
	const op = "sweep"
	if err := lockstore.ValidateSweepLimit(limit); err != nil {
		return 0, err
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	var (
		removed int
		next    []byte
	)
	err := s.update(ctx, op, func(tx *bbolt.Tx) error {
		removed, next = 0, nil // the group commit may run this twice
		now := s.nowMs()
		type change struct {
			key     string
			entries map[string]lockstore.WriteEntry
		}
		var changes []change
		c := tx.Bucket(bucketWrites).Cursor()
		k, v := c.First()
		if s.sweepFrom != nil {
			k, v = c.Seek(s.sweepFrom)
		}
		for visited := 0; k != nil && visited < limit && removed < limit; visited++ {
			var entries map[string]lockstore.WriteEntry
			if err := json.Unmarshal(v, &entries); err != nil {
				return lockstore.Errorf(lockstore.Internal, "decode", "bolt: corrupt write barrier record: %v", err)
			}
			n := len(entries)
			for id, e := range entries {
				if e.DeadlineMs <= now && removed < limit {
					delete(entries, id)
					removed++
				}
			}
			if len(entries) != n {
				changes = append(changes, change{string(k), entries})
			}
			k, v = c.Next()
		}
		if k != nil {
			next = append([]byte(nil), k...) // k is only valid inside tx
		}
		// bbolt forbids changing a bucket under a live cursor.
		for _, ch := range changes {
			if err := putWrites(tx, ch.key, ch.entries); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.sweepFrom = next
	return removed, nil
}
