// Package pgfence makes a PostgreSQL write and its fence comparison one
// atomic step: a write under a fence lower than one already committed for
// the same key is refused, by the database, in the same statement or
// transaction as the write. It is the commit half of fenceguard (which
// reads the fence the edge verified); it uses pgx/v5.
//
// Two shapes:
//
//   - Column: the resource's own row carries a fence column (bigint), and
//     one conditional UPDATE … SET …, fence = $f WHERE id = $id AND
//     (fence IS NULL OR fence <= $f) writes it.
//   - Table: a table of last fences per key, for resources that cannot
//     carry a column (several rows, another table's rows, files). Commit
//     claims the key's row (an upsert that only moves the fence up, and
//     that locks the row until the transaction ends) and runs the write in
//     the same transaction.
//
// Both allow a write under the fence already stored (a holder writes many
// times under one fence) and refuse only a lower one. RecipeSQL is the same
// rule as a trigger, for writers that are not Go.
//
// The statements are the *.sql files of this folder, with {{table}},
// {{id}}, {{fence}} and {{set}} replaced by quoted names (and the caller's
// SET list); @fencegate/guard (js/) runs the same files.
package pgfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/lockstore"
)

// Querier is what *pgx.Conn, *pgxpool.Pool and pgx.Tx share.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner starts transactions: *pgx.Conn and *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrNoRow: Column.Update found no row with the id (nothing was written).
var ErrNoRow = errors.New("pgfence: no row with that id")

// DefaultTable is the table of last fences per key that Table uses when
// its Name is empty.
const DefaultTable = "fencegate_resource_fences"

// StaleSQLState is the SQLSTATE the trigger of RecipeSQL raises for a write
// under a lower fence (IsStale recognises it); MissingSQLState the one for a
// write without a fence.
const (
	StaleSQLState   = "FG409"
	MissingSQLState = "FG428"
)

// RecipeSQL is the SQL-only recipe (docs/api.md prints it): a trigger
// function that refuses, atomically with the write, an INSERT without a
// fence and an UPDATE that would lower a row's fence column. Attach it to
// each table with
//
//	CREATE TRIGGER <table>_fence BEFORE INSERT OR UPDATE ON <table>
//	  FOR EACH ROW EXECUTE FUNCTION fencegate_refuse_stale();
//
//go:embed recipe.sql
var RecipeSQL string

// The statements, one file each; sqlText fills in their names.
var (
	//go:embed table_create.sql
	tableCreateSQL string
	//go:embed table_claim.sql
	tableClaimSQL string
	//go:embed table_stored.sql
	tableStoredSQL string
	//go:embed column_update.sql
	columnUpdateSQL string
	//go:embed column_stored.sql
	columnStoredSQL string
)

// sqlText fills a statement's {{name}} slots (quoted identifiers, or the
// program's own SET list) and drops the file's final newline.
func sqlText(stmt string, slots ...string) string {
	return strings.TrimSuffix(strings.NewReplacer(slots...).Replace(stmt), "\n")
}

// IsStale reports whether err is RecipeSQL's trigger refusing a write
// under a lower fence.
func IsStale(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == StaleSQLState
}

// parseFence reads a 15-digit fence (at least 1) as the bigint the tables
// store: a bigint compares numerically, so an unpadded value written by
// hand cannot sort wrongly, as it would in a text column.
func parseFence(fence string) (int64, error) {
	n, err := lockstore.ParseFence(fence)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("pgfence: fence %q: want 15 digits, at least 1", fence)
	}
	return n, nil
}

func formatFence(n int64) string { return fmt.Sprintf("%0*d", lockstore.FenceDigits, n) }

