package bolt

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

func TestParseURL(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url, want, errHas string
		records           RecordFormat
		floor             backend.FenceFloor
	}{
		{url: "bolt:///x.db?fenceFloor=off&records=json", want: "/x.db", records: RecordsJSON, floor: backend.FloorOff},
		{url: "bolt:///x.db?fenceFloor=clock", want: "/x.db"},
		{url: "bolt:///x.db?fenceFloor=sometimes", errHas: `fenceFloor="sometimes": want clock (the default) or off`},
		{url: "bolt:///x.db?fenceFloor=off&fenceFloor=off", errHas: "given 2 times"},
		{url: "bolt:///var/lib/fencegate/locks.db?records=json", want: "/var/lib/fencegate/locks.db", records: RecordsJSON},
		{url: "bolt://./fencegate.db?records=binary", want: filepath.Join(wd, "fencegate.db"), records: RecordsBinary},
		{url: "bolt:///x.db?records=xml", errHas: `records="xml" is not a lock record format; allowed: binary (default), json`},
		{url: "bolt:///x.db?records=JSON", errHas: "allowed: binary (default), json"},
		{url: "bolt:///x.db?records=", errHas: "records= is empty; allowed: binary (default), json"},
		{url: "bolt:///x.db?records=json&records=binary", errHas: "given 2 times"},
		{url: "bolt:///x.db?records=json;x", errHas: "query"},
		{url: "bolt:///x.db#frag", errHas: "no fragment"},
		{url: "bolt:///var/lib/fencegate/locks.db", want: "/var/lib/fencegate/locks.db"},
		{url: "bolt:///tmp/a/../b.db", want: "/tmp/b.db"},
		{url: "bolt://./fencegate.db", want: filepath.Join(wd, "fencegate.db")},
		{url: "bolt://./data/x.db", want: filepath.Join(wd, "data", "x.db")},
		{url: "bolt:///my%20dir/x.db", want: "/my dir/x.db"},
		{url: "redis://127.0.0.1:6379/0", errHas: "scheme"},
		{url: "bolt://host/x.db", errHas: "local files"},
		{url: "bolt://../x.db", errHas: "local files"},
		{url: "bolt://./", errHas: "names no file"},
		{url: "bolt://.", errHas: "names no file"},
		{url: "bolt:///", errHas: "names no file"},
		{url: "bolt://", errHas: "names no file"},
		{url: "bolt:///dir/", errHas: "names no file"},
		{url: "bolt:rel.db", errHas: "not of the form"},
		{url: "bolt:///x.db?timeout=1s", errHas: `unknown store URL parameter "timeout"; the parameters are records=binary|json`},
		{url: "bolt://user@./x.db", errHas: "no user"},
		{url: "bolt://.:80/x.db", errHas: "no user or port"},
		{url: "::", errHas: "parse"},
	} {
		t.Run(c.url, func(t *testing.T) {
			cfg, err := ParseURL(c.url)
			if c.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), c.errHas) {
					t.Fatalf("ParseURL(%q) = %+v, %v; want an error containing %q", c.url, cfg, err, c.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", c.url, err)
			}
			if cfg.Path != c.want || cfg.Records != c.records || cfg.FenceFloor != c.floor {
				t.Fatalf("ParseURL(%q) = %+v, want path %q, records %q, fenceFloor %s", c.url, cfg, c.want, c.records, c.floor)
			}
		})
	}
	// A bad records value is the caller's mistake, at parse and at Open.
	if _, err := ParseURL("bolt:///x.db?records=xml"); lockstore.CodeOf(err) != lockstore.InvalidArgument {
		t.Errorf("ParseURL(records=xml) = %v, want InvalidArgument", err)
	}
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "x.db"), Records: "xml"})
	if err == nil {
		s.Close()
	}
	if lockstore.CodeOf(err) != lockstore.InvalidArgument || !strings.Contains(err.Error(), "allowed: binary (default), json") {
		t.Errorf("Open(Records: xml) = %v, want InvalidArgument listing the formats", err)
	}
}

