package locktest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// MemStore is a small in-memory lockstore.Store for testing the helpers
// around a store (package lock's Lock, KeepAlive, AcquireWithRetry;
// lockstore's WithTelemetry, As) — not a backend: it has no fence
// persistence and one clock, time.Now (a fake clock inside synctest
// bubbles). It records the calls it gets, and hooks let a test script
// failures.
type MemStore struct {
	mu       sync.Mutex
	locks    map[string]memLock // by key
	byID     map[string]string  // lockId -> key
	fences   map[string]int64
	writes   map[string]map[string]backend.WriteEntry // barrier entries by key
	closed   int
	acquires []time.Time // when each Acquire was called
	extends  []time.Time
	releases []ReleaseCall

	// Hooks, read under the store's lock and called without it; set them
	// before the store is in use. A hook that returns handled=false (or a
	// nil hook) means the normal path.
	OnAcquire func(ctx context.Context, key string) (r lockstore.AcquireResult, err error, handled bool)
	OnExtend  func(ctx context.Context, n int, lockID string) (r lockstore.ExtendResult, err error, handled bool) // n: 1-based call number
	OnRelease func(ctx context.Context, lockID string) (r lockstore.ReleaseResult, err error, handled bool)
}

type memLock struct {
	lockID      string
	fence       string
	expiresAtMs int64
}

// ReleaseCall is one call of Release.
type ReleaseCall struct {
	LockID string
	CtxErr error // the release context's state when called
	At     time.Time
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{locks: map[string]memLock{}, byID: map[string]string{}, fences: map[string]int64{}}
}

func nowMs() int64 { return time.Now().UnixMilli() }

func (m *MemStore) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	m.mu.Lock()
	m.acquires = append(m.acquires, time.Now())
	hook := m.OnAcquire
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
	if l, ok := m.locks[k]; ok && backend.IsLive(l.expiresAtMs, now) {
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

func (m *MemStore) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	m.mu.Lock()
	m.releases = append(m.releases, ReleaseCall{LockID: lockID, CtxErr: ctx.Err(), At: time.Now()})
	hook := m.OnRelease
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
	if !backend.IsLive(l.expiresAtMs, nowMs()) {
		return lockstore.ReleaseResult{Detail: lockstore.DetailExpired}, nil
	}
	return lockstore.ReleaseResult{OK: true}, nil
}

func (m *MemStore) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	m.mu.Lock()
	m.extends = append(m.extends, time.Now())
	n := len(m.extends)
	hook := m.OnExtend
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
	if !backend.IsLive(l.expiresAtMs, now) {
		return lockstore.ExtendResult{Detail: lockstore.DetailExpired}, nil
	}
	l.expiresAtMs = now + ms
	m.locks[k] = l
	return lockstore.ExtendResult{OK: true, ExpiresAtMs: l.expiresAtMs}, nil
}

func (m *MemStore) IsLocked(ctx context.Context, key string) (bool, error) {
	info, err := m.LookupKey(ctx, key)
	return info != nil, err
}

func (m *MemStore) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[k]
	if !ok || !backend.IsLive(l.expiresAtMs, nowMs()) {
		return nil, nil
	}
	return &lockstore.LockInfo{KeyHash: lockstore.HashKey(k), LockIDHash: lockstore.HashKey(l.lockID), Fence: l.fence, ExpiresAtMs: l.expiresAtMs}, nil
}

func (m *MemStore) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return nil, err
	}
	m.mu.Lock()
	k, ok := m.byID[lockID]
	m.mu.Unlock()
	if !ok {
		return nil, nil
	}
	return m.LookupKey(ctx, k)
}

func (m *MemStore) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := lockstore.KeyState{NowMs: nowMs()}
	if l, ok := m.locks[k]; ok && backend.IsLive(l.expiresAtMs, st.NowMs) {
		st.Live = &lockstore.Lock{Key: k, LockID: l.lockID, Fence: l.fence, ExpiresAtMs: l.expiresAtMs}
	}
	if n := m.fences[k]; n > 0 {
		st.LatestFence, _ = lockstore.FormatFence(n)
	}
	return st, nil
}

func (m *MemStore) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	ms, err := backend.ValidateAdmission(a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	st, err := m.Inspect(ctx, key)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	// Not atomic with the Inspect above: the helpers under test never
	// race an acquire against an admission.
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writes == nil {
		m.writes = map[string]map[string]backend.WriteEntry{}
	}
	if m.writes[k] == nil {
		m.writes[k] = map[string]backend.WriteEntry{}
	}
	r, _ := backend.ApplyAdmission(a, m.writes[k], st, ms)
	return r, nil
}

func (m *MemStore) Finish(ctx context.Context, key, writeID string) error {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return err
	}
	if err := backend.ValidateWriteID(writeID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.writes[k], writeID)
	return nil
}

func (m *MemStore) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "mem", TimeAuthority: lockstore.ClientTime}
}

func (m *MemStore) Ping(context.Context) error { return nil }

// Close counts the calls (Closed) and closes nothing.
func (m *MemStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed++
	return nil
}

// Holder is the lockId holding key now ("" when none).
func (m *MemStore) Holder(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.locks[key]; ok && backend.IsLive(l.expiresAtMs, nowMs()) {
		return l.lockID
	}
	return ""
}

// Drop deletes key's lock, as an expiry or a takeover would.
func (m *MemStore) Drop(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.locks[key]; ok {
		delete(m.byID, l.lockID)
		delete(m.locks, key)
	}
}

// Counts is how many times Acquire, Extend and Release were called.
func (m *MemStore) Counts() (acquires, extends, releases int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.acquires), len(m.extends), len(m.releases)
}

// Acquires is when each Acquire was called.
func (m *MemStore) Acquires() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.acquires)
}

// Extends is when each Extend was called.
func (m *MemStore) Extends() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.extends)
}

// Releases are the calls of Release.
func (m *MemStore) Releases() []ReleaseCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.releases)
}

// Closed is how many times Close was called.
func (m *MemStore) Closed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}
