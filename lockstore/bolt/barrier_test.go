package bolt

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// brokenBarrier is the bolt store with one part of the write barrier done
// wrong. Each variant is a mistake a backend could plausibly make; the
// conformance suite's barrier cases must catch every one.
type brokenBarrier struct {
	*Store
	variant string
}

// The variants, with the barrier cases that must fail for each.
var brokenBarrierVariants = map[string][]string{
	// Admit registers any matching fence, ignoring older writes in flight.
	"ignores-blocking": {"newer_blocked", "same_fence", "race_handover", "survives_reopen"},
	// Finish does nothing: entries leave only by expiring.
	"finish-noop": {"newer_blocked", "finish_absent", "survives_reopen", "race_handover"},
	// Deadlines are ignored: an abandoned write blocks forever.
	"never-expires": {"expired_entry"},
	// Read and registration in two transactions, with a pause between:
	// a handover can slip in between.
	"not-atomic": {"race_handover"},
	// A refused (stale) write is registered anyway.
	"registers-refused": {"stale_unknown"},
	// Admitting a write refreshes the holder's lock: Admit must never
	// touch locks.
	"touches-lock": {"untouched"},
	// The sweep removes entries whatever their deadline.
	"sweeps-live": {"sweep"},
	// The sweep removes nothing (and says so).
	"sweep-noop": {"sweep_counts"},
	// The sweep refreshes the locks of the keys it visits.
	"sweep-touches-lock": {"sweep"},
	// No cap on a key's writes in flight: abandoned writes pile up
	// without bound.
	"no-cap": {"bounded"},
	// The cap counts entries past their deadline: abandoned writes that
	// already count as finished keep a key full.
	"cap-counts-expired": {"bounded"},
}

// TestBarrierCasesCatchBrokenStores runs the suite's barrier cases against
// each broken variant and asserts that the cases meant to catch it fail;
// and against the real store, where every case must pass (so the recorder
// is not failing everything).
func TestBarrierCasesCatchBrokenStores(t *testing.T) {
	harness := func(variant string) storetest.Harness {
		dir := t.TempDir()
		return storetest.Harness{
			Open: func(t *testing.T, ns string, o storetest.Options) (lockstore.Store, error) {
				s, err := Open(t.Context(), Config{Path: filepath.Join(dir, ns+".db"), FenceFloor: o.FenceFloor})
				if err != nil {
					return nil, err
				}
				if o.Now != nil {
					s.now = o.Now
				}
				if variant == "" {
					return s, nil
				}
				return &brokenBarrier{Store: s, variant: variant}, nil
			},
			SetFence: func(t *testing.T, s lockstore.Store, ns, key string, n int64) {
				t.Fatal("not used by the barrier cases")
			},
		}
	}
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		if failed := storetest.BarrierFailures(t, harness("")); len(failed) > 0 {
			t.Fatalf("the real bolt store fails barrier cases: %v", failed)
		}
	})
	for variant, want := range brokenBarrierVariants {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			failed := storetest.BarrierFailures(t, harness(variant))
			var names []string
			for name := range failed {
				names = append(names, name)
			}
			slices.Sort(names)
			t.Logf("cases that caught %s: %s", variant, strings.Join(names, ", "))
			for _, w := range want {
				if _, ok := failed[w]; !ok {
					t.Errorf("barrier case %q passed against the %s variant; it must catch it", w, variant)
				}
			}
		})
	}
}