// TestFileInUse: a second opener of a held file fails fast with an error
// that says why, and succeeds once the first has closed. flock is per open
// file description, so a second Open in this process contends like a
// second process would.
func TestFileInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	first, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	start := time.Now()
	second, err := Open(t.Context(), Config{Path: path, OpenTimeout: 300 * time.Millisecond})
	waited := time.Since(start)
	if err == nil {
		second.Close()
		t.Fatal("second Open of a held file succeeded")
	}
	if !strings.Contains(err.Error(), "is in use by another fencegate process") || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not say the file %s is in use", err, path)
	}
	if got := lockstore.CodeOf(err); got != lockstore.ServiceUnavailable {
		t.Errorf("code = %s, want ServiceUnavailable", got)
	}
	if waited < 250*time.Millisecond || waited > 5*time.Second {
		t.Errorf("second Open gave up after %s, want about the 300ms OpenTimeout", waited)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	third, err := Open(t.Context(), Config{Path: path, OpenTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	third.Close()
}

func openFake(t *testing.T, cfg Config) (*Store, *testutil.Clock) {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "locks.db")
	}
	s, err := Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	clk := testutil.NewClock(time.UnixMilli(1_700_000_000_000))
	s.now = clk.Now
	return s, clk
}

// TestToleranceBoundary pins the liveness predicate at the millisecond with
// a fake clock: live while expiresAt > now-1000, free from now-1000 =
// expiresAt on, and reclaimed by the next acquire with the counter intact.
func TestToleranceBoundary(t *testing.T) {
	s, clk := openFake(t, Config{})
	ctx := t.Context()
	const t0 = 1_700_000_000_000
	clk.Set(time.UnixMilli(t0))
	r, err := s.Acquire(ctx, "k", 500*time.Millisecond)
	if err != nil || !r.OK || r.ExpiresAtMs != t0+500 {
		t.Fatalf("Acquire = %+v, %v; want expiresAt %d", r, err, t0+500)
	}

	clk.Set(time.UnixMilli(r.ExpiresAtMs + lockstore.TimeToleranceMs - 1))
	if ok, _ := s.IsLocked(ctx, "k"); !ok {
		t.Fatal("lock free 1ms before expiresAt+tolerance")
	}
	if res, _ := s.Acquire(ctx, "k", time.Second); res.OK {
		t.Fatal("acquired a key 1ms before its lock left the tolerance")
	}
	e, err := s.Extend(ctx, r.LockID, 2*time.Second)
	if err != nil || !e.OK || e.ExpiresAtMs != r.ExpiresAtMs+lockstore.TimeToleranceMs-1+2000 {
		t.Fatalf("Extend inside the tolerance = %+v, %v", e, err)
	}

	clk.Set(time.UnixMilli(e.ExpiresAtMs + lockstore.TimeToleranceMs))
	if ok, _ := s.IsLocked(ctx, "k"); ok {
		t.Fatal("lock live at exactly expiresAt+tolerance")
	}
	if e2, _ := s.Extend(ctx, r.LockID, time.Second); e2.OK || e2.Detail != lockstore.DetailExpired {
		t.Fatalf("Extend at expiresAt+tolerance = %+v, want OK=false Detail=expired", e2)
	}
	r2, err := s.Acquire(ctx, "k", time.Second)
	if err != nil || !r2.OK || r2.Fence != "000000000000002" {
		t.Fatalf("Acquire after expiry = %+v, %v; want fence 2", r2, err)
	}
	// The reclaimed lock's index entry is gone; the old lockId is dead.
	if rel, _ := s.Release(ctx, r.LockID); rel.OK {
		t.Fatal("old lockId released the new lock")
	}
	if n, err := s.CountHeld(ctx); err != nil || n != 1 {
		t.Fatalf("CountHeld = %d, %v; want 1", n, err)
	}
}

