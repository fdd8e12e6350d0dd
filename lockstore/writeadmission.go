package lockstore

import "time"

// MaxWriteLimit bounds WriteAdmission.MaxWrite. An entry that outlives a
// day protects nothing a lock TTL would not, and the bound keeps now+maxWrite
// far from any overflow in every backend's arithmetic.
const MaxWriteLimit = 24 * time.Hour

// DefaultMaxInFlight is WriteAdmission.MaxInFlight when unset: how many
// unfinished writes one key may have registered at once. Legitimate load is
// one holder's concurrent writes under one fence; a thousand in flight on
// one key is far beyond any API's per-resource concurrency, while it keeps
// an abandoning client from piling up entries without bound.
const DefaultMaxInFlight = 1024

// MaxInFlightLimit bounds WriteAdmission.MaxInFlight: the cap is what keeps
// the per-key work of the backends that read a key's entries as one record
// (bolt, Firestore: a document has a 1 MiB limit) bounded.
const MaxInFlightLimit = 8192

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
	if err := ValidateLockID(id); err != nil {
		return BadInputf("writeId must be %d base64url characters ([A-Za-z0-9_-])", LockIDLength)
	}
	return nil
}

// Validate checks an admission before any I/O: the fence is a well-formed
// fence, the write id a well-formed id, and MaxWrite at least a millisecond
// and at most MaxWriteLimit. It returns MaxWrite in whole milliseconds
// (a sub-millisecond remainder is dropped: store clocks count milliseconds).
func (a WriteAdmission) Validate() (int64, error) {
	if _, err := ParseFence(a.Fence); err != nil {
		return 0, err
	}
	if err := ValidateWriteID(a.WriteID); err != nil {
		return 0, err
	}
	if a.MaxWrite < time.Millisecond {
		return 0, BadInputf("maxWrite must be at least 1ms, got %s", a.MaxWrite)
	}
	if a.MaxWrite > MaxWriteLimit {
		return 0, BadInputf("maxWrite must be at most %s, got %s", MaxWriteLimit, a.MaxWrite)
	}
	if a.MaxInFlight < 0 || a.MaxInFlight > MaxInFlightLimit {
		return 0, BadInputf("maxInFlight must be between 1 and %d (0: %d), got %d",
			MaxInFlightLimit, DefaultMaxInFlight, a.MaxInFlight)
	}
	return a.MaxWrite.Milliseconds(), nil
}

// Matches reports whether the presented fence is current for the key in
// state ks under the admission's policy: the live lock's fence when
// RequireLive, else the latest fence ever issued. Backends that apply the
// barrier rule in Go share it; the Lua and SQL forms say the same.
func (a WriteAdmission) Matches(ks KeyState) bool {
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

// Apply runs the barrier rule on a key's entries, in place, inside the
// caller's transaction: entries whose deadline is not after ks.NowMs are
// dropped (they count as finished); if the fence matches ks and no
// remaining entry has a lower fence, the write is registered with deadline
// ks.NowMs+maxWriteMs (re-registering a write id replaces its entry),
// unless the key already has InFlightCap entries (Full). changed says
// whether entries must be written back. The work is linear in the entries,
// which the cap bounds: every registration goes through Apply, and Apply
// drops the expired ones first.
func (a WriteAdmission) Apply(entries map[string]WriteEntry, ks KeyState, maxWriteMs int64) (res WriteAdmitResult, changed bool) {
	res.State = ks
	for id, e := range entries {
		if e.DeadlineMs <= ks.NowMs {
			delete(entries, id)
			changed = true
		}
	}
	if !a.Matches(ks) {
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
