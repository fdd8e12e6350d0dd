package postgres

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// slowCommitStore admits in an explicit transaction that pauses before it
// commits, as a busy server may: the admit statement has read the lock and
// inserted its entry, but nobody sees the entry yet. With the acquire's
// advisory lock taken first (lock=true, what Admit does) an acquire of the
// key waits for the commit, so the barrier holds; without it (lock=false)
// a handover and a newer fence's admission slip in.
type slowCommitStore struct {
	*Store
	lock bool
}

func (s slowCommitStore) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	maxMs, err := backend.ValidateAdmission(a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	lockKey, fenceKey, err := storageKeys(nk)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	if err := s.begin(ctx, "admit"); err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	var row admitRow
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if s.lock {
			if _, err := tx.Exec(ctx, s.sql.acquireLock, lockKey); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, s.sql.barrier.admit, lockKey, fenceKey, a.Fence, a.RequireLive, a.WriteID, maxMs,
			a.InFlightCap(), backend.BarrierPruneBatch).
			Scan(row.dest()...); err != nil {
			return err
		}
		if !row.created {
			return nil // only a registering admission is slow to commit
		}
		_, err := tx.Exec(ctx, `SELECT pg_sleep(0.2)`)
		return err
	})
	if err != nil {
		return lockstore.WriteAdmitResult{}, classify(ctx, "admit", err)
	}
	return row.result(nk, a)
}

// TestBarrierNeedsTheAdvisoryLock: the barrier cases pass with the
// advisory lock even when commits are slow, and catch its absence.
func TestBarrierNeedsTheAdvisoryLock(t *testing.T) {
	databaseURL(t)
	harness := func(lock bool) storetest.Harness {
		return storetest.Harness{
			Open: func(t *testing.T, ns string, o storetest.Options) (lockstore.Store, error) {
				// Enough connections for every racer of race_handover, so
				// the handover does not merely queue behind the admissions.
				cfg := nsConfig(t, ns)
				cfg.MaxConns = 16
				cfg.FenceFloor = o.FenceFloor
				dropTablesAtEnd(t, cfg)
				st, err := Open(t.Context(), cfg)
				if err != nil {
					return nil, err
				}
				return slowCommitStore{Store: st, lock: lock}, nil
			},
			SetFence: func(t *testing.T, _ lockstore.Store, _, _ string, _ int64) { t.Fatal("not used by the barrier cases") },
		}
	}
	t.Run("with-lock", func(t *testing.T) {
		t.Parallel()
		if failed := storetest.BarrierFailures(t, harness(true)); len(failed) > 0 {
			t.Fatalf("barrier cases fail with the advisory lock and slow commits: %v", failed)
		}
	})
	t.Run("without-lock", func(t *testing.T) {
		t.Parallel()
		failed := storetest.BarrierFailures(t, harness(false))
		names := make([]string, 0, len(failed))
		for n := range failed {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Logf("cases that caught the missing advisory lock: %v", names)
		if _, ok := failed["race_handover"]; !ok {
			t.Errorf("race_handover passed without the advisory lock; it must catch a newer fence admitted beside an uncommitted older entry")
		}
	})
}
