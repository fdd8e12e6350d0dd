package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Acquire takes the lock on key for ttl, in one script: read the lock, read
// the counter, pick the next fence (backend.NextFenceAt: past FenceMax or
// too far ahead of the clock floor, refuse), write counter, lock and index.
func (s *Store) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	const op = "acquire"
	norm, ttlMs, err := backend.PrecheckAcquire(ctx, key, ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockKey, fenceKey, err := s.keys(norm)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockID, err := s.newLockID(norm)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	keys, args := []string{lockKey, idKey, fenceKey}, []any{lockID, ttlMs, norm, ttlMs + lockstore.TimeToleranceMs, s.floorArg}
	var reply any
	if s.ackReplicas > 0 {
		reply, err = s.acquireAcked(ctx, key, lockID, keys, args...)
	} else if reply, err = s.eval(ctx, acquireScript, keys, args...).Result(); err != nil {
		err = classify(ctx, op, err)
	}
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(err, key, "")
	}
	var n, exp int64
	switch r := reply.(type) {
	case string:
		if n, exp, err = acquired(r); err != nil {
			return lockstore.AcquireResult{}, lockstore.WithKeyLockID(badReply(op, err), key, "")
		}
	case int64:
		switch r {
		case acquireLocked:
			return lockstore.AcquireResult{Reason: lockstore.ReasonLocked}, nil
		case acquireOverflow:
			return lockstore.AcquireResult{}, backend.FenceOverflow(op, key)
		case acquireCorrupt:
			return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
				Msg: "the lock key holds a value that is not a lock; refusing to overwrite it"}
		case acquireBadFence:
			return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
				Msg: "the fence counter holds a value that is not a non-negative integer"}
		}
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(badReply(op, fmt.Errorf("status %d", r)), key, "")
	case []any:
		if lead, ok := behind(r); ok {
			return lockstore.AcquireResult{}, backend.FenceClockBehind(op, key, lead)
		}
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(badReply(op, fmt.Errorf("reply %v", r)), key, "")
	default:
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(badReply(op, fmt.Errorf("reply is %T", reply)), key, "")
	}
	fence, err := lockstore.FormatFence(n)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithKeyLockID(badReply(op, err), key, "")
	}
	backend.NoteFence(ctx, s.log, norm, n)
	return lockstore.AcquireResult{OK: true, LockID: lockID, Fence: fence, ExpiresAtMs: exp}, nil
}

// acquired parses the acquire script's success reply, "<fence>:<expiresAtMs>".
func acquired(r string) (fence, exp int64, err error) {
	f, e, ok := strings.Cut(r, ":")
	if ok {
		if fence, err = strconv.ParseInt(f, 10, 64); err == nil {
			exp, err = strconv.ParseInt(e, 10, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("acquire reply %q is not <fence>:<expiresAtMs>", r)
	}
	return fence, exp, nil
}

// behind parses the acquire script's {-4, lead} reply.
func behind(r []any) (lead int64, ok bool) {
	if len(r) != 2 {
		return 0, false
	}
	status, ok1 := r[0].(int64)
	lead, ok2 := r[1].(int64)
	return lead, ok1 && ok2 && status == acquireBehind
}
