package storetest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// TestReferenceStore runs the suite against refStore, a minimal in-memory
// store written straight from the contract. It keeps the suite honest: a
// case that a faithful implementation cannot pass is a bug in the suite.
func TestReferenceStore(t *testing.T) {
	var mu sync.Mutex
	spaces := map[string]*refData{}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, ns string, o storetest.Options) (lockstore.Store, error) {
			mu.Lock()
			defer mu.Unlock()
			d, ok := spaces[ns]
			if !ok {
				d = &refData{locks: map[string]refLock{}, fences: map[string]int64{}}
				spaces[ns] = d
			}
			broken := os.Getenv(brokenEnv)
			if o.Needs(storetest.SweepCounts) {
				switch broken {
				case "lacks-sweep": // a backend that legitimately lacks the feature
					return nil, fmt.Errorf("%w: the reference store's entries expire by themselves", storetest.ErrNotSupported)
				case "server-down": // a missing server is a failure, never a skip
					return nil, errors.New("dial 127.0.0.1:1: connection refused")
				}
			}
			return &refStore{d: d, retention: o.AuditRetention.WithDefaults(), floor: o.FenceFloor, clock: o.Now, broken: broken}, nil
		},
		SetFence: func(t *testing.T, s lockstore.Store, ns, key string, n int64) {
			d := s.(*refStore).d
			d.mu.Lock()
			defer d.mu.Unlock()
			k, err := lockstore.NormalizeKey(key)
			if err != nil {
				t.Fatal(err)
			}
			d.fences[k] = n
		},
	})
}

type refLock struct {
	key, id        string
	fence          int64
	acquired, exps int64
}

type refData struct {
	mu     sync.Mutex
	locks  map[string]refLock // by normalised key
	fences map[string]int64
	audit  []lockstore.AuditEvent
	writes map[string]map[string]backend.WriteEntry // barrier entries by normalised key; see barrier_test.go
}

type refStore struct {
	d         *refData
	retention lockstore.AuditRetention
	floor     backend.FenceFloor
	clock     func() time.Time // the suite's fake clock (Options.Now); nil: time.Now
	broken    string           // a deliberate bug (brokenEnv), for TestSuiteCatches
	closed    atomic.Bool
}

// brokenEnv names a deliberate bug for the reference store to have, so
// that TestSuiteCatches can show the suite fails it.
const brokenEnv = "STORETEST_BROKEN_REFSTORE"

// TestSuiteCatches runs the reference store with a deliberate bug in a
// child process, and insists the suite fails it in the case that covers
// the bug.
func TestSuiteCatches(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("running as the broken child")
	}
	for _, c := range []struct{ bug, failingCase string }{
		// Filtering by the 96-bit keyHash lets a crafted key read another's events.
		{"hash-filter", "conformance/audit"},
		// One count budget for both classes lets input events evict a stale one.
		{"shared-retention", "conformance/audit_retention"},
		// Consecutive fences under the default: a store that loses writes repeats them.
		{"no-floor", "conformance/fence_floor_survives_lost_writes"},
		// The floor without its lead cap: a clock that stepped back goes unnoticed.
		{"no-lead-cap", "conformance/fence_floor_lead_cap"},
		// A client-time store that ignores the case's fake clock: the suite's
		// skipped waits would never have happened.
		{"real-clock", "conformance/expiry_tolerance"},
		// Open cannot reach the backend: the case fails, it is not skipped.
		{"server-down", "conformance/barrier_sweep_counts"},
	} {
		t.Run(c.bug, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestReferenceStore$/^conformance$/^"+
				strings.TrimPrefix(c.failingCase, "conformance/")+"$", "-test.v")
			cmd.Env = append(os.Environ(), brokenEnv+"="+c.bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store with bug %s:\n%s", c.bug, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestReferenceStore/"+c.failingCase) {
				t.Fatalf("bug %s did not fail %s:\n%s", c.bug, c.failingCase, out)
			}
		})
	}
}

