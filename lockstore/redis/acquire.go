package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Acquire takes the lock on key for ttl, in one script: read the lock, read
// the counter and refuse past FenceMax, INCR, write lock and index.
func (s *Store) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	const op = "acquire"
	norm, ttlMs, err := lockstore.BeginAcquire(ctx, key, ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockKey, fenceKey, err := s.keys(norm)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockID, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	reply, err := acquireScript.Run(ctx, s.client, []string{lockKey, idKey, fenceKey},
		lockID, ttlMs, norm, ttlMs+lockstore.TimeToleranceMs).Slice()
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(classify(ctx, op, err), key, "")
	}
	status, err := replyInt(reply, 0)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(badReply(op, err), key, "")
	}
	switch status {
	case acquireOK:
	case acquireLocked:
		return lockstore.AcquireResult{Reason: lockstore.ReasonLocked}, nil
	case acquireOverflow:
		return lockstore.AcquireResult{}, lockstore.FenceOverflow(op, key)
	case acquireCorrupt:
		return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
			Msg: "the lock key holds a value that is not a lock; refusing to overwrite it"}
	case acquireBadFence:
		return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
			Msg: "the fence counter holds a value that is not a non-negative integer"}
	default:
		return lockstore.AcquireResult{}, lockstore.WithContext(badReply(op, fmt.Errorf("status %d", status)), key, "")
	}
	n, err1 := replyInt(reply, 1)
	exp, err2 := replyInt(reply, 2)
	if err1 != nil || err2 != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(badReply(op, fmt.Errorf("fields: %v %v", err1, err2)), key, "")
	}
	fence, err := lockstore.FormatFence(n)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(badReply(op, err), key, "")
	}
	lockstore.NoteFence(ctx, s.log, norm, n)
	return lockstore.AcquireResult{OK: true, LockID: lockID, Fence: fence, ExpiresAtMs: exp}, nil
}