func (b *brokenBarrier) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	switch b.variant {
	case "not-atomic":
		return b.admitNotAtomic(ctx, key, a)
	case "registers-refused":
		res, err := b.Store.Admit(ctx, key, a)
		if err == nil && !res.Admitted {
			b.forceRegister(ctx, key, a)
		}
		return res, err
	case "touches-lock":
		res, err := b.Store.Admit(ctx, key, a)
		if err == nil && res.Admitted {
			k, _ := lockstore.NormalizeKey(key)
			_ = b.update(ctx, "admit", func(tx *bbolt.Tx) error {
				r, err := b.getLock(tx, k)
				if err != nil || r == nil {
					return err
				}
				r.ExpiresAtMs = b.nowMs() + a.MaxWrite.Milliseconds()
				return b.putLock(tx, r)
			})
		}
		return res, err
	case "ignores-blocking", "never-expires":
		return b.admitRule(ctx, key, a)
	case "no-cap":
		a.MaxInFlight = lockstore.MaxInFlightLimit
	case "cap-counts-expired":
		k, err := lockstore.NormalizeKey(key)
		if err != nil {
			return lockstore.WriteAdmitResult{}, err
		}
		var stored map[string]backend.WriteEntry
		if err := b.view(ctx, "admit", func(tx *bbolt.Tx) error {
			stored, err = getWrites(tx, k)
			return err
		}); err != nil {
			return lockstore.WriteAdmitResult{}, err
		}
		if _, again := stored[a.WriteID]; !again && len(stored) >= a.InFlightCap() {
			res, err := b.Store.Admit(ctx, key, lockstore.WriteAdmission{Fence: a.Fence, RequireLive: a.RequireLive,
				WriteID: a.WriteID, MaxWrite: a.MaxWrite, MaxInFlight: 1})
			if err != nil || !res.Admitted {
				return res, err
			}
			// Take it back: the broken cap said no.
			_ = b.Store.Finish(ctx, key, a.WriteID)
			return lockstore.WriteAdmitResult{State: res.State, Full: true}, nil
		}
	}
	return b.Store.Admit(ctx, key, a)
}

func (b *brokenBarrier) Finish(ctx context.Context, key, writeID string) error {
	if b.variant == "finish-noop" {
		if _, err := lockstore.NormalizeKey(key); err != nil {
			return err
		}
		return backend.ValidateWriteID(writeID)
	}
	return b.Store.Finish(ctx, key, writeID)
}

// admitRule is Admit in one transaction with the rule bent per variant.
func (b *brokenBarrier) admitRule(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	maxMs, err := backend.ValidateAdmission(a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var res lockstore.WriteAdmitResult
	err = b.update(ctx, "admit", func(tx *bbolt.Tx) error {
		res = lockstore.WriteAdmitResult{}
		ks, err := b.keyState(tx, k, b.nowMs())
		if err != nil {
			return err
		}
		res.State = ks
		entries, err := getWrites(tx, k)
		if err != nil || !backend.AdmissionMatches(a, ks) {
			return err
		}
		for _, e := range entries {
			if b.variant == "never-expires" && e.Fence < a.Fence {
				res.Blocking++
				res.BlockedUntilMs = max(res.BlockedUntilMs, e.DeadlineMs)
			}
		}
		if res.Blocking > 0 {
			return nil
		}
		entries[a.WriteID] = backend.WriteEntry{Fence: a.Fence, DeadlineMs: ks.NowMs + maxMs}
		res.Admitted = true
		return putWrites(tx, k, entries)
	})
	return res, err
}

// admitNotAtomic decides in a read transaction and registers in a later
// write transaction.
func (b *brokenBarrier) admitNotAtomic(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	maxMs, err := backend.ValidateAdmission(a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var res lockstore.WriteAdmitResult
	err = b.view(ctx, "admit", func(tx *bbolt.Tx) error {
		ks, err := b.keyState(tx, k, b.nowMs())
		if err != nil {
			return err
		}
		entries, err := getWrites(tx, k)
		if err != nil {
			return err
		}
		res, _ = backend.ApplyAdmission(a, entries, ks, maxMs)
		return nil
	})
	if err != nil || !res.Admitted {
		return res, err
	}
	time.Sleep(150 * time.Millisecond) // the window a real implementation would leave by accident
	return res, b.update(ctx, "admit", func(tx *bbolt.Tx) error {
		entries, err := getWrites(tx, k)
		if err != nil {
			return err
		}
		entries[a.WriteID] = backend.WriteEntry{Fence: a.Fence, DeadlineMs: res.State.NowMs + maxMs}
		return putWrites(tx, k, entries)
	})
}

// forceRegister writes an entry for a without any rule.
func (b *brokenBarrier) forceRegister(ctx context.Context, key string, a lockstore.WriteAdmission) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return
	}
	_ = b.update(ctx, "admit", func(tx *bbolt.Tx) error {
		entries, err := getWrites(tx, k)
		if err != nil {
			return err
		}
		entries[a.WriteID] = backend.WriteEntry{Fence: a.Fence, DeadlineMs: b.nowMs() + a.MaxWrite.Milliseconds()}
		return putWrites(tx, k, entries)
	})
}

