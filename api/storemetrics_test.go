package api_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// fenceAtStore issues fences from a counter the test sets, so that the
// warning level can be reached without issuing 90 trillion fences.
type fenceAtStore struct {
	lockstore.Store
	next atomic.Int64
}

func (s *fenceAtStore) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	res, err := s.Store.Acquire(ctx, key, ttl)
	if err == nil && res.OK {
		res.Fence, err = lockstore.FormatFence(s.next.Add(1))
	}
	return res, err
}

func TestFenceWarningsCounted(t *testing.T) {
	st := &fenceAtStore{Store: openStore(t)}
	e := newEnv(t, st, nil)
	warnings := func() float64 {
		t.Helper()
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "fencegate_fence_warnings_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("fencegate_fence_warnings_total not exported")
		return -1
	}
	if got := warnings(); got != 0 {
		t.Fatalf("warnings = %v before any acquire", got)
	}

	// At the warning level exactly: no warning (backends warn past it).
	st.next.Store(lockstore.FenceWarn - 1)
	e.acquire(t, "orders/a", 10_000)
	if got := warnings(); got != 0 {
		t.Fatalf("warnings = %v after fence FenceWarn, want 0", got)
	}
	st.next.Store(lockstore.FenceWarn)
	e.acquire(t, "orders/b", 10_000)
	e.acquire(t, "orders/c", 10_000)
	if got := warnings(); got != 2 {
		t.Fatalf("warnings = %v after two fences past FenceWarn, want 2", got)
	}
	// A denied acquire (the lock is held) issues no fence and counts nothing.
	r := e.post(t, "/v1/locks/acquire", adminToken, map[string]any{"key": "orders/c", "ttlMs": 10_000})
	if r.body["ok"] != false {
		t.Fatalf("acquire of a held key = %d %s, want ok:false", r.status, r.raw)
	}
	if got := warnings(); got != 2 {
		t.Fatalf("warnings = %v after a refused acquire, want still 2", got)
	}
}

// pingStore fails Ping while down is set.
type pingStore struct {
	lockstore.Store
	down atomic.Bool
}

func (s *pingStore) Ping(ctx context.Context) error {
	if s.down.Load() {
		return errors.New("store unreachable")
	}
	return s.Store.Ping(ctx)
}

func TestStoreReadyGauge(t *testing.T) {
	st := &pingStore{Store: openStore(t)}
	e := newEnv(t, st, nil)
	ready := func() float64 {
		t.Helper()
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "fencegate_store_ready" {
				continue
			}
			m := mf.GetMetric()[0]
			if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "backend" || l[0].GetValue() != "bolt" {
				t.Fatalf("fencegate_store_ready labels = %v, want backend=bolt", l)
			}
			return m.GetGauge().GetValue()
		}
		t.Fatal("fencegate_store_ready not exported")
		return -1
	}
	if got := ready(); got != 1 {
		t.Fatalf("fencegate_store_ready = %v with the store up, want 1", got)
	}
	st.down.Store(true)
	if got := ready(); got != 0 {
		t.Fatalf("fencegate_store_ready = %v with the store down, want 0", got)
	}
	st.down.Store(false)
	if got := ready(); got != 1 {
		t.Fatalf("fencegate_store_ready = %v after the store came back, want 1", got)
	}
}
