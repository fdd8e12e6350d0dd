package lockstore

import (
	"context"
	"io"
	"log/slog"
	"time"
)

// TimeAuthority names whose clock decides expiry.
type TimeAuthority string

const (
	// ServerTime: the backend's own clock (Redis TIME, PostgreSQL now()).
	ServerTime TimeAuthority = "server"
	// ClientTime: the gateway's clock (Firestore, bolt). Keep it NTP-synced.
	ClientTime TimeAuthority = "client"
)

// Capabilities describe a backend to callers that must adapt to it.
type Capabilities struct {
	Backend       string        // "bolt", "redis", "postgres", "firestore"
	TimeAuthority TimeAuthority // whose clock decides liveness
}

// Failure details: the best-effort reason a release or extend returned
// OK=false, for telemetry only. Backends fill it when it costs no extra I/O.
const (
	DetailExpired  = "expired"
	DetailNotFound = "not-found"
)

// ReasonLocked is the only contention reason of an acquire.
const ReasonLocked = "locked"

// AcquireResult is the outcome of one acquire attempt. When OK is false the
// key is held by someone else and Reason is ReasonLocked.
type AcquireResult struct {
	OK          bool
	Reason      string
	LockID      string // the holder's secret handle; never log it
	Fence       string // 15 digits, strictly greater than every earlier fence of the key
	ExpiresAtMs int64  // authoritative expiry, from the backend's time authority
}

// ReleaseResult is the outcome of a release. OK is false when the lock was
// absent, expired or not this lockId's; that is not an error.
type ReleaseResult struct {
	OK     bool
	Detail string // DetailExpired / DetailNotFound / "" (best effort, telemetry only)
}

// ExtendResult is the outcome of an extend: the new authoritative expiry, or
// OK=false when the lock was absent or expired (it is never resurrected).
type ExtendResult struct {
	OK          bool
	ExpiresAtMs int64
	Detail      string
}

// Lock is a live lock: the one description of a lock, as a store holds it
// and the edge check reads it (KeyState.Live). It holds secrets: LockID is
// the holder's handle, and Key may name a customer. What leaves the
// store's trusted callers, or reaches a log, is its sanitised view, Info
// (a listing's is Listed); a Lock handed to slog logs only that view.
type Lock struct {
	Key          string // NFC-normalised user key
	LockID       string // the holder's secret handle; never log it
	Fence        string // 15 digits
	ExpiresAtMs  int64
	AcquiredAtMs int64
}

// Info returns the sanitised view of l: the key and lockId hashed
// (HashKey), never raw, so every backend's lookup answers the same way and
// none can hand back a raw key or lockId.
func (l Lock) Info() *LockInfo {
	return &LockInfo{
		KeyHash:      HashKey(l.Key),
		LockIDHash:   HashKey(l.LockID),
		Fence:        l.Fence,
		ExpiresAtMs:  l.ExpiresAtMs,
		AcquiredAtMs: l.AcquiredAtMs,
	}
}

// Listed returns l as a listing shows it (LockLister): the sanitised view
// and the raw key, never the lockId.
func (l Lock) Listed() ListedLock {
	return ListedLock{Key: l.Key, LockInfo: *l.Info()}
}

// LogValue makes slog log the sanitised view: a Lock that reaches a log
// line by mistake shows hashes, never the raw key or lockId.
func (l Lock) LogValue() slog.Value {
	i := l.Info()
	return slog.GroupValue(slog.String("keyHash", i.KeyHash), slog.String("lockIdHash", i.LockIDHash),
		slog.String("fence", i.Fence), slog.Int64("expiresAtMs", i.ExpiresAtMs), slog.Int64("acquiredAtMs", i.AcquiredAtMs))
}

// LockInfo is a Lock's sanitised view (Lock.Info), what lookups return
// and the lock API answers: hashes, never the raw key or lockId.
type LockInfo struct {
	KeyHash      string `json:"keyHash"`
	LockIDHash   string `json:"lockIdHash"`
	Fence        string `json:"fence"`
	ExpiresAtMs  int64  `json:"expiresAtMs"`
	AcquiredAtMs int64  `json:"acquiredAtMs"`
}

