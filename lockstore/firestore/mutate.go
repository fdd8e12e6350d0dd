package firestore

import (
	"context"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// cleanupGuardMs is how far past the liveness tolerance an expired
// duplicate must be before we delete it (docs/design.md, "Cleanup guard", for
// client-time backends: tolerance + guard, guard >= 1000 ms), so a client
// whose clock trails ours still sees it expired too.
const cleanupGuardMs = 1000

// Release deletes the live lock lockID holds (see mutateLive).
func (s *Store) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	if err := backend.PrecheckLockID(ctx, "release", lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	ok, detail, err := s.mutateLive(ctx, "release", lockID, func(tx *firestore.Transaction, live *firestore.DocumentSnapshot, _ int64) error {
		return tx.Delete(live.Ref)
	})
	if err != nil {
		return lockstore.ReleaseResult{}, err
	}
	return lockstore.ReleaseResult{OK: ok, Detail: detail}, nil
}

// Extend sets the live lock's expiry to now+ttl (replacing, not adding) and
// returns that authoritative expiry. An expired lock is never revived.
func (s *Store) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	ttlMs, err := backend.PrecheckExtend(ctx, lockID, ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	var exp int64
	ok, detail, err := s.mutateLive(ctx, "extend", lockID, func(tx *firestore.Transaction, live *firestore.DocumentSnapshot, nowMs int64) error {
		exp = nowMs + ttlMs
		return tx.Update(live.Ref, []firestore.Update{{Path: "expiresAtMs", Value: exp}})
	})
	if err != nil || !ok {
		return lockstore.ExtendResult{Detail: detail}, err
	}
	return lockstore.ExtendResult{OK: true, ExpiresAtMs: exp}, nil
}

// mutateLive is release and extend: the lockId query finds the candidate
// documents; one transaction re-reads each by reference, verifies it (see
// resolve: ownership, liveness, home document), cleans up stale duplicates,
// and applies mutate to the one live lock, so the document it checks is the
// one it changes. ok reports whether mutate ran; otherwise detail is the
// best-effort reason.
func (s *Store) mutateLive(ctx context.Context, op, lockID string, mutate func(tx *firestore.Transaction, live *firestore.DocumentSnapshot, nowMs int64) error) (ok bool, detail string, err error) {
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return false, "", err
	}
	defer cancel()
	refs, err := s.findLockID(ctx, lockID)
	if err != nil {
		return false, "", lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	if len(refs) == 0 {
		return false, lockstore.DetailNotFound, nil
	}
	unlock, err := s.inflight.lock(ctx, op, refIDs(refs)...)
	if err != nil {
		return false, "", lockstore.WithKeyLockID(err, "", lockID)
	}
	defer unlock()
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		ok, detail = false, ""
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		// Read the clock inside the transaction (docs/design.md, "Authoritative expiry"): an extend's new
		// expiry is this attempt's now + ttl.
		nowMs := s.nowMs()
		snaps, err := tx.GetAll(refs)
		if err != nil {
			return err
		}
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		m, err := s.resolve(op, lockID, snaps, nowMs, true)
		if err != nil {
			return err
		}
		if err := m.deleteStale(tx); err != nil {
			return err
		}
		if m.live == nil {
			detail = m.detail
			return nil
		}
		if err := mutate(tx, m.live, nowMs); err != nil {
			return err
		}
		ok = true
		return nil
	}, firestore.MaxAttempts(s.cfg.MaxAttempts))
	if err != nil {
		return false, "", lockstore.WithKeyLockID(classify(ctx, op, err), "", lockID)
	}
	return ok, detail, nil
}

// match is what a lockId resolves to.
type match struct {
	live   *firestore.DocumentSnapshot // the one live lock document lockId holds, or nil
	lock   lockDoc                     // its contents
	detail string                      // why live is nil (telemetry only)
	stale  []*firestore.DocumentRef    // expired duplicates safe to delete
}

// deleteStale deletes the expired duplicates m found (docs/design.md, "Duplicate lockIds", allows it;
// live documents are never among them).
func (m *match) deleteStale(tx *firestore.Transaction) error {
	for _, ref := range m.stale {
		if err := tx.Delete(ref); err != nil {
			return err
		}
	}
	return nil
}

