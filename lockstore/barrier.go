package lockstore

import (
	"context"
	"time"
)

// The write barrier closes the window between the edge's check and the
// protected API's commit. The edge registers each write it admits as in
// flight, in the same backend call that reads the lock; a write under a
// newer fence is admitted only when no write under an older fence of the
// key is still in flight. An entry is finished when the edge reports the
// upstream's complete response (Finish), or when its deadline passes (the
// upstream exchange failed and maxWrite has passed since admission).
//
// The store keeps the entries, so every gateway replica sees them and they
// survive a gateway restart; a proxy that dies leaves entries that expire at
// their deadline. The rule of which entries block which fence is applied
// atomically by the store (it has to be: a read-then-write across two calls
// would let two fences in at once), and fencecheck turns the result into a
// decision.

// WriteAdmission asks a store to admit one write under a presented fence.
type WriteAdmission struct {
	// Fence is the presented fence (15 digits, already validated).
	Fence string
	// RequireLive: the fence must be the fence of the live lock on the key
	// (policy "holder"). Otherwise it must equal the latest fence ever
	// issued for the key, live or not (policy "latest").
	RequireLive bool
	// WriteID names the entry; it is what Finish removes. 22 characters of
	// base64url, like a lockId (NewLockID makes one); not a secret.
	WriteID string
	// MaxWrite is how long after admission the entry counts as finished
	// even if Finish never comes, measured by the store's time authority.
	MaxWrite time.Duration
	// MaxInFlight caps the key's unfinished (registered, unexpired)
	// entries: an admission that would register one more is refused with
	// Full. 0 means DefaultMaxInFlight; at most MaxInFlightLimit.
	// Re-registering a write id already in flight is not one more.
	MaxInFlight int
}

// InFlightCap is the cap MaxInFlight asks for (DefaultMaxInFlight when 0).
func (a WriteAdmission) InFlightCap() int {
	if a.MaxInFlight == 0 {
		return DefaultMaxInFlight
	}
	return a.MaxInFlight
}

// WriteAdmitResult is the outcome of Admit.
type WriteAdmitResult struct {
	// State is the key's state as Inspect would have read it, in the same
	// backend call (fencecheck derives the denial reason from it).
	State KeyState
	// Admitted says the entry was registered: the fence matched (per
	// RequireLive) and no unfinished write under a lower fence exists.
	Admitted bool
	// Blocking counts the unfinished writes under a lower fence that kept
	// an otherwise matching fence out (0 when Admitted or when the fence
	// did not match).
	// Backends that index entries may count conservatively: when more
	// expired entries wait than one Admit prunes (BarrierPruneBatch),
	// Blocking may include some of them (it is never 0 when an unfinished
	// older write exists).
	Blocking int
	// BlockedUntilMs is, by the store's clock, a time by which every
	// blocking entry counts as finished even if no Finish ever comes: the
	// latest deadline among them, or (on backends that index entries) the
	// latest among all the key's unfinished entries, never earlier. 0 when
	// Blocking is 0.
	BlockedUntilMs int64
	// Full says the fence matched and no older write blocked it, but the
	// key already has WriteAdmission.InFlightCap unfinished entries:
	// nothing was registered. Retriable once some of them finish.
	Full bool
}

// WriteBarrier is the store side of the write barrier. Admit reads the key's
// state and, only when the fence matches and no unfinished entry under a
// lower fence exists, registers the entry: one backend call, atomic with the
// read. Entries under the same fence never block each other (one holder may
// have several writes in flight), but a key holds at most
// WriteAdmission.InFlightCap unfinished entries (one more is refused Full).
// Entries past their deadline are ignored, never counted, and removed
// lazily, a bounded batch per call (and by BarrierSweeper where the store
// offers it): no call's work grows with the key's entries beyond the cap.
// Admit and Finish never touch locks or fence counters.
type WriteBarrier interface {
	Admit(ctx context.Context, key string, a WriteAdmission) (WriteAdmitResult, error)
	// Finish removes the entry writeID of key. Removing an absent or
	// expired entry is not an error (the call is idempotent).
	Finish(ctx context.Context, key, writeID string) error
}

// BarrierSweeper is implemented by stores whose barrier entries would
// otherwise stay stored until a later Admit or Finish of the same key
// prunes them: an abandoned write on a key that is never written again
// would stay forever, and with per-id keys that grows without bound.
//
// SweepBarrier removes at most limit entries whose deadline is not after
// the store's now (by the time authority Admit uses: exactly the entries
// Admit already counts as finished, never one earlier) and reports how many
// it removed. It never touches locks or fence counters. Each call does
// bounded work, so a caller sweeps periodically rather than to exhaustion.
// limit must be positive.
type BarrierSweeper interface {
	SweepBarrier(ctx context.Context, limit int) (removed int, err error)
}
