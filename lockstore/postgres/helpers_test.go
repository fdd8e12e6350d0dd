package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testutil"
)

// databaseURL is the test server, which `make test` (scripts/testenv)
// provides. A missing server fails the test: a skipped store test proves
// nothing.
func databaseURL(t testing.TB) string {
	t.Helper()
	return testutil.DatabaseURL(t)
}

// nsConfig is the Config of namespace ns: its own three tables.
func nsConfig(t testing.TB, ns string) Config {
	return Config{
		DSN:        databaseURL(t),
		Table:      ns + "_locks",
		FenceTable: ns + "_fences",
		AuditTable: ns + "_audit",
		// The barrier table too, so namespaces never see each other's
		// in-flight writes.
		BarrierTable: ns + "_writes",
		MaxConns:     4,
	}
}

// dropped remembers which namespaces already have a drop scheduled, so a
// case that reopens its namespace drops the tables once, at its end.
var dropped sync.Map

// dropTablesAtEnd drops ns's tables when t ends (after the stores close:
// cleanups run last-in first-out and the suite registers Close after Open).
func dropTablesAtEnd(t testing.TB, cfg Config) {
	if _, loaded := dropped.LoadOrStore(cfg.Table, true); loaded {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, cfg.DSN)
		if err != nil {
			t.Errorf("drop test tables: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, tbl := range []string{cfg.Table, cfg.FenceTable, cfg.AuditTable, cfg.BarrierTable} {
			if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS `+ident(tbl)); err != nil {
				t.Errorf("drop %s: %v", tbl, err)
			}
		}
	})
}

// openNS opens a store over ns's tables and schedules them to be dropped.
func openNS(t testing.TB, ns string, mod ...func(*Config)) *Store {
	t.Helper()
	cfg := nsConfig(t, ns)
	for _, m := range mod {
		m(&cfg)
	}
	dropTablesAtEnd(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open(ns=%s): %v", ns, err)
	}
	return s
}
