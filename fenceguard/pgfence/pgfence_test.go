package pgfence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fenceguard/pgfence"
	"github.com/fencegate/fencegate/internal/testutil"
)

// pool connects to DATABASE_URL; a missing database fails the test (make
// test and scripts/testenv start one), it never skips.
func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testutil.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 40
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func ns() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "pgfence_" + hex.EncodeToString(b)
}

func fence(n int64) string { return fmt.Sprintf("%015d", n) }

// fixture is a data table (one row per key: its history of committed
// fences, appended in each write's own statement, so the array is the
// exact commit order) and a fence table, both dropped at the end.
type fixture struct {
	p      *pgxpool.Pool
	data   string
	fences pgfence.Table
	keys   int
}

func newFixture(t *testing.T, keys int) *fixture {
	t.Helper()
	p := pool(t)
	n := ns()
	f := &fixture{p: p, data: n + "_data", fences: pgfence.Table{Name: n + "_fences"}, keys: keys}
	ctx := context.Background()
	if err := f.fences.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, `CREATE TABLE `+f.data+` (id int PRIMARY KEY, history bigint[] NOT NULL DEFAULT '{}', fence bigint)`); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if _, err := p.Exec(ctx, `INSERT INTO `+f.data+` (id) VALUES ($1)`, k); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = p.Exec(context.Background(), `DROP TABLE IF EXISTS `+f.data+`, `+f.fences.Name)
	})
	return f
}

// inversions counts, over every row's history, commits under a fence lower
// than one that row had already committed.
func (f *fixture) inversions(t *testing.T) (commits, inversions int) {
	t.Helper()
	rows, err := f.p.Query(context.Background(), `SELECT history FROM `+f.data)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var h []int64
		if err := rows.Scan(&h); err != nil {
			t.Fatal(err)
		}
		var top int64
		for _, x := range h {
			commits++
			if x < top {
				inversions++
			}
			top = max(top, x)
		}
	}
	return commits, inversions
}

// committer is one way of committing a write of key k under fence,
// delayed by hold between the edge's check and the commit: it reports
// whether the write was applied.
type committer func(ctx context.Context, f *fixture, k int, fence string, hold time.Duration) (bool, error)

func appendSQL(f *fixture) string {
	return `UPDATE ` + f.data + ` SET history = history || $1::bigint WHERE id = $2`
}

var committers = map[string]committer{
	// The helper: claim the key in the fence table, write, commit.
	"Table.Commit": func(ctx context.Context, f *fixture, k int, fc string, hold time.Duration) (bool, error) {
		n, _ := parse(fc)
		res, err := f.fences.Commit(ctx, f.p, fmt.Sprintf("k/%d", k), fc, func(tx pgx.Tx) error {
			time.Sleep(hold) // a slow write: the claim holds the key meanwhile
			_, err := tx.Exec(ctx, appendSQL(f), n, k)
			return err
		})
		return res.Applied, err
	},
	// The helper: the row's own fence column, one statement.
	"Column.Update": func(ctx context.Context, f *fixture, k int, fc string, hold time.Duration) (bool, error) {
		n, _ := parse(fc)
		time.Sleep(hold)
		res, err := pgfence.Column{Table: f.data}.Update(ctx, f.p, k, fc, `history = history || $3::bigint`, n)
		return res.Applied, err
	},
}

// brokenCommitters are what an API does without the helper; the property
// test must catch each.
var brokenCommitters = map[string]committer{
	"no comparison": func(ctx context.Context, f *fixture, k int, fc string, hold time.Duration) (bool, error) {
		n, _ := parse(fc)
		time.Sleep(hold)
		_, err := f.p.Exec(ctx, appendSQL(f), n, k)
		return true, err
	},
	"compare, then write in another statement": func(ctx context.Context, f *fixture, k int, fc string, hold time.Duration) (bool, error) {
		n, _ := parse(fc)
		var stored *int64
		if err := f.p.QueryRow(ctx, `SELECT fence FROM `+f.data+` WHERE id = $1`, k).Scan(&stored); err != nil {
			return false, err
		}
		if stored != nil && *stored > n {
			return false, nil
		}
		time.Sleep(hold)
		_, err := f.p.Exec(ctx, `UPDATE `+f.data+` SET history = history || $1::bigint, fence = $1 WHERE id = $2`, n, k)
		return true, err
	},
}

