package lockstore

import (
	"context"
	"sync"
	"time"
)

// memStore is a small in-memory Store for testing the helpers
// (WithTelemetry, As) — not a backend: it has no
// fence persistence and one clock, time.Now (a fake clock inside
// synctest bubbles). Hooks let a test script failures.
type memStore struct {
	mu       sync.Mutex
	locks    map[string]memLock // by key
	byID     map[string]string  // lockId -> key
	fences   map[string]int64
	writes   map[string]map[string]WriteEntry // barrier entries by key
	closed   int
	acquires []time.Time // when each Acquire was called
	extends  []time.Time
	releases []releaseCall

	// Hooks, called without mu held. A nil hook means the normal path.
	onAcquire func(ctx context.Context, key string) (AcquireResult, error, bool)
	onExtend  func(ctx context.Context, n int, lockID string) (ExtendResult, error, bool) // n: 1-based call number
	onRelease func(ctx context.Context, lockID string) (ReleaseResult, error, bool)
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

func (m *memStore) Acquire(ctx context.Context, key string, ttl time.Duration) (AcquireResult, error) {
	m.mu.Lock()
	m.acquires = append(m.acquires, time.Now())
	hook := m.onAcquire
	m.mu.Unlock()
	if hook != nil {
		if r, err, handled := hook(ctx, key); handled {
			return r, err
		}
	}
	if err := ContextError(ctx, "acquire"); err != nil {
		return AcquireResult{}, err
	}
	k, err := NormalizeKey(key)
	if err != nil {
		return AcquireResult{}, err
	}
	ms, err := ValidateTTL(ttl)
	if err != nil {
		return AcquireResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := nowMs()
	if l, ok := m.locks[k]; ok && IsLive(l.expiresAtMs, now) {
		return AcquireResult{OK: false, Reason: ReasonLocked}, nil
	}
	id, err := NewLockID()
	if err != nil {
		return AcquireResult{}, err
	}
	m.fences[k]++
	f, err := FormatFence(m.fences[k])
	if err != nil {
		return AcquireResult{}, err
	}
	if old, ok := m.locks[k]; ok {
		delete(m.byID, old.lockID)
	}
	m.locks[k] = memLock{lockID: id, fence: f, expiresAtMs: now + ms}
	m.byID[id] = k
	return AcquireResult{OK: true, LockID: id, Fence: f, ExpiresAtMs: now + ms}, nil
}

func (m *memStore) Release(ctx context.Context, lockID string) (ReleaseResult, error) {
	m.mu.Lock()
	m.releases = append(m.releases, releaseCall{lockID: lockID, ctxErr: ctx.Err(), at: time.Now()})
	hook := m.onRelease
	m.mu.Unlock()
	if hook != nil {
		if r, err, handled := hook(ctx, lockID); handled {
			return r, err
		}
	}
	if err := ValidateLockID(lockID); err != nil {
		return ReleaseResult{}, err
	}
	if err := ContextError(ctx, "release"); err != nil {
		return ReleaseResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[lockID]
	if !ok {
		return ReleaseResult{Detail: DetailNotFound}, nil
	}
	l := m.locks[k]
	delete(m.byID, lockID)
	delete(m.locks, k)
	if !IsLive(l.expiresAtMs, nowMs()) {
		return ReleaseResult{Detail: DetailExpired}, nil
	}
	return ReleaseResult{OK: true}, nil
}

func (m *memStore) Extend(ctx context.Context, lockID string, ttl time.Duration) (ExtendResult, error) {
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
	if err := ValidateLockID(lockID); err != nil {
		return ExtendResult{}, err
	}
	ms, err := ValidateTTL(ttl)
	if err != nil {
		return ExtendResult{}, err
	}
	if err := ContextError(ctx, "extend"); err != nil {
		return ExtendResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.byID[lockID]
	if !ok {
		return ExtendResult{Detail: DetailNotFound}, nil
	}
	l := m.locks[k]
	now := nowMs()
	if !IsLive(l.expiresAtMs, now) {
		return ExtendResult{Detail: DetailExpired}, nil
	}
	l.expiresAtMs = now + ms
	m.locks[k] = l
	return ExtendResult{OK: true, ExpiresAtMs: l.expiresAtMs}, nil
}

func (m *memStore) IsLocked(ctx context.Context, key string) (bool, error) {
	info, err := m.LookupKey(ctx, key)
	return info != nil, err
}

func (m *memStore) LookupKey(ctx context.Context, key string) (*LockInfo, error) {
	k, err := NormalizeKey(key)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[k]
	if !ok || !IsLive(l.expiresAtMs, nowMs()) {
		return nil, nil
	}
	return &LockInfo{KeyHash: HashKey(k), LockIDHash: HashKey(l.lockID), Fence: l.fence, ExpiresAtMs: l.expiresAtMs}, nil
}

func (m *memStore) LookupLockID(ctx context.Context, lockID string) (*LockInfo, error) {
	if err := ValidateLockID(lockID); err != nil {
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

func (m *memStore) Inspect(ctx context.Context, key string) (KeyState, error) {
	k, err := NormalizeKey(key)
	if err != nil {
		return KeyState{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := KeyState{NowMs: nowMs()}
	if l, ok := m.locks[k]; ok && IsLive(l.expiresAtMs, st.NowMs) {
		st.Live = &HeldLock{LockID: l.lockID, Fence: l.fence, ExpiresAtMs: l.expiresAtMs}
	}
	if n := m.fences[k]; n > 0 {
		st.LatestFence, _ = FormatFence(n)
	}
	return st, nil
}

func (m *memStore) Admit(ctx context.Context, key string, a WriteAdmission) (WriteAdmitResult, error) {
	k, err := NormalizeKey(key)
	if err != nil {
		return WriteAdmitResult{}, err
	}
	ms, err := a.Validate()
	if err != nil {
		return WriteAdmitResult{}, err
	}
	st, err := m.Inspect(ctx, key)
	if err != nil {
		return WriteAdmitResult{}, err
	}
	// Not atomic with the Inspect above: the helpers under test never
	// race an acquire against an admission.
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writes == nil {
		m.writes = map[string]map[string]WriteEntry{}
	}
	if m.writes[k] == nil {
		m.writes[k] = map[string]WriteEntry{}
	}
	r, _ := a.Apply(m.writes[k], st, ms)
	return r, nil
}

func (m *memStore) Finish(ctx context.Context, key, writeID string) error {
	k, err := NormalizeKey(key)
	if err != nil {
		return err
	}
	if err := ValidateWriteID(writeID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.writes[k], writeID)
	return nil
}

func (m *memStore) Capabilities() Capabilities {
	return Capabilities{Backend: "mem", TimeAuthority: ClientTime}
}

func (m *memStore) Ping(context.Context) error { return nil }

func (m *memStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed++
	return nil
}

// auditMemStore adds the optional interfaces.
type auditMemStore struct {
	*memStore
	appended int
}

func (a *auditMemStore) AppendAudit(_ context.Context, ev []AuditEvent) error {
	a.appended += len(ev)
	return nil
}

func (a *auditMemStore) QueryAudit(context.Context, AuditQuery) ([]AuditEvent, error) {
	return []AuditEvent{{Reason: "stale"}}, nil
}

type counterMemStore struct{ *memStore }

func (c counterMemStore) CountHeld(context.Context) (int64, error) { return 7, nil }

type fullMemStore struct {
	*auditMemStore
}

func (f fullMemStore) CountHeld(context.Context) (int64, error) { return 7, nil }
