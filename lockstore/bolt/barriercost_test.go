package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// TestBarrierLegacyRecordsMoved: entries an earlier version kept in the
// write_barrier bucket (one JSON record per key) are moved into the index
// at Open and keep blocking newer fences until finished.
func TestBarrierLegacyRecordsMoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "legacy.db")
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: path, FenceFloor: backend.FloorOff})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Acquire(ctx, "k", time.Hour)
	if err != nil || !a.OK {
		t.Fatalf("Acquire = %+v, %v", a, err)
	}
	id1, id2 := newWriteID(t), newWriteID(t)
	legacy := map[string]backend.WriteEntry{
		id1: {Fence: a.Fence, DeadlineMs: time.Now().Add(time.Hour).UnixMilli()},
		id2: {Fence: a.Fence, DeadlineMs: time.Now().Add(time.Hour).UnixMilli()},
	}
	v, _ := json.Marshal(legacy)
	if err := s.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketWrites).Put([]byte("k"), v) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(ctx, Config{Path: path, FenceFloor: backend.FloorOff})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.db.View(func(tx *bbolt.Tx) error {
		if n := tx.Bucket(bucketWrites).Stats().KeyN; n != 0 {
			return fmt.Errorf("legacy bucket keeps %d records after Open", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Release(ctx, a.LockID); err != nil || !r.OK {
		t.Fatalf("Release = %+v, %v", r, err)
	}
	b, err := s.Acquire(ctx, "k", time.Hour)
	if err != nil || !b.OK {
		t.Fatalf("Acquire = %+v, %v", b, err)
	}
	newer := func() lockstore.WriteAdmitResult {
		r, err := s.Admit(ctx, "k", lockstore.WriteAdmission{Fence: b.Fence, RequireLive: true, WriteID: newWriteID(t), MaxWrite: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := newer(); r.Admitted || r.Blocking != 2 {
		t.Fatalf("Admit(newer fence) beside 2 moved entries = %+v, want blocked by 2", r)
	}
	for _, id := range []string{id1, id2} {
		if err := s.Finish(ctx, "k", id); err != nil {
			t.Fatal(err)
		}
	}
	if r := newer(); !r.Admitted {
		t.Fatalf("Admit(newer fence) after finishing the moved entries = %+v, want admitted", r)
	}
}

func newWriteID(t *testing.T) string {
	t.Helper()
	id, err := lockstore.NewLockID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// legacyAdmit is Admit as earlier versions did it: the key's entries as
// one record, decoded, walked and rewritten whole (Apply over getWrites /
// putWrites). The broken variant TestBarrierAdmitWorkFlat must catch.
func (s *Store) legacyAdmit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	k, maxMs, err := backend.PrecheckAdmit(ctx, key, a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var res lockstore.WriteAdmitResult
	err = s.update(ctx, "admit", func(tx *bbolt.Tx) error {
		ks, err := s.keyState(tx, k, s.nowMs())
		if err != nil {
			return err
		}
		entries, err := getWrites(tx, k)
		if err != nil {
			return err
		}
		var changed bool
		a.MaxInFlight = lockstore.MaxInFlightLimit
		res, changed = backend.ApplyAdmission(a, entries, ks, maxMs)
		if changed {
			return putWrites(tx, k, entries)
		}
		return nil
	})
	return res, err
}

// TestBarrierAdmitWorkFlat: beside 5,000 abandoned, unexpired entries on
// one key, an Admit of that key (refused Full) and of an unrelated key
// writes about as many pages as an Admit of an empty key (bbolt's own
// count of pages written, so no wall clock); an Admit that walks and
// rewrites the key's entries (legacyAdmit) is caught by the same bound.
func TestBarrierAdmitWorkFlat(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "work.db"), FenceFloor: backend.FloorOff})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const size = 5000
	acquire := func(key string) string {
		r, err := s.Acquire(ctx, key, time.Hour)
		if err != nil || !r.OK {
			t.Fatalf("Acquire(%s) = %+v, %v", key, r, err)
		}
		return r.Fence
	}
	piled, other, empty := acquire("piled"), acquire("other"), acquire("empty")
	// The pile: one transaction, through the index's own add.
	if err := s.db.Update(func(tx *bbolt.Tx) error {
		b, p := barrierOf(tx), keyPrefix("piled")
		c := counts{}
		dl := time.Now().Add(time.Hour).UnixMilli()
		for range size {
			if err := b.add(p, newWriteID(t), backend.WriteEntry{Fence: piled, DeadlineMs: dl}, c); err != nil {
				return err
			}
		}
		return b.putCounts("piled", c)
	}); err != nil {
		t.Fatal(err)
	}
	pages := func(reps int, admit func(context.Context, string, lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error), key, fence string, want func(lockstore.WriteAdmitResult) bool) float64 {
		st := s.db.Stats()
		before := st.TxStats.GetWrite()
		for range reps {
			r, err := admit(ctx, key, lockstore.WriteAdmission{Fence: fence, RequireLive: true, WriteID: newWriteID(t), MaxWrite: time.Minute})
			if err != nil || !want(r) {
				t.Fatalf("Admit(%s) = %+v, %v", key, r, err)
			}
		}
		st = s.db.Stats()
		return float64(st.TxStats.GetWrite()-before) / float64(reps)
	}
	admitted := func(r lockstore.WriteAdmitResult) bool { return r.Admitted }
	full := func(r lockstore.WriteAdmitResult) bool { return r.Full }
	emptyPages := pages(50, s.Admit, "empty", empty, admitted)
	piledPages := pages(50, s.Admit, "piled", piled, full)
	otherPages := pages(50, s.Admit, "other", other, admitted)
	legacyPages := pages(3, s.legacyAdmit, "piled", piled, admitted)
	t.Logf("pages written per Admit: empty key %.1f; beside %d entries: same key %.1f, unrelated key %.1f; the legacy record walk %.1f",
		emptyPages, size, piledPages, otherPages, legacyPages)
	bound := 2*emptyPages + 8
	if piledPages > bound || otherPages > bound {
		t.Errorf("Admit beside %d entries writes %.1f (same key) / %.1f (other key) pages, want at most %.1f", size, piledPages, otherPages, bound)
	}
	if legacyPages <= bound {
		t.Errorf("the legacy walk writes %.1f pages, within the bound %.1f: the bound would not catch it", legacyPages, bound)
	}
}
