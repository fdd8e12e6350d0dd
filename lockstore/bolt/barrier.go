package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// The write barrier's in-flight entries are indexed so that an Admit costs
// O(log n) in the key's entries, never a walk over them. Every index key
// starts with the key's prefix, p = uint16 big-endian length of the
// normalised key + the key (a length, not a separator: keys may hold any
// byte), so one key's entries are one contiguous range:
//
//   - write_entries:   p + fence (15 digits) + deadline (int64 BE) + id → ""
//     (ordered by fence: "any entry under a lower fence" is the range
//     before p+fence);
//   - write_deadlines: p + deadline (int64 BE) + id → "" (ordered by
//     deadline: the expired entries are the range's head, the latest
//     deadline its tail);
//   - write_ids:       p + id → fence + deadline (Finish, re-registration);
//   - write_keys:      normalised key → JSON {fence: count} of the key's
//     stored entries (expired ones included until pruned), so the counts
//     the rule and the cap need are one small read.
//
// Locks and counters live in other buckets, so nothing here can touch them.
var (
	bucketEntries   = []byte("write_entries")
	bucketDeadlines = []byte("write_deadlines")
	bucketWriteIDs  = []byte("write_ids")
	bucketWriteKeys = []byte("write_keys")
)

// bucketWrites is where earlier versions kept each key's entries as one
// JSON object {writeId: {fence, deadlineMs}}, decoded and rewritten whole on
// every Admit. Open moves its records into the index (migrateWrites) and
// leaves it empty.
var bucketWrites = []byte("write_barrier")

// barrierBuckets lists every bucket the barrier uses, for Open.
var barrierBuckets = [][]byte{bucketWrites, bucketEntries, bucketDeadlines, bucketWriteIDs, bucketWriteKeys}

var _ lockstore.WriteBarrier = (*Store)(nil)

// idLen is a write id's length (backend.ValidateWriteID).
const idLen = lockstore.LockIDLength

// barrier is one transaction's view of the barrier's buckets.
type barrier struct {
	entries, deadlines, ids, keys *bbolt.Bucket
}

func barrierOf(tx *bbolt.Tx) barrier {
	return barrier{tx.Bucket(bucketEntries), tx.Bucket(bucketDeadlines), tx.Bucket(bucketWriteIDs), tx.Bucket(bucketWriteKeys)}
}

func keyPrefix(k string) []byte {
	p := make([]byte, 2, 2+len(k))
	binary.BigEndian.PutUint16(p, uint16(len(k)))
	return append(p, k...)
}