// ident quotes a possibly schema-qualified name ("app.orders").
func ident(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

// Table is a table of last fences per key: (key text primary key, fence
// bigint not null). Its zero value uses DefaultTable.
type Table struct {
	Name string
}

func (t Table) name() string {
	if t.Name == "" {
		return DefaultTable
	}
	return t.Name
}

// Create creates the table if it does not exist.
func (t Table) Create(ctx context.Context, q Querier) error {
	_, err := q.Exec(ctx, sqlText(tableCreateSQL, "{{table}}", ident(t.name())))
	if err != nil {
		return fmt.Errorf("pgfence: create %s: %w", t.name(), err)
	}
	return nil
}

// Claim moves key's stored fence up to fence, inside the caller's
// transaction tx, or reports that a higher fence is stored. It locks the
// key's row until tx ends, so the caller's writes in tx commit before any
// other claim on the key can be decided: write in tx after an applied
// Claim, and roll tx back when it is not applied.
func (t Table) Claim(ctx context.Context, tx Querier, key, fence string) (fenceguard.Result, error) {
	n, err := parseFence(fence)
	if err != nil {
		return fenceguard.Result{}, err
	}
	name := ident(t.name())
	// One statement decides: a new key inserts; an existing one moves
	// only up or stays (<=: writes under the stored fence are the same
	// holder's). ON CONFLICT DO UPDATE locks the row and evaluates the
	// WHERE against its latest committed version.
	var stored int64
	err = tx.QueryRow(ctx, sqlText(tableClaimSQL, "{{table}}", name), key, n).Scan(&stored)
	if err == nil {
		return fenceguard.Result{Applied: true, Fence: fence, Stored: formatFence(stored)}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fenceguard.Result{}, fmt.Errorf("pgfence: claim: %w", err)
	}
	if err := tx.QueryRow(ctx, sqlText(tableStoredSQL, "{{table}}", name), key).Scan(&stored); err != nil {
		return fenceguard.Result{}, fmt.Errorf("pgfence: read the stored fence: %w", err)
	}
	return fenceguard.Result{Fence: fence, Stored: formatFence(stored)}, nil
}

// Commit runs write in a transaction that first claims key under fence:
// when a higher fence is stored, write does not run and the result is not
// applied; otherwise write runs and the transaction commits, the fence and
// the write together. An error from write rolls everything back and is
// returned. The key should be fenceguard.Fence.Key (NFC).
func (t Table) Commit(ctx context.Context, db Beginner, key, fence string, write func(pgx.Tx) error) (fenceguard.Result, error) {
	if _, err := parseFence(fence); err != nil {
		return fenceguard.Result{}, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fenceguard.Result{}, fmt.Errorf("pgfence: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // no-op after Commit
	res, err := t.Claim(ctx, tx, key, fence)
	if err != nil || !res.Applied {
		return res, err
	}
	if err := write(tx); err != nil {
		return fenceguard.Result{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return fenceguard.Result{}, fmt.Errorf("pgfence: commit: %w", err)
	}
	return res, nil
}

// Column is a fence column (bigint, NULL for rows never written under a
// fence) on the resource's own table.
type Column struct {
	Table string // the table, optionally schema-qualified
	ID    string // the id column (default "id")
	Fence string // the fence column (default "fence")
}

// Update runs, as one statement,
//
//	UPDATE <Table> SET <set>, <Fence> = $1 WHERE <ID> = $2 AND (<Fence> IS NULL OR <Fence> <= $1)
//
// set is SQL the program writes (never request input), with its own
// parameters from $3 on, passed as args. It returns applied, or refused as
// stale with the stored fence, or ErrNoRow.
func (c Column) Update(ctx context.Context, q Querier, id any, fence string, set string, args ...any) (fenceguard.Result, error) {
	n, err := parseFence(fence)
	if err != nil {
		return fenceguard.Result{}, err
	}
	idc, fc := c.ID, c.Fence
	if idc == "" {
		idc = "id"
	}
	if fc == "" {
		fc = "fence"
	}
	tbl, idc, fc := ident(c.Table), ident(idc), ident(fc)
	tag, err := q.Exec(ctx, sqlText(columnUpdateSQL, "{{table}}", tbl, "{{set}}", set, "{{fence}}", fc, "{{id}}", idc),
		append([]any{n, id}, args...)...)
	if err != nil {
		return fenceguard.Result{}, fmt.Errorf("pgfence: update: %w", err)
	}
	if tag.RowsAffected() > 0 {
		return fenceguard.Result{Applied: true, Fence: fence, Stored: fence}, nil
	}
	// Not applied: no row, or a higher fence. This read only names the
	// stored fence; the UPDATE above already decided.
	var stored *int64
	if err := q.QueryRow(ctx, sqlText(columnStoredSQL, "{{table}}", tbl, "{{fence}}", fc, "{{id}}", idc), id).Scan(&stored); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fenceguard.Result{}, ErrNoRow
		}
		return fenceguard.Result{}, fmt.Errorf("pgfence: read the stored fence: %w", err)
	}
	res := fenceguard.Result{Fence: fence}
	if stored != nil {
		res.Stored = formatFence(*stored)
	}
	return res, nil
}
