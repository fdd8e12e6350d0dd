package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
)

// metaAuditCount and metaInputCount hold the number of events in the
// audit and audit_input buckets, kept in step by every append and prune so
// retention never has to count.
var (
	metaAuditCount = []byte("audit_count")
	metaInputCount = []byte("audit_input_count")
)

// auditClass is where one retention class lives: its bucket and count.
type auditClass struct {
	bucket, count []byte
}

// classOf returns class c's bucket and count: each class is trimmed to its
// own budget, so input events never evict decision events.
func classOf(c lockstore.AuditClass) auditClass {
	if c == lockstore.AuditInput {
		return auditClass{bucketInput, metaInputCount}
	}
	return auditClass{bucketAudit, metaAuditCount}
}

var auditClasses = []lockstore.AuditClass{lockstore.AuditDecision, lockstore.AuditInput}

// auditKey orders events by time, then by arrival: big-endian so bbolt's
// byte order is time order and "newest first" is a reverse cursor walk.
func auditKey(timeMs int64, seq uint64) []byte {
	var k [16]byte
	binary.BigEndian.PutUint64(k[:8], uint64(max(timeMs, 0)))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k[:]
}

func auditKeyTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[:8])) }

func getCount(tx *bbolt.Tx, name []byte) int64 {
	v := tx.Bucket(bucketMeta).Get(name)
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func putCount(tx *bbolt.Tx, name []byte, n int64) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(max(n, 0)))
	return tx.Bucket(bucketMeta).Put(name, v[:])
}

// AppendAudit stores events in their class's bucket and, in the same
// transaction, prunes each class to the retention: events older than
// MaxAge, then the oldest beyond the class's count budget.
func (s *Store) AppendAudit(ctx context.Context, events []lockstore.AuditEvent) error {
	if len(events) == 0 {
		if err := lockstore.ContextError(ctx, "audit-append"); err != nil {
			return err
		}
		return nil
	}
	return s.update(ctx, "audit-append", func(tx *bbolt.Tx) error {
		counts := map[lockstore.AuditClass]int64{}
		for _, c := range auditClasses {
			counts[c] = getCount(tx, classOf(c).count)
		}
		for i := range events {
			c := events[i].Class()
			b := tx.Bucket(classOf(c).bucket)
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
			counts[c]++
		}
		cutoff := s.nowMs() - s.retention.MaxAge.Milliseconds()
		for _, c := range auditClasses {
			count, budget := counts[c], int64(s.retention.MaxEventsOf(c))
			cur := tx.Bucket(classOf(c).bucket).Cursor()
			// Re-seek after each delete: a bbolt cursor's position after
			// Delete is not reliable for a forward walk.
			for k, _ := cur.First(); k != nil; k, _ = cur.First() {
				if auditKeyTime(k) >= cutoff && count <= budget {
					break
				}
				if err := cur.Delete(); err != nil {
					return err
				}
				count--
			}
			if err := putCount(tx, classOf(c).count, count); err != nil {
				return err
			}
		}
		return nil
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
	digest := ""
	if q.Key != "" {
		digest = lockstore.DigestKey(q.Key).String()
	}
	var out []lockstore.AuditEvent
	err := s.view(ctx, "audit-query", func(tx *bbolt.Tx) error {
		out = nil
		// Merge the two class buckets, both walked newest first.
		var cur [2]*bbolt.Cursor
		var k, v [2][]byte
		for i, c := range auditClasses {
			cur[i] = tx.Bucket(classOf(c).bucket).Cursor()
			k[i], v[i] = cur[i].Last()
		}
		for len(out) < limit {
			i := 0
			switch {
			case k[0] == nil && k[1] == nil:
				return nil
			case k[0] == nil || k[1] != nil && bytes.Compare(k[1][:8], k[0][:8]) > 0:
				i = 1
			}
			key, val := k[i], v[i]
			k[i], v[i] = cur[i].Prev()
			if auditKeyTime(key) < q.SinceMs {
				// Everything further back in this bucket is older still.
				k[i], v[i] = nil, nil
				continue
			}
			var ev lockstore.AuditEvent
			if err := json.Unmarshal(val, &ev); err != nil {
				return lockstore.Errorf(lockstore.Internal, "audit-query", "bolt: corrupt audit event: %v", err)
			}
			if digest != "" && ev.KeyDigest != digest {
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