// TestSuiteSkipsNotSupported: a harness answering ErrNotSupported for a
// feature its backend lacks skips the case that needs it, with the reason,
// and the suite passes.
func TestSuiteSkipsNotSupported(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("running as the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReferenceStore$/^conformance$/^barrier_sweep", "-test.v")
	cmd.Env = append(os.Environ(), brokenEnv+"=lacks-sweep")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite failed a store lacking an optional feature (%v):\n%s", err, out)
	}
	for _, want := range []string{"--- SKIP: TestReferenceStore/conformance/barrier_sweep_counts", "entries expire by themselves",
		"--- PASS: TestReferenceStore/conformance/barrier_sweep "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
}

func (s *refStore) start(ctx context.Context, op string) (func(), error) {
	if err := lockstore.ContextError(ctx, op); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, lockstore.Errorf(lockstore.ServiceUnavailable, op, "store is closed")
	}
	s.d.mu.Lock()
	return s.d.mu.Unlock, nil
}

// now is the store's time: the suite's fake clock when it gave one.
func (s *refStore) now() int64 {
	if s.broken == "real-clock" || s.clock == nil {
		return time.Now().UnixMilli()
	}
	return s.clock().UnixMilli()
}

func (s *refStore) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	ms, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	unlock, err := s.start(ctx, "acquire")
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	defer unlock()
	n := s.now()
	if l, ok := s.d.locks[k]; ok && backend.IsLive(l.exps, n) {
		return lockstore.AcquireResult{Reason: lockstore.ReasonLocked}, nil
	}
	if s.d.fences[k] >= lockstore.FenceMax {
		return lockstore.AcquireResult{}, lockstore.Errorf(lockstore.Internal, "acquire", "fence overflow")
	}
	next := s.d.fences[k] + 1
	if s.floor == backend.FloorClock && s.broken != "no-floor" {
		// The floor, (now - epoch) * per-ms rate, and its lead cap.
		floor := max(n-backend.FloorEpochMs, 0) * backend.FloorPerMs
		if next-floor > backend.FloorLeadMax && s.broken != "no-lead-cap" {
			return lockstore.AcquireResult{}, lockstore.Errorf(lockstore.ServiceUnavailable, "acquire", "clock behind the counter")
		}
		next = max(next, floor)
	}
	f, err := lockstore.FormatFence(next)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	id, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	s.d.fences[k] = next
	s.d.locks[k] = refLock{key: k, id: id, fence: next, acquired: n, exps: n + ms}
	return lockstore.AcquireResult{OK: true, LockID: id, Fence: f, ExpiresAtMs: n + ms}, nil
}

// byID finds the live lock lockID holds; the caller holds the mutex.
func (s *refStore) byID(id string) (refLock, bool) {
	for _, l := range s.d.locks {
		if l.id == id && backend.IsLive(l.exps, s.now()) {
			return l, true
		}
	}
	return refLock{}, false
}

func (s *refStore) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	unlock, err := s.start(ctx, "release")
	if err != nil {
		return lockstore.ReleaseResult{}, err
	}
	defer unlock()
	l, ok := s.byID(lockID)
	if !ok {
		return lockstore.ReleaseResult{Detail: lockstore.DetailNotFound}, nil
	}
	delete(s.d.locks, l.key)
	return lockstore.ReleaseResult{OK: true}, nil
}

func (s *refStore) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ExtendResult{}, err
	}
	ms, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	unlock, err := s.start(ctx, "extend")
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	defer unlock()
	l, ok := s.byID(lockID)
	if !ok {
		return lockstore.ExtendResult{Detail: lockstore.DetailNotFound}, nil
	}
	l.exps = s.now() + ms
	s.d.locks[l.key] = l
	return lockstore.ExtendResult{OK: true, ExpiresAtMs: l.exps}, nil
}

func (s *refStore) IsLocked(ctx context.Context, key string) (bool, error) {
	li, err := s.LookupKey(ctx, key)
	return li != nil, err
}

