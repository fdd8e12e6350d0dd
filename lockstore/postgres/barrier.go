package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// The write barrier keeps one row per in-flight write in the barrier table
// (Config.BarrierTable): (key, write_id) → fence, deadline_ms, keyed by the
// lock's storage key. Locks and counters are other tables; nothing here
// writes them.

// barrierStatements is the barrier's SQL with the table names quoted.
type barrierStatements struct {
	admit, finish, sweep string
}

func buildBarrierStatements(cfg Config) barrierStatements {
	r := strings.NewReplacer(
		"{locks}", ident(cfg.Table),
		"{fences}", ident(cfg.FenceTable),
		"{barrier}", ident(cfg.BarrierTable),
		"{now_ms}", nowMsSQL,
		"{count_limit}", strconv.Itoa(lockstore.MaxInFlightLimit),
	)
	return barrierStatements{
		// Runs after the acquire's advisory lock on the storage key ($1),
		// in the same implicit transaction, so no acquire of the key can
		// commit between this statement's read and its insert; admissions
		// of one key serialise on the same lock.
		//   state   - what inspect reads, at one clock reading;
		//   derived - the live fence and the latest fence as Inspect derives
		//             them in Go (the counter, raised to a live fence above
		//             it), and whether $3 matches under policy $4;
		//   pruned  - up to $8 (BarrierPruneBatch) expired entries of the
		//             key, oldest first, deleted (except this write id's
		//             own, which the upsert may rewrite: one statement must
		//             not touch a row twice);
		//   lower   - unexpired entries under a lower fence, counted up to
		//             lockstore.MaxInFlightLimit (a cap admits no more);
		//   blockers- that count, and the latest deadline among the key's
		//             entries;
		//   inflight- the key's unexpired entries, counted up to the cap
		//             $7, and whether this write id is one (re-registering
		//             is not one more);
		//   ins     - the registration, only when matched, unblocked and
		//             under the cap.
		// Every scan of the barrier table is a range of the (key,
		// deadline_ms) index or a primary-key probe: the key's unexpired
		// entries (which the cap bounds), a LIMITed batch of its expired
		// ones, never all of a key's rows. The clock is read through a
		// scalar subquery so that it is an index condition, not a join;
		// the deadline bounds are written as row comparisons on (key,
		// deadline_ms), which only that index can use (the deadline-only
		// index, the sweep's, would walk every key's expired entries), and
		// each LIMITed scan is ORDER BY the index's columns.
		// Fences are 15 digits; COLLATE "C" makes text order byte order.
		admit: r.Replace(`WITH clock AS (
				SELECT {now_ms} AS now_ms
			), state AS MATERIALIZED (
				SELECT c.now_ms, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence AS lock_fence,
					(SELECT f.fence FROM {fences} f WHERE f.fence_key = $2) AS counter
				FROM clock c LEFT JOIN {locks} l ON l.key = $1
			), live AS (
				SELECT s.*,
					CASE WHEN s.expires_at_ms > s.now_ms - 1000 THEN s.lock_fence END AS live_fence,
					CASE WHEN s.counter > 0
						THEN lpad(s.counter::text, greatest(15, length(s.counter::text)), '0') END AS counted
				FROM state s
			), derived AS (
				SELECT v.*,
					coalesce(CASE WHEN $4::boolean THEN v.live_fence = $3::text
						ELSE (CASE WHEN v.live_fence COLLATE "C" > coalesce(v.counted, '') COLLATE "C"
							THEN v.live_fence ELSE v.counted END) = $3::text END, false) AS matched
				FROM live v
			), pruned AS (
				DELETE FROM {barrier} b
				WHERE b.key = $1 AND b.write_id = ANY (ARRAY(
					SELECT x.write_id FROM {barrier} x
					WHERE x.key = $1 AND (x.key, x.deadline_ms) <= ($1::text, (SELECT now_ms FROM clock)) AND x.write_id <> $5
					ORDER BY x.key, x.deadline_ms LIMIT $8))
				RETURNING b.write_id
			), lower AS (
				SELECT count(*) AS n FROM (
					SELECT 1 FROM {barrier} b
					WHERE b.key = $1 AND (b.key, b.deadline_ms) > ($1::text, (SELECT now_ms FROM clock))
						AND b.fence COLLATE "C" < $3::text COLLATE "C"
					ORDER BY b.key, b.deadline_ms LIMIT {count_limit}) x
			), blockers AS (
				-- The latest deadline of all the key's entries, one index
				-- probe: never earlier than the blocking entries' latest.
				SELECT l.n, CASE WHEN l.n > 0 THEN coalesce(
					(SELECT max(b.deadline_ms) FROM {barrier} b WHERE b.key = $1), 0) ELSE 0 END AS until
				FROM lower l
			), inflight AS (
				SELECT (SELECT count(*) FROM (
						SELECT 1 FROM {barrier} b
						WHERE b.key = $1 AND (b.key, b.deadline_ms) > ($1::text, (SELECT now_ms FROM clock))
						ORDER BY b.key, b.deadline_ms LIMIT $7) x) AS n,
					EXISTS (SELECT 1 FROM {barrier} b
						WHERE b.key = $1 AND b.write_id = $5 AND b.deadline_ms > (SELECT now_ms FROM clock)) AS again
			), ins AS (
				INSERT INTO {barrier} (key, write_id, fence, deadline_ms)
				SELECT $1, $5, $3::text, d.now_ms + $6::bigint FROM derived d, blockers b, inflight f
				WHERE d.matched AND b.n = 0 AND (f.n < $7 OR f.again)
				ON CONFLICT (key, write_id) DO UPDATE SET fence = EXCLUDED.fence, deadline_ms = EXCLUDED.deadline_ms
				RETURNING 1
			)
			SELECT d.now_ms, d.lock_id, d.expires_at_ms, d.acquired_at_ms, d.lock_fence, d.counter,
				d.matched, b.n, b.until, EXISTS (SELECT 1 FROM ins), f.n, f.again
			FROM derived d, blockers b, inflight f`),

		finish: r.Replace(`DELETE FROM {barrier} WHERE key = $1 AND write_id = $2`),

		// Up to $1 entries whose deadline passed, found through the
		// deadline index. Rows an Admit holds are skipped (the next sweep
		// gets them); the outer condition is checked again on the row it
		// deletes, so an entry re-registered with a new deadline between
		// the pick and the delete stays.
		sweep: r.Replace(`WITH clock AS (
				SELECT {now_ms} AS now_ms
			), expired AS (
				SELECT b.key, b.write_id FROM {barrier} b, clock c
				WHERE b.deadline_ms <= c.now_ms
				LIMIT $1
				FOR UPDATE OF b SKIP LOCKED
			)
			DELETE FROM {barrier} b USING expired e, clock c
			WHERE b.key = e.key AND b.write_id = e.write_id AND b.deadline_ms <= c.now_ms`),
	}
}