func be64(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// counts is a key's write_keys record: stored entries per fence.
type counts map[string]int

func (b barrier) counts(k string) (counts, error) {
	c := counts{}
	v := b.keys.Get([]byte(k))
	if v == nil {
		return c, nil
	}
	if err := json.Unmarshal(v, &c); err != nil {
		return nil, lockstore.Errorf(lockstore.Internal, "decode", "bolt: corrupt write barrier count record: %v", err)
	}
	return c, nil
}

func (b barrier) putCounts(k string, c counts) error {
	if len(c) == 0 {
		return b.keys.Delete([]byte(k))
	}
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return b.keys.Put([]byte(k), v)
}

func (c counts) total() (n int) {
	for _, x := range c {
		n += x
	}
	return n
}

// below is the number of stored entries under a fence lower than f.
func (c counts) below(f string) (n int) {
	for fence, x := range c {
		if fence < f { // 15 digits: string order is numeric order
			n += x
		}
	}
	return n
}

// entry reads the stored entry of write id (ok false if none).
func (b barrier) entry(p []byte, id string) (e backend.WriteEntry, ok bool, err error) {
	v := b.ids.Get(cat(p, []byte(id)))
	if v == nil {
		return e, false, nil
	}
	if len(v) != lockstore.FenceDigits+8 {
		return e, false, lockstore.Errorf(lockstore.Internal, "decode", "bolt: corrupt write barrier id record")
	}
	return backend.WriteEntry{Fence: string(v[:lockstore.FenceDigits]), DeadlineMs: int64(binary.BigEndian.Uint64(v[lockstore.FenceDigits:]))}, true, nil
}

// add registers (or re-registers) an entry, keeping c current.
func (b barrier) add(p []byte, id string, e backend.WriteEntry, c counts) error {
	if _, err := b.remove(p, id, c); err != nil {
		return err
	}
	dl := be64(e.DeadlineMs)
	if err := b.entries.Put(cat(p, []byte(e.Fence), dl, []byte(id)), nil); err != nil {
		return err
	}
	if err := b.deadlines.Put(cat(p, dl, []byte(id)), nil); err != nil {
		return err
	}
	c[e.Fence]++
	return b.ids.Put(cat(p, []byte(id)), cat([]byte(e.Fence), dl))
}

// remove deletes write id's entry, if stored, keeping c current.
func (b barrier) remove(p []byte, id string, c counts) (bool, error) {
	e, ok, err := b.entry(p, id)
	if err != nil || !ok {
		return false, err
	}
	dl := be64(e.DeadlineMs)
	for _, del := range []struct {
		b *bbolt.Bucket
		k []byte
	}{{b.entries, cat(p, []byte(e.Fence), dl, []byte(id))}, {b.deadlines, cat(p, dl, []byte(id))}, {b.ids, cat(p, []byte(id))}} {
		if err := del.b.Delete(del.k); err != nil {
			return false, err
		}
	}
	if c[e.Fence]--; c[e.Fence] <= 0 {
		delete(c, e.Fence)
	}
	return true, nil
}

// prune removes up to limit entries of the key whose deadline is not after
// now, earliest first, and reports how many it removed and whether more
// expired entries are left.
func (b barrier) prune(p []byte, now int64, limit int, c counts) (removed int, more bool, err error) {
	var ids []string
	cur := b.deadlines.Cursor()
	for k, _ := cur.Seek(p); k != nil && bytes.HasPrefix(k, p) && len(k) == len(p)+8+idLen; k, _ = cur.Next() {
		if int64(binary.BigEndian.Uint64(k[len(p):])) > now {
			break
		}
		if len(ids) == limit {
			more = true
			break
		}
		ids = append(ids, string(k[len(p)+8:]))
	}
	// bbolt forbids changing a bucket under a live cursor: delete after.
	for _, id := range ids {
		if _, err := b.remove(p, id, c); err != nil {
			return removed, more, err
		}
		removed++
	}
	return removed, more, nil
}

// lastDeadline is the latest deadline among the key's stored entries (0 if
// none): one seek.
func (b barrier) lastDeadline(p []byte) int64 {
	cur := b.deadlines.Cursor()
	end := cat(p, bytes.Repeat([]byte{0xff}, 8+idLen+1))
	k, _ := cur.Seek(end)
	if k == nil {
		k, _ = cur.Last()
	} else {
		k, _ = cur.Prev()
	}
	if k == nil || !bytes.HasPrefix(k, p) || len(k) != len(p)+8+idLen {
		return 0
	}
	return int64(binary.BigEndian.Uint64(k[len(p):]))
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
	if r != nil && backend.IsLive(r.ExpiresAtMs, now) {
		ks.Live = &lockstore.Lock{Key: k, LockID: r.LockID, Fence: r.Fence,
			ExpiresAtMs: r.ExpiresAtMs, AcquiredAtMs: r.AcquiredAtMs}
	}
	return ks, nil
}

// admitTx applies the barrier rule to key k inside tx: a bounded prune
// (backend.BarrierPruneBatch), then a fixed number of seeks and small
// reads, whatever the number of entries. When more expired entries are
// left than one call prunes, the counts include them: the answer errs
// towards blocked and Full, never towards admitted.
func admitTx(tx *bbolt.Tx, k string, a lockstore.WriteAdmission, ks lockstore.KeyState, maxMs int64) (lockstore.WriteAdmitResult, error) {
	res := lockstore.WriteAdmitResult{State: ks}
	b, p := barrierOf(tx), keyPrefix(k)
	c, err := b.counts(k)
	if err != nil {
		return res, err
	}
	removed, _, err := b.prune(p, ks.NowMs, backend.BarrierPruneBatch, c)
	if err != nil {
		return res, err
	}
	if !backend.AdmissionMatches(a, ks) {
		if removed > 0 {
			return res, b.putCounts(k, c)
		}
		return res, nil
	}
	last := b.lastDeadline(p)
	live := c // stays the stored counts: c is written back
	if last <= ks.NowMs {
		// Every stored entry is expired (the prune left some): none counts.
		live = counts{}
	}
	if n := live.below(a.Fence); n > 0 {
		res.Blocking, res.BlockedUntilMs = n, last
		return res, b.putCounts(k, c)
	}
	prev, again, err := b.entry(p, a.WriteID)
	if err != nil {
		return res, err
	}
	if !(again && prev.DeadlineMs > ks.NowMs) && live.total() >= a.InFlightCap() {
		res.Full = true
		return res, b.putCounts(k, c)
	}
	if err := b.add(p, a.WriteID, backend.WriteEntry{Fence: a.Fence, DeadlineMs: ks.NowMs + maxMs}, c); err != nil {
		return res, err
	}
	res.Admitted = true
	return res, b.putCounts(k, c)
}

// Admit reads key's state and applies the barrier rule in one read-write
// transaction, so no acquire, release or other admission can come between
// the read and the registration.
func (s *Store) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	k, maxMs, err := backend.PrecheckAdmit(ctx, key, a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var res lockstore.WriteAdmitResult
	err = s.update(ctx, op, func(tx *bbolt.Tx) error {
		ks, err := s.keyState(tx, k, s.nowMs())
		if err != nil {
			return err
		}
		res, err = admitTx(tx, k, a, ks, maxMs) // the group commit may run this twice: res is rebuilt
		return err
	})
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithKeyLockID(err, key, "")
	}
	return res, nil
}