// KeyState is what the edge check reads for a key in one backend call.
type KeyState struct {
	// Live is the live lock on the key, or nil.
	Live *Lock
	// LatestFence is the latest fence ever issued for the key ("" if none).
	// It is at least Live.Fence.
	LatestFence string
	// NowMs is the time authority's clock when the state was read.
	NowMs int64
}

// The contract is cut by role: each consumer takes the narrowest role it
// uses, and each wrapper wraps only the role it changes. Store is all of
// them, what every backend implements; the optional capabilities
// (AuditLog, HeldCounter, LockLister, BarrierSweeper, ReplicationReporter)
// are found with As, through any wrapper.
//
//	role          methods                              taken by
//	Locker        Acquire, Release, Extend             the lock helper, AcquireWithRetry
//	Locks         Locker + IsLocked, LookupKey, ...    the lock API (api), its wrappers
//	Inspector     Inspect                              the console's key page
//	EdgeState     Inspector + WriteBarrier (Admit, ...) the edge check (fencecheck)
//	Pinger        Ping                                 readiness
//	Describer     Capabilities                         metrics labels, logs

// Locker is the lock operations that change a lock: SyncGuard's acquire,
// release and extend. A Store and fencegate's network client implement it.
type Locker interface {
	// Acquire tries once to take the lock on key for ttl. Contention is
	// AcquireResult{OK: false, Reason: "locked"}, not an error.
	Acquire(ctx context.Context, key string, ttl time.Duration) (AcquireResult, error)
	// Release drops the lock lockID holds, if it is still live.
	Release(ctx context.Context, lockID string) (ReleaseResult, error)
	// Extend sets the live lock's expiry to now+ttl (it replaces, it does not
	// add) and returns the new authoritative expiry.
	Extend(ctx context.Context, lockID string, ttl time.Duration) (ExtendResult, error)
}

// Locks is every lock operation of SyncGuard's interface: Locker and the
// read-only ones. It is what the lock API serves.
type Locks interface {
	Locker
	// IsLocked reports whether key has a live lock. It is read-only.
	IsLocked(ctx context.Context, key string) (bool, error)
	// LookupKey returns the sanitised live lock on key, or nil.
	LookupKey(ctx context.Context, key string) (*LockInfo, error)
	// LookupLockID returns the sanitised live lock lockID holds, or nil.
	LookupLockID(ctx context.Context, lockID string) (*LockInfo, error)
}

// Inspector reads a key's state for the edge (and the console).
type Inspector interface {
	// Inspect reads, in one backend call and atomically where the backend
	// allows, the live lock on key and the latest fence ever issued for it.
	Inspect(ctx context.Context, key string) (KeyState, error)
}

// EdgeState is what the edge check reads and writes for each request: the
// key's state, and the write barrier's entries. It is all fencecheck uses
// of a store.
type EdgeState interface {
	Inspector
	// WriteBarrier registers and finishes in-flight writes (barrier.go).
	WriteBarrier
}

// Pinger checks that a backend is reachable (for readiness probes).
type Pinger interface {
	Ping(ctx context.Context) error
}

// Describer describes a backend (its name, whose clock decides expiry).
type Describer interface {
	Capabilities() Capabilities
}

// Store is a lock backend: every role. Every operation is a single attempt
// (retries live in the caller's lock helper), validates its input before
// any I/O (the Precheck functions), maps context cancellation to Aborted and
// an expired deadline to NetworkTimeout, and returns *Error for system
// failures. Close releases the backend's resources (locks are not
// released); it is idempotent.
type Store interface {
	Locks
	EdgeState
	Describer
	Pinger
	io.Closer
}

// HeldCounter is implemented by stores that can count live locks cheaply
// (for the fencegate_locks_held gauge).
type HeldCounter interface {
	CountHeld(ctx context.Context) (int64, error)
}
