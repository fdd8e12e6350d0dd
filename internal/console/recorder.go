package console

import (
	"context"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// DefaultRecorderSize is how many lock operations a Recorder remembers.
const DefaultRecorderSize = 4096

// Op kinds in a key's timeline.
const (
	opAcquire = "acquire"
	opExtend  = "extend"
	opRelease = "release"
)

// lockOp is one lock operation this gateway served. Key is the raw key,
// kept in memory for scope checks; it is shown only when raw keys are on.
type lockOp struct {
	TimeMs      int64
	Kind        string
	Key         string
	KeyHash     string
	LockIDHash  string
	Fence       string
	ExpiresAtMs int64
}

// Recorder remembers the last lock operations served through the store it
// wraps (Record): successful acquires, extends and releases. It is this
// process's view only; see the package doc.
type Recorder struct {
	now func() time.Time

	mu   sync.Mutex
	ring []lockOp
	next int
	full bool
}

// NewRecorder returns a Recorder keeping the last size operations (size <=
// 0 means DefaultRecorderSize).
func NewRecorder(size int) *Recorder {
	if size <= 0 {
		size = DefaultRecorderSize
	}
	return &Recorder{now: time.Now, ring: make([]lockOp, size)}
}

func (r *Recorder) add(op lockOp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring[r.next] = op
	r.next = (r.next + 1) % len(r.ring)
	if r.next == 0 {
		r.full = true
	}
}

// ops returns the remembered operations, oldest first, that keep returns
// true for.
func (r *Recorder) ops(keep func(lockOp) bool) []lockOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []lockOp
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	start := 0
	if r.full {
		start = r.next
	}
	for i := range n {
		op := r.ring[(start+i)%len(r.ring)]
		if keep(op) {
			out = append(out, op)
		}
	}
	return out
}

// holderOf finds the remembered acquisition of the lock whose lockId hashes
// to h, for attributing a release or extend (which name only the lockId)
// to its key.
func (r *Recorder) holderOf(h string) (lockOp, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i <= len(r.ring); i++ {
		op := r.ring[(r.next-i+len(r.ring))%len(r.ring)]
		if op.Kind == "" {
			break
		}
		if op.LockIDHash == h && op.Kind == opAcquire {
			return op, true
		}
	}
	return lockOp{}, false
}

// Record wraps the lock operations l so that those served through it are
// remembered. It wraps only the lock operations; what l wraps (the store's
// HeldCounter, AuditLog, LockLister, ...) stays reachable through Unwrap
// with lockstore.As. Recording is a few field copies under a mutex, on the
// operation's goroutine; it does no I/O.
func (r *Recorder) Record(l lockstore.Locks) lockstore.Locks {
	return &recordingLocks{Locks: l, rec: r}
}

// recordingLocks overrides the three mutating lock operations.
type recordingLocks struct {
	lockstore.Locks
	rec *Recorder
}

// Unwrap returns the recorded lock operations (lockstore.As).
func (s *recordingLocks) Unwrap() any { return s.Locks }

func (s *recordingLocks) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	res, err := s.Locks.Acquire(ctx, key, ttl)
	if err == nil && res.OK {
		nk, nerr := lockstore.NormalizeKey(key)
		if nerr == nil {
			s.rec.add(lockOp{
				TimeMs: s.rec.now().UnixMilli(), Kind: opAcquire, Key: nk, KeyHash: lockstore.HashKey(nk),
				LockIDHash: lockstore.HashKey(res.LockID), Fence: res.Fence, ExpiresAtMs: res.ExpiresAtMs,
			})
		}
	}
	return res, err
}

func (s *recordingLocks) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	res, err := s.Locks.Release(ctx, lockID)
	if err == nil && res.OK {
		s.follow(opRelease, lockID, 0)
	}
	return res, err
}

func (s *recordingLocks) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	res, err := s.Locks.Extend(ctx, lockID, ttl)
	if err == nil && res.OK {
		s.follow(opExtend, lockID, res.ExpiresAtMs)
	}
	return res, err
}

// follow records a release or extend of a lock whose acquisition this
// gateway remembers; others cannot be attributed to a key without a store
// read, which the hot path does not pay for.
func (s *recordingLocks) follow(kind, lockID string, expiresAtMs int64) {
	h := lockstore.HashKey(lockID)
	acq, ok := s.rec.holderOf(h)
	if !ok {
		return
	}
	s.rec.add(lockOp{
		TimeMs: s.rec.now().UnixMilli(), Kind: kind, Key: acq.Key, KeyHash: acq.KeyHash,
		LockIDHash: h, Fence: acq.Fence, ExpiresAtMs: expiresAtMs,
	})
}
