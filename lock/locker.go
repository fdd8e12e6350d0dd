package lock

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Locker is what the lock helpers (Lock, KeepAlive, AcquireWithRetry) run
// over: fencegate's network client (package client), or a backend's lock
// operations in-process (FromStore).
type Locker interface {
	// Acquire tries once to take the lock on key for ttl. Contention is
	// OK=false with Reason lockstore.ReasonLocked, not an error.
	Acquire(ctx context.Context, key string, ttl time.Duration) (Acquired, error)
	// Release drops the lock lockID holds, if it is still live.
	Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error)
	// Extend sets the live lock's expiry to now+ttl and returns the new
	// authoritative expiry.
	Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error)
}

// Acquired is an acquire's outcome as the lock's holder receives it: the
// store's result and, from a gateway with proof keys, the signed write
// proof for its fence.
type Acquired struct {
	lockstore.AcquireResult
	// Proof is the signed write proof for Fence (fencegate's writeproof
	// package), which the gateway's lock API answers when it has proof
	// keys; "" otherwise, and always from a store in-process. It can
	// write under Fence and nothing else.
	Proof string
}

// FromStore runs the lock helpers over a backend's lock operations
// in-process (a *bolt.Store, or any lockstore.Locker): its acquires carry
// no proof.
func FromStore(l lockstore.Locker) Locker { return storeLocker{l} }

// storeLocker adapts a lockstore.Locker; Unwrap returns it (lockstore.As).
type storeLocker struct{ lockstore.Locker }

func (s storeLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (Acquired, error) {
	r, err := s.Locker.Acquire(ctx, key, ttl)
	return Acquired{AcquireResult: r}, err
}

// Unwrap returns the adapted lock operations.
func (s storeLocker) Unwrap() any { return s.Locker }
