package bolt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

// oldRecord is the lock record exactly as fencegate declared it before the
// binary record (32e23d8:lockstore/bolt/lock.go). That version marshalled
// it with encoding/json to write and unmarshalled it, trusting every
// field, to read; oldDecode and oldEncode do the same here, independently
// of record.go.
type oldRecord struct {
	LockID       string `json:"lockId"`
	ExpiresAtMs  int64  `json:"expiresAtMs"`
	AcquiredAtMs int64  `json:"acquiredAtMs"`
	Key          string `json:"key"`
	Fence        string `json:"fence"`
}

func oldDecode(v []byte) (oldRecord, error) {
	var r oldRecord
	err := json.Unmarshal(v, &r)
	return r, err
}

func oldEncode(r oldRecord) []byte {
	v, err := json.Marshal(&r)
	if err != nil {
		panic(err)
	}
	return v
}

// rollbackFixture is a file as this version leaves it: binary records of
// held, extended, reclaimed and expired locks, a JSON record from an
// older version, counters (one without a lock), and what an older
// fencegate must read from each record after the conversion.
type rollbackFixture struct {
	path     string
	want     map[string]oldRecord // bucket key → the record an old binary must read
	counters map[string]string    // bucket key → fence counter
	binary   int                  // binary records in the file
	legacy   []byte               // the JSON record, byte for byte
	now      int64                // the fake clock at the end
}

const fixtureT0 int64 = 1_700_000_000_000