func parse(fc string) (int64, error) {
	var n int64
	_, err := fmt.Sscanf(fc, "%d", &n)
	return n, err
}

// run is the workload: the current fence of each key jumps up by 1–3 every
// 15–40 ms (a handover; fences are not consecutive); 24 writers take a
// key's current fence, hold the write 0–30 ms (the time between the edge's
// check and the commit), then commit. It returns the counts.
func run(t *testing.T, f *fixture, c committer, d time.Duration) (applied, refused int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cur := make([]atomic.Int64, f.keys)
	for k := range cur {
		cur[k].Store(1)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(time.Duration(15+mrand.IntN(25)) * time.Millisecond)
			cur[mrand.IntN(f.keys)].Add(int64(1 + mrand.IntN(3)))
		}
	}()
	var ap, rf atomic.Int64
	var errs atomic.Int64
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := mrand.IntN(f.keys)
				ok, err := c(context.Background(), f, k, fence(cur[k].Load()), time.Duration(mrand.IntN(31))*time.Millisecond)
				switch {
				case err != nil:
					if errs.Add(1) < 5 {
						t.Errorf("commit: %v", err)
					}
				case ok:
					ap.Add(1)
				default:
					rf.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ap.Load(), rf.Load()
}

// TestCommitsFollowFenceOrder: with the helper, no row ever commits under a
// fence lower than one it committed before, under concurrent writers
// whose commits land 0–30 ms after their check; without it (the broken
// committers), the same workload commits out of fence order.
func TestCommitsFollowFenceOrder(t *testing.T) {
	for name, c := range committers {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 3)
			applied, refused := run(t, f, c, 3*time.Second)
			commits, inv := f.inversions(t)
			t.Logf("%s: %d applied, %d refused stale; %d commits, %d out of fence order", name, applied, refused, commits, inv)
			if inv != 0 {
				t.Errorf("%d commits under a fence lower than one already committed", inv)
			}
			if commits != int(applied) || refused == 0 || applied < 100 {
				t.Errorf("workload: %d applied (%d commits recorded), %d refused; want both, and every applied write recorded", applied, commits, refused)
			}
		})
	}
	for name, c := range brokenCommitters {
		t.Run("broken/"+name, func(t *testing.T) {
			f := newFixture(t, 3)
			run(t, f, c, 3*time.Second)
			commits, inv := f.inversions(t)
			t.Logf("without the helper (%s): %d commits, %d out of fence order", name, commits, inv)
			if inv == 0 {
				t.Errorf("%s: no commit out of fence order in %d: the workload cannot tell the helper from its absence", name, commits)
			}
		})
	}
}

// semantics runs the rule's cases through commit (on a fresh key) and
// returns what went wrong.
func semantics(commit func(string) (string, bool)) []string {
	var errs []string
	for _, c := range []struct {
		fence, stored string
		applied       bool
	}{
		{fence(7), fence(7), true},
		{fence(7), fence(7), true}, // one holder, several writes
		{fence(6), fence(7), false},
		{fence(1), fence(7), false},
		{fence(1000), fence(1000), true}, // fences jump
		{fence(999), fence(1000), false},
	} {
		if stored, applied := commit(c.fence); stored != c.stored || applied != c.applied {
			errs = append(errs, fmt.Sprintf("commit under %s: applied %v, stored %s; want %v, %s", c.fence, applied, stored, c.applied, c.stored))
		}
	}
	return errs
}

