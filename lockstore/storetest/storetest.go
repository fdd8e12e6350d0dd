// Package storetest is the conformance suite every lockstore backend must
// pass. A backend's own test calls Run with a Harness that opens its store
// over a namespace; every case gets a fresh namespace, so cases never see
// each other's locks, fence counters or audit events, and most run in
// parallel.
//
// The suite checks behaviour through the public contract only (Store,
// AuditLog, HeldCounter), which is what makes the backends interchangeable:
// a case that passes on one backend and fails on another is a bug in the
// second, not a backend-specific allowance.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Harness tells the suite how to reach one backend.
type Harness struct {
	// Open returns a store over namespace ns (a key prefix, table-name
	// suffix or file name). Opening ns again after the previous store was
	// closed must reach the same data. ns is at most 28 bytes of [a-z0-9_],
	// starting with a letter. Open fails the test itself on error.
	Open func(t *testing.T, ns string) lockstore.Store
	// OpenAudit is Open with the given audit retention (the audit
	// retention case needs a small one).
	OpenAudit func(t *testing.T, ns string, r lockstore.AuditRetention) lockstore.Store
	// OpenFloorOff is Open with lockstore.FloorOff: consecutive fences, for
	// the cases that count them. Open (and OpenAudit) use the backend's
	// default, lockstore.FloorClock.
	OpenFloorOff func(t *testing.T, ns string) lockstore.Store
	// SetFence seeds the fence counter of user key `key` in ns to n, so the
	// next successful acquire of key issues fence n+1 under FloorOff (used
	// for overflow), and so that a store that lost writes can be played.
	SetFence func(t *testing.T, s lockstore.Store, ns, key string, n int64)

	// ConcurrencyScale scales the number of acquire/release cycles of the
	// concurrency case, for backends whose round trip is slow (e.g. 0.1 for
	// an emulator). Zero means 1, full strength; values are clamped to
	// (0, 1].
	ConcurrencyScale float64
	// ExtraClockMargin is added to the margin the suite waits past a lock's
	// expiresAt+TimeToleranceMs before it insists the lock is gone, for a
	// time authority whose clock may trail this process's. Zero is right
	// for servers on this machine.
	ExtraClockMargin time.Duration
	// BarrierExpiresItself says the backend removes expired barrier
	// entries by itself (Redis: PEXPIRE), so its SweepBarrier may report 0
	// removed; every other store must report the expired entry it removed.
	BarrierExpiresItself bool
}

// baseClockMargin is how long past expiresAt+tolerance the suite waits before
// asserting a lock is free: it absorbs millisecond rounding and scheduling
// delay on a loaded machine, and is small next to the 1000 ms tolerance it
// follows, so a backend that ignores expiry still fails.
const baseClockMargin = 300 * time.Millisecond

// opTimeout bounds every single store call the suite makes, so a hung
// backend fails a case instead of the whole test binary's timeout.
const opTimeout = 20 * time.Second

// suite is one Run's harness with its defaults applied.
type suite struct {
	h      Harness
	margin int64 // ms past expiresAt+tolerance before "must be free"
	scale  float64
}

// testCase is one conformance case.
type testCase struct {
	name string
	fn   func(t *testing.T)
}

// Run runs the conformance suite against the backend h opens. The
// conformance cases run in parallel, each in its own namespace; the
// concurrency stress case runs alone afterwards so its load does not skew
// the timing-sensitive cases.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil || h.SetFence == nil || h.OpenAudit == nil || h.OpenFloorOff == nil {
		t.Fatal("storetest: Harness.Open, Harness.OpenAudit, Harness.OpenFloorOff and Harness.SetFence are required")
	}
	s := &suite{h: h, scale: h.ConcurrencyScale}
	if s.scale <= 0 || s.scale > 1 {
		s.scale = 1
	}
	s.margin = (baseClockMargin + h.ExtraClockMargin).Milliseconds()

	t.Run("conformance", func(t *testing.T) {
		for _, c := range append(s.cases(), s.barrierCases()...) {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.fn(t)
			})
		}
	})
	t.Run("stress", func(t *testing.T) {
		t.Run("concurrency", s.concurrency)
		t.Run("concurrency_floor_off", s.concurrencyFloorOff)
	})
}