func (b *brokenBarrier) SweepBarrier(ctx context.Context, limit int) (int, error) {
	switch b.variant {
	case "sweep-noop":
		return 0, backend.ValidateSweepLimit(limit)
	case "sweeps-live", "sweep-touches-lock":
		if err := backend.ValidateSweepLimit(limit); err != nil {
			return 0, err
		}
		removed := 0
		err := b.update(ctx, "sweep", func(tx *bbolt.Tx) error {
			removed = 0
			var keys []string
			err := tx.Bucket(bucketWriteKeys).ForEach(func(k, _ []byte) error {
				entries, err := getWrites(tx, string(k))
				if err != nil {
					return err
				}
				for _, e := range entries {
					if b.variant == "sweeps-live" || e.DeadlineMs <= b.nowMs() {
						removed++
					}
				}
				keys = append(keys, string(k))
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range keys {
				if b.variant == "sweeps-live" {
					if err := putWrites(tx, k, nil); err != nil {
						return err
					}
					continue
				}
				r, err := b.getLock(tx, k)
				if err != nil || r == nil {
					return err
				}
				r.ExpiresAtMs += 1000
				if err := b.putLock(tx, r); err != nil {
					return err
				}
			}
			return nil
		})
		return removed, err
	}
	return b.Store.SweepBarrier(ctx, limit)
}

// TestSweepBarrierBounded: each sweep removes at most its limit, later
// sweeps continue where it stopped, and unexpired entries stay.
func TestSweepBarrierBounded(t *testing.T) {
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "sweep.db")})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	clock := time.Now()
	s.now = func() time.Time { return clock }
	admitN := func(prefix string, n int, maxWrite time.Duration) {
		for i := range n {
			key := prefix + string(rune('a'+i))
			r, err := s.Acquire(t.Context(), key, time.Hour)
			if err != nil || !r.OK {
				t.Fatalf("Acquire(%s) = %v, %v", key, r, err)
			}
			id, _ := lockstore.NewLockID()
			res, err := s.Admit(t.Context(), key, lockstore.WriteAdmission{Fence: r.Fence, RequireLive: true, WriteID: id, MaxWrite: maxWrite})
			if err != nil || !res.Admitted {
				t.Fatalf("Admit(%s) = %+v, %v", key, res, err)
			}
		}
	}
	admitN("expired-", 5, time.Second)
	admitN("live-", 3, time.Hour)
	clock = clock.Add(time.Second) // deadline <= now: finished

	total := 0
	for range 10 {
		n, err := s.SweepBarrier(t.Context(), 2)
		if err != nil {
			t.Fatalf("SweepBarrier: %v", err)
		}
		if n > 2 {
			t.Fatalf("SweepBarrier(limit 2) removed %d", n)
		}
		total += n
	}
	if total != 5 {
		t.Fatalf("sweeps removed %d entries in all, want the 5 expired", total)
	}
	var left int
	if err := s.view(t.Context(), "test", func(tx *bbolt.Tx) error {
		left = tx.Bucket(bucketWriteKeys).Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if left != 3 {
		t.Fatalf("barrier records after the sweeps = %d, want the 3 live keys'", left)
	}
}

// getWrites reads every entry of key k (a walk: for the broken variants and
// tests only; the store itself never reads a key's entries whole).
func getWrites(tx *bbolt.Tx, k string) (map[string]backend.WriteEntry, error) {
	b, p := barrierOf(tx), keyPrefix(k)
	out := map[string]backend.WriteEntry{}
	cur := b.ids.Cursor()
	for id, _ := cur.Seek(p); id != nil && bytes.HasPrefix(id, p); id, _ = cur.Next() {
		e, ok, err := b.entry(p, string(id[len(p):]))
		if err != nil {
			return nil, err
		}
		if ok {
			out[string(id[len(p):])] = e
		}
	}
	return out, nil
}

// putWrites replaces every entry of key k with entries.
func putWrites(tx *bbolt.Tx, k string, entries map[string]backend.WriteEntry) error {
	old, err := getWrites(tx, k)
	if err != nil {
		return err
	}
	b, p := barrierOf(tx), keyPrefix(k)
	c, err := b.counts(k)
	if err != nil {
		return err
	}
	for id := range old {
		if _, err := b.remove(p, id, c); err != nil {
			return err
		}
	}
	for id, e := range entries {
		if err := b.add(p, id, e, c); err != nil {
			return err
		}
	}
	return b.putCounts(k, c)
}
