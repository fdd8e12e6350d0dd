package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lockstore"
)

// migrateLock takes the advisory lock that serialises concurrent migrations
// (several gateways starting at once): CREATE TABLE IF NOT EXISTS is not
// safe against itself and can fail with a unique violation on pg_type. The
// two-int4 form lives in a key space apart from the single-bigint locks that
// acquire takes, so no user key can ever contend with a migration.
const migrateLock = `SELECT pg_advisory_xact_lock(hashtext('fencegate'), hashtext('migrate'))`

// schemaStatements returns the DDL for cfg's tables, idempotent throughout.
//
// The lock and fence tables are SyncGuard's byte for byte (docs/design.md, "Backends",
// and SyncGuard's setupSchema), including the index names idx_<table>_lock_id
// and idx_<table>_expires, so either tool's migration finds the other's
// objects. The fence table keeps SyncGuard's nullable key_debug column: its
// acquire inserts into it, so a table without it would break SyncGuard
// clients sharing the tables. fencegate never writes it.
func schemaStatements(cfg Config) []string {
	locks := ident(cfg.Table)
	fences := ident(cfg.FenceTable)
	audit := ident(cfg.AuditTable)
	barrier := ident(cfg.BarrierTable)
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + locks + ` (
			key TEXT PRIMARY KEY,
			lock_id TEXT NOT NULL,
			expires_at_ms BIGINT NOT NULL,
			acquired_at_ms BIGINT NOT NULL,
			fence TEXT NOT NULL,
			user_key TEXT NOT NULL
		)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS ` + ident("idx_"+cfg.Table+"_lock_id") + ` ON ` + locks + ` (lock_id)`,
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+cfg.Table+"_expires") + ` ON ` + locks + ` (expires_at_ms)`,
		`CREATE TABLE IF NOT EXISTS ` + fences + ` (
			fence_key TEXT PRIMARY KEY,
			fence BIGINT NOT NULL DEFAULT 0,
			key_debug TEXT
		)`,
		`CREATE TABLE IF NOT EXISTS ` + audit + ` (
			id BIGSERIAL PRIMARY KEY,
			time_ms BIGINT NOT NULL,
			key_hash TEXT NOT NULL,
			event JSONB NOT NULL
		)`,
		// Per-key audit queries, newest first.
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+cfg.AuditTable+"_key_time") + ` ON ` + audit + ` (key_hash, time_ms)`,
		// Unfiltered audit queries and age-based retention.
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+cfg.AuditTable+"_time") + ` ON ` + audit + ` (time_ms)`,
		// The retention class (lockstore.AuditInput when true), so each
		// class is trimmed to its own count. Added in place to tables
		// created before it; the constant default makes that instant.
		`ALTER TABLE ` + audit + ` ADD COLUMN IF NOT EXISTS input BOOLEAN NOT NULL DEFAULT false`,
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+cfg.AuditTable+"_class") + ` ON ` + audit + ` (input, id)`,
		// The write barrier's in-flight writes (barrier.go); fencegate's own.
		`CREATE TABLE IF NOT EXISTS ` + barrier + ` (
			key TEXT NOT NULL,
			write_id TEXT NOT NULL,
			fence TEXT NOT NULL,
			deadline_ms BIGINT NOT NULL,
			PRIMARY KEY (key, write_id)
		)`,
		// SweepBarrier finds expired entries of any key by deadline.
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+cfg.BarrierTable+"_deadline") + ` ON ` + barrier + ` (deadline_ms)`,
		// Admit reaches a key's unfinished entries (and its expired ones,
		// to prune a batch) by deadline, without visiting the others.
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+cfg.BarrierTable+"_key_deadline") + ` ON ` + barrier + ` (key, deadline_ms)`,
	}
}

// ident quotes a validated name as an SQL identifier.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// Migrate creates the tables and indexes cfg names, if missing, in one
// transaction. It is idempotent and safe to run from several processes at
// once; `fencegate migrate` calls it for teams that create schema ahead of
// time and open the store with autoMigrate off. It never drops or rewrites
// anything, so it is safe against tables SyncGuard created.
func Migrate(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := lockstore.ContextError(ctx, "migrate"); err != nil {
		return err
	}
	pcfg, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return errBadDSN("migrate")
	}
	if pcfg.ConnectTimeout == 0 {
		pcfg.ConnectTimeout = DefaultConnectTimeout
	}
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return classify(ctx, "migrate", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrate(ctx, conn, cfg)
}

// execer is what migrate needs of a connection or a pool.
type execer interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

func migrate(ctx context.Context, db execer, cfg Config) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrateLock); err != nil {
			return err
		}
		for _, stmt := range schemaStatements(cfg) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", firstLine(stmt), err)
			}
		}
		return nil
	})
	return classify(ctx, "migrate", err)
}

// firstLine names a DDL statement in an error without its column list.
func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '(' {
			return s[:i]
		}
	}
	return s
}
