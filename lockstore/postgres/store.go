package postgres

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Store is the PostgreSQL lock store. It implements lockstore.Store,
// lockstore.AuditLog and lockstore.HeldCounter. Every operation is a single
// network round trip on a warm connection (see the per-operation comments),
// and the server's now() is the time authority.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
	sql  statements

	// auditSincePrune counts appended audit events since the last
	// retention pass; see AppendAudit.
	auditSincePrune atomic.Int64

	closeOnce sync.Once
	closed    atomic.Bool
}

// Interface guards.
var (
	_ lockstore.Store       = (*Store)(nil)
	_ lockstore.AuditLog    = (*Store)(nil)
	_ lockstore.HeldCounter = (*Store)(nil)
)

// Open connects to PostgreSQL, checks the connection with a ping and, unless
// cfg.DisableAutoMigrate, creates missing tables and indexes. The returned
// store owns a connection pool; Close it.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := lockstore.ContextError(ctx, "open"); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, errBadDSN("open")
	}
	switch {
	case cfg.MaxConns > 0:
		pcfg.MaxConns = cfg.MaxConns
	case !strings.Contains(cfg.DSN, "pool_max_conns"):
		pcfg.MaxConns = DefaultMaxConns
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, classify(ctx, "open", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, classify(ctx, "open", err)
	}
	if !cfg.DisableAutoMigrate {
		if err := migrate(ctx, pool, cfg); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return &Store{pool: pool, cfg: cfg, log: cfg.Logger.With("backend", "postgres"), sql: buildStatements(cfg)}, nil
}

// errBadDSN does not carry pgx's parse error: its text quotes the DSN, and
// the password redaction in it is best effort.
func errBadDSN(op string) error {
	return lockstore.Errorf(lockstore.InvalidArgument, op,
		"postgres: DSN does not parse (expected a postgres:// URL or key=value pairs)")
}

// Capabilities reports PostgreSQL on server time (now()).
func (s *Store) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "postgres", TimeAuthority: lockstore.ServerTime}
}

// Ping checks that PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.begin(ctx, "ping"); err != nil {
		return err
	}
	return classify(ctx, "ping", s.pool.Ping(ctx))
}

// Close closes the pool. It is idempotent; locks are not released.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.pool.Close()
	})
	return nil
}

// checkOpen follows the lockstore precheck (backend.PrecheckKey and
// friends) of every operation: a closed store fails before any I/O. It is
// ServiceUnavailable, as on the other backends: during shutdown, callers
// still in flight see the store as gone, which is what it is.
func (s *Store) checkOpen(op string) error {
	if s.closed.Load() {
		return lockstore.Errorf(lockstore.ServiceUnavailable, op, "postgres: store is closed")
	}
	return nil
}

// begin is the preamble of an operation without arguments to validate: a
// closed store or a dead context fails before any I/O.
func (s *Store) begin(ctx context.Context, op string) error {
	if err := s.checkOpen(op); err != nil {
		return err
	}
	if err := lockstore.ContextError(ctx, op); err != nil {
		return err
	}
	return nil
}

// storageKeys derives the lock row key and the fence counter key of a
// normalised user key: makeStorageKey("", key, 1700, 0) and the two-step
// fence key (docs/design.md, "Backends"). No prefix: the tables are the namespace,
// and because lock rows and counters live in different tables a user key
// spelled "fence:…" cannot collide with another key's counter. A key with
// a NUL byte is refused as input: PostgreSQL text cannot hold one.
func storageKeys(normKey string) (lockKey, fenceKey string, err error) {
	if strings.IndexByte(normKey, 0) >= 0 {
		return "", "", lockstore.BadInputf("PostgreSQL keys cannot contain NUL bytes")
	}
	lockKey, err = backend.MakeStorageKey("", normKey, backend.PostgresKeyLimit, 0)
	if err != nil {
		return "", "", err
	}
	fenceKey, err = backend.FenceStorageKey("", lockKey, backend.PostgresKeyLimit, 0)
	if err != nil {
		return "", "", err
	}
	return lockKey, fenceKey, nil
}
