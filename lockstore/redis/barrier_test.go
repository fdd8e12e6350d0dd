package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// TestBarrierLayout: the entries of a key live in two sorted sets named
// <prefix>.fencegate:wdeadline:<lock storage key> (id → deadline) and
// …:wfence:<lock storage key> (id → fence), outside SyncGuard's key space,
// with a PEXPIRE past the latest deadline; the legacy hash …:writes:… holds
// only the summary older gateways read; finishing the last entry leaves
// nothing behind.
func TestBarrierLayout(t *testing.T) {
	s := openPrefix(t, "syncguard_test_barrier_layout")
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	c := s.Client()
	const key = "orders/42"
	r := locktest.Acquire(t, s, key, time.Minute)
	const base = "syncguard_test_barrier_layout.fencegate:"
	const lk = "syncguard_test_barrier_layout:orders/42"
	wk, dk, fk := base+"writes:"+lk, base+"wdeadline:"+lk, base+"wfence:"+lk
	id, _ := lockstore.NewLockID()
	res, err := s.Admit(ctx, key, lockstore.WriteAdmission{Fence: r.Fence, RequireLive: true, WriteID: id, MaxWrite: 5 * time.Second})
	if err != nil || !res.Admitted {
		t.Fatalf("Admit = %+v, %v", res, err)
	}
	dl, err := c.ZScore(ctx, dk, id).Result()
	if err != nil || int64(dl) < res.State.NowMs+5000 || int64(dl) > res.State.NowMs+5000 {
		t.Errorf("ZSCORE %s = %v, %v; want now+5000 = %d", dk, dl, err, res.State.NowMs+5000)
	}
	fn, err := c.ZScore(ctx, fk, id).Result()
	if want, _ := lockstore.ParseFence(r.Fence); err != nil || int64(fn) != want {
		t.Errorf("ZSCORE %s = %v, %v; want the fence %d", fk, fn, err, want)
	}
	all, err := c.HGetAll(ctx, wk).Result()
	if want := r.Fence + ":" + strconv.FormatInt(int64(dl), 10); err != nil || len(all) != 1 || all[barrierSummaryField] != want {
		t.Errorf("legacy hash = %v, %v; want only the summary %q", all, err, want)
	}
	for _, k := range []string{wk, dk, fk} {
		pttl, err := c.PTTL(ctx, k).Result()
		if err != nil || pttl <= 5*time.Second || pttl > 5*time.Second+lockstore.TimeToleranceMs*time.Millisecond {
			t.Errorf("PTTL of %s = %s, %v; want maxWrite + tolerance (5s..6s)", k, pttl, err)
		}
	}
	if err := s.Finish(ctx, key, id); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, wk, dk, fk).Result(); n != 0 {
		t.Errorf("%d barrier keys outlived their last entry", n)
	}
}

// TestBarrierRoundTrips: Admit (admitted, refused, blocked) and Finish are
// one EVALSHA each.
func TestBarrierRoundTrips(t *testing.T) {
	s := openPrefix(t, "syncguard_test_barrier_rt")
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	a := locktest.Acquire(t, s, "rt", time.Minute)
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
		{"Finish", "evalsha", func() error { return s.Finish(ctx, "rt", first.WriteID) }},
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
