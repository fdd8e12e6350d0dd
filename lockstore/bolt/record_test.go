package bolt

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// TestRecordCodec: the binary record round-trips, and every malformed
// value, in either format, is a corrupt record (Internal), never a lock
// that reads as free or as someone else's.
func TestRecordCodec(t *testing.T) {
	const id = "AAAAAAAAAAAAAAAAAAAAAA"
	r := &lockRecord{LockID: id, ExpiresAtMs: 1_700_000_005_000, AcquiredAtMs: 1_700_000_000_000, Key: "k", Fence: "000000000000042"}
	v, err := encodeRecord(r)
	if err != nil || len(v) != recordV1Length {
		t.Fatalf("encode: %d bytes, %v", len(v), err)
	}
	got, err := decodeRecord("k", v)
	if err != nil || *got != *r {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, r)
	}
	legacy, err := encodeJSONRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeRecord("k", legacy); err != nil || *got != *r {
		t.Fatalf("JSON record = %+v, %v; want %+v", got, err, r)
	}

	withFence := func(f uint64) []byte {
		w := append([]byte(nil), v...)
		for i := range 8 {
			w[17+i] = byte(f >> (56 - 8*i))
		}
		return w
	}
	for name, bad := range map[string][]byte{
		"empty":             {},
		"unknown format":    append([]byte{0x02}, v[1:]...),
		"short":             v[:recordV1Length-1],
		"long":              append(append([]byte(nil), v...), 'x'),
		"fence 0":           withFence(0),
		"fence past max":    withFence(uint64(lockstore.FenceMax) + 1),
		"fence past int64":  withFence(1 << 63),
		"bad lockId":        append(append([]byte(nil), v[:25]...), []byte("AAAAAAAAAAAAAAAAAAAAA!")...),
		"JSON, bad syntax":  []byte(`{"lockId":`),
		"JSON, other key":   []byte(`{"lockId":"` + id + `","expiresAtMs":1,"acquiredAtMs":1,"key":"other","fence":"000000000000001"}`),
		"JSON, no expiry":   []byte(`{"lockId":"` + id + `","acquiredAtMs":1,"key":"k","fence":"000000000000001"}`),
		"JSON, short fence": []byte(`{"lockId":"` + id + `","expiresAtMs":1,"acquiredAtMs":1,"key":"k","fence":"1"}`),
		"JSON, bad lockId":  []byte(`{"lockId":"x","expiresAtMs":1,"acquiredAtMs":1,"key":"k","fence":"000000000000001"}`),
	} {
		got, err := decodeRecord("k", bad)
		if err == nil || lockstore.CodeOf(err) != lockstore.Internal {
			t.Errorf("%s: decode = %+v, %v; want an Internal error", name, got, err)
		}
	}
}

// legacyT0 is the fake clock's time when the legacy file is opened.
const legacyT0 int64 = 1_700_000_000_000

