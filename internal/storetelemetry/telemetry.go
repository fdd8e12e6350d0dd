package storetelemetry

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// LockEvent is one observed lock operation (docs/design.md, "Telemetry is opt-in"). It identifies the key
// and lockId by their hashes; the raw values only when
// TelemetryOptions.IncludeRaw allows.
type LockEvent struct {
	Type       string `json:"type"` // EventAcquire, EventRelease, ...
	KeyHash    string `json:"keyHash,omitempty"`
	LockIDHash string `json:"lockIdHash,omitempty"`
	Result     string `json:"result"`           // ResultOK or ResultFail
	Reason     string `json:"reason,omitempty"` // "locked", lockstore.DetailExpired, lockstore.DetailNotFound, best effort
	// Code is the error code when the operation failed with an error
	// rather than a domain outcome (a fencegate addition; SyncGuard emits
	// nothing for errors).
	Code     lockstore.Code `json:"code,omitempty"`
	Duration time.Duration  `json:"durationNs"`       // how long the backend call took
	Key      string         `json:"key,omitempty"`    // raw, only with IncludeRaw
	LockID   string         `json:"lockId,omitempty"` // raw, only with IncludeRaw
}

// LockEvent types and results. The types are SyncGuard's operation names.
const (
	EventAcquire  = "acquire"
	EventRelease  = "release"
	EventExtend   = "extend"
	EventIsLocked = "isLocked" // ResultOK when the key is locked
	EventLookup   = "lookup"   // ResultOK when a live lock was found

	ResultOK   = "ok"
	ResultFail = "fail"
)

// DefaultTelemetryQueue is the event queue length of WithTelemetry: enough
// to absorb a burst while the callback is slow, small enough to bound memory.
const DefaultTelemetryQueue = 1024

// TelemetryOptions configures WithTelemetry.
type TelemetryOptions struct {
	// OnEvent receives every event, on one goroutine owned by the
	// decorator, never on the operation's. It may be slow (events queue,
	// then are dropped and counted) and may panic (recovered and logged).
	// nil disables telemetry: the decorator passes calls through.
	OnEvent func(LockEvent)
	// IncludeRaw decides per event whether the raw key and lockId go into
	// it; it sees the event with hashes only. nil means never. Keys that
	// look like secrets (containing "token", "secret", "password",
	// "credential" or "apikey") stay redacted regardless.
	IncludeRaw func(LockEvent) bool
	// QueueSize bounds the events waiting for OnEvent; 0 means
	// DefaultTelemetryQueue.
	QueueSize int
	// Logger receives callback panics (Warn). nil means slog.Default().
	Logger *slog.Logger
}

// TelemetryStats is implemented by the decorator WithTelemetry returns.
type TelemetryStats interface {
	// DroppedEvents counts events lost because the queue was full or the
	// store closed.
	DroppedEvents() uint64
}

// rawDenylist are substrings of keys that are never emitted raw.
var rawDenylist = []string{"token", "secret", "password", "credential", "apikey", "api_key"}

// WithTelemetry wraps the lock operations l so that each acquire, release,
// extend, isLocked and lookup emits a LockEvent to opts.OnEvent. Hashes are
// computed, and the callback is run, on the decorator's single worker
// goroutine; the operation only enqueues (never blocking: a full queue
// drops the event and counts it, see TelemetryStats). With a nil OnEvent
// the decorator passes every call through and emits nothing.
//
// It wraps only the role it changes (lockstore.Locks); what l wraps stays reachable
// through Unwrap and As (the store's AuditLog, HeldCounter, Pinger, ...).
// Close stops the worker after it has delivered the events already queued;
// it does not close what l wraps (its owner does).
//
// It is SyncGuard's opt-in withTelemetry (docs/design.md, "Telemetry is opt-in"). The
// gateway wraps its store's lock operations with it to time each store
// call per backend (lockserver.StoreMetrics); the lock API's own metrics count
// requests, which include refusals no store call sees (401, 403, 400) and
// waits that span many store calls (waitMs).
func WithTelemetry(l lockstore.Locks, opts TelemetryOptions) *Telemetry {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultTelemetryQueue
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	t := &Telemetry{inner: l, opts: opts, exited: make(chan struct{})}
	if opts.OnEvent == nil {
		t.closed = true // nothing to deliver: emit drops without counting
		close(t.exited)
		return t
	}
	t.queue = make(chan pendingEvent, opts.QueueSize)
	go t.work()
	return t
}

// Interface guards.
var (
	_ lockstore.Locks     = (*Telemetry)(nil)
	_ TelemetryStats      = (*Telemetry)(nil)
	_ lockstore.Unwrapper = (*Telemetry)(nil)
)

