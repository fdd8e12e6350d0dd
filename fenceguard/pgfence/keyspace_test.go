package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fenceguard/pgfence"
)

// A fenced write under test: write key's value under fc, and read the
// fence stored for key ("" when none).
type fencedStore struct {
	write  func(ctx context.Context, key, fc, value string) (bool, error)
	stored func(ctx context.Context, key string) string
}

// keyNames are keys chosen to reach each other's fences if the layout let
// them: the suffix an older Redis helper used, the Redis helper's prefix,
// SQL-ish spellings.
func keyNames() []string {
	var keys []string
	for _, b := range []string{"orders/42", "{orders/43}"} {
		keys = append(keys, b, b+":fence", b+":fence:fence", "fencegate.fence:"+b, b+"'", b+" ")
	}
	return keys
}

// pgKeyspaceViolation: random fenced writes over keyNames with values
// that look like fences; the first write that changed another key's
// stored fence, or lowered one, or was decided against the wrong fence.
func pgKeyspaceViolation(t *testing.T, s fencedStore, seed uint64) string {
	t.Helper()
	ctx := context.Background()
	keys := keyNames()
	values := []string{"1", fence(1), "garbage", fence(999999999999999)}
	rng := mrand.New(mrand.NewPCG(seed, 11))
	model := map[string]string{}
	for i := range 200 {
		k := keys[rng.IntN(len(keys))]
		fc := fence(int64(1 + rng.IntN(50)))
		applied, err := s.write(ctx, k, fc, values[rng.IntN(len(values))])
		if err != nil {
			return fmt.Sprintf("write %d: %q under %s: %v", i, k, fc, err)
		}
		if want := fc >= model[k]; applied != want {
			return fmt.Sprintf("write %d: %q under %s with %q stored: applied %v", i, k, fc, model[k], applied)
		}
		if applied {
			model[k] = fc
		}
		for _, o := range keys {
			if got := s.stored(ctx, o); got != model[o] {
				return fmt.Sprintf("write %d: %q under %s left %q's stored fence %q, want %q", i, k, fc, o, got, model[o])
			}
		}
	}
	return ""
}

func readFence(t *testing.T, p *pgxpool.Pool, q string, arg any) string {
	var n *int64
	err := p.QueryRow(context.Background(), q, arg).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && n == nil {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return fence(*n)
}

// TestFenceKeyspace (#26 item 7, for pgfence): in the table form the fences
// are rows keyed by the key itself, and in the column form each row carries
// its own, so no write to one key (or row) changes another's stored fence
// and a stored fence only rises. The same check catches a layout that
// keeps fences beside the values under key + ":fence" (redisfence's old
// default, in SQL).
func TestFenceKeyspace(t *testing.T) {
	p := pool(t)
	ctx := context.Background()
	n := ns()
	tbl := pgfence.Table{Name: n + "_fences"}
	col := pgfence.Column{Table: n + "_rows"}
	for _, q := range []string{
		`CREATE TABLE ` + n + `_values (key text PRIMARY KEY, value text)`,
		`CREATE TABLE ` + n + `_rows (id text PRIMARY KEY, value text, fence bigint)`,
		`CREATE TABLE ` + n + `_kv (k text PRIMARY KEY, v text NOT NULL)`,
	} {
		if _, err := p.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tbl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = p.Exec(context.Background(), `DROP TABLE IF EXISTS `+n+`_values, `+n+`_rows, `+n+`_kv, `+tbl.Name)
	})
	for _, k := range keyNames() {
		if _, err := p.Exec(ctx, `INSERT INTO `+n+`_rows (id) VALUES ($1)`, k); err != nil {
			t.Fatal(err)
		}
	}
	table := fencedStore{
		write: func(ctx context.Context, key, fc, value string) (bool, error) {
			res, err := tbl.Commit(ctx, p, key, fc, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+n+`_values VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, key, value)
				return err
			})
			return res.Applied, err
		},
		stored: func(ctx context.Context, key string) string {
			return readFence(t, p, `SELECT fence FROM `+tbl.Name+` WHERE key = $1`, key)
		},
	}
	column := fencedStore{
		write: func(ctx context.Context, key, fc, value string) (bool, error) {
			res, err := col.Update(ctx, p, key, fc, `value = $3`, value)
			return res.Applied, err
		},
		stored: func(ctx context.Context, key string) string {
			return readFence(t, p, `SELECT fence FROM `+col.Table+` WHERE id = $1`, key)
		},
	}
	// The broken layout: one key-value table holding values at key and
	// fences at key || ':fence', a conditional upsert per write.
	kv := fencedStore{
		write: func(ctx context.Context, key, fc, value string) (bool, error) {
			tx, err := p.Begin(ctx)
			if err != nil {
				return false, err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var one int
			err = tx.QueryRow(ctx, `INSERT INTO `+n+`_kv AS t VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v
				WHERE t.v <= EXCLUDED.v RETURNING 1`, key+":fence", fc).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+n+`_kv VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v`, key, value); err != nil {
				return false, err
			}
			return true, tx.Commit(ctx)
		},
		stored: func(ctx context.Context, key string) string {
			var v string
			if err := p.QueryRow(ctx, `SELECT v FROM `+n+`_kv WHERE k = $1`, key+":fence").Scan(&v); err != nil {
				return ""
			}
			return v
		},
	}
	for seed := range uint64(2) {
		for name, s := range map[string]fencedStore{"Table": table, "Column": column} {
			if v := pgKeyspaceViolation(t, s, seed); v != "" {
				t.Errorf("%s, seed %d: %s", name, seed, v)
			}
		}
		if v := pgKeyspaceViolation(t, kv, seed); v == "" {
			t.Errorf("seed %d: fences kept at key || ':fence' beside the values passed: the check cannot fail", seed)
		} else {
			t.Logf("fences at key || ':fence', seed %d: %s", seed, v)
		}
		_, _ = p.Exec(ctx, `TRUNCATE `+tbl.Name+`, `+n+`_kv`)
		_, _ = p.Exec(ctx, `UPDATE `+n+`_rows SET fence = NULL`)
	}
}
