// Package firestore is fencegate's Cloud Firestore lock store, on
// cloud.google.com/go/firestore, with the gateway's clock as time authority.
//
// # Layout
//
// The layout is SyncGuard's (docs/design.md, "Backends"), so SyncGuard
// TypeScript clients and fencegate share locks and one fence sequence per
// key on the same database:
//
//   - collection "locks" (Config.Collection): one document per key, ID
//     makeStorageKey("", key, 1500, 0) — the NFC key itself —, fields
//     {lockId, expiresAtMs, acquiredAtMs, key, fence};
//   - collection "fence_counters" (Config.FenceCollection): one document
//     per key, ID makeStorageKey("", "fence:"+lockDocID, 1500, 0), fields
//     {fence, keyDebug}. Counters are never deleted, by anything;
//   - collection "fencegate_write_barrier" (Config.BarrierCollection),
//     fencegate's own: the write barrier's in-flight writes, one document
//     per key under the lock document's ID, fields {key, writes: {writeId:
//     {fence, deadlineMs}}}, deleted when its last write finishes.
//
// Keys that are not legal document IDs (containing '/', equal to "." or
// "..", or of the reserved form __.*__) use the hashed storage-key form instead,
// base64url(sha256(key)[:16]); see lockDocID. SyncGuard cannot store such
// keys at all, so no shared lock is affected.
//
// # Operations
//
// Acquire first reads the lock document without a transaction: a live lock
// answers "locked" at once, without the shared lock a transactional read
// would hold on the holder's document. Otherwise one transaction reads the
// lock and counter documents (all reads before writes), reads the clock
// inside it, checks the fence limit before writing, and writes the counter
// and the lock; the returned expiresAtMs is the one stored.
//
// Release and Extend find the candidate documents with a plain lockId
// query without limit(1), then, in one transaction, re-read each candidate
// by reference and verify it explicitly (docs/design.md, "Ownership re-verified"): it must still carry the
// lockId, be live, and sit at its own key's document ID. More than one
// candidate is an inconsistency (docs/design.md, "Duplicate lockIds"), logged with hashes only: the
// operation returns OK=false without touching a live document, and deletes
// duplicates that expired more than tolerance + 1 s ago. LookupLockID
// treats duplicates the same way and never writes. Inspect reads the lock
// and counter documents in one batched get (one consistent snapshot).
//
// A store serialises its own read-write transactions per lock document, so
// transactions of one process never deadlock each other on Firestore's
// pessimistic locks; conflicts with other processes are retried by the
// client library at most Config.MaxAttempts times, then reported as
// ServiceUnavailable.
//
// # Indexes
//
// Lock operations use the automatic single-field indexes (lockId,
// expiresAtMs). Audit events live in two collections, one per retention
// class: Config.AuditCollection (default "fencegate_audit") for decision
// events and the same name plus "_input" for input events (missing,
// malformed), each trimmed to its own count. Each needs one composite
// index, for QueryAudit with a key filter (which matches keyDigest):
//
//	for c in fencegate_audit fencegate_audit_input; do
//	  gcloud firestore indexes composite create --collection-group=$c \
//	      --field-config=field-path=keyDigest,order=ascending \
//	      --field-config=field-path=timeMs,order=descending
//	done
//
// Without them a key query fails with InvalidArgument (FAILED_PRECONDITION)
// naming the index; every other query, and retention trimming, needs none.
// The (keyHash, timeMs) index earlier versions asked for is no longer used.
// The emulator needs no indexes.
//
// # Time
//
// Firestore offers no server clock a transaction can read, so expiry is
// decided by Config.Now (time.Now): every gateway and SyncGuard client on
// the database must be NTP-synced well within lockstore.TimeToleranceMs.
//
// # Store URL
//
//	firestore://PROJECT?database=D&collection=C&fenceCollection=F&auditCollection=A
//	    &barrierCollection=B&auditMaxEvents=N&auditMaxAge=168h&maxAttempts=N
//
// Credentials are Application Default Credentials; with
// FIRESTORE_EMULATOR_HOST set, the client library talks to that emulator.
package firestore