// pendingEvent is what the operation path enqueues: raw inputs, no hashing.
type pendingEvent struct {
	typ      string
	key      string
	lockID   string
	ok       bool
	reason   string
	err      error
	duration time.Duration
}

// Telemetry is the telemetry decorator of a lockstore.Locks (WithTelemetry).
type Telemetry struct {
	inner   lockstore.Locks
	opts    TelemetryOptions
	mu      sync.RWMutex // guards sends against Close closing the queue
	closed  bool
	queue   chan pendingEvent
	exited  chan struct{}
	dropped atomic.Uint64
	once    sync.Once
}

// Unwrap returns the decorated lock operations.
func (t *Telemetry) Unwrap() any { return t.inner }

// DroppedEvents implements TelemetryStats.
func (t *Telemetry) DroppedEvents() uint64 { return t.dropped.Load() }

func (t *Telemetry) emit(e pendingEvent) {
	if t.opts.OnEvent == nil {
		return
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		t.dropped.Add(1)
		return
	}
	select {
	case t.queue <- e:
	default:
		t.dropped.Add(1)
	}
}

func (t *Telemetry) work() {
	defer close(t.exited)
	for e := range t.queue {
		t.deliver(e)
	}
}

func (t *Telemetry) deliver(p pendingEvent) {
	defer func() {
		if r := recover(); r != nil {
			t.opts.Logger.Warn("telemetry callback panicked", "type", p.typ, "panic", r)
		}
	}()
	e := LockEvent{Type: p.typ, Result: ResultFail, Reason: p.reason, Duration: p.duration}
	if p.ok {
		e.Result = ResultOK
	}
	if p.err != nil {
		e.Code = lockstore.CodeOf(p.err)
	}
	if p.key != "" {
		e.KeyHash = lockstore.HashKey(p.key)
	}
	if p.lockID != "" {
		e.LockIDHash = lockstore.HashKey(p.lockID)
	}
	if t.opts.IncludeRaw != nil && t.includeRaw(e) {
		if !secretLooking(p.key) {
			e.Key = p.key
		}
		e.LockID = p.lockID
	}
	t.opts.OnEvent(e)
}

// includeRaw asks the predicate, redacting if it panics.
func (t *Telemetry) includeRaw(e LockEvent) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return t.opts.IncludeRaw(e)
}

func secretLooking(key string) bool {
	k := strings.ToLower(key)
	for _, d := range rawDenylist {
		if strings.Contains(k, d) {
			return true
		}
	}
	return false
}

func (t *Telemetry) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	start := time.Now()
	r, err := t.inner.Acquire(ctx, key, ttl)
	reason := ""
	if err == nil && !r.OK {
		reason = r.Reason
	}
	t.emit(pendingEvent{typ: EventAcquire, key: key, lockID: r.LockID, ok: err == nil && r.OK,
		reason: reason, err: err, duration: time.Since(start)})
	return r, err
}

func (t *Telemetry) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	start := time.Now()
	r, err := t.inner.Release(ctx, lockID)
	t.emit(pendingEvent{typ: EventRelease, lockID: lockID, ok: err == nil && r.OK,
		reason: r.Detail, err: err, duration: time.Since(start)})
	return r, err
}

func (t *Telemetry) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	start := time.Now()
	r, err := t.inner.Extend(ctx, lockID, ttl)
	t.emit(pendingEvent{typ: EventExtend, lockID: lockID, ok: err == nil && r.OK,
		reason: r.Detail, err: err, duration: time.Since(start)})
	return r, err
}

func (t *Telemetry) IsLocked(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	locked, err := t.inner.IsLocked(ctx, key)
	t.emit(pendingEvent{typ: EventIsLocked, key: key, ok: err == nil && locked, err: err, duration: time.Since(start)})
	return locked, err
}

func (t *Telemetry) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	start := time.Now()
	info, err := t.inner.LookupKey(ctx, key)
	t.emit(pendingEvent{typ: EventLookup, key: key, ok: err == nil && info != nil, err: err, duration: time.Since(start)})
	return info, err
}

func (t *Telemetry) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	start := time.Now()
	info, err := t.inner.LookupLockID(ctx, lockID)
	t.emit(pendingEvent{typ: EventLookup, lockID: lockID, ok: err == nil && info != nil, err: err, duration: time.Since(start)})
	return info, err
}

// Close delivers the events already queued and stops the worker. It is
// idempotent; events emitted after it are dropped. It does not close the
// wrapped lock operations.
func (t *Telemetry) Close() error {
	if t.opts.OnEvent == nil {
		return nil
	}
	t.once.Do(func() {
		t.mu.Lock()
		t.closed = true
		close(t.queue)
		t.mu.Unlock()
	})
	<-t.exited
	return nil
}
