package firestore

import (
	"context"

	"cloud.google.com/go/firestore"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

var _ lockstore.LockLister = (*Store)(nil)

// ListHeld lists live locks with one query over the single-field
// expiresAtMs index (live documents only, soonest expiry first), one
// document past the limit to tell a partial answer apart. Documents whose
// stored key does not belong where they are (atHome) are skipped, as the
// lookups skip them.
func (s *Store) ListHeld(ctx context.Context, limit int) (lockstore.LockList, error) {
	const op = "list"
	limit = backend.ListLimit(limit)
	var out lockstore.LockList
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return out, err
	}
	defer cancel()
	out.NowMs = s.nowMs()
	q := s.locks.Where("expiresAtMs", ">", out.NowMs-lockstore.TimeToleranceMs).
		OrderBy("expiresAtMs", firestore.Asc).Limit(limit + 1)
	docs, err := q.Documents(ctx).GetAll()
	if err != nil {
		return out, classify(ctx, op, err)
	}
	for _, d := range docs {
		l, ok, err := decodeLock(d, op)
		if err != nil {
			return out, err
		}
		if !ok || l.LockID == "" || !s.atHome(d.Ref, l) || !backend.IsLive(l.ExpiresAtMs, out.NowMs) {
			continue
		}
		if len(out.Locks) == limit {
			out.Partial = true
			break
		}
		out.Locks = append(out.Locks, lockstore.Lock{Key: l.Key, LockID: l.LockID, Fence: l.Fence, ExpiresAtMs: l.ExpiresAtMs, AcquiredAtMs: l.AcquiredAtMs}.Listed())
	}
	return out, nil
}
