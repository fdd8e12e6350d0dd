package bolt

import (
	"context"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

var _ lockstore.LockLister = (*Store)(nil)

// ListHeld lists live locks. The locks bucket holds only current and
// not-yet-reclaimed locks, so the walk is over live locks plus a few stale
// ones; it stops at limit.
func (s *Store) ListHeld(ctx context.Context, limit int) (lockstore.LockList, error) {
	limit = backend.ListLimit(limit)
	var out lockstore.LockList
	err := s.view(ctx, "list", func(tx *bbolt.Tx) error {
		out.NowMs = s.nowMs()
		c := tx.Bucket(bucketLocks).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, err := s.decode(string(k), v)
			if err != nil {
				return err
			}
			if !backend.IsLive(r.ExpiresAtMs, out.NowMs) {
				continue
			}
			if len(out.Locks) == limit {
				out.Partial = true
				return nil
			}
			out.Locks = append(out.Locks, lockstore.Lock{Key: r.Key, LockID: r.LockID, Fence: r.Fence, ExpiresAtMs: r.ExpiresAtMs, AcquiredAtMs: r.AcquiredAtMs}.Listed())
		}
		return nil
	})
	return out, err
}