func (s *suite) cases() []testCase {
	return []testCase{
		{"capabilities", s.capabilities},
		{"lifecycle", s.lifecycle},
		{"contention", s.contention},
		{"race_one_winner", s.raceOneWinner},
		{"double_release", s.doubleRelease},
		{"foreign_lockids", s.foreignLockIDs},
		{"stale_holder", s.staleHolder},
		{"extend_replaces_ttl", s.extendReplacesTTL},
		{"no_resurrection", s.noResurrection},
		{"expiry_tolerance", s.expiryTolerance},
		{"fence_sequence", s.fenceSequence},
		{"fence_per_key", s.fencePerKey},
		{"fence_survives_reopen", s.fenceSurvivesReopen},
		{"fence_overflow", s.fenceOverflow},
		{"fence_warn_level", s.fenceWarnLevel},
		{"fence_floor", s.fenceFloor},
		{"fence_floor_survives_lost_writes", s.fenceFloorSurvivesLostWrites},
		{"fence_floor_lead_cap", s.fenceFloorLeadCap},
		{"lookup_sanitised", s.lookupSanitised},
		{"lookup_read_only", s.lookupReadOnly},
		{"nfc_keys", s.nfcKeys},
		{"max_key", s.maxKey},
		{"validation", s.validation},
		{"input_keys", s.inputKeys},
		{"context", s.contextErrors},
		{"inspect", s.inspect},
		{"audit", s.audit},
		{"audit_retention", s.auditRetention},
		{"held_counter", s.heldCounter},
		{"list_held", s.listHeld},
		{"close_idempotent", s.closeIdempotent},
		{"internal_keys", s.internalKeys},
		{"many_keys", s.manyKeys},
	}
}

// newNS derives a namespace from the running case's name plus a random
// suffix: short, [a-z0-9_] only, starting with a letter, because backends
// turn it into a Redis prefix, an SQL identifier or a file name.
func newNS(t TB) string {
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	b.WriteByte('t')
	for _, r := range strings.ToLower(name) {
		if b.Len() >= 18 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("storetest: random namespace: %v", err)
	}
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(rnd[:]))
	return b.String()
}

// open opens a store over ns and closes it when the test ends. A test that
// closes it earlier exercises Close's idempotency through this cleanup.
func (s *suite) open(t *testing.T, ns string) lockstore.Store {
	t.Helper()
	st := s.h.Open(t, ns)
	if st == nil {
		t.Fatalf("Harness.Open(%q) returned nil", ns)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return st
}

// fresh opens a store over a new namespace.
func (s *suite) fresh(t *testing.T) (lockstore.Store, string) {
	t.Helper()
	ns := newNS(t)
	return s.open(t, ns), ns
}

// freshConsecutive opens a store with lockstore.FloorOff over a new
// namespace, for the cases that count fences one by one.
func (s *suite) freshConsecutive(t *testing.T) (lockstore.Store, string) {
	t.Helper()
	ns := newNS(t)
	return s.openConsecutive(t, ns), ns
}

// openConsecutive is open with lockstore.FloorOff.
func (s *suite) openConsecutive(t *testing.T, ns string) lockstore.Store {
	t.Helper()
	st := s.h.OpenFloorOff(t, ns)
	if st == nil {
		t.Fatalf("Harness.OpenFloorOff(%q) returned nil", ns)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return st
}

// ctx returns a context bounded by opTimeout for one store call.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return c
}

func nowMs() int64 { return time.Now().UnixMilli() }

// sleepUntil sleeps until this process's clock reaches ms (Unix ms).
func sleepUntil(ms int64) {
	if d := time.Until(time.UnixMilli(ms)); d > 0 {
		time.Sleep(d)
	}
}

// freeAt is the local time after which a lock expiring at expiresAtMs must
// be gone on every backend.
func (s *suite) freeAt(expiresAtMs int64) int64 {
	return expiresAtMs + lockstore.TimeToleranceMs + s.margin
}
