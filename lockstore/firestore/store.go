package firestore

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// cleanupGuardMs is how far past the liveness tolerance an expired
// duplicate must be before we delete it (interface.md's cleanup guard for
// client-time backends: tolerance + guard, guard >= 1000 ms), so a client
// whose clock trails ours still sees it expired too.
const cleanupGuardMs = 1000

// Store is the Firestore lock store. It implements lockstore.Store,
// lockstore.AuditLog and lockstore.HeldCounter. It is safe for concurrent
// use.
type Store struct {
	cfg    Config
	client *firestore.Client
	locks  *firestore.CollectionRef
	fences *firestore.CollectionRef
	audit  *firestore.CollectionRef // decision-class audit events
	input  *firestore.CollectionRef // input-class audit events (inputCollection)
	log    *slog.Logger

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	inflight *keyLocks // per-document serialisation of our own transactions
}

var (
	_ lockstore.Store       = (*Store)(nil)
	_ lockstore.AuditLog    = (*Store)(nil)
	_ lockstore.HeldCounter = (*Store)(nil)
)

// Open validates cfg and creates a Firestore client. It does not contact
// Firestore (the client connects lazily); call Ping to check reachability.
// With FIRESTORE_EMULATOR_HOST set, the client library talks to the
// emulator without credentials.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var (
		client *firestore.Client
		err    error
	)
	if cfg.DatabaseID == "" {
		client, err = firestore.NewClient(ctx, cfg.ProjectID, cfg.ClientOptions...)
	} else {
		client, err = firestore.NewClientWithDatabase(ctx, cfg.ProjectID, cfg.DatabaseID, cfg.ClientOptions...)
	}
	if err != nil {
		return nil, classify(ctx, "open", err)
	}
	s := &Store{
		cfg:    cfg,
		client: client,
		locks:  client.Collection(cfg.Collection),
		fences: client.Collection(cfg.FenceCollection),
		audit:  client.Collection(cfg.AuditCollection),
		input:  client.Collection(inputCollection(cfg.AuditCollection)),
		log:    cfg.Logger.With("backend", "firestore"),

		inflight: newKeyLocks(),
	}
	s.log.Debug("firestore store opened",
		"project", cfg.ProjectID, "database", cfg.DatabaseID,
		"collection", cfg.Collection, "fence_collection", cfg.FenceCollection,
		"audit_collection", cfg.AuditCollection,
		"emulator", os.Getenv("FIRESTORE_EMULATOR_HOST"))
	return s, nil
}

// Capabilities reports a fencing backend on client time.
func (s *Store) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "firestore", SupportsFencing: true, TimeAuthority: lockstore.ClientTime}
}

// Close closes the client. It is idempotent; locks are not released.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.closeErr = s.client.Close()
	})
	return s.closeErr
}

// nowMs reads the time authority, the gateway's clock.
func (s *Store) nowMs() int64 { return s.cfg.Now().UnixMilli() }

// begin is the common preamble of every operation: a closed store or a
// finished context fails before any I/O.
func (s *Store) begin(ctx context.Context, op string) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return ctx, func() {}, lockstore.Errorf(lockstore.ServiceUnavailable, op, "store is closed")
	}
	if ce := lockstore.ContextError(ctx, op); ce != nil {
		return ctx, func() {}, ce
	}
	// The client library retries UNAVAILABLE until the context ends, so an
	// unreachable Firestore would hold a caller without a deadline forever.
	// Bound every operation; classify reports our bound as
	// ServiceUnavailable, the caller's own deadline as NetworkTimeout.
	bctx, cancel := context.WithTimeoutCause(ctx, s.cfg.OpTimeout, errOpTimeout)
	return bctx, cancel, nil
}

// checkpoint is the spec's checkAborted: a cancelled or expired context
// stops a transaction function between its reads and its writes.
func checkpoint(ctx context.Context, op string) error {
	if ce := lockstore.ContextError(ctx, op); ce != nil {
		return ce
	}
	return nil
}