func writeBinaryFile(t *testing.T) rollbackFixture {
	t.Helper()
	f := rollbackFixture{
		path:     filepath.Join(t.TempDir(), "rollback.db"),
		want:     map[string]oldRecord{},
		counters: map[string]string{},
	}
	s, clk := openFake(t, Config{Path: f.path, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	clk.Set(time.UnixMilli(fixtureT0))
	acquire := func(key string, ttl time.Duration) lockstore.AcquireResult {
		t.Helper()
		a, err := s.Acquire(ctx, key, ttl)
		if err != nil || !a.OK {
			t.Fatalf("Acquire(%q) = %+v, %v", key, a, err)
		}
		return a
	}
	record := func(k string, a lockstore.AcquireResult, acquiredAt int64) {
		f.want[k] = oldRecord{LockID: a.LockID, ExpiresAtMs: a.ExpiresAtMs, AcquiredAtMs: acquiredAt, Key: k, Fence: a.Fence}
		f.counters[k] = strings.TrimLeft(a.Fence, "0")
	}

	// held: its third fence, long TTL.
	for range 2 {
		a := acquire("held", time.Minute)
		if r, err := s.Release(ctx, a.LockID); err != nil || !r.OK {
			t.Fatalf("Release(held) = %+v, %v", r, err)
		}
	}
	record("held", acquire("held", time.Hour), fixtureT0)
	// café (given decomposed, stored NFC) and a key JSON escapes.
	record("caf\u00e9", acquire("cafe\u0301", time.Hour), fixtureT0)
	record(`<a&b> "q"\`, acquire(`<a&b> "q"\`, time.Hour), fixtureT0)
	// expired: a 1 s lock, past expiry and tolerance by the end.
	record("expired", acquire("expired", time.Second), fixtureT0)
	// extended later, at t0+1000.
	ext := acquire("extended", time.Second)
	// released: only its counter stays.
	rel := acquire("released", time.Minute)
	if r, err := s.Release(ctx, rel.LockID); err != nil || !r.OK {
		t.Fatalf("Release(released) = %+v, %v", r, err)
	}
	f.counters["released"] = "1"

	clk.Set(time.UnixMilli(fixtureT0 + 1000))
	e, err := s.Extend(ctx, ext.LockID, time.Hour)
	if err != nil || !e.OK {
		t.Fatalf("Extend = %+v, %v", e, err)
	}
	ext.ExpiresAtMs = e.ExpiresAtMs
	record("extended", ext, fixtureT0)
	// reclaimed: expired, then taken again at t0+10000 with the next fence.
	old := acquire("reclaimed", time.Second)
	clk.Set(time.UnixMilli(fixtureT0 + 10_000))
	a := acquire("reclaimed", time.Hour)
	if a.Fence <= old.Fence {
		t.Fatalf("reclaim fence %s after %s", a.Fence, old.Fence)
	}
	record("reclaimed", a, fixtureT0+10_000)
	f.now = fixtureT0 + 10_000

	// A JSON record an older fencegate wrote, left as it was.
	legacy := oldRecord{LockID: "LegacyLegacyLegacyLe01", ExpiresAtMs: fixtureT0 + 60_000, AcquiredAtMs: fixtureT0, Key: "legacy", Fence: "000000000000009"}
	f.legacy = oldEncode(legacy)
	f.want["legacy"], f.counters["legacy"] = legacy, "9"
	err = s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketLocks).Put([]byte("legacy"), f.legacy); err != nil {
			return err
		}
		if err := tx.Bucket(bucketIDs).Put([]byte(legacy.LockID), []byte("legacy")); err != nil {
			return err
		}
		return tx.Bucket(bucketFences).Put([]byte("legacy"), []byte("9"))
	})
	if err != nil {
		t.Fatal(err)
	}
	// The fixture must hold what the conversion is for: binary records.
	err = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
			if v[0] == recordV1 {
				f.binary++
			}
			return nil
		})
	})
	if err != nil || f.binary != len(f.want)-1 {
		t.Fatalf("fixture has %d binary records (%v); want %d", f.binary, err, len(f.want)-1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return f
}

// rollbackProblems writes the fixture, opens it with records=json and
// encodeJSON as the store's JSON encoder, and reads the closed file as an
// older fencegate would, returning everything that older version would
// misread (nothing, for a correct conversion).
func rollbackProblems(t *testing.T, encodeJSON func(*lockRecord) ([]byte, error)) []string {
	f := writeBinaryFile(t)
	var logs bytes.Buffer
	s, err := open(t.Context(), Config{Path: f.path, Records: RecordsJSON, Logger: testutil.Logger(&logs, nil)}, encodeJSON)
	if err != nil {
		return []string{fmt.Sprintf("Open(records=json): %v", err)}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	db, err := bbolt.Open(f.path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seen := map[string]bool{}
	err = db.View(func(tx *bbolt.Tx) error {
		_ = tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
			key := string(k)
			seen[key] = true
			want, ok := f.want[key]
			check(ok, "record under %q that the fixture did not write", key)
			got, err := oldDecode(v)
			if err != nil {
				check(false, "%q: an older fencegate cannot decode %q: %v", key, v, err)
				return nil
			}
			check(got == want, "%q: an older fencegate reads %+v; want %+v", key, got, want)
			check(bytes.Equal(v, oldEncode(want)), "%q: record %s is not byte for byte what an older fencegate writes, %s", key, v, oldEncode(want))
			if key == "legacy" {
				check(bytes.Equal(v, f.legacy), "the older version's own JSON record was changed: %s", v)
			}
			if ok {
				check(string(tx.Bucket(bucketIDs).Get([]byte(want.LockID))) == key, "%q: lockId index entry lost", key)
			}
			return nil
		})
		for k, n := range f.counters {
			check(string(tx.Bucket(bucketFences).Get([]byte(k))) == n, "%q: fence counter %q, want %s", k, tx.Bucket(bucketFences).Get([]byte(k)), n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range f.want {
		check(seen[k], "%q: record lost", k)
	}

	// One log line, with the count and without a key or lockId.
	out := logs.String()
	check(strings.Count(out, "\n") == 1, "the conversion logged %d lines, want 1:\n%s", strings.Count(out, "\n"), out)
	check(strings.Contains(out, fmt.Sprintf("converted=%d ", f.binary)) && strings.Contains(out, "already_json=1 ") &&
		strings.Contains(out, "undecodable=0"), "the log does not count %d converted, 1 already JSON: %s", f.binary, out)
	for k, r := range f.want {
		check(!strings.Contains(out, r.LockID), "the log carries %q's lockId", k)
		check(!strings.Contains(out, k), "the log carries the key %q", k)
	}
	return problems
}

// TestRecordsJSONConversion: a file of binary records (held, extended,
// reclaimed, expired, with counters and an older version's JSON record)
// opened with records=json holds only JSON records afterwards, each read
// by an older fencegate's plain encoding/json decoder as the same lock,
// byte for byte what that version writes. The same check fails against
// broken conversions.
func TestRecordsJSONConversion(t *testing.T) {
	if p := rollbackProblems(t, encodeJSONRecord); len(p) > 0 {
		t.Fatalf("records=json conversion:\n%s", strings.Join(p, "\n"))
	}
	// Expiry against the fixture's final clock, past tolerance.
	expired := func(r *lockRecord) bool { return r.ExpiresAtMs+lockstore.TimeToleranceMs <= fixtureT0+10_000 }
	mutate := func(change func(*lockRecord)) func(*lockRecord) ([]byte, error) {
		return func(r *lockRecord) ([]byte, error) {
			c := *r
			change(&c)
			return encodeJSONRecord(&c)
		}
	}
	for name, enc := range map[string]func(*lockRecord) ([]byte, error){
		"no conversion (binary kept)": encodeRecord,
		"expired records skipped": func(r *lockRecord) ([]byte, error) {
			if expired(r) {
				return encodeRecord(r)
			}
			return encodeJSONRecord(r)
		},
		"key left out":           mutate(func(r *lockRecord) { r.Key = "" }),
		"key not normalised":     mutate(func(r *lockRecord) { r.Key = strings.ReplaceAll(r.Key, "\u00e9", "e\u0301") }),
		"expiry from acquiredAt": mutate(func(r *lockRecord) { r.ExpiresAtMs = r.AcquiredAtMs }),
		"fence renumbered":       mutate(func(r *lockRecord) { r.Fence = "000000000000001" }),
		"lockId case folded":     mutate(func(r *lockRecord) { r.LockID = strings.ToLower(r.LockID) }),
		"fields in another order": func(r *lockRecord) ([]byte, error) {
			return json.Marshal(struct {
				Key          string `json:"key"`
				LockID       string `json:"lockId"`
				Fence        string `json:"fence"`
				ExpiresAtMs  int64  `json:"expiresAtMs"`
				AcquiredAtMs int64  `json:"acquiredAtMs"`
			}{r.Key, r.LockID, r.Fence, r.ExpiresAtMs, r.AcquiredAtMs})
		},
	} {
		p := rollbackProblems(t, enc)
		if len(p) == 0 {
			t.Errorf("the rollback check passed a conversion with %s", name)
			continue
		}
		sort.Strings(p)
		t.Logf("%s caught: %s", name, p[0])
	}
}

// TestRecordsJSONWrites: after the conversion a records=json store keeps
// the file readable by an older fencegate: acquire, reclaim and extend
// write JSON records, and the binary format comes back only when the file
// is opened without the option.
func TestRecordsJSONWrites(t *testing.T) {
	f := writeBinaryFile(t)
	s, clk := openFake(t, Config{Path: f.path, Records: RecordsJSON, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	clk.Set(time.UnixMilli(f.now))
	a, err := s.Acquire(ctx, "new", time.Minute)
	check := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Errorf(format, args...)
		}
	}
	check(err == nil && a.OK && a.Fence == "000000000000001", "Acquire(new) = %+v, %v", a, err)
	a, err = s.Acquire(ctx, "expired", time.Minute)
	check(err == nil && a.OK && a.Fence == "000000000000002", "Acquire(expired) = %+v, %v; want the reclaim's fence 2", a, err)
	e, err := s.Extend(ctx, f.want["held"].LockID, 2*time.Hour)
	check(err == nil && e.OK, "Extend(held) = %+v, %v", e, err)
	n, err := s.CountHeld(ctx)
	// Every fixture lock but the expired one, "new", and "expired" again.
	check(err == nil && n == int64(len(f.want)+1), "CountHeld = %d, %v; want %d", n, err, len(f.want)+1)
	_ = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
			r, err := oldDecode(v)
			check(err == nil && r.Key == string(k) && lockstore.ValidateLockID(r.LockID) == nil,
				"%q after records=json writes: an older fencegate reads %+v, %v from %q", k, r, err, v)
			return nil
		})
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Without the option the file is read as it is and new writes are binary.
	s, clk = openFake(t, Config{Path: f.path})
	clk.Set(time.UnixMilli(f.now))
	a, err = s.Acquire(ctx, "binary-again", time.Minute)
	check(err == nil && a.OK, "Acquire(binary-again) = %+v, %v", a, err)
	_ = s.db.View(func(tx *bbolt.Tx) error {
		for k, want := range map[string]byte{"binary-again": recordV1, "new": recordJSON, "legacy": recordJSON} {
			v := tx.Bucket(bucketLocks).Get([]byte(k))
			check(len(v) > 0 && v[0] == want, "%q: record starts %q, want 0x%02x", k, v, want)
		}
		return nil
	})
}

// TestRecordsJSONLeavesUndecodable: a record neither format reads is left
// byte for byte as it was (it fails closed for its key in every version),
// the store still opens, and the log line says so at warn level.
func TestRecordsJSONLeavesUndecodable(t *testing.T) {
	f := writeBinaryFile(t)
	bad := map[string][]byte{
		"short binary":   {recordV1, 0, 0, 1},
		"unknown format": append([]byte{0x02}, bytes.Repeat([]byte{'A'}, recordV1Length-1)...),
	}
	db, err := bbolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for k, v := range bad {
			if err := tx.Bucket(bucketLocks).Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := Open(t.Context(), Config{Path: f.path, Records: RecordsJSON, Logger: testutil.Logger(&logs, nil)})
	if err != nil {
		t.Fatalf("Open(records=json) with undecodable records: %v", err)
	}
	if got := lockstore.CodeOf(func() error { _, err := s.IsLocked(t.Context(), "short binary"); return err }()); got != lockstore.Internal {
		t.Errorf("IsLocked on an undecodable record: code %s, want Internal (fail closed)", got)
	}
	_ = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
			if want, ok := bad[string(k)]; ok {
				if !bytes.Equal(v, want) {
					t.Errorf("%q: undecodable record changed to %q", k, v)
				}
			} else if _, err := oldDecode(v); err != nil {
				t.Errorf("%q: not converted: %q", k, v)
			}
			return nil
		})
	})
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, fmt.Sprintf("converted=%d ", f.binary)) || !strings.Contains(out, "undecodable=2") {
		t.Errorf("log does not warn of 2 undecodable records next to %d converted:\n%s", f.binary, out)
	}
}