// TestAuditRetention: events past MaxEvents (oldest first) and past MaxAge
// are pruned as new ones are appended.
func TestAuditRetention(t *testing.T) {
	s, clk := openFake(t, Config{AuditRetention: lockstore.AuditRetention{MaxEvents: 5, MaxAge: time.Hour}})
	ctx := t.Context()
	const t0 = 1_700_000_000_000
	clk.Set(time.UnixMilli(t0))
	var evs []lockstore.AuditEvent
	for i := range 8 {
		evs = append(evs, lockstore.AuditEvent{TimeMs: t0 - 10_000 + int64(i), KeyHash: "h", Reason: "stale"})
	}
	if err := s.AppendAudit(ctx, evs); err != nil {
		t.Fatal(err)
	}
	got, err := s.QueryAudit(ctx, lockstore.AuditQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].TimeMs != t0-10_000+7 || got[4].TimeMs != t0-10_000+3 {
		t.Fatalf("after 8 appends with MaxEvents 5: %d events %+v, want the newest 5", len(got), got)
	}

	// Two hours later, one new event: everything older than an hour goes.
	clk.Set(time.UnixMilli(t0 + 2*time.Hour.Milliseconds()))
	if err := s.AppendAudit(ctx, []lockstore.AuditEvent{{TimeMs: t0 + 2*time.Hour.Milliseconds(), KeyHash: "h", Reason: "unknown"}}); err != nil {
		t.Fatal(err)
	}
	got, err = s.QueryAudit(ctx, lockstore.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Reason != "unknown" {
		t.Fatalf("after MaxAge: %+v, want only the new event", got)
	}
	// The kept count stays right, so MaxEvents still trims exactly.
	if err := s.db.View(func(tx *bbolt.Tx) error {
		if n := getCount(tx, metaAuditCount); n != 1 {
			t.Errorf("stored audit count = %d, want 1", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestFenceWarning: crossing FenceWarn logs a warning with the key's hash,
// never the raw key or lockId.
func TestFenceWarning(t *testing.T) {
	var buf testutil.LogBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	// Without the floor: a counter this far ahead of it is refused.
	s, _ := openFake(t, Config{Logger: logger, FenceFloor: backend.FloorOff})
	s.now = time.Now
	const key = "tenant-7/secret-resource"
	if err := s.setFence(key, lockstore.FenceWarn-1); err != nil {
		t.Fatal(err)
	}
	r, err := s.Acquire(t.Context(), key, time.Second)
	if err != nil || !r.OK {
		t.Fatalf("Acquire = %+v, %v", r, err)
	}
	if buf.String() != "" {
		t.Fatalf("warning at exactly FenceWarn (not past it): %s", buf.String())
	}
	s.Release(t.Context(), r.LockID)
	r, err = s.Acquire(t.Context(), key, time.Second)
	if err != nil || !r.OK {
		t.Fatalf("Acquire = %+v, %v", r, err)
	}
	out := buf.String()
	if !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, lockstore.HashKey(key)) {
		t.Fatalf("no warning with the key hash past FenceWarn: %q", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, r.LockID) {
		t.Fatalf("log leaks the raw key or lockId: %q", out)
	}
}

// TestClosedStore: operations on a closed store fail with
// ServiceUnavailable rather than panicking.
func TestClosedStore(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "x.db")})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Acquire(t.Context(), "k", time.Second)
	if err != nil || !r.OK {
		t.Fatal(err)
	}
	s.Close()
	ctx := context.Background()
	_, err = s.Acquire(ctx, "k2", time.Second)
	if lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
		t.Errorf("Acquire on closed store: %v, want ServiceUnavailable", err)
	}
	_, err = s.IsLocked(ctx, "k")
	if lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
		t.Errorf("IsLocked on closed store: %v, want ServiceUnavailable", err)
	}
	if err := s.Ping(ctx); lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
		t.Errorf("Ping on closed store: %v, want ServiceUnavailable", err)
	}
}

func TestOpenRejectsEmptyPath(t *testing.T) {
	if _, err := Open(t.Context(), Config{}); lockstore.CodeOf(err) != lockstore.InvalidArgument {
		t.Fatalf("Open(empty path) = %v, want InvalidArgument", err)
	}
}