// Finish removes entry writeID of key; an absent entry is not an error.
// A bounded batch of the key's expired entries goes too.
func (s *Store) Finish(ctx context.Context, key, writeID string) error {
	const op = "finish"
	k, err := backend.PrecheckFinish(ctx, key, writeID)
	if err != nil {
		return err
	}
	err = s.update(ctx, op, func(tx *bbolt.Tx) error {
		b, p := barrierOf(tx), keyPrefix(k)
		c, err := b.counts(k)
		if err != nil || len(c) == 0 {
			return err
		}
		gone, err := b.remove(p, writeID, c)
		if err != nil {
			return err
		}
		removed, _, err := b.prune(p, s.nowMs(), backend.BarrierPruneBatch, c)
		if err != nil || (!gone && removed == 0) {
			return err
		}
		return b.putCounts(k, c)
	})
	if err != nil {
		return lockstore.WithKeyLockID(err, key, "")
	}
	return nil
}

var _ lockstore.BarrierSweeper = (*Store)(nil)

// SweepBarrier removes expired entries in one read-write transaction. It
// visits at most limit keys, continuing where the previous sweep stopped
// and wrapping at the end, so a store of live entries costs each call a
// bounded scan; it stops once limit entries are removed.
func (s *Store) SweepBarrier(ctx context.Context, limit int) (int, error) {
	const op = "sweep"
	if err := backend.ValidateSweepLimit(limit); err != nil {
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
		b := barrierOf(tx)
		var keys []string
		cur := b.keys.Cursor()
		k, _ := cur.First()
		if s.sweepFrom != nil {
			k, _ = cur.Seek(s.sweepFrom)
		}
		for ; k != nil && len(keys) < limit; k, _ = cur.Next() {
			keys = append(keys, string(k))
		}
		if k != nil {
			next = append([]byte(nil), k...) // k is only valid inside tx
		}
		for _, key := range keys {
			if removed >= limit {
				next = []byte(key)
				break
			}
			c, err := b.counts(key)
			if err != nil {
				return err
			}
			n, _, err := b.prune(keyPrefix(key), now, limit-removed, c)
			if err != nil {
				return err
			}
			if n > 0 {
				removed += n
				if err := b.putCounts(key, c); err != nil {
					return err
				}
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

// migrateWrites moves the records of the legacy bucket write_barrier into
// the index, inside Open's transaction, and empties it: every entry keeps
// its write id, fence and deadline (expired ones are pruned later, as any
// other). It reports how many entries it moved. A bolt file has one
// process, so no older gateway can be writing the legacy bucket meanwhile.
func migrateWrites(tx *bbolt.Tx) (int, error) {
	legacy := tx.Bucket(bucketWrites)
	type record struct {
		key     string
		entries map[string]backend.WriteEntry
	}
	var records []record
	err := legacy.ForEach(func(k, v []byte) error {
		var entries map[string]backend.WriteEntry
		if err := json.Unmarshal(v, &entries); err != nil {
			return fmt.Errorf("bolt: corrupt legacy write barrier record: %w", err)
		}
		records = append(records, record{string(k), entries})
		return nil
	})
	if err != nil {
		return 0, err
	}
	b, moved := barrierOf(tx), 0
	for _, r := range records {
		c, err := b.counts(r.key)
		if err != nil {
			return moved, err
		}
		p := keyPrefix(r.key)
		for id, e := range r.entries {
			if backend.ValidateWriteID(id) != nil || !lockstore.ValidFence(e.Fence) {
				return moved, fmt.Errorf("bolt: legacy write barrier record holds a malformed entry")
			}
			if err := b.add(p, id, e, c); err != nil {
				return moved, err
			}
			moved++
		}
		if err := b.putCounts(r.key, c); err != nil {
			return moved, err
		}
		if err := legacy.Delete([]byte(r.key)); err != nil {
			return moved, err
		}
	}
	return moved, nil
}
