package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Release drops the lock lockID holds if it is still live. It is safe to
// call without owning the lock: anything else is OK=false.
func (s *Store) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	const op = "release"
	if err := backend.PrecheckLockID(ctx, op, lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return lockstore.ReleaseResult{}, err
	}
	status, err := s.eval(ctx, releaseScript, []string{idKey}, lockID).Int64()
	if err != nil {
		return lockstore.ReleaseResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	switch status {
	case mutateOK:
		return lockstore.ReleaseResult{OK: true}, nil
	case mutateExpired:
		return lockstore.ReleaseResult{Detail: lockstore.DetailExpired}, nil
	case mutateNotFound:
		return lockstore.ReleaseResult{Detail: lockstore.DetailNotFound}, nil
	}
	return lockstore.ReleaseResult{}, lockstore.WithKeyLockID(badReply(op, fmt.Errorf("status %d", status)), "", lockID)
}

// Extend sets the live lock's expiry to now+ttl by the server clock and
// returns it. It never revives an expired lock.
func (s *Store) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	const op = "extend"
	ttlMs, err := backend.PrecheckExtend(ctx, lockID, ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	reply, err := s.eval(ctx, extendScript, []string{idKey}, lockID, ttlMs, ttlMs+lockstore.TimeToleranceMs).Slice()
	if err != nil {
		return lockstore.ExtendResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	status, err := replyInt(reply, 0)
	if err != nil {
		return lockstore.ExtendResult{}, lockstore.WithKeyLockID(badReply(op, err), "", lockID)
	}
	switch status {
	case mutateOK:
		exp, err := replyInt(reply, 1)
		if err != nil {
			return lockstore.ExtendResult{}, lockstore.WithKeyLockID(badReply(op, err), "", lockID)
		}
		return lockstore.ExtendResult{OK: true, ExpiresAtMs: exp}, nil
	case mutateExpired:
		return lockstore.ExtendResult{Detail: lockstore.DetailExpired}, nil
	case mutateNotFound:
		return lockstore.ExtendResult{Detail: lockstore.DetailNotFound}, nil
	}
	return lockstore.ExtendResult{}, lockstore.WithKeyLockID(badReply(op, fmt.Errorf("status %d", status)), "", lockID)
}
