package redis

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/fencegate/fencegate/lockstore"
)

// storedLock is SyncGuard's lock value.
type storedLock struct {
	LockID       string `json:"lockId"`
	ExpiresAtMs  int64  `json:"-"`
	AcquiredAtMs int64  `json:"-"`
	Key          string `json:"key"`
	Fence        string `json:"fence"`
}

// decodeLock parses a lock value. Times are decoded as JSON numbers so a
// value another writer stored as 1.7e12 still parses.
func decodeLock(raw string) (*storedLock, error) {
	var v struct {
		storedLock
		ExpiresAtMs  json.Number `json:"expiresAtMs"`
		AcquiredAtMs json.Number `json:"acquiredAtMs"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, fmt.Errorf("lock value is not JSON: %w", err)
	}
	exp, err := jsonInt(v.ExpiresAtMs)
	if err != nil {
		return nil, fmt.Errorf("lock value expiresAtMs: %w", err)
	}
	acq, _ := jsonInt(v.AcquiredAtMs) // informational only
	l := v.storedLock
	l.ExpiresAtMs, l.AcquiredAtMs = exp, acq
	return &l, nil
}

func jsonInt(n json.Number) (int64, error) {
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("not an integer: %q", string(n))
	}
	return int64(f), nil
}

// liveLock reads the reply's lock value at index vi and the server clock at
// index ni, and returns the lock if the liveness predicate holds.
func liveLock(reply []any, vi, ni int) (*storedLock, int64, error) {
	now, err := replyInt(reply, ni)
	if err != nil {
		return nil, 0, err
	}
	raw, ok := reply[vi].(string)
	if !ok {
		return nil, now, nil
	}
	l, err := decodeLock(raw)
	if err != nil {
		return nil, now, err
	}
	if !lockstore.IsLive(l.ExpiresAtMs, now) {
		return nil, now, nil
	}
	return l, now, nil
}

// info is the sanitised view of l, the lock on normalised key.
func info(key string, l *storedLock) *lockstore.LockInfo {
	return lockstore.NewLockInfo(key, l.LockID, l.Fence, l.ExpiresAtMs, l.AcquiredAtMs)
}

// replyInt returns reply[i] as an integer.
func replyInt(reply []any, i int) (int64, error) {
	if i >= len(reply) {
		return 0, fmt.Errorf("reply has %d fields, want more than %d", len(reply), i)
	}
	n, ok := reply[i].(int64)
	if !ok {
		return 0, fmt.Errorf("reply field %d is %T, want an integer", i, reply[i])
	}
	return n, nil
}

func badReply(op string, err error) *lockstore.Error {
	return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "unexpected script reply", Err: err}
}
