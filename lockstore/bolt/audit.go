package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
)

// metaAuditCount holds the number of events in the audit bucket, kept in
// step by every append and prune so retention never has to count.
var metaAuditCount = []byte("audit_count")

// auditKey orders events by time, then by arrival: big-endian so bbolt's
// byte order is time order and "newest first" is a reverse cursor walk.
func auditKey(timeMs int64, seq uint64) []byte {
	var k [16]byte
	binary.BigEndian.PutUint64(k[:8], uint64(max(timeMs, 0)))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k[:]
}

func auditKeyTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[:8])) }

func getCount(tx *bbolt.Tx) int64 {
	v := tx.Bucket(bucketMeta).Get(metaAuditCount)
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func putCount(tx *bbolt.Tx, n int64) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(max(n, 0)))
	return tx.Bucket(bucketMeta).Put(metaAuditCount, v[:])
}

// AppendAudit stores events and, in the same transaction, prunes what
// falls outside the retention: events older than MaxAge, then the oldest
// beyond MaxEvents. Events already older than MaxAge are not stored.
func (s *Store) AppendAudit(ctx context.Context, events []lockstore.AuditEvent) error {
	if len(events) == 0 {
		if err := lockstore.ContextError(ctx, "audit-append"); err != nil {
			return err
		}
		return nil
	}
	return s.update(ctx, "audit-append", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketAudit)
		count := getCount(tx)
		for i := range events {
			v, err := json.Marshal(&events[i])
			if err != nil {
				return err
			}
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(auditKey(events[i].TimeMs, seq), v); err != nil {
				return err
			}
			count++
		}
		cutoff := s.nowMs() - s.retention.MaxAge.Milliseconds()
		c := b.Cursor()
		// Re-seek after each delete: a bbolt cursor's position after
		// Delete is not reliable for a forward walk.
		for k, _ := c.First(); k != nil; k, _ = c.First() {
			if auditKeyTime(k) >= cutoff && count <= int64(s.retention.MaxEvents) {
				break
			}
			if err := c.Delete(); err != nil {
				return err
			}
			count--
		}
		return putCount(tx, count)
	})
}

// QueryAudit returns matching events newest first. Limit <= 0 means
// lockstore.DefaultAuditLimit; it is capped at lockstore.MaxAuditLimit.
func (s *Store) QueryAudit(ctx context.Context, q lockstore.AuditQuery) ([]lockstore.AuditEvent, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = lockstore.DefaultAuditLimit
	}
	limit = min(limit, lockstore.MaxAuditLimit)
	var out []lockstore.AuditEvent
	err := s.view(ctx, "audit-query", func(tx *bbolt.Tx) error {
		out = nil
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
			if auditKeyTime(k) < q.SinceMs {
				break // everything further back is older still
			}
			var ev lockstore.AuditEvent
			if err := json.Unmarshal(v, &ev); err != nil {
				return lockstore.Errorf(lockstore.Internal, "audit-query", "bolt: corrupt audit event: %v", err)
			}
			if q.KeyHash != "" && ev.KeyHash != q.KeyHash {
				continue
			}
			out = append(out, ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