func info(l refLock) *lockstore.LockInfo {
	f, _ := lockstore.FormatFence(l.fence)
	return &lockstore.LockInfo{KeyHash: lockstore.HashKey(l.key), LockIDHash: lockstore.HashKey(l.id),
		Fence: f, ExpiresAtMs: l.exps, AcquiredAtMs: l.acquired}
}

func (s *refStore) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return nil, err
	}
	unlock, err := s.start(ctx, "lookup")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if l, ok := s.d.locks[k]; ok && backend.IsLive(l.exps, s.now()) {
		return info(l), nil
	}
	return nil, nil
}

func (s *refStore) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return nil, err
	}
	unlock, err := s.start(ctx, "lookup")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if l, ok := s.byID(lockID); ok {
		return info(l), nil
	}
	return nil, nil
}

func (s *refStore) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	unlock, err := s.start(ctx, "inspect")
	if err != nil {
		return lockstore.KeyState{}, err
	}
	defer unlock()
	ks := lockstore.KeyState{NowMs: s.now()}
	if n := s.d.fences[k]; n > 0 {
		ks.LatestFence, _ = lockstore.FormatFence(n)
	}
	if l, ok := s.d.locks[k]; ok && backend.IsLive(l.exps, ks.NowMs) {
		f, _ := lockstore.FormatFence(l.fence)
		ks.Live = &lockstore.Lock{Key: k, LockID: l.id, Fence: f, ExpiresAtMs: l.exps, AcquiredAtMs: l.acquired}
	}
	return ks, nil
}

func (s *refStore) AppendAudit(ctx context.Context, events []lockstore.AuditEvent) error {
	unlock, err := s.start(ctx, "audit")
	if err != nil {
		return err
	}
	defer unlock()
	s.d.audit = append(s.d.audit, events...)
	// Each class keeps its newest MaxEventsOf (the bug: one shared budget).
	counts := map[lockstore.AuditClass]int{}
	var kept []lockstore.AuditEvent
	for i := len(s.d.audit) - 1; i >= 0; i-- {
		e := s.d.audit[i]
		c := e.Class()
		if s.broken == "shared-retention" {
			c = lockstore.AuditDecision
		}
		if counts[c]++; counts[c] <= s.retention.MaxEventsOf(c) {
			kept = append(kept, e)
		}
	}
	slices.Reverse(kept)
	s.d.audit = kept
	return nil
}

func (s *refStore) QueryAudit(ctx context.Context, q lockstore.AuditQuery) ([]lockstore.AuditEvent, error) {
	unlock, err := s.start(ctx, "audit")
	if err != nil {
		return nil, err
	}
	defer unlock()
	var out []lockstore.AuditEvent
	for _, e := range s.d.audit {
		match := q.Key == "" || e.KeyDigest == lockstore.DigestKey(q.Key).String()
		if s.broken == "hash-filter" {
			match = q.Key == "" || e.KeyHash == lockstore.HashKey(q.Key)
		}
		if match && e.TimeMs >= q.SinceMs {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b lockstore.AuditEvent) int { return cmp.Compare(b.TimeMs, a.TimeMs) })
	limit := q.Limit
	if limit <= 0 {
		limit = lockstore.DefaultAuditLimit
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (s *refStore) CountHeld(ctx context.Context) (int64, error) {
	unlock, err := s.start(ctx, "count")
	if err != nil {
		return 0, err
	}
	defer unlock()
	var n int64
	for _, l := range s.d.locks {
		if backend.IsLive(l.exps, s.now()) {
			n++
		}
	}
	return n, nil
}

func (s *refStore) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "reference", TimeAuthority: lockstore.ClientTime}
}

func (s *refStore) Ping(ctx context.Context) error {
	// ContextError returns a typed *Error; a nil one must not become a
	// non-nil error interface.
	if err := lockstore.ContextError(ctx, "ping"); err != nil {
		return err
	}
	return nil
}

func (s *refStore) Close() error {
	s.closed.Store(true)
	return nil
}
