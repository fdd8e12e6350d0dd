package postgres

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Release deletes the lock lockID holds if it is still live. One statement
// (one round trip, one implicit transaction) resolves lockId → row under a
// row lock (FOR UPDATE), checks ownership and liveness, and deletes.
func (s *Store) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	const op = "release"
	if err := backend.PrecheckLockID(ctx, op, lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	if err := s.checkOpen(op); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	var (
		heldID, goneID *string
		heldExp        *int64
		nowMs          int64
	)
	err := s.pool.QueryRow(ctx, s.sql.release, lockID).Scan(&heldID, &heldExp, &nowMs, &goneID)
	if err != nil {
		return lockstore.ReleaseResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	if goneID != nil {
		// docs/design.md, "Ownership re-verified": the statement deleted only a row whose lock_id matched;
		// say so again here rather than trust the SQL alone.
		if *goneID != lockID {
			return lockstore.ReleaseResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, LockID: lockID,
				Msg: "postgres: release deleted a lock it does not own"}
		}
		return lockstore.ReleaseResult{OK: true}, nil
	}
	detail, err := failureDetail(op, lockID, heldID, heldExp, nowMs)
	return lockstore.ReleaseResult{Detail: detail}, err
}

// Extend sets the live lock lockID holds to expire at now+ttl (server time),
// replacing the old expiry, in one statement like Release.
func (s *Store) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	const op = "extend"
	ttlMs, err := backend.PrecheckExtend(ctx, lockID, ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	if err := s.checkOpen(op); err != nil {
		return lockstore.ExtendResult{}, err
	}
	var (
		heldID, movedID   *string
		heldExp, movedExp *int64
		nowMs             int64
	)
	err = s.pool.QueryRow(ctx, s.sql.extend, lockID, ttlMs).Scan(&heldID, &heldExp, &nowMs, &movedID, &movedExp)
	if err != nil {
		return lockstore.ExtendResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	if movedID != nil && movedExp != nil {
		if *movedID != lockID { // docs/design.md, "Ownership re-verified", as in Release
			return lockstore.ExtendResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, LockID: lockID,
				Msg: "postgres: extend updated a lock it does not own"}
		}
		return lockstore.ExtendResult{OK: true, ExpiresAtMs: *movedExp}, nil
	}
	detail, err := failureDetail(op, lockID, heldID, heldExp, nowMs)
	return lockstore.ExtendResult{Detail: detail}, err
}

// failureDetail explains why a release or extend changed nothing: the row
// was absent (or, defensively, not ours) or expired. A live row of ours that
// the statement still did not change means the SQL and backend.IsLive
// disagree, which is a bug, not an outcome.
func failureDetail(op, lockID string, heldID *string, heldExp *int64, nowMs int64) (string, error) {
	switch {
	case heldID == nil || *heldID != lockID || heldExp == nil:
		return lockstore.DetailNotFound, nil
	case !backend.IsLive(*heldExp, nowMs):
		return lockstore.DetailExpired, nil
	}
	return "", &lockstore.Error{Code: lockstore.Internal, Op: op, LockID: lockID,
		Msg: "postgres: live lock was found but not changed"}
}
