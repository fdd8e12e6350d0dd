// Package redis is fencegate's Redis lock store: one Lua script per
// operation, run with EVALSHA, with Redis's own clock (TIME) as the time
// authority. It works against a single server, a master found through
// Redis Sentinel, or a Redis Cluster (redis+cluster://, cluster.go: its own
// key layout, one hash tag per lock, which SyncGuard cannot share).
//
// # Key layout
//
// On one server or Sentinel (LayoutSyncGuard, the default) the layout is
// SyncGuard's, byte for byte, so a fleet already locking with
// the SyncGuard TypeScript library shares locks and fence sequences with
// fencegate. With the default prefix "syncguard", acquiring "resource:123"
// writes exactly:
//
//	syncguard:resource:123                   lock: {"lockId","expiresAtMs","acquiredAtMs","key","fence"}, PX ttl+1000
//	syncguard:id:<lockId>                    index: the full lock storage key (docs/design.md, "Storage keys"), same PX
//	syncguard:fence:syncguard:resource:123   fence counter: only ever INCRed, never expired or deleted
//
// Each name is backend.MakeStorageKey(prefix, …, 1000, 26); the counter
// is backend.FenceStorageKey of the lock key. Storage keys too long for
// Redis's budget are hashed, and because the index stores the full lock key,
// release and extend still find a hashed lock. The keys expire 1000 ms
// (lockstore.TimeToleranceMs) after expiresAtMs, exactly when the liveness
// predicate expiresAtMs > now-1000 stops calling the lock live.
//
// Collisions the layout allows are refused: a prefix containing "fence:" or
// ending in "fence" or ".fencegate" fails at Open; an empty prefix means the default
// (fencegate never writes unprefixed keys); user keys starting "id:" or
// "fence:" are InvalidArgument on this backend, since they would land on an
// index or a fence counter. fencegate's own keys (the audit streams, write
// barrier entries) start "<prefix>.fencegate:", outside SyncGuard's
// "<prefix>:" space, so they cannot collide with any user key; see ownKey.
// The scripts also refuse to overwrite a lock key whose value is not a lock.
//
// # Operations and round trips
//
// Acquire, Release, Extend, IsLocked, LookupKey, LookupLockID and Inspect
// are one script each (EVALSHA; on NOSCRIPT — the server lost its script
// cache — that script is sent again as EVAL). Concurrent callers' scripts
// share round trips: the scripts queued while one round trip is in flight go
// out together as one pipeline (dispatch.go), so under load a gateway's
// checks and lock calls cost Redis and the gateway far fewer system calls
// each; a lone call is sent at once. Pipelining changes no semantics: each
// script still runs atomically, on its own reads of TIME and its keys.
// Acquire reads the counter and
// refuses, writing nothing, when the next fence would pass
// lockstore.FenceMax; it logs a warning past lockstore.FenceWarn. Release
// and Extend resolve lockId → lock key, check that the lock names that
// lockId (docs/design.md, "Ownership re-verified") and is live, and mutate, inside one script. Extend sets
// the expiry to now+ttl and returns it. AppendAudit is one script per 500
// events; QueryAudit is one XREVRANGE per 500 entries scanned.
//
// HeldCounter is not implemented: counting live locks in Redis means a SCAN
// of the whole keyspace, which is not cheap. LockLister (the console's live
// view) is a bounded SCAN instead: at most 50 pages of 1000 slots over the
// lockId index keys, two MGETs per page, Partial when it stopped early (see
// list.go for why no index is kept by the scripts).
//
// # Durability
//
// A server that loses writes it acknowledged — a restart without AOF or RDB,
// a crash past the last fsync or snapshot, a Sentinel failover to a replica
// that had not yet received the latest acquires — loses fence counters. The
// clock floor (Config.FenceFloor, the default; backend.NextFenceAt) keeps
// fences growing all the same: the acquire script issues
// max(counter+1, floor(TIME)) and writes it back. With fenceFloor=off such a
// loss reissues fences. ack=replicas (ack.go) makes every acquire wait for
// the replicas instead, with no clock assumption. docs/fences.md has the
// guarantee per deployment.
//
// Eviction must not touch counters either: Open refuses a server whose
// maxmemory-policy is allkeys-* (it may evict a counter, which then starts
// again at 1) and warns on volatile-* (it may evict live locks early; the
// fences still protect writes). Where CONFIG is denied, the check is
// logged as skipped and noeviction is the operator's to keep.
//
// # Connections
//
// go-redis retries are disabled (an operation is a single attempt; the
// lockstore Lock helper retries), context deadlines are honoured on the
// socket, and dial/read/write/pool timeouts default to 2 s, so a dead server
// fails a call promptly with ServiceUnavailable or NetworkTimeout. A
// NetworkTimeout is ambiguous: the script may still have run (e.g. on a
// server that was merely slow), so an acquire that timed out can leave a
// lock nobody holds the lockId of; it expires on its TTL.
package redis
