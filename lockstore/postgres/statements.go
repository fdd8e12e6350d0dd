package postgres

import (
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/lockstore/backend"
)

// nowMsSQL is the server clock in Unix milliseconds, floored as SyncGuard
// floors it. now() is the transaction's start time, so every statement of one
// operation sees the same instant.
const nowMsSQL = `floor(extract(epoch FROM now()) * 1000)::bigint`

// statements holds one store's SQL, built once with its table names quoted.
//
// Liveness in SQL is written "expires_at_ms > now_ms - 1000": the textual
// twin of backend.IsLive with TimeToleranceMs. Release and extend must
// decide inside the statement (that is what makes them atomic); reads fetch
// the expiry and the clock and call backend.IsLive in Go.
type statements struct {
	acquireLock, acquireInit, acquire string
	release, extend                   string
	isLocked, lookupKey, lookupLockID string
	inspect, countHeld                string
	auditInsert, auditPruneAge        string
	auditPruneCount                   string
	auditQuery, auditQueryKey         string
	barrier                           barrierStatements // barrier.go
}

func buildStatements(cfg Config) statements {
	r := strings.NewReplacer(
		"{locks}", ident(cfg.Table),
		"{fences}", ident(cfg.FenceTable),
		"{audit}", ident(cfg.AuditTable),
		"{now_ms}", nowMsSQL,
		"{floor_epoch}", strconv.FormatInt(backend.FloorEpochMs, 10),
		"{floor_per_ms}", strconv.FormatInt(backend.FloorPerMs, 10),
		"{floor_lead}", strconv.FormatInt(backend.FloorLeadMax, 10),
	)
	return statements{
		// Serialises acquires of one storage key, SyncGuard's way
		// (hashtext of the storage key), so a SyncGuard client and
		// fencegate exclude each other too.
		acquireLock: `SELECT pg_advisory_xact_lock(hashtext($1))`,

		// Step one of the canonical fence increment: make sure the
		// counter row exists. A separate statement because the UPDATE of
		// step two must see it, and statements in one WITH share a
		// snapshot.
		acquireInit: r.Replace(`INSERT INTO {fences} (fence_key, fence) VALUES ($1, 0)
			ON CONFLICT (fence_key) DO NOTHING`),

		// Step two plus the lock write, in one statement:
		//   holder  - the current row, locked (a concurrent release or
		//             extend finishes first, and we re-read its result);
		//   free    - the clock, present only if no live lock holds the key;
		//   counter - the next fence (backend.NextFenceAt): counter+1,
		//             raised to the clock floor when $7 (FloorClock) is
		//             true; written only when free, only when it stays <=
		//             FenceMax ($6) and within the floor's lead cap, so an
		//             overflow or a clock behind the counter writes
		//             nothing at all;
		//   lock    - the upsert, only when a fence was issued.
		// The floor reads clock_timestamp(), not now(): now() is the
		// transaction's start, before the advisory lock was granted, and
		// the acquires that held it meanwhile may have raised the counter
		// to floors of later instants.
		// The final row reports which branch ran; prior is the counter as
		// this statement found it and floor the floor it was held to, to
		// tell an overflow or a clock behind apart.
		acquire: r.Replace(`WITH clock AS (
				SELECT {now_ms} AS now_ms,
					greatest(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - {floor_epoch}, 0) * {floor_per_ms} AS floor
			), holder AS MATERIALIZED (
				SELECT expires_at_ms FROM {locks} WHERE key = $1 FOR UPDATE
			), free AS (
				SELECT c.now_ms FROM clock c
				WHERE NOT EXISTS (SELECT 1 FROM holder h WHERE h.expires_at_ms > c.now_ms - 1000)
			), counter AS (
				UPDATE {fences} SET fence = CASE WHEN $7 THEN greatest(fence + 1, c.floor) ELSE fence + 1 END
				FROM clock c
				WHERE fence_key = $2 AND fence < $6 AND EXISTS (SELECT 1 FROM free)
					AND (NOT $7 OR (fence + 1 - c.floor <= {floor_lead} AND c.floor <= $6))
				RETURNING fence
			), lock AS (
				INSERT INTO {locks} (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key)
				SELECT $1, $3, f.now_ms + $4, f.now_ms, lpad(n.fence::text, 15, '0'), $5
				FROM free f, counter n
				ON CONFLICT (key) DO UPDATE SET
					lock_id = EXCLUDED.lock_id,
					expires_at_ms = EXCLUDED.expires_at_ms,
					acquired_at_ms = EXCLUDED.acquired_at_ms,
					fence = EXCLUDED.fence,
					user_key = EXCLUDED.user_key
				RETURNING expires_at_ms
			)
			SELECT EXISTS (SELECT 1 FROM free),
				(SELECT fence FROM counter),
				(SELECT expires_at_ms FROM lock),
				(SELECT fence FROM {fences} WHERE fence_key = $2),
				floor
			FROM clock`),

		// Resolve lockId -> row with a row lock, verify ownership and
		// liveness, delete: one statement, one implicit transaction.
		release: r.Replace(`WITH clock AS (
				SELECT {now_ms} AS now_ms
			), held AS MATERIALIZED (
				SELECT key, lock_id, expires_at_ms FROM {locks} WHERE lock_id = $1 FOR UPDATE
			), gone AS (
				DELETE FROM {locks} l USING held h, clock c
				WHERE l.key = h.key AND l.lock_id = $1 AND h.lock_id = $1
					AND h.expires_at_ms > c.now_ms - 1000
				RETURNING l.lock_id
			)
			SELECT (SELECT lock_id FROM held), (SELECT expires_at_ms FROM held), c.now_ms,
				(SELECT lock_id FROM gone)
			FROM clock c`),

		// As release, but set the expiry to now+ttl ($2).
		extend: r.Replace(`WITH clock AS (
				SELECT {now_ms} AS now_ms
			), held AS MATERIALIZED (
				SELECT key, lock_id, expires_at_ms FROM {locks} WHERE lock_id = $1 FOR UPDATE
			), moved AS (
				UPDATE {locks} l SET expires_at_ms = c.now_ms + $2
				FROM held h, clock c
				WHERE l.key = h.key AND l.lock_id = $1 AND h.lock_id = $1
					AND h.expires_at_ms > c.now_ms - 1000
				RETURNING l.lock_id, l.expires_at_ms
			)
			SELECT (SELECT lock_id FROM held), (SELECT expires_at_ms FROM held), c.now_ms,
				(SELECT lock_id FROM moved), (SELECT expires_at_ms FROM moved)
			FROM clock c`),

		isLocked: r.Replace(`SELECT c.now_ms, l.expires_at_ms
			FROM (SELECT {now_ms} AS now_ms) c LEFT JOIN {locks} l ON l.key = $1`),

		lookupKey: r.Replace(`SELECT c.now_ms, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence, l.user_key
			FROM (SELECT {now_ms} AS now_ms) c LEFT JOIN {locks} l ON l.key = $1`),

		lookupLockID: r.Replace(`SELECT c.now_ms, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence, l.user_key
			FROM (SELECT {now_ms} AS now_ms) c LEFT JOIN {locks} l ON l.lock_id = $1`),

		// The live lock and the latest counter in one statement, so both
		// come from one snapshot and one clock reading.
		inspect: r.Replace(`SELECT c.now_ms, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence,
				(SELECT f.fence FROM {fences} f WHERE f.fence_key = $2)
			FROM (SELECT {now_ms} AS now_ms) c LEFT JOIN {locks} l ON l.key = $1`),

		// A range scan of the expires_at_ms index over live rows only.
		countHeld: r.Replace(`SELECT count(*) FROM {locks} WHERE expires_at_ms > {now_ms} - 1000`),

		auditInsert: r.Replace(`INSERT INTO {audit} (time_ms, key_hash, event, input)
			SELECT u.t, u.k, u.e::jsonb, u.i FROM unnest($1::bigint[], $2::text[], $3::text[], $4::boolean[]) AS u(t, k, e, i)`),
		auditPruneAge: r.Replace(`DELETE FROM {audit} WHERE time_ms < {now_ms} - $1`),
		// Everything of class $2 older than its $1-th newest row, by
		// insertion order (the primary key), so the cut is one probe of
		// the (input, id) index.
		auditPruneCount: r.Replace(`DELETE FROM {audit} WHERE input = $2
			AND id <= (SELECT id FROM {audit} WHERE input = $2 ORDER BY id DESC OFFSET $1 LIMIT 1)`),
		auditQuery: r.Replace(`SELECT event FROM {audit} WHERE time_ms >= $1
			ORDER BY time_ms DESC, id DESC LIMIT $2`),
		// key_hash narrows through its index; the digest decides, since
		// keys with one key_hash are cheap to construct.
		auditQueryKey: r.Replace(`SELECT event FROM {audit} WHERE key_hash = $3 AND event->>'keyDigest' = $4 AND time_ms >= $1
			ORDER BY time_ms DESC, id DESC LIMIT $2`),
		barrier: buildBarrierStatements(cfg),
	}
}