// Ping reads one (normally absent) counter document: it proves the
// database is reachable and the credentials may read, and writes nothing.
func (s *Store) Ping(ctx context.Context) error {
	const op = "ping"
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer cancel()
	_, err = s.fences.Doc("fencegate-ping").Get(ctx)
	if status.Code(err) == codes.NotFound {
		err = nil
	}
	return classify(ctx, op, err)
}

// Acquire tries once to take the lock on key for ttl. A plain read that
// finds a live lock answers "locked"; otherwise one transaction reads the
// lock and counter documents together and, if the lock is absent or
// expired, writes the next fence to the counter and a new lock document.
func (s *Store) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	const op = "acquire"
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	ttlMs, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockID, fenceID, err := docIDs(nk)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	defer cancel()
	id, err := lockstore.NewLockID()
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	lockRef, fenceRef := s.locks.Doc(lockID), s.fences.Doc(fenceID)

	// Contention fast path: a plain (strongly consistent, lock-free) read
	// that finds a live lock answers "locked" without a transaction. Inside
	// a read-write transaction the same read would take a shared lock on
	// the holder's document — Firestore's transactions are pessimistic —
	// and a crowd of waiters polling a held key would then stall the
	// holder's own Extend and Release behind lock waits. The clock is read
	// after the read returns, so a lock live at that instant was live when
	// read: "locked" is a true answer for a moment inside this call. A free
	// or expired key falls through to the transaction, which decides.
	switch snap, err := lockRef.Get(ctx); {
	case status.Code(err) == codes.NotFound:
	case err != nil:
		return lockstore.AcquireResult{}, lockstore.WithContext(classify(ctx, op, err), nk, "")
	default:
		cur, held, err := decodeLock(snap, op)
		if err != nil {
			return lockstore.AcquireResult{}, lockstore.WithContext(err, nk, "")
		}
		if held && lockstore.IsLive(cur.ExpiresAtMs, s.nowMs()) {
			return lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}, nil
		}
	}

	unlock, err := s.inflight.lock(ctx, op, lockID)
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(err, nk, "")
	}
	defer unlock()
	var res lockstore.AcquireResult
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		res = lockstore.AcquireResult{} // the library may run us more than once
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		// The time authority is read inside the transaction (ADR-010), so
		// a retried attempt computes its expiry afresh.
		nowMs := s.nowMs()
		snaps, err := tx.GetAll([]*firestore.DocumentRef{lockRef, fenceRef})
		if err != nil {
			return err
		}
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		cur, held, err := decodeLock(snaps[0], op)
		if err != nil {
			return err
		}
		if held && lockstore.IsLive(cur.ExpiresAtMs, nowMs) {
			res = lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}
			return nil
		}
		last, err := decodeCounter(snaps[1], op)
		if err != nil {
			return err
		}
		// The lock document carries a copy of its fence. Should a counter
		// ever go missing while a lock document survives, continuing from
		// the larger of the two keeps fences strictly increasing.
		if held {
			if n, err := lockstore.ParseFence(cur.Fence); err == nil && n > last {
				last = n
			}
		}
		if last >= lockstore.FenceMax {
			return &lockstore.Error{Code: lockstore.Internal, Op: op, Key: nk,
				Msg: "fence counter overflow: the key's counter is at its limit; rotate the key namespace"}
		}
		next := last + 1
		fence, err := lockstore.FormatFence(next)
		if err != nil {
			return err
		}
		if lockstore.FenceNeedsWarning(next) {
			s.log.Warn("fence counter approaching its limit",
				"key_hash", lockstore.HashKey(nk), "fence", fence, "limit", lockstore.FenceMax)
		}
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		if err := tx.Set(fenceRef, counterDoc{Fence: fence, KeyDebug: nk}); err != nil {
			return err
		}
		exp := nowMs + ttlMs
		if err := tx.Set(lockRef, lockDoc{LockID: id, ExpiresAtMs: exp, AcquiredAtMs: nowMs, Key: nk, Fence: fence}); err != nil {
			return err
		}
		res = lockstore.AcquireResult{OK: true, LockID: id, Fence: fence, ExpiresAtMs: exp}
		return nil
	}, firestore.MaxAttempts(s.cfg.MaxAttempts))
	if err != nil {
		return lockstore.AcquireResult{}, lockstore.WithContext(classify(ctx, op, err), nk, "")
	}
	return res, nil
}