var _ lockstore.WriteBarrier = (*Store)(nil)

// Admit applies the write barrier in one round trip: the acquire's advisory
// lock on the storage key and the admit statement, sent as one pipeline
// that PostgreSQL runs as one implicit transaction, by the server's now().
func (s *Store) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	nk, maxMs, err := backend.PrecheckAdmit(ctx, key, a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	lockKey, fenceKey, err := storageKeys(nk)
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithKeyLockID(err, key, "")
	}
	if err := s.begin(ctx, op); err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var row admitRow
	b := &pgx.Batch{}
	b.Queue(s.sql.acquireLock, lockKey)
	b.Queue(s.sql.barrier.admit, lockKey, fenceKey, a.Fence, a.RequireLive, a.WriteID, maxMs,
		a.InFlightCap(), backend.BarrierPruneBatch).
		QueryRow(func(r pgx.Row) error { return r.Scan(row.dest()...) })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	res, err := row.result(nk, a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, lockstore.WithKeyLockID(err, key, "")
	}
	return res, nil
}

// admitRow is the admit statement's row.
type admitRow struct {
	lock             lockRow
	counter          *int64
	matched, created bool
	blocking, until  int64
	inflight         int64 // the key's unexpired entries, counted up to the cap
	again            bool  // this write id is one of them
}

func (r *admitRow) dest() []any {
	return append(r.lock.dest()[:5], &r.counter, &r.matched, &r.blocking, &r.until, &r.created, &r.inflight, &r.again)
}

// result derives the state exactly as Inspect does from the same columns
// and turns the row into Admit's result.
func (r *admitRow) result(nk string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	ks := lockstore.KeyState{NowMs: r.lock.nowMs}
	if l := r.lock; l.live() {
		ks.Live = &lockstore.Lock{Key: nk, LockID: *l.lockID, Fence: *l.fence,
			ExpiresAtMs: *l.expiresAt, AcquiredAtMs: *l.acquiredAt}
	}
	if r.counter != nil && *r.counter > 0 {
		ks.LatestFence = fmt.Sprintf("%0*d", lockstore.FenceDigits, *r.counter)
	}
	if ks.Live != nil && ks.Live.Fence > ks.LatestFence {
		ks.LatestFence = ks.Live.Fence
	}
	// SQL and Go must agree on the match; if they ever do not, the
	// decision cannot be trusted (an entry it wrote is left to expire).
	if r.matched != backend.AdmissionMatches(a, ks) {
		return lockstore.WriteAdmitResult{}, lockstore.Errorf(lockstore.Internal, op,
			"postgres: the admit statement and the store disagree whether fence %s matches (statement %v)", a.Fence, r.matched)
	}
	res := lockstore.WriteAdmitResult{State: ks}
	switch {
	case r.created:
		res.Admitted = true
	case r.matched && r.blocking > 0:
		res.Blocking, res.BlockedUntilMs = int(r.blocking), r.until
	case r.matched && r.inflight >= int64(a.InFlightCap()) && !r.again:
		res.Full = true
	case r.matched:
		// Matching, unblocked, under the cap, yet not registered: the
		// statement did something this code does not expect; fail closed
		// as an error, not as a retriable "full".
		return lockstore.WriteAdmitResult{}, lockstore.Errorf(lockstore.Internal, op,
			"postgres: the admit statement registered no entry for a matching, unblocked write under the cap (%d in flight)", r.inflight)
	}
	return res, nil
}

// Finish deletes the entry in one statement; an absent entry is not an
// error. Expired entries are left to the next Admit of the key or to
// SweepBarrier.
func (s *Store) Finish(ctx context.Context, key, writeID string) error {
	const op = "finish"
	nk, err := backend.PrecheckFinish(ctx, key, writeID)
	if err != nil {
		return err
	}
	lockKey, _, err := storageKeys(nk)
	if err != nil {
		return lockstore.WithKeyLockID(err, key, "")
	}
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.sql.barrier.finish, lockKey, writeID); err != nil {
		return lockstore.WithKeyLockID(classify(ctx, op, err), key, "")
	}
	return nil
}

var _ lockstore.BarrierSweeper = (*Store)(nil)

// SweepBarrier deletes up to limit expired entries in one statement, by the
// server's now() as Admit judges them.
func (s *Store) SweepBarrier(ctx context.Context, limit int) (int, error) {
	const op = "sweep"
	if err := backend.ValidateSweepLimit(limit); err != nil {
		return 0, err
	}
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, s.sql.barrier.sweep, limit)
	if err != nil {
		return 0, classify(ctx, op, err)
	}
	return int(tag.RowsAffected()), nil
}
