package postgres

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/lockstore"
)

// countingConn counts writes to the server. pgx buffers each request (a
// query, or a whole batch pipeline up to its Sync) and flushes it with one
// write before it waits for the answer, so on a warm connection (statements
// already prepared) writes per operation = network round trips per operation.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestRoundTrips pins the number of round trips of every operation.
func TestRoundTrips(t *testing.T) {
	cfg := nsConfig(t, testNS(t)).withDefaults()
	dropTablesAtEnd(t, cfg)
	if err := Migrate(tctx(t), cfg); err != nil {
		t.Fatal(err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	pcfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	}
	pcfg.MaxConns = 1 // one warm connection: every statement gets prepared once
	// Never ping before use: the pings are the pool's, not the operation's.
	pcfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(tctx(t), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{pool: pool, cfg: cfg, log: cfg.Logger, sql: buildStatements(cfg)}
	defer s.Close()
	ctx := tctx(t)

	var lockID, fence, writeID string
	ops := []struct {
		name string
		do   func() error
	}{
		{"Acquire", func() error {
			r, err := s.Acquire(ctx, "rt", time.Minute)
			lockID, fence = r.LockID, r.Fence
			return err
		}},
		{"Acquire (contended)", func() error { _, err := s.Acquire(ctx, "rt", time.Minute); return err }},
		{"Extend", func() error { _, err := s.Extend(ctx, lockID, time.Minute); return err }},
		{"IsLocked", func() error { _, err := s.IsLocked(ctx, "rt"); return err }},
		{"LookupKey", func() error { _, err := s.LookupKey(ctx, "rt"); return err }},
		{"LookupLockID", func() error { _, err := s.LookupLockID(ctx, lockID); return err }},
		{"Inspect", func() error { _, err := s.Inspect(ctx, "rt"); return err }},
		{"Admit", func() error {
			writeID, _ = lockstore.NewLockID()
			_, err := s.Admit(ctx, "rt", lockstore.WriteAdmission{Fence: fence, RequireLive: true, WriteID: writeID, MaxWrite: time.Minute})
			return err
		}},
		{"Finish", func() error { return s.Finish(ctx, "rt", writeID) }},
		{"CountHeld", func() error { _, err := s.CountHeld(ctx); return err }},
		{"Release", func() error { _, err := s.Release(ctx, lockID); return err }},
		{"AppendAudit", func() error {
			return s.AppendAudit(ctx, []lockstore.AuditEvent{{TimeMs: 1, KeyHash: "h", Reason: "stale"}})
		}},
		{"QueryAudit", func() error { _, err := s.QueryAudit(ctx, lockstore.AuditQuery{KeyHash: "h"}); return err }},
	}
	// Warm up: prepare every statement on the one connection.
	for range 2 {
		for _, o := range ops {
			if err := o.do(); err != nil {
				t.Fatalf("warm-up %s: %v", o.name, err)
			}
		}
	}
	for _, o := range ops {
		before := writes.Load()
		if err := o.do(); err != nil {
			t.Fatalf("%s: %v", o.name, err)
		}
		n := writes.Load() - before
		t.Logf("%-20s %d round trip(s)", o.name, n)
		if n != 1 {
			t.Errorf("%s took %d round trips, want 1", o.name, n)
		}
	}
}
