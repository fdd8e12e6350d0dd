package fencecheck

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/lockstore"
)

// Metric label values for the decision label.
const (
	decisionAllow     = "allow"
	decisionDeny      = "deny"
	decisionWouldDeny = "would-deny"
	reasonNone        = "none" // the reason label of an allow
)

// Audit drop reasons (the reason label of fencegate_audit_dropped_total).
const (
	dropQueueFull   = "queue-full"
	dropWriteFailed = "write-failed"
	dropClosed      = "closed"
)

type checkMetrics struct {
	decisions *prometheus.CounterVec
	// allowEnforce is decisions' series of the common case (an allowed
	// write in enforce mode), bound once: WithLabelValues per check hashes
	// the labels and looks the series up under a lock.
	allowEnforce prometheus.Counter
	duration     prometheus.Histogram

	inflight     prometheus.Gauge
	abandoned    prometheus.Counter
	finishErrors prometheus.Counter
	barrierWait  prometheus.Histogram
	barrierFull  prometheus.Counter
	waiters      prometheus.Gauge
	waitersFull  prometheus.Counter
	// waitersShare counts the refusals of waitersFull due to a key's or a
	// client's share of the slots (waiters.go), by share.
	waitersShare *prometheus.CounterVec
}

func newCheckMetrics(reg prometheus.Registerer) *checkMetrics {
	m := &checkMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authz_decisions_total",
			Help: "Edge-check decisions by outcome (allow, deny, would-deny), reason and mode.",
		}, []string{"decision", "reason", "mode"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencegate_authz_check_duration_seconds",
			Help: "Time to decide an edge check, backend read included.",
			// The check sits on every write's path: resolve the sub-millisecond range.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .15, .25, .5, 1},
		}),
	}
	m.inflight = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_barrier_inflight_writes",
		Help: "Writes this process admitted under the write barrier and has not yet finished or abandoned.",
	}))
	m.abandoned = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_barrier_abandoned_total",
		Help: "Barrier writes whose upstream exchange failed; their entries are left to expire at maxWrite.",
	}))
	m.finishErrors = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_barrier_finish_errors_total",
		Help: "Barrier Finish store calls that failed; those entries expire at maxWrite.",
	}))
	m.barrierWait = register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "fencegate_barrier_wait_seconds",
		Help: "Time a barrier write waited for older writes of its key to finish (admitted or refused as draining).",
		// Up to the longest wait a route may ask for (check.maxWaitCap's default).
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .15, .25, .5, 1, 2.5, 5, 10, 30},
	}))
	m.waiters = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_barrier_waiters",
		Help: "Barrier writes waiting now for older writes of their key to finish (at most check.barrierMaxWaiters).",
	}))
	m.waitersFull = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_barrier_waiters_full_total",
		Help: "Barrier writes refused as draining without waiting: the gateway already had check.barrierMaxWaiters writes waiting, or their key or client its share of them (fencegate_barrier_waiters_share_full_total).",
	}))
	m.waitersShare = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_barrier_waiters_share_full_total",
		Help: "Barrier writes refused as draining without waiting because their key, or their client (source address), already had its share of the waiter slots (check.barrierMaxWaiters / 8), by share: key or client.",
	}, []string{"share"}))
	m.waitersShare.WithLabelValues(waitersFullKey)
	m.waitersShare.WithLabelValues(waitersFullClient)
	m.barrierFull = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_barrier_full_total",
		Help: "Barrier writes refused as too-many-writes: their key already had its cap of writes in flight (maxInFlight).",
	}))
	m.decisions = register(reg, m.decisions)
	m.duration = register(reg, m.duration)
	m.allowEnforce = m.decisions.WithLabelValues(decisionAllow, reasonNone, string(ModeEnforce))
	return m
}

// decision returns the decisions counter of one outcome.
func (m *checkMetrics) decision(label, reason, mode string) prometheus.Counter {
	if label == decisionAllow && reason == reasonNone && mode == string(ModeEnforce) {
		return m.allowEnforce
	}
	return m.decisions.WithLabelValues(label, reason, mode)
}

func newDroppedCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_audit_dropped_total",
		Help: "Audit events dropped, by reason (queue full, sink write failed, recorded after Close) and retention class (decision, input).",
	}, []string{"reason", "class"})
	c = register(reg, c)
	// Exported as 0 from the start: increase() cannot see a series's first
	// value as an increase, so an alert on drops would miss the first burst.
	for _, r := range []string{dropQueueFull, dropWriteFailed, dropClosed} {
		for _, cl := range []lockstore.AuditClass{lockstore.AuditDecision, lockstore.AuditInput} {
			c.WithLabelValues(r, cl.String())
		}
	}
	return c
}

// register registers c with reg (when reg is non-nil) and returns the
// collector to use: the already registered one when another Checker or
// Auditor on the same registry got there first, so that several of them
// (authz and admission in one process) share one series.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A conflicting definition under the same name is a programming
		// error: keep counting locally rather than failing every check.
	}
	return c
}
