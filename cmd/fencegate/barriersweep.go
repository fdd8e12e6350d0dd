package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/lockstore"
)

// barrierSweepInterval is how often a serving process sweeps expired write
// barrier entries. Admit already ignores them, so the sweep is only about
// space: an abandoned write on a key never written again would otherwise
// stay stored forever. A minute keeps the backlog small while costing the
// store one bounded call per replica per minute.
const barrierSweepInterval = time.Minute

// barrierSweepLimit bounds the entries one sweep removes (and, on bolt, the
// records it visits), so a sweep is one short store call even after an
// outage left many entries behind; the next sweeps take the rest.
const barrierSweepLimit = 1000

// barrierSweepTimeout bounds one sweep call, well inside the interval.
const barrierSweepTimeout = 30 * time.Second

// startBarrierSweep sweeps expired barrier entries every interval
// (barrierSweepInterval outside tests) through goBG, if the store keeps entries that would
// not otherwise go (lockstore.BarrierSweeper), and counts what it removed
// as fencegate_barrier_swept_total. Logs carry counts and errors only:
// sweep errors name no key.
func startBarrierSweep(store any, interval time.Duration, reg prometheus.Registerer, goBG func(func(context.Context)), log *slog.Logger) error {
	sw, ok := lockstore.As[lockstore.BarrierSweeper](store)
	if !ok {
		return nil
	}
	swept := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_barrier_swept_total",
		Help: "Expired write barrier entries the periodic sweep removed (0 on Redis, whose entries expire by themselves).",
	})
	if err := reg.Register(swept); err != nil {
		return err
	}
	goBG(func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sctx, cancel := context.WithTimeout(ctx, barrierSweepTimeout)
			n, err := sw.SweepBarrier(sctx, barrierSweepLimit)
			cancel()
			swept.Add(float64(n))
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("write barrier sweep failed; expired entries stay until the next sweep", "removed", n, "err", err)
			case err == nil && n > 0:
				log.Debug("write barrier sweep removed expired entries", "removed", n)
			}
		}
	})
	return nil
}
