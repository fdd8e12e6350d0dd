package main

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// TestBarrierSweep: the background sweep removes an abandoned entry and
// counts it in fencegate_barrier_swept_total; it stops with its context.
func TestBarrierSweep(t *testing.T) {
	st := locktest.OpenBolt(t)
	r, err := st.Acquire(t.Context(), "abandoned", time.Minute)
	if err != nil || !r.OK {
		t.Fatalf("Acquire = %v, %v", r, err)
	}
	id, _ := lockstore.NewLockID()
	if res, err := st.Admit(t.Context(), "abandoned", lockstore.WriteAdmission{Fence: r.Fence, RequireLive: true, WriteID: id, MaxWrite: time.Millisecond}); err != nil || !res.Admitted {
		t.Fatalf("Admit = %+v, %v", res, err)
	}

	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	goBG := func(fn func(context.Context)) { wg.Go(func() { fn(ctx) }) }
	if err := startBarrierSweep(st, 20*time.Millisecond, reg, goBG, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wg.Wait() }()

	// The counter is the only signal the sweep gives; poll it, bounded.
	var got float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = sweptTotal(t, reg); got >= 1 {
			break
		}
	}
	if got != 1 {
		t.Fatalf("fencegate_barrier_swept_total = %v, want 1 (the abandoned entry)", got)
	}
}

func sweptTotal(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "fencegate_barrier_swept_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