// writeLegacyFile creates a bbolt file as a fencegate before the binary
// record left it: JSON lock records (byte for byte as it wrote them), the
// lockId index and decimal fence counters. Keys: "held" and "café" (NFC)
// are live, "stale" has expired.
func writeLegacyFile(t *testing.T, path string) map[string]string {
	t.Helper()
	ids := map[string]string{"held": "HeldHeldHeldHeldHeld01", "caf\u00e9": "CafeCafeCafeCafeCafe02", "stale": "StaleStaleStaleStale03"}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bucketLocks, bucketIDs, bucketFences} {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		for _, l := range []struct {
			key              string
			expires, counter int64
		}{
			{"held", legacyT0 + 60_000, 7},
			{"caf\u00e9", legacyT0 + 60_000, 2},
			{"stale", legacyT0 - lockstore.TimeToleranceMs - 1, 3},
		} {
			v := fmt.Sprintf(`{"lockId":"%s","expiresAtMs":%d,"acquiredAtMs":%d,"key":"%s","fence":"%015d"}`,
				ids[l.key], l.expires, legacyT0-1000, l.key, l.counter)
			if err := tx.Bucket(bucketLocks).Put([]byte(l.key), []byte(v)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketIDs).Put([]byte(ids[l.key]), []byte(l.key)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketFences).Put([]byte(l.key), fmt.Appendf(nil, "%d", l.counter)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// legacyProblems opens a file of JSON records with decode as the store's
// decoder and runs every lock operation on them, returning what went
// wrong (nothing, for a correct decoder).
func legacyProblems(t *testing.T, decode func(string, []byte) (*lockRecord, error)) []string {
	path := filepath.Join(t.TempDir(), "legacy.db")
	ids := writeLegacyFile(t, path)
	s, clk := openFake(t, Config{Path: path})
	clk.Set(time.UnixMilli(legacyT0))
	s.decode = decode
	ctx := t.Context()
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	fence := func(n int) string { return fmt.Sprintf("%015d", n) }

	// Reads.
	for key, f := range map[string]string{"held": fence(7), "cafe\u0301": fence(2)} {
		locked, err := s.IsLocked(ctx, key)
		check(err == nil && locked, "IsLocked(%q) = %v, %v; want true", key, locked, err)
		li, err := s.LookupKey(ctx, key)
		check(err == nil && li != nil && li.Fence == f && li.ExpiresAtMs == legacyT0+60_000 && li.AcquiredAtMs == legacyT0-1000,
			"LookupKey(%q) = %+v, %v; want fence %s", key, li, err, f)
		nk, _ := lockstore.NormalizeKey(key)
		li, err = s.LookupLockID(ctx, ids[nk])
		check(err == nil && li != nil && li.Fence == f, "LookupLockID(%s) = %+v, %v; want fence %s", key, li, err, f)
		ks, err := s.Inspect(ctx, key)
		check(err == nil && ks.Live != nil && ks.Live.LockID == ids[nk] && ks.Live.Fence == f && ks.LatestFence == f,
			"Inspect(%q) = %+v, %v; want live lock %s", key, ks, err, f)
	}
	locked, err := s.IsLocked(ctx, "stale")
	check(err == nil && !locked, "IsLocked(stale) = %v, %v; want false (expired)", locked, err)
	ks, err := s.Inspect(ctx, "stale")
	check(err == nil && ks.Live == nil && ks.LatestFence == fence(3), "Inspect(stale) = %+v, %v", ks, err)
	n, err := s.CountHeld(ctx)
	check(err == nil && n == 2, "CountHeld = %d, %v; want 2", n, err)
	l, err := s.ListHeld(ctx, 10)
	check(err == nil && len(l.Locks) == 2, "ListHeld = %+v, %v; want 2 locks", l, err)

	// The barrier reads a legacy lock as Inspect does.
	res, err := s.Admit(ctx, "held", lockstore.WriteAdmission{Fence: fence(7), RequireLive: true, WriteID: "WriteWriteWriteWrite01", MaxWrite: time.Second})
	check(err == nil && res.Admitted, "Admit(held, its fence) = %+v, %v; want admitted", res, err)
	if err == nil && res.Admitted {
		check(s.Finish(ctx, "held", "WriteWriteWriteWrite01") == nil, "Finish(held) failed")
	}

	// Writes: a live legacy lock is not taken; an expired one is
	// reclaimed with the next fence; extend keeps the lock, release frees it.
	a, err := s.Acquire(ctx, "held", time.Minute)
	check(err == nil && !a.OK, "Acquire(held) = %+v, %v; want refused (held)", a, err)
	a, err = s.Acquire(ctx, "stale", time.Minute)
	check(err == nil && a.OK && a.Fence == fence(4), "Acquire(stale) = %+v, %v; want fence %s", a, err, fence(4))
	rel, err := s.Release(ctx, ids["stale"])
	check(err == nil && !rel.OK, "Release(old stale lockId) = %+v, %v; want not OK", rel, err)
	clk.Set(time.UnixMilli(legacyT0 + 1000))
	e, err := s.Extend(ctx, ids["caf\u00e9"], time.Hour)
	check(err == nil && e.OK && e.ExpiresAtMs == legacyT0+1000+3_600_000, "Extend(café) = %+v, %v", e, err)
	ks, err = s.Inspect(ctx, "caf\u00e9")
	check(err == nil && ks.Live != nil && ks.Live.Fence == fence(2) && ks.Live.ExpiresAtMs == legacyT0+1000+3_600_000,
		"Inspect(café) after extend = %+v, %v", ks, err)
	_ = s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketLocks).Get([]byte("caf\u00e9"))
		check(len(v) > 0 && v[0] == recordV1, "the extended record was not rewritten in the binary format: %q", v)
		return nil
	})
	rel, err = s.Release(ctx, ids["held"])
	check(err == nil && rel.OK, "Release(held) = %+v, %v; want OK", rel, err)
	a, err = s.Acquire(ctx, "held", time.Minute)
	check(err == nil && a.OK && a.Fence == fence(8), "Acquire(held) after release = %+v, %v; want fence %s", a, err, fence(8))
	rel, err = s.Release(ctx, ids["caf\u00e9"])
	check(err == nil && rel.OK, "Release(café) = %+v, %v; want OK", rel, err)
	n, err = s.CountHeld(ctx)
	check(err == nil && n == 2, "CountHeld at the end = %d, %v; want 2 (held, stale)", n, err)
	return problems
}

