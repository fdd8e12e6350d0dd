package firestore

import (
	"cloud.google.com/go/firestore"

	"github.com/fencegate/fencegate/lockstore"
)

// lockDoc is a lock document, field for field SyncGuard's LockDocument.
type lockDoc struct {
	LockID       string `firestore:"lockId"`
	ExpiresAtMs  int64  `firestore:"expiresAtMs"`
	AcquiredAtMs int64  `firestore:"acquiredAtMs"`
	Key          string `firestore:"key"`
	Fence        string `firestore:"fence"`
}

// counterDoc is a fence counter document (SyncGuard's FenceCounterDocument).
// keyDebug holds the user key so an operator can tell which key a hashed
// counter belongs to; counters are never deleted.
type counterDoc struct {
	Fence    string `firestore:"fence"`
	KeyDebug string `firestore:"keyDebug,omitempty"`
}

// document does not exist.
func decodeLock(snap *firestore.DocumentSnapshot, op string) (lockDoc, bool, error) {
	if snap == nil || !snap.Exists() {
		return lockDoc{}, false, nil
	}
	var l lockDoc
	if err := snap.DataTo(&l); err != nil {
		return lockDoc{}, false, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "lock document does not decode", Err: err}
	}
	return l, true, nil
}

// decodeCounter returns the fence stored in a counter snapshot, 0 when the
// counter does not exist yet. A counter that exists but does not hold a
// 15-digit fence is an error, never a reset: overwriting it could reissue
// fences.
func decodeCounter(snap *firestore.DocumentSnapshot, op string) (int64, error) {
	if snap == nil || !snap.Exists() {
		return 0, nil
	}
	var c counterDoc
	if err := snap.DataTo(&c); err != nil {
		return 0, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "fence counter document does not decode", Err: err}
	}
	n, err := lockstore.ParseFence(c.Fence)
	if err != nil {
		return 0, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "fence counter holds a malformed fence", Err: err}
	}
	return n, nil
}

// sanitise builds the hashed view of a lock on normalised key nk.
func sanitise(nk string, l lockDoc) *lockstore.LockInfo {
	return lockstore.Lock{Key: nk, LockID: l.LockID, Fence: l.Fence, ExpiresAtMs: l.ExpiresAtMs, AcquiredAtMs: l.AcquiredAtMs}.Info()
}
