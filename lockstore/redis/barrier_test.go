package redis

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// TestBarrierLayout: the entries of a key live in one hash named
// <prefix>.fencegate:writes:<lock storage key>, outside SyncGuard's key
// space, with a PEXPIRE past the latest deadline; finishing the last entry
// leaves nothing behind.
func TestBarrierLayout(t *testing.T) {
	s := openPrefix(t, "syncguard_test_barrier_layout")
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	c := s.Client()
	const key = "orders/42"
	r := mustAcquire(t, s, key, time.Minute)
	wk := "syncguard_test_barrier_layout.fencegate:writes:syncguard_test_barrier_layout:orders/42"
	id, _ := lockstore.NewLockID()
	res, err := s.Admit(ctx, key, lockstore.WriteAdmission{Fence: r.Fence, RequireLive: true, WriteID: id, MaxWrite: 5 * time.Second})
	if err != nil || !res.Admitted {
		t.Fatalf("Admit = %+v, %v", res, err)
	}
	v, err := c.HGet(ctx, wk, id).Result()
	if err != nil {
		t.Fatalf("HGET %s: %v", wk, err)
	}
	if want := r.Fence + ":"; len(v) < len(want) || v[:len(want)] != want {
		t.Errorf("entry = %q, want %q<deadlineMs>", v, want)
	}
	pttl, err := c.PTTL(ctx, wk).Result()
	if err != nil || pttl <= 5*time.Second || pttl > 5*time.Second+lockstore.TimeToleranceMs*time.Millisecond {
		t.Errorf("PTTL of the entries hash = %s, %v; want maxWrite + tolerance (5s..6s)", pttl, err)
	}
	if err := s.Finish(ctx, key, id); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, wk).Result(); n != 0 {
		t.Errorf("the entries hash outlived its last entry")
	}
}

// TestBarrierRoundTrips: Admit (admitted, refused, blocked) is one EVALSHA
// and Finish one HDEL.
func TestBarrierRoundTrips(t *testing.T) {
	s := openPrefix(t, "syncguard_test_barrier_rt")
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	a := mustAcquire(t, s, "rt", time.Minute)
	h := &cmdCounter{}
	s.Client().AddHook(h)
	w := func(fence string) lockstore.WriteAdmission {
		id, _ := lockstore.NewLockID()
		return lockstore.WriteAdmission{Fence: fence, RequireLive: true, WriteID: id, MaxWrite: time.Minute}
	}
	first := w(a.Fence)
	var next string
	steps := []struct {
		name, want string
		fn         func() error
	}{
		{"Admit (admitted)", "evalsha", func() error { _, err := s.Admit(ctx, "rt", first); return err }},
		{"Admit (stale)", "evalsha", func() error { _, err := s.Admit(ctx, "rt", w("000000000000000")); return err }},
		{"handover", "", func() error {
			if _, err := s.Release(ctx, a.LockID); err != nil {
				return err
			}
			r, err := s.Acquire(ctx, "rt", time.Minute)
			next = r.Fence
			return err
		}},
		{"Admit (blocked)", "evalsha", func() error {
			r, err := s.Admit(ctx, "rt", w(next))
			if err == nil && r.Blocking != 1 {
				t.Errorf("Admit(newer) = %+v, want Blocking=1", r)
			}
			return err
		}},
		{"Finish", "hdel", func() error { return s.Finish(ctx, "rt", first.WriteID) }},
	}
	for _, st := range steps {
		if err := st.fn(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := h.take()
		if st.want == "" {
			continue
		}
		if len(got) != 1 || got[0] != st.want {
			t.Errorf("%s sent %v, want exactly one %s", st.name, got, st.want)
		}
	}
}
