package firestore

import (
	"context"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// outsideReadStore decides outside the transaction that registers the
// write (a plain batched read of lock, counter and entries, then a pause,
// then a transaction over the barrier document only): a handover and a
// newer fence's admission can commit in between. The suite's barrier cases
// must catch it.
type outsideReadStore struct{ *Store }

func (s outsideReadStore) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	const op = "admit"
	nk, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	maxMs, err := backend.ValidateAdmission(a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	lockID, fenceID, err := docIDs(nk)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	if ce := lockstore.ContextError(ctx, op); ce != nil {
		return lockstore.WriteAdmitResult{}, ce
	}
	wRef := s.barrierRef(lockID)
	snaps, err := s.client.GetAll(ctx, []*firestore.DocumentRef{s.locks.Doc(lockID), s.fences.Doc(fenceID), wRef})
	if err != nil {
		return lockstore.WriteAdmitResult{}, classify(ctx, op, err)
	}
	ks, err := keyState(snaps[0], snaps[1], nk, s.nowMs(), op)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	entries, err := decodeWrites(snaps[2], op)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	res, _ := backend.ApplyAdmission(a, entries, ks, maxMs)
	if !res.Admitted {
		return res, nil
	}
	// The pause stands for a slow client between its decision and its
	// commit; the registration then merges into whatever is stored now.
	time.Sleep(400 * time.Millisecond)
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		ws, err := tx.GetAll([]*firestore.DocumentRef{wRef})
		if err != nil {
			return err
		}
		cur, err := decodeWrites(ws[0], op)
		if err != nil {
			return err
		}
		cur[a.WriteID] = backend.WriteEntry{Fence: a.Fence, DeadlineMs: ks.NowMs + maxMs}
		return putWrites(tx, wRef, nk, cur)
	})
	return res, classify(ctx, op, err)
}

// TestBarrierReadOutsideTransactionIsCaught: the lock must be read in the
// registering transaction; the suite catches a store that reads it before.
func TestBarrierReadOutsideTransactionIsCaught(t *testing.T) {
	needEmulator(t)
	failed := storetest.BarrierFailures(t, storetest.Harness{
		Open: func(t *testing.T, ns string, o storetest.Options) (lockstore.Store, error) {
			cfg := nsConfig(t, ns)
			cfg.FenceFloor = o.FenceFloor
			if o.Now != nil {
				cfg.Now = o.Now
			}
			s, err := Open(context.Background(), cfg)
			if err != nil {
				return nil, err
			}
			return outsideReadStore{s}, nil
		},
		SetFence: func(t *testing.T, _ lockstore.Store, _, _ string, _ int64) { t.Fatal("not used by the barrier cases") },
	})
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("cases that caught the read outside the transaction: %v", names)
	if _, ok := failed["race_handover"]; !ok {
		t.Errorf("race_handover passed against a store that reads the lock outside its transaction")
	}
}

// TestBarrierCapBoundsTheDocument: whatever cap an admission asks for, a
// key's barrier document never holds more than maxInFlight unexpired
// entries (Firestore's document limits), and at that many a matching fence
// is refused Full; the time of an Admit beside them is logged.
func TestBarrierCapBoundsTheDocument(t *testing.T) {
	needEmulator(t)
	cfg := nsConfig(t, "barriercap")
	cfg.FenceFloor = backend.FloorOff
	s := openStore(t, cfg)
	ctx := context.Background()
	const key = "capped"
	a, err := s.Acquire(ctx, key, time.Hour)
	if err != nil || !a.OK {
		t.Fatalf("Acquire = %+v, %v", a, err)
	}
	nk, _ := lockstore.NormalizeKey(key)
	lockID, _, err := docIDs(nk)
	if err != nil {
		t.Fatal(err)
	}
	admit := func(capN int) (lockstore.WriteAdmitResult, time.Duration) {
		id, _ := lockstore.NewLockID()
		t0 := time.Now()
		r, err := s.Admit(ctx, key, lockstore.WriteAdmission{Fence: a.Fence, RequireLive: true, WriteID: id, MaxWrite: time.Hour, MaxInFlight: capN})
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
		return r, time.Since(t0)
	}
	_, empty := admit(0)
	d := barrierDoc{Key: nk, Writes: map[string]barrierEntry{}}
	dl := time.Now().Add(time.Hour).UnixMilli()
	for len(d.Writes) < maxInFlight {
		id, _ := lockstore.NewLockID()
		d.Writes[id] = barrierEntry{Fence: a.Fence, DeadlineMs: dl}
	}
	d.MaxDeadlineMs = dl
	if _, err := s.barrierRef(lockID).Set(ctx, d); err != nil {
		t.Fatalf("seeding %d entries: %v", maxInFlight, err)
	}
	r, full := admit(lockstore.MaxInFlightLimit)
	if r.Admitted || !r.Full {
		t.Fatalf("Admit(MaxInFlight %d) beside %d entries = %+v, want Full (the cap is clamped to %d)", lockstore.MaxInFlightLimit, maxInFlight, r, maxInFlight)
	}
	t.Logf("Admit: empty key %s; beside %d entries %s", empty, maxInFlight, full)
}
