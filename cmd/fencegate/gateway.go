package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/health"
	"github.com/fencegate/fencegate/internal/storetelemetry"
	"github.com/fencegate/fencegate/internal/tracing/otelenv"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

// gateway is what both serving commands (serve, proxy) build before their
// listeners: tracing, the store, the metrics registry, the lifecycle every
// listener follows (health), the owner of the background work (the
// barrier sweep, the audit pipeline's writer, the readiness loop), the
// audit pipeline and the edge checker. close undoes it in reverse order,
// after the listeners have drained.
type gateway struct {
	// store is the opened store: each consumer takes its role from it
	// (the checker its edge state, the console its Inspect), and the
	// optional capabilities are found in it with lockstore.As.
	store lockstore.Store
	// locks are the store's lock operations behind storetelemetry.WithTelemetry,
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
	// health is the lifecycle every listener follows: /healthz, /readyz
	// and gRPC health, the store's ping among its checks.
	health *health.Readiness
	// conns are every listener's connection slots (connections.*), counted
	// in fencegate_listener_connections*.
	conns connlimit.Limits
	// goBG runs fn until close: every background goroutine has this owner.
	goBG func(fn func(context.Context))

	undo []func() // run last first by close
}

// gatewaySettings are what startGateway needs beyond the config file.
type gatewaySettings struct {
	store   storeURL
	tracing otelenv.Config
	proofs  *writeproof.Verifier // nil: no proof keys
}

// startGateway builds the gateway; on error what was built is undone.
func startGateway(ctx context.Context, cfg config.Config, set gatewaySettings, log *slog.Logger) (_ *gateway, err error) {
	gw := &gateway{}
	defer func() {
		if err != nil {
			gw.close()
		}
	}()
	stopTracing, err := setupTracing(ctx, set.tracing, set.store.backend, log)
	if err != nil {
		return nil, err
	}
	gw.undo = append(gw.undo, stopTracing) // after the listeners drained: their last spans are flushed

	retention := lockstore.AuditRetention{MaxEvents: cfg.Audit.MaxEvents, MaxInputEvents: cfg.Audit.MaxInputEvents, MaxAge: cfg.Audit.MaxAge.Std()}
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	gw.store, err = set.store.Open(octx, retention, log)
	cancel()
	if err != nil {
		return nil, err
	}
	gw.undo = append(gw.undo, func() { _ = gw.store.Close() })
	gw.caps = gw.store.Capabilities()

	gw.reg = prometheus.NewRegistry()
	gw.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gw.conns = connsOf(cfg.Connections)
	gw.conns.Metrics = connlimit.NewMetrics(gw.reg)
	// Every lock operation is also timed per store call, off the request
	// path (the decorator's worker observes; a full queue drops and counts).
	sm, err := lockserver.NewStoreMetrics(gw.reg, gw.caps.Backend)
	if err != nil {
		return nil, err
	}
	if gw.replication, err = watchReplication(ctx, gw.store, gw.reg, log); err != nil {
		return nil, err
	}
	if gw.health, err = health.New(health.Options{Store: gw.store, Replication: gw.replication, Registerer: gw.reg, Logger: log}); err != nil {
		return nil, err
	}
	tel := storetelemetry.WithTelemetry(gw.store, storetelemetry.TelemetryOptions{OnEvent: sm.Observe, Logger: log})
	gw.locks = tel
	gw.undo = append(gw.undo, func() { _ = tel.Close() }) // delivers the queued events and stops the decorator's worker, before the store closes

	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(context.Background())
	gw.undo = append(gw.undo, func() { stopBG(); bg.Wait() })
	gw.goBG = func(fn func(context.Context)) {
		bg.Add(1)
		go func() { defer bg.Done(); fn(bgCtx) }()
	}

	gw.goBG(gw.health.Run)

	// Expired barrier entries of keys never written again.
	if err := startBarrierSweep(gw.store, barrierSweepInterval, gw.reg, gw.goBG, log); err != nil {
		return nil, err
	}

	al, ok := lockstore.As[lockstore.AuditLog](gw.store)
	if !ok {
		return nil, fmt.Errorf("store %s keeps no audit log", gw.caps.Backend)
	}
	gw.auditLog = al
	auditor := fencecheck.NewAuditor(al, fencecheck.AuditorOptions{QueueSize: cfg.Audit.QueueSize, Logger: log, Registerer: gw.reg})
	gw.goBG(func(ctx context.Context) { _ = auditor.Run(ctx) })
	gw.undo = append(gw.undo, func() { _ = auditor.Close() }) // flushes queued events, before the background work stops

	gw.checker = fencecheck.New(gw.store, fencecheck.Options{
		Timeout: cfg.Check.Timeout.Std(), Audit: auditor, AuditRawKeys: cfg.Check.AuditRawKeys,
		Registerer: gw.reg, Logger: log, Proofs: set.proofs, HideCurrentFence: cfg.Check.HideCurrentFence,
		MaxWriteCap:        cfg.Check.EffectiveMaxWriteCap(),
		BarrierMaxInFlight: cfg.Check.BarrierMaxInFlight,
		MaxWaitCap:         cfg.Check.EffectiveMaxWaitCap(),
		BarrierMaxWaiters:  cfg.Check.BarrierMaxWaiters,
	})
	return gw, nil
}

// close undoes startGateway, last step first.
func (gw *gateway) close() {
	for i := len(gw.undo) - 1; i >= 0; i-- {
		gw.undo[i]()
	}
	gw.undo = nil
}