// findLockID returns the documents whose lockId field is lockID: a plain
// equality query on the automatic single-field index, without limit(1) so
// duplicates are seen (docs/design.md, "Duplicate lockIds").
//
// It runs outside the transaction on purpose. The binding lockId → document
// never changes while the lock exists (a lockId is issued once, for one
// key's document), so finding the candidates needs no isolation; what needs
// it — that the document still carries this lockId, is live, and is the one
// mutated — is re-read and verified by reference inside the transaction.
// A query inside a read-write transaction would also lock far more than the
// documents it returns (the emulator locks the whole collection for it,
// stalling every acquire behind each release for its 2 s lock timeout).
// A duplicate created between the query and the transaction is missed by
// that one call, as it would be by any call made a moment earlier.
func (s *Store) findLockID(ctx context.Context, lockID string) ([]*firestore.DocumentRef, error) {
	docs, err := s.locks.Where("lockId", "==", lockID).Documents(ctx).GetAll()
	if err != nil {
		return nil, err
	}
	refs := make([]*firestore.DocumentRef, len(docs))
	for i, d := range docs {
		refs[i] = d.Ref
	}
	return refs, nil
}

// refIDs returns the document IDs of refs.
func refIDs(refs []*firestore.DocumentRef) []string {
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	return ids
}

// resolve decides which document, if any, lockID holds, from snapshots of
// the candidate documents (read inside the transaction for release/extend,
// by the query itself for lookup). Documents that are gone or now carry
// another lockId are not candidates any more.
//
// A single candidate is verified explicitly (docs/design.md, "Ownership re-verified"): its lockId must equal
// lockID and it must sit where its own key's lock lives, else it is not this
// lock. More than one is an inconsistency (docs/design.md, "Duplicate lockIds"): it is logged (hashes
// only) and nothing is returned as live, so no caller mutates ambiguous
// state; with cleanup, duplicates expired beyond the clean-up guard are
// offered for deletion.
func (s *Store) resolve(op, lockID string, snaps []*firestore.DocumentSnapshot, nowMs int64, cleanup bool) (match, error) {
	type candidate struct {
		snap *firestore.DocumentSnapshot
		lock lockDoc
		err  error
	}
	var cands []candidate
	for _, snap := range snaps {
		l, ok, err := decodeLock(snap, op)
		if err == nil && (!ok || l.LockID != lockID) {
			continue
		}
		cands = append(cands, candidate{snap, l, err})
	}
	switch len(cands) {
	case 0:
		return match{detail: lockstore.DetailNotFound}, nil
	case 1:
		c := cands[0]
		if c.err != nil {
			return match{}, c.err
		}
		if !s.atHome(c.snap.Ref, c.lock) {
			return match{detail: lockstore.DetailNotFound}, nil
		}
		if !backend.IsLive(c.lock.ExpiresAtMs, nowMs) {
			return match{detail: lockstore.DetailExpired}, nil
		}
		return match{live: c.snap, lock: c.lock}, nil
	}

	m := match{detail: lockstore.DetailExpired}
	live := 0
	for _, c := range cands {
		switch {
		case c.err != nil:
			// Unreadable: treat as possibly live, never delete it.
			live++
		case backend.IsLive(c.lock.ExpiresAtMs, nowMs):
			live++
		case cleanup && c.lock.ExpiresAtMs < nowMs-lockstore.TimeToleranceMs-cleanupGuardMs:
			m.stale = append(m.stale, c.snap.Ref)
		}
	}
	if live > 0 {
		m.detail = ""
	}
	s.log.Warn("duplicate lock documents for one lockId; refusing to act on ambiguous state",
		"op", op, "lockIdHash", lockstore.HashKey(lockID), "documents", len(cands),
		"live", live, "expired_deleted", len(m.stale))
	return m, nil
}

// atHome reports whether ref is the document where the lock on l.Key
// lives. A document elsewhere carrying a lockId (a stray copy from a
// migration or a manual edit) holds no lock: acquire never looks at it.
func (s *Store) atHome(ref *firestore.DocumentRef, l lockDoc) bool {
	nk, err := lockstore.NormalizeKey(l.Key)
	if err != nil {
		return false
	}
	id, err := lockDocID(nk)
	if err != nil || id != ref.ID {
		s.log.Warn("lock document is not at its key's document ID; ignoring it",
			"keyHash", lockstore.HashKey(l.Key), "lockIdHash", lockstore.HashKey(l.LockID))
		return false
	}
	return true
}
