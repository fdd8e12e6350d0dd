package postgres

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Default table names: SyncGuard's, so a fleet that already locks with the
// SyncGuard TypeScript library shares locks and fence counters with us.
const (
	DefaultTable      = "syncguard_locks"
	DefaultFenceTable = "syncguard_fence_counters"
	DefaultAuditTable = "syncguard_audit"
	// DefaultBarrierTable holds the write barrier's in-flight entries. It
	// is fencegate's own (SyncGuard has no barrier), hence the name.
	DefaultBarrierTable = "fencegate_write_barrier"
)

// DefaultMaxConns is the pool size when neither Config.MaxConns nor the DSN's
// pool_max_conns sets one. pgxpool's own default (max(4, NumCPU)) is too
// small for a gateway whose every edge check is a query.
const DefaultMaxConns = 16

// DefaultConnectTimeout bounds a dial when the DSN has no connect_timeout, so
// a black-holed server costs a caller without a deadline seconds, not minutes.
const DefaultConnectTimeout = 5 * time.Second

// maxTableNameLen keeps "idx_<table>_lock_id" (the longest derived index name)
// within PostgreSQL's 63-byte identifier limit; a longer table name would get
// index names silently truncated, and two truncated names could collide so
// that CREATE INDEX IF NOT EXISTS skips an index.
const maxTableNameLen = 63 - len("idx_") - len("_lock_id")

// tableNameRE admits lower-case unquoted SQL identifiers only. Lower case
// because SyncGuard interpolates the names unquoted (PostgreSQL folds them to
// lower case) and we quote them: both spell the same table only when the
// name is already lower case.
var tableNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Config configures the PostgreSQL store. The zero value (plus a DSN) is
// usable: SyncGuard's table names, tables created on Open, default audit
// retention.
type Config struct {
	// DSN is a pgx connection string: a postgres:// URL or key=value pairs,
	// without fencegate's own parameters (ParseURL strips those).
	DSN string
	// Table is the lock table; default "syncguard_locks".
	Table string
	// FenceTable is the fence counter table; default
	// "syncguard_fence_counters". Its rows are never deleted.
	FenceTable string
	// AuditTable holds audit events; default "syncguard_audit".
	AuditTable string
	// BarrierTable holds the write barrier's in-flight writes; default
	// "fencegate_write_barrier".
	BarrierTable string
	// DisableAutoMigrate stops Open from creating missing tables and indexes,
	// for teams that create schema ahead of time (fencegate migrate).
	DisableAutoMigrate bool
	// MaxConns caps the connection pool; 0 means the DSN's pool_max_conns,
	// or DefaultMaxConns.
	MaxConns int32
	// FenceFloor picks the next fence: the zero value, FloorClock, keeps
	// fences growing with the server's clock so that a promoted
	// asynchronous standby or a restored backup cannot reissue one
	// (backend.FloorLeadMax); FloorOff issues consecutive fences and can.
	FenceFloor backend.FenceFloor
	// AuditRetention bounds the audit table; zero fields take lockstore's defaults.
	AuditRetention lockstore.AuditRetention
	// Logger receives warnings (fence past the warning level); nil means
	// slog.Default(). It never receives a raw key or lockId.
	Logger *slog.Logger
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.FenceTable == "" {
		c.FenceTable = DefaultFenceTable
	}
	if c.AuditTable == "" {
		c.AuditTable = DefaultAuditTable
	}
	if c.BarrierTable == "" {
		c.BarrierTable = DefaultBarrierTable
	}
	c.AuditRetention = c.AuditRetention.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks a defaulted Config. Table names end up in SQL text, so this
// is the injection guard as well as the spec's "tables must be distinct" rule
// (a fence table that is also the lock table would have its counters deleted
// by release).
func (c Config) validate() error {
	if strings.TrimSpace(c.DSN) == "" {
		return lockstore.Errorf(lockstore.InvalidArgument, "config", "postgres: DSN is empty")
	}
	for _, t := range []struct{ what, name string }{
		{"table", c.Table}, {"fenceTable", c.FenceTable}, {"auditTable", c.AuditTable},
		{"barrierTable", c.BarrierTable},
	} {
		if err := validateTableName(t.name); err != nil {
			return lockstore.Errorf(lockstore.InvalidArgument, "config", "postgres: %s: %v", t.what, err)
		}
	}
	if c.Table == c.FenceTable {
		return lockstore.Errorf(lockstore.InvalidArgument, "config",
			"postgres: fence counter table must differ from lock table (both %q)", c.Table)
	}
	if c.AuditTable == c.Table || c.AuditTable == c.FenceTable {
		return lockstore.Errorf(lockstore.InvalidArgument, "config",
			"postgres: audit table %q must differ from the lock and fence tables", c.AuditTable)
	}
	if c.BarrierTable == c.Table || c.BarrierTable == c.FenceTable || c.BarrierTable == c.AuditTable {
		return lockstore.Errorf(lockstore.InvalidArgument, "config",
			"postgres: barrier table %q must differ from the lock, fence and audit tables", c.BarrierTable)
	}
	if c.MaxConns < 0 {
		return lockstore.Errorf(lockstore.InvalidArgument, "config", "postgres: MaxConns must not be negative")
	}
	return nil
}

// validateTableName reports why name cannot be a table name, or nil.
func validateTableName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("table name is empty")
	case len(name) > maxTableNameLen:
		return fmt.Errorf("table name %q is %d bytes; the limit is %d (derived index names must fit PostgreSQL's 63)",
			name, len(name), maxTableNameLen)
	case !tableNameRE.MatchString(name):
		return fmt.Errorf("table name %q must be a lower-case SQL identifier: [a-z_][a-z0-9_]*", name)
	}
	return nil
}

