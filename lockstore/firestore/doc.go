// Package firestore is fencegate's Cloud Firestore lock store, on
// cloud.google.com/go/firestore, with the gateway's clock as time authority.
//
// # Layout
//
// The layout is SyncGuard's (firestore-backend.md), so SyncGuard
// TypeScript clients and fencegate share locks and one fence sequence per
// key on the same database:
//
//   - collection "locks" (Config.Collection): one document per key, ID
//     makeStorageKey("", key, 1500, 0) — the NFC key itself —, fields
//     {lockId, expiresAtMs, acquiredAtMs, key, fence};
//   - collection "fence_counters" (Config.FenceCollection): one document
//     per key, ID makeStorageKey("", "fence:"+lockDocID, 1500, 0), fields
//     {fence, keyDebug}. Counters are never deleted, by anything.
//
// Keys that are not legal document IDs (containing '/', "." and "..", or
// of the reserved form __.*__) use the hashed storage-key form instead,
// base64url(sha256(key)[:16]); see lockDocID. SyncGuard cannot store such
// keys at all, so no shared lock is affected.
//
// # Operations
//
// Acquire runs one transaction (reads of both documents first, the clock
// read inside it, overflow checked before any write). Release and Extend
// query lockId inside a transaction without limit(1): more than one match
// is an inconsistency (ADR-014) that is logged with hashes only and makes
// the operation return OK=false without touching any live document;
// duplicates expired beyond the clean-up guard are deleted in the same
// transaction. LookupLockID treats duplicates the same way and never writes.
// Inspect reads the lock and counter documents in one batched get.
// Commit conflicts are retried by the client library at most
// Config.MaxAttempts times; past that the operation is ServiceUnavailable.
//
// # Indexes
//
// Lock operations use the automatic single-field indexes (lockId,
// expiresAtMs). The audit collection (Config.AuditCollection, default
// "fencegate_audit") needs exactly one composite index, for QueryAudit with
// a keyHash filter:
//
//	gcloud firestore indexes composite create --collection-group=fencegate_audit \
//	    --field-config=field-path=keyHash,order=ascending \
//	    --field-config=field-path=timeMs,order=descending
//
// Without it a keyHash query fails with InvalidArgument (FAILED_PRECONDITION)
// naming the index; every other query, and retention trimming, needs none.
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
//	firestore://PROJECT?database=D&collection=C&fenceCollection=F&auditCollection=A&maxAttempts=N
//
// Credentials are Application Default Credentials; with
// FIRESTORE_EMULATOR_HOST set, the client library talks to that emulator.
package firestore
