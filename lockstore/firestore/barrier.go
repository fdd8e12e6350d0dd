package firestore

import (
	"context"

	"cloud.google.com/go/firestore"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// The write barrier keeps, per key, one document in Config.BarrierCollection
// under the lock document's ID: {key, writes: {writeId: {fence,
// deadlineMs}}, maxDeadlineMs}. Locks and counters are other collections;
// the barrier's transactions only read them. maxDeadlineMs is the latest
// deadline among the entries: once it has passed every entry has, which is
// what SweepBarrier queries for.

// barrierDoc is a key's in-flight writes.
type barrierDoc struct {
	Key    string                  `firestore:"key"`
	Writes map[string]barrierEntry `firestore:"writes"`
	// MaxDeadlineMs is the latest DeadlineMs in Writes (documents written
	// before the field existed lack it until their next Admit or Finish).
	MaxDeadlineMs int64 `firestore:"maxDeadlineMs"`
}

// fieldMaxDeadline is barrierDoc.MaxDeadlineMs's field name, for queries.
const fieldMaxDeadline = "maxDeadlineMs"

type barrierEntry struct {
	Fence      string `firestore:"fence"`
	DeadlineMs int64  `firestore:"deadlineMs"`
}

var _ lockstore.WriteBarrier = (*Store)(nil)

// maxInFlight caps WriteAdmission.MaxInFlight on Firestore, whatever the
// admission asks: a key's entries are one document, and a document holds at
// most 1 MiB and 20,000 fields (each entry is three: the map entry, fence,
// deadlineMs) with at most 40,000 index entries. 4,096 entries are about
// 12,300 fields and 350 KB. Every Admit reads and rewrites the document, so
// its cost is linear in the key's unexpired entries, which this bounds.
const maxInFlight = 4096

func (s *Store) barrierRef(docID string) *firestore.DocumentRef {
	return s.client.Collection(s.cfg.BarrierCollection).Doc(docID)
}

// decodeWrites returns a barrier snapshot's entries (empty if absent).
func decodeWrites(snap *firestore.DocumentSnapshot, op string) (map[string]backend.WriteEntry, error) {
	entries := map[string]backend.WriteEntry{}
	if snap == nil || !snap.Exists() {
		return entries, nil
	}
	var d barrierDoc
	if err := snap.DataTo(&d); err != nil {
		return nil, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "write barrier document does not decode", Err: err}
	}
	for id, e := range d.Writes {
		entries[id] = backend.WriteEntry{Fence: e.Fence, DeadlineMs: e.DeadlineMs}
	}
	return entries, nil
}

// putWrites writes a key's entries in tx, deleting the document when none
// is left.
func putWrites(tx *firestore.Transaction, ref *firestore.DocumentRef, nk string, entries map[string]backend.WriteEntry) error {
	if len(entries) == 0 {
		return tx.Delete(ref)
	}
	d := barrierDoc{Key: nk, Writes: make(map[string]barrierEntry, len(entries))}
	for id, e := range entries {
		d.Writes[id] = barrierEntry{Fence: e.Fence, DeadlineMs: e.DeadlineMs}
		d.MaxDeadlineMs = max(d.MaxDeadlineMs, e.DeadlineMs)
	}
	return tx.Set(ref, d)
}

// keyState derives a key's state from its lock and counter snapshots at
// nowMs, exactly as Inspect does.
func keyState(lockSnap, counterSnap *firestore.DocumentSnapshot, nk string, nowMs int64, op string) (lockstore.KeyState, error) {
	st := lockstore.KeyState{NowMs: nowMs}
	l, held, err := decodeLock(lockSnap, op)
	if err != nil {
		return st, err
	}
	latest, err := decodeCounter(counterSnap, op)
	if err != nil {
		return st, err
	}
	if held && keyIs(l, nk) {
		if n, err := lockstore.ParseFence(l.Fence); err == nil && n > latest {
			latest = n
		}
		if backend.IsLive(l.ExpiresAtMs, nowMs) {
			st.Live = &lockstore.Lock{Key: nk, LockID: l.LockID, Fence: l.Fence, ExpiresAtMs: l.ExpiresAtMs, AcquiredAtMs: l.AcquiredAtMs}
		}
	}
	if latest > 0 {
		if st.LatestFence, err = lockstore.FormatFence(latest); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Admit applies the write barrier in one transaction that reads the lock,
// the counter and the key's barrier document and writes only the last:
// Firestore's serializable transactions keep any acquire or release of the
// key from committing between the read and the registration.
func (s *Store) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	nk, maxMs, err := backend.PrecheckAdmit(ctx, key, a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	lockID, fenceID, err := docIDs(nk)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	defer cancel()
	// Our own transactions on the key take turns (see keyLocks): two
	// admissions both reading and then writing the barrier document would
	// otherwise deadlock until Firestore aborts one.
	unlock, err := s.inflight.lock(ctx, op, lockID)
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithKeyLockID(err, nk, "")
	}
	defer unlock()
	lockRef, fenceRef, wRef := s.locks.Doc(lockID), s.fences.Doc(fenceID), s.barrierRef(lockID)
	if a.InFlightCap() > maxInFlight {
		a.MaxInFlight = maxInFlight
	}
	var res lockstore.WriteAdmitResult
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		res = lockstore.WriteAdmitResult{} // the library may run us more than once
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		snaps, err := tx.GetAll([]*firestore.DocumentRef{lockRef, fenceRef, wRef})
		if err != nil {
			return err
		}
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		// The clock after the reads, as Inspect reads it.
		ks, err := keyState(snaps[0], snaps[1], nk, s.nowMs(), op)
		if err != nil {
			return err
		}
		entries, err := decodeWrites(snaps[2], op)
		if err != nil {
			return err
		}
		var changed bool
		// Deadlines are by this gateway's clock, and another gateway
		// reading them may run ahead by up to the tolerance the lock
		// contract grants (TimeToleranceMs): the entry lives that much
		// longer, so no replica sees it expire before maxWrite has passed
		// on the clock that registered it.
		res, changed = backend.ApplyAdmission(a, entries, ks, maxMs+lockstore.TimeToleranceMs)
		if !changed {
			return nil
		}
		return putWrites(tx, wRef, nk, entries)
	}, firestore.MaxAttempts(s.cfg.MaxAttempts))
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), nk, "")
	}
	return res, nil
}

