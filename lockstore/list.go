package lockstore

import "context"

// ListedLock is one live lock as a listing returns it (Lock.Listed): its
// sanitised view and the raw key, because a caller must be able to check a
// token's key prefixes against it; the holder's lockId only as a hash: a
// listing never hands out a handle that could release or extend someone
// else's lock. Whoever shows a ListedLock decides whether the raw key may
// be shown (fencegate shows it only when raw keys are configured).
type ListedLock struct {
	Key string // raw (NFC-normalised) key; show only when configured
	LockInfo
}

// Listing bounds. A listing is for people looking at a console, not for
// enumeration: it is capped, and a backend may stop early and say so.
const (
	DefaultListLimit = 200
	MaxListLimit     = 1000
)

// LockList is the answer of LockLister.ListHeld.
type LockList struct {
	// Locks are live locks (IsLive at NowMs), at most the limit asked for,
	// in no particular order.
	Locks []ListedLock
	// Partial reports that the backend stopped before it had looked at
	// every lock (the limit was reached, or a bounded scan ran out of
	// pages): more live locks may exist than Locks shows.
	Partial bool
	// NowMs is the time authority's clock when the listing was read.
	NowMs int64
}

// LockLister is implemented by stores that can list live locks within a
// bounded cost (the console's live view). limit <= 0 means
// DefaultListLimit; a larger limit than MaxListLimit is capped.
type LockLister interface {
	ListHeld(ctx context.Context, limit int) (LockList, error)
}
