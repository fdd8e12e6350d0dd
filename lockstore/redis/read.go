package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// IsLocked reports whether key has a live lock. It is read-only unless
// Config.CleanupInIsLocked is set.
func (s *Store) IsLocked(ctx context.Context, key string) (bool, error) {
	held, _, err := s.readKey(ctx, "isLocked", key, s.cleanup)
	return held != nil, err
}

// LookupKey returns the sanitised live lock on key, or nil.
func (s *Store) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	held, norm, err := s.readKey(ctx, "lookup", key, false)
	if err != nil || held == nil {
		return nil, err
	}
	return info(norm, held), nil
}

// readKey runs readKeyScript and returns the live lock, or nil.
func (s *Store) readKey(ctx context.Context, op, key string, cleanup bool) (*storedLock, string, error) {
	norm, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return nil, "", err
	}
	lockKey, _, err := s.keys(norm)
	if err != nil {
		return nil, "", err
	}
	flag := "0"
	if cleanup {
		flag = "1"
	}
	reply, err := s.eval(ctx, readKeyScript, []string{lockKey}, flag, s.idPrefixOf(norm)).Slice()
	if err != nil {
		return nil, "", lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	held, _, err := liveLock(reply, 0, 1)
	if err != nil {
		return nil, "", lockstore.WithKeyLockID(badReply(op, err), key, "")
	}
	return held, norm, nil
}

// LookupLockID returns the sanitised live lock lockID holds, or nil. The
// index and the lock are read in one script.
func (s *Store) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	const op = "lookup"
	if err := backend.PrecheckLockID(ctx, op, lockID); err != nil {
		return nil, err
	}
	idKey, err := s.IndexKey(lockID)
	if err != nil {
		return nil, err
	}
	reply, err := s.eval(ctx, readLockIDScript, []string{idKey}, lockID).Slice()
	if err != nil {
		return nil, lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	held, _, err := liveLock(reply, 0, 1)
	if err != nil {
		return nil, lockstore.WithKeyLockID(badReply(op, err), "", lockID)
	}
	// docs/design.md, "Ownership re-verified", again on this side of the wire.
	if held == nil || held.LockID != lockID {
		return nil, nil
	}
	return info(held.Key, held), nil
}

// Inspect reads the live lock on key and the latest fence issued for it in
// one script, at one server instant.
func (s *Store) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	const op = "inspect"
	norm, err := backend.PrecheckKey(ctx, op, key)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	lockKey, fenceKey, err := s.keys(norm)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	reply, err := s.eval(ctx, inspectScript, []string{lockKey, fenceKey}).Slice()
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	held, now, err := liveLock(reply, 0, 2)
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithKeyLockID(badReply(op, err), key, "")
	}
	ks := lockstore.KeyState{NowMs: now}
	if c, ok := reply[1].(string); ok {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			return lockstore.KeyState{}, lockstore.WithKeyLockID(badReply(op, fmt.Errorf("fence counter is not an integer")), key, "")
		}
		if n > 0 {
			if ks.LatestFence, err = lockstore.FormatFence(n); err != nil {
				return lockstore.KeyState{}, lockstore.WithKeyLockID(badReply(op, err), key, "")
			}
		}
	}
	if held != nil {
		ks.Live = &lockstore.Lock{Key: norm, LockID: held.LockID, Fence: held.Fence,
			ExpiresAtMs: held.ExpiresAtMs, AcquiredAtMs: held.AcquiredAtMs}
		// A live lock's fence came from this counter; if the counter reads
		// lower (it was reset by hand), report the lock's.
		if lockstore.ValidFence(held.Fence) && ks.LatestFence < held.Fence {
			ks.LatestFence = held.Fence
		}
	}
	return ks, nil
}
