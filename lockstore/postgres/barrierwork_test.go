package postgres

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// legacyAdmitSQL is the admit statement of the versions before the cap
// (verbatim): it deletes every expired entry of the key and counts every
// unexpired one under a lower fence; TestBarrierAdmitWorkFlat must catch
// it. Parameters $1..$6 as Admit's.
const legacyAdmitSQL = `WITH clock AS (
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
				DELETE FROM {barrier} b USING clock c
				WHERE b.key = $1 AND b.deadline_ms <= c.now_ms AND b.write_id <> $5
				RETURNING b.write_id
			), blockers AS (
				SELECT count(*) AS n, coalesce(max(b.deadline_ms), 0) AS until
				FROM {barrier} b, clock c
				WHERE b.key = $1 AND b.deadline_ms > c.now_ms AND b.fence COLLATE "C" < $3::text COLLATE "C"
			), ins AS (
				INSERT INTO {barrier} (key, write_id, fence, deadline_ms)
				SELECT $1, $5, $3::text, d.now_ms + $6::bigint FROM derived d, blockers b
				WHERE d.matched AND b.n = 0
				ON CONFLICT (key, write_id) DO UPDATE SET fence = EXCLUDED.fence, deadline_ms = EXCLUDED.deadline_ms
				RETURNING 1
			)
			SELECT d.now_ms, d.lock_id, d.expires_at_ms, d.acquired_at_ms, d.lock_fence, d.counter,
				d.matched, b.n, b.until, EXISTS (SELECT 1 FROM ins)
			FROM derived d, blockers b`

// TestBarrierAdmitWorkFlat: the rows an Admit examines in the barrier
// table (EXPLAIN ANALYZE of the statement itself, rolled back: rows every
// scan node returned or filtered out) do not grow with a key's expired
// entries, which abandoned writes pile up without bound: beside 1,000
// unexpired entries (the cap bounds those), 16,000 expired ones cost what
// 2,000 do. The legacy statement, which deleted every expired entry of the
// key on each Admit, is caught by the same bound.
func TestBarrierAdmitWorkFlat(t *testing.T) {
	s := openNS(t, "barrierwork", func(c *Config) { c.FenceFloor = backend.FloorOff })
	ctx := tctx(t)
	r := strings.NewReplacer("{locks}", ident(s.cfg.Table), "{fences}", ident(s.cfg.FenceTable),
		"{barrier}", ident(s.cfg.BarrierTable), "{now_ms}", nowMsSQL)
	legacy := r.Replace(legacyAdmitSQL)
	const unexpired = 1000
	rows := func(sql, key string, expired int, newer bool) float64 {
		t.Helper()
		a, err := s.Acquire(ctx, key, time.Hour)
		if err != nil || !a.OK {
			t.Fatalf("Acquire = %+v, %v", a, err)
		}
		lockKey, fenceKey, _ := storageKeys(key)
		ins := `INSERT INTO ` + ident(s.cfg.BarrierTable) + ` (key, write_id, fence, deadline_ms)
			SELECT $1, $2 || lpad(g::text, 21, '0'), $3, $4 FROM generate_series(1, $5) g`
		now := time.Now()
		if _, err := s.pool.Exec(ctx, ins, lockKey, "u", a.Fence, now.Add(time.Hour).UnixMilli(), unexpired); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(ctx, ins, lockKey, "x", a.Fence, now.Add(-time.Hour).UnixMilli(), expired); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(ctx, `ANALYZE `+ident(s.cfg.BarrierTable)); err != nil {
			t.Fatal(err)
		}
		fence := a.Fence
		if newer {
			if _, err := s.Release(ctx, a.LockID); err != nil {
				t.Fatal(err)
			}
			b, err := s.Acquire(ctx, key, time.Hour)
			if err != nil || !b.OK {
				t.Fatal(err)
			}
			fence = b.Fence
		}
		args := []any{lockKey, fenceKey, fence, true, newID(t), int64(60000)}
		if sql != legacy {
			args = append(args, lockstore.DefaultMaxInFlight, backend.BarrierPruneBatch)
		}
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		var plan []byte
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql, args...).Scan(&plan); err != nil {
			t.Fatalf("EXPLAIN: %v", err)
		}
		var out []struct {
			Plan map[string]any `json:"Plan"`
		}
		if err := json.Unmarshal(plan, &out); err != nil || len(out) != 1 {
			t.Fatalf("EXPLAIN output: %v", err)
		}
		var total float64
		var walk func(map[string]any)
		walk = func(p map[string]any) {
			if p["Relation Name"] == s.cfg.BarrierTable && p["Node Type"] != "ModifyTable" {
				n := 0.0
				for _, k := range []string{"Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"} {
					if v, ok := p[k].(float64); ok {
						n += v
					}
				}
				loops, _ := p["Actual Loops"].(float64)
				total += n * loops
			}
			if kids, ok := p["Plans"].([]any); ok {
				for _, k := range kids {
					if m, ok := k.(map[string]any); ok {
						walk(m)
					}
				}
			}
		}
		walk(out[0].Plan)
		if os.Getenv("FENCEGATE_SHOW_PLAN") != "" {
			var pretty string
			_ = tx.QueryRow(ctx, `EXPLAIN (ANALYZE, COSTS OFF) `+sql, args...).Scan(&pretty)
			rows, _ := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+sql, args...)
			for rows.Next() {
				var l string
				_ = rows.Scan(&l)
				t.Log(l)
			}
			rows.Close()
		}
		return total
	}
	for _, c := range []struct {
		what  string
		newer bool
	}{{"same fence", false}, {"newer fence (blocked)", true}} {
		small := rows(s.sql.barrier.admit, "small-"+c.what, 2000, c.newer)
		large := rows(s.sql.barrier.admit, "large-"+c.what, 16000, c.newer)
		lsmall := rows(legacy, "lsmall-"+c.what, 2000, c.newer)
		llarge := rows(legacy, "llarge-"+c.what, 16000, c.newer)
		t.Logf("%s: rows examined per Admit beside %d unexpired + 2,000 / 16,000 expired entries: %.0f / %.0f; legacy statement %.0f / %.0f",
			c.what, unexpired, small, large, lsmall, llarge)
		bound := func(x float64) float64 { return 1.2*x + 50 }
		if large > bound(small) {
			t.Errorf("%s: Admit examines %.0f rows beside 16,000 expired entries, %.0f beside 2,000: grows with them", c.what, large, small)
		}
		if llarge <= bound(lsmall) {
			t.Errorf("%s: the legacy statement examines %.0f / %.0f rows: the bound would not catch it", c.what, lsmall, llarge)
		}
	}
}

func newID(t *testing.T) string {
	t.Helper()
	id, err := lockstore.NewLockID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}