// URL query parameters that belong to fencegate, not to pgx. ParseURL
// removes them before the DSN reaches pgx, which would otherwise send them
// to the server as run-time parameters and fail the connection.
const (
	paramTable          = "table"
	paramFenceTable     = "fenceTable"
	paramAuditTable     = "auditTable"
	paramBarrierTable   = "barrierTable"
	paramAutoMigrate    = "autoMigrate"
	paramAuditMaxEvents = "auditMaxEvents"
	paramAuditMaxAge    = "auditMaxAge"
)

// ParseURL parses a store URL: a pgx DSN with scheme postgres:// or
// postgresql://, plus these optional fencegate query parameters:
//
//	table=NAME          lock table (default syncguard_locks)
//	fenceTable=NAME     fence counter table (default syncguard_fence_counters)
//	auditTable=NAME     audit table (default syncguard_audit)
//	barrierTable=NAME   write barrier table (default fencegate_write_barrier)
//	autoMigrate=BOOL    create missing tables on Open (default true)
//	auditMaxEvents=N    audit retention by count
//	auditMaxAge=DUR     audit retention by age (Go duration, e.g. 168h)
//	fenceFloor=clock|off the next fence's rule (Config.FenceFloor; default clock)
//
// Everything else (sslmode, pool_max_conns, connect_timeout, …) is left in
// Config.DSN for pgx. Errors never echo the URL: it may hold a password.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the input, password included.
		return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config", "postgres: store URL does not parse")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config",
			"postgres: store URL scheme must be postgres:// or postgresql://, got %q", u.Scheme)
	}
	q := u.Query()
	var c Config
	take := func(name string) (string, bool) {
		v, ok := q[name]
		q.Del(name)
		if !ok || len(v) == 0 {
			return "", false
		}
		return v[len(v)-1], true
	}
	if v, ok := take(paramTable); ok {
		c.Table = v
	}
	if v, ok := take(paramFenceTable); ok {
		c.FenceTable = v
	}
	if v, ok := take(paramAuditTable); ok {
		c.AuditTable = v
	}
	if v, ok := take(paramBarrierTable); ok {
		c.BarrierTable = v
	}
	if v, ok := take(paramAutoMigrate); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config",
				"postgres: %s=%q is not a boolean", paramAutoMigrate, v)
		}
		c.DisableAutoMigrate = !b
	}
	if v, ok := take(paramAuditMaxEvents); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config",
				"postgres: %s=%q must be a positive integer", paramAuditMaxEvents, v)
		}
		c.AuditRetention.MaxEvents = n
	}
	if v, ok := take(paramAuditMaxAge); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config",
				"postgres: %s=%q must be a positive duration such as 168h", paramAuditMaxAge, v)
		}
		c.AuditRetention.MaxAge = d
	}
	if n := len(q[backend.FenceFloorParam]); n > 1 {
		return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config", "postgres: %s given %d times", backend.FenceFloorParam, n)
	}
	if v, ok := take(backend.FenceFloorParam); ok {
		f, err := backend.ParseFenceFloor(v)
		if err != nil {
			return Config{}, err
		}
		c.FenceFloor = f
	}
	u.RawQuery = q.Encode()
	c.DSN = u.String()
	if err := c.withDefaults().validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
