package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// testNS returns a fresh namespace for this package's own tests.
func testNS(t testing.TB) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "pgt_" + hex.EncodeToString(b[:])
}

func tctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(tctx(t), databaseURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestSchema checks the tables and indexes Open creates against SyncGuard's
// layout, column by column, from information_schema and pg_indexes.
func TestSchema(t *testing.T) {
	ns := testNS(t)
	s := openNS(t, ns)
	defer s.Close()
	conn := connect(t)

	columns := func(table string) []string {
		rows, _ := conn.Query(tctx(t), `SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '-')
			FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return cols
	}
	for _, c := range []struct {
		table string
		want  []string
	}{
		{s.cfg.Table, []string{
			"key text NO -", "lock_id text NO -", "expires_at_ms bigint NO -",
			"acquired_at_ms bigint NO -", "fence text NO -", "user_key text NO -"}},
		{s.cfg.FenceTable, []string{"fence_key text NO -", "fence bigint NO 0", "key_debug text YES -"}},
		{s.cfg.AuditTable, []string{
			"id bigint NO nextval('" + s.cfg.AuditTable + "_id_seq'::regclass)",
			"time_ms bigint NO -", "key_hash text NO -", "event jsonb NO -", "input boolean NO false"}},
		{s.cfg.BarrierTable, []string{
			"key text NO -", "write_id text NO -", "fence text NO -", "deadline_ms bigint NO -"}},
	} {
		if got := columns(c.table); !reflect.DeepEqual(got, c.want) {
			t.Errorf("columns of %s =\n  %q\nwant\n  %q", c.table, got, c.want)
		}
	}

	rows, _ := conn.Query(tctx(t), `SELECT indexname || ': ' || regexp_replace(indexdef, '^.* USING ', '')
		FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ANY($1)`,
		[]string{s.cfg.Table, s.cfg.FenceTable, s.cfg.AuditTable, s.cfg.BarrierTable})
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := []string{
		"idx_" + s.cfg.AuditTable + "_class: btree (input, id)",
		"idx_" + s.cfg.AuditTable + "_key_time: btree (key_hash, time_ms)",
		"idx_" + s.cfg.AuditTable + "_time: btree (time_ms)",
		"idx_" + s.cfg.Table + "_expires: btree (expires_at_ms)",
		"idx_" + s.cfg.BarrierTable + "_deadline: btree (deadline_ms)",
		"idx_" + s.cfg.BarrierTable + "_key_deadline: btree (key, deadline_ms)",
		"idx_" + s.cfg.Table + "_lock_id: btree (lock_id)",
		s.cfg.AuditTable + "_pkey: btree (id)",
		s.cfg.BarrierTable + "_pkey: btree (key, write_id)",
		s.cfg.FenceTable + "_pkey: btree (fence_key)",
		s.cfg.Table + "_pkey: btree (key)",
	}
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("indexes =\n  %q\nwant\n  %q", got, want)
	}
	var unique bool
	if err := conn.QueryRow(tctx(t), `SELECT indisunique FROM pg_index WHERE indexrelid = $1::regclass`,
		"idx_"+s.cfg.Table+"_lock_id").Scan(&unique); err != nil || !unique {
		t.Errorf("lock_id index unique = %v, %v; want a UNIQUE index", unique, err)
	}
}

// TestMigrateIdempotent runs Migrate concurrently and again, then opens with
// autoMigrate off: all must succeed on the one schema.
func TestMigrateIdempotent(t *testing.T) {
	cfg := nsConfig(t, testNS(t))
	dropTablesAtEnd(t, cfg)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = Migrate(tctx(t), cfg) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate #%d: %v", i, err)
		}
	}
	if err := Migrate(tctx(t), cfg); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	cfg.DisableAutoMigrate = true
	s, err := Open(tctx(t), cfg)
	if err != nil {
		t.Fatalf("Open without auto-migrate over migrated tables: %v", err)
	}
	defer s.Close()
	if r, err := s.Acquire(tctx(t), "k", time.Second); err != nil || !r.OK {
		t.Fatalf("Acquire = %+v, %v", r, err)
	}
}

// TestMissingTables: with autoMigrate off and no schema, operations fail
// with Internal and a message that says what to do.
func TestMissingTables(t *testing.T) {
	cfg := nsConfig(t, testNS(t))
	cfg.DisableAutoMigrate = true
	s, err := Open(tctx(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	_, err = s.Acquire(tctx(t), "k", time.Second)
	if lockstore.CodeOf(err) != lockstore.Internal || !strings.Contains(err.Error(), "fencegate migrate") {
		t.Fatalf("Acquire on missing tables = %v, want Internal naming `fencegate migrate`", err)
	}
	if _, err := s.IsLocked(tctx(t), "k"); lockstore.CodeOf(err) != lockstore.Internal {
		t.Fatalf("IsLocked on missing tables = %v, want Internal", err)
	}
}

// TestOpenErrors: bad configuration and an unreachable server.
func TestOpenErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want lockstore.Code
	}{
		{"same tables", Config{DSN: databaseURL(t), Table: "a", FenceTable: "a"}, lockstore.InvalidArgument},
		{"bad name", Config{DSN: databaseURL(t), Table: "a;b"}, lockstore.InvalidArgument},
		{"bad dsn", Config{DSN: "postgres://h:notaport/db"}, lockstore.InvalidArgument},
		// Port 1 on loopback: nothing listens, the dial is refused at once.
		{"refused", Config{DSN: "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable"}, lockstore.ServiceUnavailable},
		{"unknown user", Config{DSN: strings.Replace(databaseURL(t), "postgres@", "nobody_fg@", 1)}, lockstore.AuthFailed},
	} {
		s, err := Open(tctx(t), c.cfg)
		if err == nil {
			s.Close()
		}
		if got := lockstore.CodeOf(err); got != c.want {
			t.Errorf("%s: Open = %v (%s), want %s", c.name, err, got, c.want)
		}
	}
}

// TestBatchIsOneTransaction pins what Acquire's atomicity rests on: pgx
// sends a batch as one pipeline with one Sync, which PostgreSQL runs as one
// implicit transaction.
func TestBatchIsOneTransaction(t *testing.T) {
	conn := connect(t)
	b := &pgx.Batch{}
	var x1, x2 int64
	b.Queue(`SELECT txid_current()`).QueryRow(func(r pgx.Row) error { return r.Scan(&x1) })
	b.Queue(`SELECT txid_current()`).QueryRow(func(r pgx.Row) error { return r.Scan(&x2) })
	if err := conn.SendBatch(tctx(t), b).Close(); err != nil {
		t.Fatal(err)
	}
	if x1 != x2 {
		t.Fatalf("batch statements ran in transactions %d and %d; Acquire's batch would not be atomic", x1, x2)
	}
}

// TestOverflowWritesNothing: an acquire that would pass FenceMax fails with
// Internal and leaves the counter and the lock table as they were.
func TestOverflowWritesNothing(t *testing.T) {
	s := openNS(t, testNS(t), func(c *Config) { c.FenceFloor = backend.FloorOff })
	defer s.Close()
	setFence(t, s, "k", lockstore.FenceMax)
	_, err := s.Acquire(tctx(t), "k", time.Minute)
	if lockstore.CodeOf(err) != lockstore.Internal {
		t.Fatalf("Acquire past FenceMax = %v, want Internal", err)
	}
	var locks, counter int64
	if err := s.pool.QueryRow(tctx(t), `SELECT (SELECT count(*) FROM `+ident(s.cfg.Table)+`),
		(SELECT fence FROM `+ident(s.cfg.FenceTable)+`)`).Scan(&locks, &counter); err != nil {
		t.Fatal(err)
	}
	if locks != 0 || counter != lockstore.FenceMax {
		t.Fatalf("after overflow: %d lock rows, counter %d; want 0 and %d", locks, counter, lockstore.FenceMax)
	}
	// One below the limit still issues exactly FenceMax.
	setFence(t, s, "k", lockstore.FenceMax-1)
	r, err := s.Acquire(tctx(t), "k", time.Minute)
	if err != nil || r.Fence != "900000000000000" {
		t.Fatalf("Acquire at FenceMax-1 = %+v, %v; want fence 900000000000000", r, err)
	}
}

// TestSyncGuardInterop writes locks the way SyncGuard's TypeScript acquire
// does (its statements, its advisory lock, its key_debug column) and checks
// that fencegate sees them and continues the same fence sequence: under the
// clock floor (the default) fencegate's fence jumps to the floor, and
// SyncGuard's plain increment continues from it.
func TestSyncGuardInterop(t *testing.T) {
	s := openNS(t, testNS(t))
	defer s.Close()
	const key = "orders:42"
	lockKey, fenceKey, err := storageKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	if lockKey != key || fenceKey != "fence:"+key {
		t.Fatalf("storage keys = %q, %q; want SyncGuard's %q, %q", lockKey, fenceKey, key, "fence:"+key)
	}
	sgAcquire := func(lockID string, ttlMs int64) string {
		t.Helper()
		var fence string
		err := pgx.BeginFunc(tctx(t), s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(tctx(t), `SELECT pg_advisory_xact_lock(hashtext($1))`, lockKey); err != nil {
				return err
			}
			var now float64
			if err := tx.QueryRow(tctx(t), `SELECT EXTRACT(EPOCH FROM NOW()) * 1000 AS now_ms`).Scan(&now); err != nil {
				return err
			}
			if _, err := tx.Exec(tctx(t), `INSERT INTO `+s.cfg.FenceTable+` (fence_key, fence, key_debug)
				VALUES ($1, 0, $2) ON CONFLICT (fence_key) DO NOTHING`, fenceKey, key); err != nil {
				return err
			}
			var n int64
			if err := tx.QueryRow(tctx(t), `UPDATE `+s.cfg.FenceTable+` SET fence = fence + 1
				WHERE fence_key = $1 RETURNING fence`, fenceKey).Scan(&n); err != nil {
				return err
			}
			fence = strings.Repeat("0", 15-len(itoa(n))) + itoa(n)
			_, err := tx.Exec(tctx(t), `INSERT INTO `+s.cfg.Table+` (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key)
				VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key) DO UPDATE SET lock_id = EXCLUDED.lock_id,
				expires_at_ms = EXCLUDED.expires_at_ms, acquired_at_ms = EXCLUDED.acquired_at_ms,
				fence = EXCLUDED.fence, user_key = EXCLUDED.user_key`,
				lockKey, lockID, int64(now)+ttlMs, int64(now), fence, key)
			return err
		})
		if err != nil {
			t.Fatalf("SyncGuard-style acquire: %v", err)
		}
		return fence
	}

	sgID, _ := lockstore.NewLockID()
	if f := sgAcquire(sgID, 60_000); f != "000000000000001" {
		t.Fatalf("SyncGuard fence = %s", f)
	}
	if r, err := s.Acquire(tctx(t), key, time.Second); err != nil || r.OK {
		t.Fatalf("fencegate Acquire over a SyncGuard lock = %+v, %v; want contention", r, err)
	}
	ks, err := s.Inspect(tctx(t), key)
	if err != nil || ks.Live == nil || ks.Live.LockID != sgID || ks.LatestFence != "000000000000001" {
		t.Fatalf("Inspect = %+v, %v", ks, err)
	}
	if r, err := s.Release(tctx(t), sgID); err != nil || !r.OK {
		t.Fatalf("fencegate Release of a SyncGuard lock = %+v, %v", r, err)
	}
	before := time.Now().UnixMilli()
	r, err := s.Acquire(tctx(t), key, time.Second)
	if err != nil || !r.OK || r.Fence < fmt.Sprintf("%015d", backend.FenceFloorAt(before-1000)) {
		t.Fatalf("fencegate Acquire after SyncGuard = %+v, %v; want the clock floor's fence", r, err)
	}
	if _, err := s.Release(tctx(t), r.LockID); err != nil {
		t.Fatal(err)
	}
	n, _ := lockstore.ParseFence(r.Fence)
	sgID2, _ := lockstore.NewLockID()
	if f := sgAcquire(sgID2, 60_000); f != fmt.Sprintf("%015d", n+1) {
		t.Fatalf("SyncGuard fence after fencegate's %s = %s, want one more", r.Fence, f)
	}
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// TestAuditRetention: the first append prunes, MaxEvents keeps the newest,
// MaxAge drops old events on the next pass.
func TestAuditRetention(t *testing.T) {
	cfg := nsConfig(t, testNS(t))
	cfg.AuditRetention = lockstore.AuditRetention{MaxEvents: 10, MaxAge: time.Hour}
	dropTablesAtEnd(t, cfg)
	s, err := Open(tctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UnixMilli()
	evs := make([]lockstore.AuditEvent, 300)
	for i := range evs {
		evs[i] = lockstore.AuditEvent{TimeMs: now - int64(len(evs)-i), KeyHash: "h", Reason: "stale", DecisionID: itoa(int64(i))}
	}
	if err := s.AppendAudit(tctx(t), evs); err != nil {
		t.Fatal(err)
	}
	got, err := s.QueryAudit(tctx(t), lockstore.AuditQuery{Limit: lockstore.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 || got[0].DecisionID != "299" || got[9].DecisionID != "290" {
		t.Fatalf("after 300 appends with MaxEvents=10: %d events, newest %+v", len(got), got[0])
	}
	// Old events: stored, then dropped by the pass the 256-event mark triggers.
	old := make([]lockstore.AuditEvent, 256)
	for i := range old {
		old[i] = lockstore.AuditEvent{TimeMs: now - 2*time.Hour.Milliseconds(),
			KeyHash: lockstore.HashKey("old"), KeyDigest: lockstore.DigestKey("old").String(), Reason: "stale"}
	}
	if err := s.AppendAudit(tctx(t), old); err != nil {
		t.Fatal(err)
	}
	got, err = s.QueryAudit(tctx(t), lockstore.AuditQuery{Key: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("%d events older than MaxAge survived a retention pass", len(got))
	}
}