// Release deletes the live lock lockID holds (see mutateLive).
func (s *Store) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
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
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ExtendResult{}, err
	}
	ttlMs, err := lockstore.ValidateTTL(ttl)
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
		return false, "", lockstore.WithContext(classify(ctx, op, err), "", lockID)
	}
	if len(refs) == 0 {
		return false, lockstore.DetailNotFound, nil
	}
	unlock, err := s.inflight.lock(ctx, op, refIDs(refs)...)
	if err != nil {
		return false, "", lockstore.WithContext(err, "", lockID)
	}
	defer unlock()
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		ok, detail = false, ""
		if err := checkpoint(ctx, op); err != nil {
			return err
		}
		// Read the clock inside the transaction (ADR-010): an extend's new
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
		return false, "", lockstore.WithContext(classify(ctx, op, err), "", lockID)
	}
	return ok, detail, nil
}

// IsLocked reports whether key has a live lock. It only reads.
func (s *Store) IsLocked(ctx context.Context, key string) (bool, error) {
	info, err := s.lookupKey(ctx, "isLocked", key)
	return info != nil, err
}

// LookupKey returns the sanitised live lock on key, or nil.
func (s *Store) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	return s.lookupKey(ctx, "lookup", key)
}

func (s *Store) lookupKey(ctx context.Context, op, key string) (*lockstore.LockInfo, error) {
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return nil, err
	}
	lockID, err := lockDocID(nk)
	if err != nil {
		return nil, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer cancel()
	snap, err := s.locks.Doc(lockID).Get(ctx)
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, lockstore.WithContext(classify(ctx, op, err), nk, "")
	}
	nowMs := s.nowMs()
	l, ok, err := decodeLock(snap, op)
	if err != nil || !ok || !lockstore.IsLive(l.ExpiresAtMs, nowMs) || !keyIs(l, nk) {
		return nil, lockstore.WithContext(err, nk, "")
	}
	return sanitise(nk, l), nil
}

// keyIs reports whether the lock document l belongs to the normalised key
// nk. Keys that are not legal document IDs ('/' and the like) live under a
// hashed ID, and a user key may spell that very hash: the two then share a
// document. Reads must not report the other key's lock as this key's (the
// edge check would accept its fence); acquires already treat it as
// contention, and the shared counter still only grows.
func keyIs(l lockDoc, nk string) bool {
	k, err := lockstore.NormalizeKey(l.Key)
	return err == nil && k == nk
}

// LookupLockID returns the sanitised live lock lockID holds, or nil. It is
// a plain indexed query (lookup is diagnostic, ADR-011) and never mutates:
// duplicates make it return nil without deleting anything.
func (s *Store) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	const op = "lookup"
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return nil, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer cancel()
	docs, err := s.locks.Where("lockId", "==", lockID).Documents(ctx).GetAll()
	if err != nil {
		return nil, lockstore.WithContext(classify(ctx, op, err), "", lockID)
	}
	m, err := s.resolve(op, lockID, docs, s.nowMs(), false)
	if err != nil {
		return nil, lockstore.WithContext(err, "", lockID)
	}
	if m.live == nil {
		return nil, nil
	}
	return sanitise(m.lock.Key, m.lock), nil
}

