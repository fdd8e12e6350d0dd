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
//
// Time: a store whose time authority is this process (bolt, Firestore)
// gets each case's own fake clock through Options.Now, and the suite moves
// it instead of sleeping (and checks that the store follows it); stores on
// server time (Redis, PostgreSQL) are waited for in real time, each wait
// bounded by the case's TTLs.
//
// Optional features: a case that needs one names it in Options.Need; a
// harness whose backend legitimately lacks it answers ErrNotSupported and
// the case is skipped with the reason. Anything else Open returns (a
// server that is not there) fails the case.
//
// Every case and helper runs on a *caseT over a TB (*testing.T, or the recorder
// BarrierFailures uses to prove the write-barrier cases catch broken
// stores).
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Harness tells the suite how to reach one backend.
type Harness struct {
	// Open returns a store over namespace ns (a key prefix, table-name
	// suffix or file name), configured as o asks. Opening ns again after
	// the previous store was closed must reach the same data. ns is at most
	// 28 bytes of [a-z0-9_], starting with a letter. t is the case's own
	// test (BarrierFailures: its caller's).
	//
	// An error fails the case, except one that wraps ErrNotSupported: the
	// backend legitimately lacks a feature in o.Need, and the suite skips
	// the case with the error as the reason. A server that cannot be
	// reached is an error like any other, never ErrNotSupported.
	Open func(t *testing.T, ns string, o Options) (lockstore.Store, error)
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
	// server time authority whose clock may trail this process's. Zero is
	// right for servers on this machine, and for client-time stores (their
	// time is the case's fake clock).
	ExtraClockMargin time.Duration
}

// Options is how a case asks Harness.Open to configure a store.
type Options struct {
	// FenceFloor is backend.FloorClock (the zero value, every backend's
	// default) or backend.FloorOff (consecutive fences, for the cases
	// that count them).
	FenceFloor backend.FenceFloor
	// AuditRetention is the audit retention; the zero value is the
	// backend's default.
	AuditRetention lockstore.AuditRetention
	// Now is the case's fake clock, set when the backend's time authority
	// is this process (Capabilities().TimeAuthority == lockstore.ClientTime:
	// bolt, Firestore): the store must read its time from it, and the
	// suite then moves time by advancing it instead of sleeping (the suite
	// checks that the store follows it). Nil for a store on server time
	// (Redis, PostgreSQL): it keeps its server's clock and the suite waits
	// in real time, each wait bounded by the case's TTLs.
	Now func() time.Time
	// Need lists the optional features the case needs beyond the contract
	// every store keeps.
	Need []Feature
}

// Needs reports whether the case asked for feature f.
func (o Options) Needs(f Feature) bool { return slices.Contains(o.Need, f) }

// Feature is an optional behaviour a case needs beyond lockstore.Store's
// contract. A harness whose backend legitimately lacks it answers Open
// with an error wrapping ErrNotSupported that says why.
type Feature string

// SweepCounts: SweepBarrier removes an expired entry itself and counts it.
// Redis lacks it: its entries leave by PEXPIRE and its SweepBarrier is a
// no-op that reports 0.
const SweepCounts Feature = "SweepBarrier removes and counts expired entries"

// ErrNotSupported is what Harness.Open wraps when the backend legitimately
// lacks a feature a case needs; the suite skips that case with the reason.
var ErrNotSupported = errors.New("storetest: not supported by this backend")

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
	// fake: the backend's time authority is this process, so every case
	// runs on a fake clock of its own (Options.Now).
	fake bool
}

// testCase is one conformance case.
type testCase struct {
	name string
	fn   func(t *caseT)
}

// newSuite applies h's defaults and asks the backend, on a store over a
// namespace of its own, whose clock it keeps.
func newSuite(t *testing.T, h Harness) *suite {
	t.Helper()
	if h.Open == nil || h.SetFence == nil {
		t.Fatal("storetest: Harness.Open and Harness.SetFence are required")
	}
	s := &suite{h: h, scale: h.ConcurrencyScale, margin: (baseClockMargin + h.ExtraClockMargin).Milliseconds()}
	if s.scale <= 0 || s.scale > 1 {
		s.scale = 1
	}
	st, err := h.Open(t, newNS(t), Options{})
	if err != nil || st == nil {
		t.Fatalf("storetest: Harness.Open of a probe store = %v, %v", st, err)
	}
	s.fake = st.Capabilities().TimeAuthority == lockstore.ClientTime
	if err := st.Close(); err != nil {
		t.Fatalf("storetest: Close of the probe store: %v", err)
	}
	return s
}

// Run runs the conformance suite against the backend h opens. The
// conformance cases run in parallel, each in its own namespace (and, for a
// client-time store, on its own fake clock); the concurrency stress case
// runs alone afterwards so its load does not skew the timing-sensitive
// cases.
func Run(t *testing.T, h Harness) {
	t.Helper()
	s := newSuite(t, h)
	t.Run("conformance", func(t *testing.T) {
		for _, c := range append(s.cases(), s.barrierCases()...) {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.fn(s.newCaseT(t, t))
			})
		}
	})
	t.Run("stress", func(t *testing.T) {
		t.Run("concurrency", func(t *testing.T) { s.concurrency(s.newCaseT(t, t)) })
		t.Run("concurrency_floor_off", func(t *testing.T) { s.concurrencyFloorOff(s.newCaseT(t, t)) })
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
func newNS(t interface {
	Name() string
	Fatalf(string, ...any)
}) string {
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

// setFence seeds key's counter through the harness.
func (s *suite) setFence(t *caseT, st lockstore.Store, ns, key string, n int64) {
	t.Helper()
	s.h.SetFence(t.testT, st, ns, key, n)
}

// freeAt is the time (by the case's clock) after which a lock expiring at
// expiresAtMs must be gone on every backend.
func (s *suite) freeAt(expiresAtMs int64) int64 {
	return expiresAtMs + lockstore.TimeToleranceMs + s.margin
}
