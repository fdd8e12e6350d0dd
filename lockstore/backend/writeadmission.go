package backend

import (
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// BarrierPruneBatch bounds how many expired entries one Admit removes (on
// the backends that index entries; the others prune a key's whole record,
// which the cap bounds). Expired entries never count against the cap; an
// Admit that finds more expired entries than it may remove answers
// conservatively (blocked, never admitted early), and the next one
// continues.
const BarrierPruneBatch = 256

// ValidateWriteID checks that a barrier write id has a lockId's shape
// (^[A-Za-z0-9_-]{22}$): backends store it as a field name or row key, so
// its alphabet and length are fixed. The error never echoes the input.
func ValidateWriteID(id string) error {
	if err := lockstore.ValidateLockID(id); err != nil {
		return lockstore.BadInputf("writeId must be %d base64url characters ([A-Za-z0-9_-])", lockstore.LockIDLength)
	}
	return nil
}

// ValidateAdmission checks an admission before any I/O: the fence is a well-formed
// fence, the write id a well-formed id, and MaxWrite at least a millisecond
// and at most MaxWriteLimit. It returns MaxWrite in whole milliseconds
// (a sub-millisecond remainder is dropped: store clocks count milliseconds).
func ValidateAdmission(a lockstore.WriteAdmission) (int64, error) {
	if _, err := lockstore.ParseFence(a.Fence); err != nil {
		return 0, err
	}
	if err := ValidateWriteID(a.WriteID); err != nil {
		return 0, err
	}
	if a.MaxWrite < time.Millisecond {
		return 0, lockstore.BadInputf("maxWrite must be at least 1ms, got %s", a.MaxWrite)
	}
	if a.MaxWrite > lockstore.MaxWriteLimit {
		return 0, lockstore.BadInputf("maxWrite must be at most %s, got %s", lockstore.MaxWriteLimit, a.MaxWrite)
	}
	if a.MaxInFlight < 0 || a.MaxInFlight > lockstore.MaxInFlightLimit {
		return 0, lockstore.BadInputf("maxInFlight must be between 1 and %d (0: %d), got %d",
			lockstore.MaxInFlightLimit, lockstore.DefaultMaxInFlight, a.MaxInFlight)
	}
	return a.MaxWrite.Milliseconds(), nil
}

// AdmissionMatches reports whether the presented fence is current for the key in
// state ks under the admission's policy: the live lock's fence when
// RequireLive, else the latest fence ever issued. Backends that apply the
// barrier rule in Go share it; the Lua and SQL forms say the same.
func AdmissionMatches(a lockstore.WriteAdmission, ks lockstore.KeyState) bool {
	if a.RequireLive {
		return ks.Live != nil && ks.Live.Fence == a.Fence
	}
	return ks.LatestFence != "" && ks.LatestFence == a.Fence
}

// WriteEntry is one in-flight write as the backends that apply the barrier
// rule in Go (bolt, Firestore) keep it, keyed by write id.
type WriteEntry struct {
	Fence      string `json:"fence"`
	DeadlineMs int64  `json:"deadlineMs"`
}

// ApplyAdmission runs the barrier rule on a key's entries, in place, inside the
// caller's transaction: entries whose deadline is not after ks.NowMs are
// dropped (they count as finished); if the fence matches ks and no
// remaining entry has a lower fence, the write is registered with deadline
// ks.NowMs+maxWriteMs (re-registering a write id replaces its entry),
// unless the key already has InFlightCap entries (Full). changed says
// whether entries must be written back. The work is linear in the entries,
// which the cap bounds: every registration goes through ApplyAdmission, and it
// drops the expired ones first.
func ApplyAdmission(a lockstore.WriteAdmission, entries map[string]WriteEntry, ks lockstore.KeyState, maxWriteMs int64) (res lockstore.WriteAdmitResult, changed bool) {
	res.State = ks
	for id, e := range entries {
		if e.DeadlineMs <= ks.NowMs {
			delete(entries, id)
			changed = true
		}
	}
	if !AdmissionMatches(a, ks) {
		return res, changed
	}
	for _, e := range entries {
		// 15-digit fences: string order is numeric order.
		if e.Fence < a.Fence {
			res.Blocking++
			res.BlockedUntilMs = max(res.BlockedUntilMs, e.DeadlineMs)
		}
	}
	if res.Blocking > 0 {
		return res, changed
	}
	if _, again := entries[a.WriteID]; !again && len(entries) >= a.InFlightCap() {
		res.Full = true
		return res, changed
	}
	entries[a.WriteID] = WriteEntry{Fence: a.Fence, DeadlineMs: ks.NowMs + maxWriteMs}
	res.Admitted = true
	return res, true
}