// Finish removes entry writeID of key (and any expired ones) in one
// transaction over the key's barrier document; an absent entry is not an
// error and writes nothing.
func (s *Store) Finish(ctx context.Context, key, writeID string) error {
	const op = "finish"
	nk, err := backend.PrecheckFinish(ctx, key, writeID)
	if err != nil {
		return err
	}
	lockID, _, err := docIDs(nk)
	if err != nil {
		return err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	unlock, err := s.inflight.lock(ctx, op, lockID)
	if err != nil {
		return lockstore.WithKeyLockID(err, nk, "")
	}
	defer unlock()
	wRef := s.barrierRef(lockID)
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		// GetAll reports an absent document as a snapshot, not an error.
		snaps, err := tx.GetAll([]*firestore.DocumentRef{wRef})
		if err != nil {
			return err
		}
		entries, err := decodeWrites(snaps[0], op)
		if err != nil {
			return err
		}
		if _, ok := entries[writeID]; !ok {
			return nil
		}
		delete(entries, writeID)
		now := s.nowMs()
		for id, e := range entries {
			if e.DeadlineMs <= now {
				delete(entries, id)
			}
		}
		return putWrites(tx, wRef, nk, entries)
	}, firestore.MaxAttempts(s.cfg.MaxAttempts))
	if err != nil {
		return lockstore.WithKeyLockID(classify(ctx, op, err), nk, "")
	}
	return nil
}

var _ lockstore.BarrierSweeper = (*Store)(nil)

// SweepBarrier finds up to limit barrier documents whose latest deadline
// passed, by this gateway's clock as Admit judges entries, and removes each
// in its own transaction that reads the document again: an entry an Admit
// registered since the query keeps the document (only the expired entries
// go). It stops before a document that would take the count past limit,
// unless it has removed nothing yet (so a document holding more than limit
// entries cannot stay forever).
func (s *Store) SweepBarrier(ctx context.Context, limit int) (int, error) {
	const op = "sweep"
	if err := backend.ValidateSweepLimit(limit); err != nil {
		return 0, err
	}
	qctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	q := s.client.Collection(s.cfg.BarrierCollection).
		Where(fieldMaxDeadline, "<=", s.nowMs()).Select().Limit(limit)
	snaps, err := q.Documents(qctx).GetAll()
	if err != nil {
		err = classify(qctx, op, err)
	}
	cancel()
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, snap := range snaps {
		n, err := s.sweepDoc(ctx, snap.Ref, limit-removed, removed == 0)
		if err != nil {
			return removed, err
		}
		if n < 0 {
			break
		}
		removed += n
	}
	return removed, nil
}

// sweepDoc removes the expired entries of one barrier document, the whole
// document if none is left. It returns -1, removing nothing, when more than
// room entries expired and !anyway.
func (s *Store) sweepDoc(ctx context.Context, ref *firestore.DocumentRef, room int, anyway bool) (int, error) {
	const op = "sweep"
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer cancel()
	unlock, err := s.inflight.lock(ctx, op, ref.ID)
	if err != nil {
		return 0, err
	}
	defer unlock()
	var removed int
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		removed = 0 // the library may run us more than once
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		snaps, err := tx.GetAll([]*firestore.DocumentRef{ref})
		if err != nil {
			return err
		}
		if !snaps[0].Exists() {
			return nil
		}
		var d barrierDoc
		if err := snaps[0].DataTo(&d); err != nil {
			return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "write barrier document does not decode", Err: err}
		}
		entries, err := decodeWrites(snaps[0], op)
		if err != nil {
			return err
		}
		now := s.nowMs()
		for id, e := range entries {
			if e.DeadlineMs <= now {
				delete(entries, id)
				removed++
			}
		}
		if removed == 0 {
			return nil
		}
		if removed > room && !anyway {
			removed = -1
			return nil
		}
		return putWrites(tx, ref, d.Key, entries)
	}, firestore.MaxAttempts(s.cfg.MaxAttempts))
	if err != nil {
		return 0, classify(ctx, op, err)
	}
	return removed, nil
}
