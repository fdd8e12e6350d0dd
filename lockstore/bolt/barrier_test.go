package bolt

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
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
}

// TestBarrierCasesCatchBrokenStores runs the suite's barrier cases against
// each broken variant and asserts that the cases meant to catch it fail;
// and against the real store, where every case must pass (so the recorder
// is not failing everything).
func TestBarrierCasesCatchBrokenStores(t *testing.T) {
	harness := func(variant string) storetest.Harness {
		dir := t.TempDir()
		return storetest.Harness{
			Open: func(t *testing.T, ns string) lockstore.Store {
				s, err := Open(t.Context(), Config{Path: filepath.Join(dir, ns+".db")})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if variant == "" {
					return s
				}
				return &brokenBarrier{Store: s, variant: variant}
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
				r, err := getLock(tx, k)
				if err != nil || r == nil {
					return err
				}
				r.ExpiresAtMs = b.nowMs() + a.MaxWrite.Milliseconds()
				v, _ := json.Marshal(r)
				return tx.Bucket(bucketLocks).Put([]byte(k), v)
			})
		}
		return res, err
	case "ignores-blocking", "never-expires":
		return b.admitRule(ctx, key, a)
	}
	return b.Store.Admit(ctx, key, a)
}

func (b *brokenBarrier) Finish(ctx context.Context, key, writeID string) error {
	if b.variant == "finish-noop" {
		if _, err := lockstore.NormalizeKey(key); err != nil {
			return err
		}
		return lockstore.ValidateWriteID(writeID)
	}
	return b.Store.Finish(ctx, key, writeID)
}

// admitRule is Admit in one transaction with the rule bent per variant.
func (b *brokenBarrier) admitRule(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	maxMs, err := a.Validate()
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var res lockstore.WriteAdmitResult
	err = b.update(ctx, "admit", func(tx *bbolt.Tx) error {
		res = lockstore.WriteAdmitResult{}
		ks, err := keyState(tx, k, b.nowMs())
		if err != nil {
			return err
		}
		res.State = ks
		entries, err := getWrites(tx, k)
		if err != nil || !a.Matches(ks) {
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
		entries[a.WriteID] = lockstore.WriteEntry{Fence: a.Fence, DeadlineMs: ks.NowMs + maxMs}
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
	maxMs, err := a.Validate()
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var res lockstore.WriteAdmitResult
	err = b.view(ctx, "admit", func(tx *bbolt.Tx) error {
		ks, err := keyState(tx, k, b.nowMs())
		if err != nil {
			return err
		}
		entries, err := getWrites(tx, k)
		if err != nil {
			return err
		}
		res, _ = a.Apply(entries, ks, maxMs)
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
		entries[a.WriteID] = lockstore.WriteEntry{Fence: a.Fence, DeadlineMs: res.State.NowMs + maxMs}
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
		entries[a.WriteID] = lockstore.WriteEntry{Fence: a.Fence, DeadlineMs: b.nowMs() + a.MaxWrite.Milliseconds()}
		return putWrites(tx, k, entries)
	})
}