// TestSemantics: the same fence again applies, a lower one is refused
// naming the stored fence, a higher one (not consecutive) applies.
func TestSemantics(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	commitT := func(fc string) (string, bool) {
		res, err := f.fences.Commit(ctx, f.p, "k/0", fc, func(pgx.Tx) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if res.Fence != fc || res.Stale() == res.Applied {
			t.Fatalf("result %+v", res)
		}
		return res.Stored, res.Applied
	}
	commitC := func(fc string) (string, bool) {
		res, err := pgfence.Column{Table: f.data}.Update(ctx, f.p, 0, fc, `history = history`)
		if err != nil {
			t.Fatal(err)
		}
		return res.Stored, res.Applied
	}
	for name, commit := range map[string]func(string) (string, bool){"Table": commitT, "Column": commitC} {
		for _, e := range semantics(commit) {
			t.Errorf("%s: %s", name, e)
		}
	}
	// The cases catch a strict comparison (the holder's second write
	// under its own fence refused).
	strict := func(fc string) (string, bool) {
		n, _ := parse(fc)
		var stored int64
		err := f.p.QueryRow(ctx, `INSERT INTO `+f.fences.Name+` AS t (key, fence) VALUES ('strict', $1)
			ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence WHERE t.fence < EXCLUDED.fence RETURNING fence`, n).Scan(&stored)
		if err == nil {
			return fence(stored), true
		}
		_ = f.p.QueryRow(ctx, `SELECT fence FROM `+f.fences.Name+` WHERE key = 'strict'`).Scan(&stored)
		return fence(stored), false
	}
	if len(semantics(strict)) == 0 {
		t.Error("the semantics cases pass a strict < comparison")
	}
	// A write that fails rolls the fence back with it.
	boom := errors.New("boom")
	if _, err := f.fences.Commit(ctx, f.p, "k/0", fence(2000), func(pgx.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failing write: %v", err)
	}
	if stored, applied := commitT(fence(1500)); !applied || stored != fence(1500) {
		t.Errorf("after a failed write under 2000, 1500 applied %v (stored %s): the failed write's fence stayed", applied, stored)
	}
	// Bad input never reaches the database.
	for _, bad := range []string{"", "7", "000000000000000", "0000000000000a7", "1000000000000000"} {
		if _, err := f.fences.Commit(ctx, f.p, "k/0", bad, func(pgx.Tx) error { t.Fatal("wrote"); return nil }); err == nil {
			t.Errorf("fence %q accepted", bad)
		}
	}
	if _, err := (pgfence.Column{Table: f.data}).Update(ctx, f.p, 99, fence(1), `history = history`); !errors.Is(err, pgfence.ErrNoRow) {
		t.Errorf("missing row: %v, want ErrNoRow", err)
	}
}

// TestRecipe runs the SQL-only recipe: concurrent plain UPDATEs that set
// the fence column never commit out of fence order, a lower fence is
// SQLSTATE FG409 (IsStale), a write without one FG428; without the trigger
// the same workload does commit out of order.
func TestRecipe(t *testing.T) {
	p := pool(t)
	ctx := context.Background()
	if _, err := p.Exec(ctx, pgfence.RecipeSQL); err != nil {
		t.Fatalf("RecipeSQL: %v", err)
	}
	plain := func(ctx context.Context, f *fixture, k int, fc string, hold time.Duration) (bool, error) {
		n, _ := parse(fc)
		time.Sleep(hold)
		_, err := f.p.Exec(ctx, `UPDATE `+f.data+` SET history = history || $1::bigint, fence = $1 WHERE id = $2`, n, k)
		if pgfence.IsStale(err) {
			return false, nil
		}
		return err == nil, err
	}
	for _, trigger := range []bool{true, false} {
		f := newFixture(t, 3)
		if trigger {
			if _, err := p.Exec(ctx, `CREATE TRIGGER fence BEFORE INSERT OR UPDATE ON `+f.data+` FOR EACH ROW EXECUTE FUNCTION fencegate_refuse_stale()`); err != nil {
				t.Fatal(err)
			}
			// The fixture's rows were inserted before the trigger.
			_, err := p.Exec(ctx, `INSERT INTO `+f.data+` (id) VALUES (99)`)
			if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != pgfence.MissingSQLState {
				t.Errorf("insert without a fence: %v, want SQLSTATE %s", err, pgfence.MissingSQLState)
			}
		}
		applied, refused := run(t, f, plain, 3*time.Second)
		commits, inv := f.inversions(t)
		t.Logf("recipe trigger %v: %d applied, %d refused (FG409); %d commits, %d out of fence order", trigger, applied, refused, commits, inv)
		if trigger && (inv != 0 || refused == 0) {
			t.Errorf("with the trigger: %d out of order, %d refused; want 0 and some", inv, refused)
		}
		if !trigger && inv == 0 {
			t.Errorf("without the trigger no commit went out of order: the workload proves nothing")
		}
	}
}
