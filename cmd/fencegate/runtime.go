package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/tracing/otelenv"
	"github.com/fencegate/fencegate/writeproof"
)

// runtime is what both serving commands (serve, proxy) build before their
// listeners: tracing, the store, the metrics registry, the owner of the
// background work (the barrier sweep, the audit pipeline's writer), the
// audit pipeline and the edge checker. close undoes
// it in reverse order, after the listeners have drained.
type runtime struct {
	// store is the opened store: each consumer takes its role from it
	// (the checker its edge state, the console its Inspect), and the
	// optional capabilities are found in it with lockstore.As.
	store lockstore.Store
	// locks are the store's lock operations behind lockstore.WithTelemetry,
	// which times each call per backend (fencegate_store_*): what the lock
	// API serves. lockstore.As finds the store's capabilities through it.
	locks lockstore.Locks
	// replication reports the store's replication for /readyz, or
	// is nil (replication.go).
	replication func(context.Context) (lockstore.Replication, error)
	caps        lockstore.Capabilities
	auditLog    lockstore.AuditLog
	reg         *prometheus.Registry
	checker     *fencecheck.Checker
	// conns are every listener's connection slots (connections.*), counted
	// in fencegate_listener_connections*.
	conns connLimits
	// goBG runs fn until close: every background goroutine has this owner.
	goBG func(fn func(context.Context))

	undo []func() // run last first by close
}

// runtimeSettings are what startRuntime needs beyond the config file.
type runtimeSettings struct {
	store   storeURL
	tracing otelenv.Config
	proofs  *writeproof.Verifier // nil: no proof keys
}

// startRuntime builds the runtime; on error what was built is undone.
func startRuntime(ctx context.Context, cfg config.Config, set runtimeSettings, log *slog.Logger) (_ *runtime, err error) {
	rt := &runtime{}
	defer func() {
		if err != nil {
			rt.close()
		}
	}()
	stopTracing, err := setupTracing(ctx, set.tracing, set.store.backend, log)
	if err != nil {
		return nil, err
	}
	rt.undo = append(rt.undo, stopTracing) // after the listeners drained: their last spans are flushed

	retention := lockstore.AuditRetention{MaxEvents: cfg.Audit.MaxEvents, MaxInputEvents: cfg.Audit.MaxInputEvents, MaxAge: cfg.Audit.MaxAge.Std()}
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	rt.store, err = set.store.Open(octx, retention, log)
	cancel()
	if err != nil {
		return nil, err
	}
	rt.undo = append(rt.undo, func() { _ = rt.store.Close() })
	rt.caps = rt.store.Capabilities()

	rt.reg = prometheus.NewRegistry()
	rt.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rt.conns = connsOf(cfg.Connections)
	rt.conns.metrics = newConnMetrics(rt.reg)
	// Every lock operation is also timed per store call, off the request
	// path (the decorator's worker observes; a full queue drops and counts).
	sm, err := api.NewStoreMetrics(rt.reg, rt.caps.Backend)
	if err != nil {
		return nil, err
	}
	if rt.replication, err = watchReplication(ctx, rt.store, rt.reg, log); err != nil {
		return nil, err
	}
	tel := lockstore.WithTelemetry(rt.store, lockstore.TelemetryOptions{OnEvent: sm.Observe, Logger: log})
	rt.locks = tel
	rt.undo = append(rt.undo, func() { _ = tel.Close() }) // delivers the queued events and stops the decorator's worker, before the store closes

	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(context.Background())
	rt.undo = append(rt.undo, func() { stopBG(); bg.Wait() })
	rt.goBG = func(fn func(context.Context)) {
		bg.Add(1)
		go func() { defer bg.Done(); fn(bgCtx) }()
	}

	// Expired barrier entries of keys never written again.
	if err := startBarrierSweep(rt.store, barrierSweepInterval, rt.reg, rt.goBG, log); err != nil {
		return nil, err
	}

	al, ok := lockstore.As[lockstore.AuditLog](rt.store)
	if !ok {
		return nil, fmt.Errorf("store %s keeps no audit log", rt.caps.Backend)
	}
	rt.auditLog = al
	auditor := fencecheck.NewAuditor(al, fencecheck.AuditorOptions{QueueSize: cfg.Audit.QueueSize, Logger: log, Registerer: rt.reg})
	rt.goBG(func(ctx context.Context) { _ = auditor.Run(ctx) })
	rt.undo = append(rt.undo, func() { _ = auditor.Close() }) // flushes queued events, before the background work stops

	rt.checker = fencecheck.New(rt.store, fencecheck.Options{
		Timeout: cfg.Check.Timeout.Std(), Audit: auditor, AuditRawKeys: cfg.Check.AuditRawKeys,
		Registerer: rt.reg, Logger: log, Proofs: set.proofs, HideCurrentFence: cfg.Check.HideCurrentFence,
		MaxWriteCap:        cfg.Check.EffectiveMaxWriteCap(),
		BarrierMaxInFlight: cfg.Check.BarrierMaxInFlight,
	})
	return rt, nil
}

// close undoes startRuntime, last step first.
func (rt *runtime) close() {
	for i := len(rt.undo) - 1; i >= 0; i-- {
		rt.undo[i]()
	}
	rt.undo = nil
}