// Inspect reads the lock and counter documents of key in one batched read
// (one BatchGetDocuments call, one consistent snapshot) and reports the
// live lock and the latest fence ever issued for the key.
func (s *Store) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	const op = "inspect"
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	lockID, fenceID, err := docIDs(nk)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return lockstore.KeyState{}, err
	}
	defer cancel()
	snaps, err := s.client.GetAll(ctx, []*firestore.DocumentRef{s.locks.Doc(lockID), s.fences.Doc(fenceID)})
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithContext(classify(ctx, op, err), nk, "")
	}
	// Read the clock after the read returns: a later "now" can only make
	// a lock look expired sooner, which is the safe side for the check.
	st := lockstore.KeyState{NowMs: s.nowMs()}
	l, held, err := decodeLock(snaps[0], op)
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithContext(err, nk, "")
	}
	latest, err := decodeCounter(snaps[1], op)
	if err != nil {
		return lockstore.KeyState{}, lockstore.WithContext(err, nk, "")
	}
	if held && keyIs(l, nk) {
		if n, err := lockstore.ParseFence(l.Fence); err == nil && n > latest {
			latest = n
		}
		if lockstore.IsLive(l.ExpiresAtMs, st.NowMs) {
			st.Live = &lockstore.HeldLock{LockID: l.LockID, Fence: l.Fence, ExpiresAtMs: l.ExpiresAtMs, AcquiredAtMs: l.AcquiredAtMs}
		}
	}
	if latest > 0 {
		if st.LatestFence, err = lockstore.FormatFence(latest); err != nil {
			return lockstore.KeyState{}, lockstore.WithContext(err, nk, "")
		}
	}
	return st, nil
}

// CountHeld counts live lock documents with one aggregation query over the
// single-field expiresAtMs index.
func (s *Store) CountHeld(ctx context.Context) (int64, error) {
	const op = "countHeld"
	ctx, cancel, err := s.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer cancel()
	nowMs := s.nowMs()
	// IsLive(exp, now) is exp > now - tolerance.
	q := s.locks.Where("expiresAtMs", ">", nowMs-lockstore.TimeToleranceMs)
	ar, err := q.NewAggregationQuery().WithCount("held").Get(ctx)
	if err != nil {
		return 0, classify(ctx, op, err)
	}
	var out struct {
		Held int64 `firestore:"held"`
	}
	if err := ar.DataTo(&out); err != nil {
		return 0, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "count result does not decode", Err: err}
	}
	return out.Held, nil
}

// match is what a lockId resolves to.
type match struct {
	live   *firestore.DocumentSnapshot // the one live lock document lockId holds, or nil
	lock   lockDoc                     // its contents
	detail string                      // why live is nil (telemetry only)
	stale  []*firestore.DocumentRef    // expired duplicates safe to delete
}

// deleteStale deletes the expired duplicates m found (ADR-014 allows it;
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
// duplicates are seen (ADR-014).
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
// A single candidate is verified explicitly (ADR-003): its lockId must equal
// lockID and it must sit where its own key's lock lives, else it is not this
// lock. More than one is an inconsistency (ADR-014): it is logged (hashes
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
		if !lockstore.IsLive(c.lock.ExpiresAtMs, nowMs) {
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
		case lockstore.IsLive(c.lock.ExpiresAtMs, nowMs):
			live++
		case cleanup && c.lock.ExpiresAtMs < nowMs-lockstore.TimeToleranceMs-cleanupGuardMs:
			m.stale = append(m.stale, c.snap.Ref)
		}
	}
	if live > 0 {
		m.detail = ""
	}
	s.log.Warn("duplicate lock documents for one lockId; refusing to act on ambiguous state",
		"op", op, "lockid_hash", lockstore.HashKey(lockID), "documents", len(cands),
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
			"key_hash", lockstore.HashKey(l.Key), "lockid_hash", lockstore.HashKey(l.LockID))
		return false
	}
	return true
}

// decodeLock decodes a lock document snapshot. ok is false when the
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
	return &lockstore.LockInfo{
		KeyHash:      lockstore.HashKey(nk),
		LockIDHash:   lockstore.HashKey(l.LockID),
		Fence:        l.Fence,
		ExpiresAtMs:  l.ExpiresAtMs,
		AcquiredAtMs: l.AcquiredAtMs,
	}
}
