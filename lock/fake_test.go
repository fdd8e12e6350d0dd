package lock

import (
	"context"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// memStore is a small in-memory Locker for testing the helpers (Lock,
// KeepAlive, AcquireWithRetry) — not a backend: it has no
// fence persistence and one clock, time.Now (a fake clock inside
// synctest bubbles). Hooks let a test script failures.
type memStore struct {
	mu       sync.Mutex
	locks    map[string]memLock // by key
	byID     map[string]string  // lockId -> key
	fences   map[string]int64
	acquires []time.Time // when each Acquire was called
	extends  []time.Time
	releases []releaseCall

	// Hooks, called without mu held. A nil hook means the normal path.
	onAcquire func(ctx context.Context, key string) (lockstore.AcquireResult, error, bool)
	onExtend  func(ctx context.Context, n int, lockID string) (lockstore.ExtendResult, error, bool) // n: 1-based call number
	onRelease func(ctx context.Context, lockID string) (lockstore.ReleaseResult, error, bool)
}

type memLock struct {
	lockID      string
	fence       string
	expiresAtMs int64
}

type releaseCall struct {
	lockID string
	ctxErr error // the release context's state when called
	at     time.Time
}

func newMemStore() *memStore {
	return &memStore{locks: map[string]memLock{}, byID: map[string]string{}, fences: map[string]int64{}}
}

func nowMs() int64 { return time.Now().UnixMilli() }

// Acquire makes memStore a Locker; acquire is the store's answer.
func (m *memStore) Acquire(ctx context.Context, key string, ttl time.Duration) (Acquired, error) {
	r, err := m.acquire(ctx, key, ttl)
	return Acquired{AcquireResult: r}, err
}

func (m *memStore) acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	m.mu.Lock()
	m.acquires = append(m.acquires, time.Now())
	hook := m.onAcquire
	m.mu.Unlock()
	if hook != nil {
		if r, err, handled := hook(ctx, key); handled {
			return r, err
		}
	}
	if err := lockstore.ContextError(ctx, "acquire"); err != nil {
		return lockstore.AcquireResult{}, err
	}
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	ms, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMs()
	if l, ok := m.locks[k]; ok && lockstore.IsLive(l.expiresAtMs, now) {
		return lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}, nil
	}
	id, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	m.fences[k]++
	f, err := lockstore.FormatFence(m.fences[k])
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	if old, ok := m.locks[k]; ok {
		delete(m.byID, old.lockID)
	}
	m.locks[k] = memLock{lockID: id, fence: f, expiresAtMs: now + ms}
	m.byID[id] = k
	return lockstore.AcquireResult{OK: true, LockID: id, Fence: f, ExpiresAtMs: now + ms}, nil
}

func (m *memStore) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	m.mu.Lock()
	m.releases = append(m.releases, releaseCall{lockID: lockID, ctxErr: ctx.Err(), at: time.Now()})
	hook := m.onRelease
	m.mu.Unlock()
	if hook != nil {
		if r, err, handled := hook(ctx, lockID); handled {
			return r, err
		}
	}
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	if err := lockstore.ContextError(ctx, "release"); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[lockID]
	if !ok {
		return lockstore.ReleaseResult{Detail: lockstore.DetailNotFound}, nil
	}
	l := m.locks[k]
	delete(m.byID, lockID)
	delete(m.locks, k)
	if !lockstore.IsLive(l.expiresAtMs, nowMs()) {
		return lockstore.ReleaseResult{Detail: lockstore.DetailExpired}, nil
	}
	return lockstore.ReleaseResult{OK: true}, nil
}

func (m *memStore) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	m.mu.Lock()
	m.extends = append(m.extends, time.Now())
	n := len(m.extends)
	hook := m.onExtend
	m.mu.Unlock()
	if hook != nil {
		if r, err, handled := hook(ctx, n, lockID); handled {
			return r, err
		}
	}
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ExtendResult{}, err
	}
	ms, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	if err := lockstore.ContextError(ctx, "extend"); err != nil {
		return lockstore.ExtendResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[lockID]
	if !ok {
		return lockstore.ExtendResult{Detail: lockstore.DetailNotFound}, nil
	}
	l := m.locks[k]
	now := nowMs()
	if !lockstore.IsLive(l.expiresAtMs, now) {
		return lockstore.ExtendResult{Detail: lockstore.DetailExpired}, nil
	}
	l.expiresAtMs = now + ms
	m.locks[k] = l
	return lockstore.ExtendResult{OK: true, ExpiresAtMs: l.expiresAtMs}, nil
}

func (m *memStore) holder(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.locks[key]; ok && lockstore.IsLive(l.expiresAtMs, nowMs()) {
		return l.lockID
	}
	return ""
}

// drop deletes key's lock, as an expiry or a takeover would.
func (m *memStore) drop(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.locks[key]; ok {
		delete(m.byID, l.lockID)
		delete(m.locks, key)
	}
}

func (m *memStore) counts() (acquires, extends, releases int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.acquires), len(m.extends), len(m.releases)
}

// auditMemStore adds the optional interfaces.