// TestLegacyJSONRecords: a file written before the binary record (JSON
// lock records) works under every operation, and the same check fails
// against decoders that misread such records.
func TestLegacyJSONRecords(t *testing.T) {
	if p := legacyProblems(t, decodeRecord); len(p) > 0 {
		t.Fatalf("legacy JSON records:\n%s", strings.Join(p, "\n"))
	}
	onJSON := func(change func(*lockRecord)) func(string, []byte) (*lockRecord, error) {
		return func(k string, v []byte) (*lockRecord, error) {
			r, err := decodeRecord(k, v)
			if err == nil && v[0] == '{' {
				change(r)
			}
			return r, err
		}
	}
	for name, decode := range map[string]func(string, []byte) (*lockRecord, error){
		"binary only": func(k string, v []byte) (*lockRecord, error) {
			if v[0] != recordV1 {
				return nil, errors.New("not a binary record")
			}
			return decodeRecord(k, v)
		},
		"expiry dropped":    onJSON(func(r *lockRecord) { r.ExpiresAtMs = 0 }),
		"fence dropped":     onJSON(func(r *lockRecord) { r.Fence = "000000000000001" }),
		"lockId misread":    onJSON(func(r *lockRecord) { r.LockID = strings.ToLower(r.LockID) }),
		"acquiredAt as exp": onJSON(func(r *lockRecord) { r.AcquiredAtMs = r.ExpiresAtMs }),
	} {
		if p := legacyProblems(t, decode); len(p) == 0 {
			t.Errorf("the legacy check passed a decoder with %s", name)
		} else {
			t.Logf("%s caught: %s", name, p[0])
		}
	}
}

// TestConformanceJSONRecords runs the shared suite on stores opened
// through the URL option records=json: every lock record is written in
// the JSON format older versions read, so every case also covers reading,
// extending and releasing the records of older files, and each reopen
// runs the conversion on a file in use.
func TestConformanceJSONRecords(t *testing.T) {
	storetest.Run(t, harnessQuery(t, "records=json", func(s *Store) lockstore.Store {
		v, err := s.encode(&lockRecord{LockID: "AAAAAAAAAAAAAAAAAAAAAA", Key: "k", Fence: "000000000000001"})
		if err != nil || len(v) == 0 || v[0] != recordJSON {
			t.Fatalf("a store opened with records=json writes %q, %v; want a JSON record", v, err)
		}
		return s
	}))
}