// TestLayout pins the file layout that operators (and the bbolt CLI) see:
// the binary lock record (record.go) under the NFC key, the lockId index,
// the decimal fence counter, which outlives the lock.
func TestLayout(t *testing.T) {
	s, clk := openFake(t, Config{})
	clk.Set(time.UnixMilli(1_700_000_000_000))
	r, err := s.Acquire(t.Context(), "cafe\u0301", 5*time.Second)
	if err != nil || !r.OK {
		t.Fatal(r, err)
	}
	view := func(fn func(tx *bbolt.Tx)) {
		t.Helper()
		if err := s.db.View(func(tx *bbolt.Tx) error { fn(tx); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	view(func(tx *bbolt.Tx) {
		// 0x01 ‖ expiresAtMs ‖ acquiredAtMs ‖ fence (big-endian int64s) ‖ lockId
		want := "01" + "0000018bcfe57b88" + "0000018bcfe56800" + "0000000000000001" + hex.EncodeToString([]byte(r.LockID))
		if got := hex.EncodeToString(tx.Bucket(bucketLocks).Get([]byte("caf\u00e9"))); got != want {
			t.Errorf("lock record = %s, want %s", got, want)
		}
		if got := string(tx.Bucket(bucketIDs).Get([]byte(r.LockID))); got != "caf\u00e9" {
			t.Errorf("index entry = %q, want the NFC key", got)
		}
		if got := string(tx.Bucket(bucketFences).Get([]byte("caf\u00e9"))); got != "1" {
			t.Errorf("fence counter = %q, want \"1\"", got)
		}
	})
	if _, err := s.Release(t.Context(), r.LockID); err != nil {
		t.Fatal(err)
	}
	view(func(tx *bbolt.Tx) {
		if tx.Bucket(bucketLocks).Stats().KeyN != 0 || tx.Bucket(bucketIDs).Stats().KeyN != 0 {
			t.Error("release left a lock record or index entry behind")
		}
		if got := string(tx.Bucket(bucketFences).Get([]byte("caf\u00e9"))); got != "1" {
			t.Errorf("fence counter after release = %q, want \"1\" (never deleted)", got)
		}
	})
}

// helperPathEnv makes this test binary act as a second fencegate process
// opening the file it names (see TestMain and TestFileInUseByOtherProcess).
const helperPathEnv = "FENCEGATE_BOLT_TEST_OPEN"

// TestMain lets the test binary serve as the second process of
// TestFileInUseByOtherProcess: with helperPathEnv set it only opens that
// file, reports, and exits, running no tests (so no test passes without
// checking anything).
func TestMain(m *testing.M) {
	if path := os.Getenv(helperPathEnv); path != "" {
		openAsOtherProcess(path)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// openAsOtherProcess is the second process's body: it opens path with a
// short timeout and prints what happened for the parent to read.
func openAsOtherProcess(path string) {
	s, err := Open(context.Background(), Config{Path: path, OpenTimeout: 300 * time.Millisecond})
	if err != nil {
		fmt.Println("OPEN-ERROR:", err)
		return
	}
	s.Close()
	fmt.Println("OPEN-OK")
}

// TestFileInUseByOtherProcess: a real second process gets the clear
// "in use" error quickly while this one holds the file, and opens it once
// this one has closed.
func TestFileInUseByOtherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	s, err := Open(t.Context(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	second := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Env = append(os.Environ(), helperPathEnv+"="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper process: %v\n%s", err, out)
		}
		return string(out)
	}
	out := second()
	if !strings.Contains(out, "OPEN-ERROR:") || !strings.Contains(out, "is in use by another fencegate process") {
		t.Fatalf("second process while the file is held:\n%s\nwant the in-use error", out)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out := second(); !strings.Contains(out, "OPEN-OK") {
		t.Fatalf("second process after close:\n%s\nwant OPEN-OK", out)
	}
}
