package postgres

import (
	"context"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

var _ lockstore.LockLister = (*Store)(nil)

// listSQL reads live locks through the expires_at_ms index (a range scan
// over live rows only), soonest expiry first, one row past the limit to
// tell a partial answer apart.
func (s *Store) listSQL() string {
	return `WITH c AS (SELECT ` + nowMsSQL + ` AS now_ms)
		SELECT c.now_ms, l.user_key, l.lock_id, l.fence, l.expires_at_ms, l.acquired_at_ms
		FROM c LEFT JOIN LATERAL (
			SELECT * FROM ` + ident(s.cfg.Table) + ` WHERE expires_at_ms > c.now_ms - 1000
			ORDER BY expires_at_ms LIMIT $1
		) l ON true`
}

// ListHeld lists live locks in one statement, with PostgreSQL's clock.
func (s *Store) ListHeld(ctx context.Context, limit int) (lockstore.LockList, error) {
	const op = "list"
	limit = backend.ListLimit(limit)
	var out lockstore.LockList
	if err := lockstore.ContextError(ctx, op); err != nil {
		return out, err
	}
	if err := s.checkOpen(op); err != nil {
		return out, err
	}
	rows, err := s.pool.Query(ctx, s.listSQL(), limit+1)
	if err != nil {
		return out, classify(ctx, op, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key, lockID, fence *string
			exp, acq           *int64
		)
		if err := rows.Scan(&out.NowMs, &key, &lockID, &fence, &exp, &acq); err != nil {
			return out, classify(ctx, op, err)
		}
		if key == nil || lockID == nil || fence == nil || exp == nil || acq == nil || !backend.IsLive(*exp, out.NowMs) {
			continue
		}
		if len(out.Locks) == limit {
			out.Partial = true
			continue
		}
		out.Locks = append(out.Locks, lockstore.Lock{Key: *key, LockID: *lockID, Fence: *fence, ExpiresAtMs: *exp, AcquiredAtMs: *acq}.Listed())
	}
	if err := rows.Err(); err != nil {
		return out, classify(ctx, op, err)
	}
	return out, nil
}
