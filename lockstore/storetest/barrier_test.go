package storetest_test

import (
	"context"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// The reference store's write barrier: the rule applied under the store's
// one mutex, straight from the contract.

func (s *refStore) Admit(ctx context.Context, key string, a lockstore.WriteAdmission) (lockstore.WriteAdmitResult, error) {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	ms, err := backend.ValidateAdmission(a)
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	unlock, err := s.start(ctx, "admit")
	if err != nil {
		return lockstore.WriteAdmitResult{}, err
	}
	defer unlock()
	ks := s.stateLocked(k)
	if s.d.writes == nil {
		s.d.writes = map[string]map[string]backend.WriteEntry{}
	}
	entries := s.d.writes[k]
	if entries == nil {
		entries = map[string]backend.WriteEntry{}
		s.d.writes[k] = entries
	}
	res, _ := backend.ApplyAdmission(a, entries, ks, ms)
	return res, nil
}

// stateLocked reads key k's state; the caller holds the mutex.
func (s *refStore) stateLocked(k string) lockstore.KeyState {
	ks := lockstore.KeyState{NowMs: s.now()}
	if n := s.d.fences[k]; n > 0 {
		ks.LatestFence, _ = lockstore.FormatFence(n)
	}
	if l, ok := s.d.locks[k]; ok && backend.IsLive(l.exps, ks.NowMs) {
		f, _ := lockstore.FormatFence(l.fence)
		ks.Live = &lockstore.Lock{Key: k, LockID: l.id, Fence: f, ExpiresAtMs: l.exps, AcquiredAtMs: l.acquired}
	}
	return ks
}

func (s *refStore) Finish(ctx context.Context, key, writeID string) error {
	k, err := lockstore.NormalizeKey(key)
	if err != nil {
		return err
	}
	if err := backend.ValidateWriteID(writeID); err != nil {
		return err
	}
	unlock, err := s.start(ctx, "finish")
	if err != nil {
		return err
	}
	defer unlock()
	delete(s.d.writes[k], writeID)
	return nil
}

// SweepBarrier removes up to limit entries whose deadline passed.
func (s *refStore) SweepBarrier(ctx context.Context, limit int) (int, error) {
	if err := backend.ValidateSweepLimit(limit); err != nil {
		return 0, err
	}
	unlock, err := s.start(ctx, "sweep")
	if err != nil {
		return 0, err
	}
	defer unlock()
	removed, t := 0, s.now()
	for k, entries := range s.d.writes {
		for id, e := range entries {
			if removed < limit && e.DeadlineMs <= t {
				delete(entries, id)
				removed++
			}
		}
		if len(entries) == 0 {
			delete(s.d.writes, k)
		}
	}
	return removed, nil
}
