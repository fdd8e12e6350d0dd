package lockserver

import (
	"github.com/fencegate/fencegate/internal/storetelemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// StoreMetrics turns the store's telemetry events (storetelemetry.WithTelemetry)
// into per-backend metrics: what each store call costs, apart from the
// request around it. fencegate_lock_op_* count requests (refusals before
// any store call, waits over many calls); these count store calls.
type StoreMetrics struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewStoreMetrics registers the store-call metrics of backend with reg.
// Labels are bounded: the backend, SyncGuard's five operation names and
// ok / fail / a LockError code.
func NewStoreMetrics(reg prometheus.Registerer, backend string) (*StoreMetrics, error) {
	m := &StoreMetrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "fencegate_store_ops_total",
			Help:        "Store calls of the lock API by operation and result (ok, fail = locked/absent, or the LockError code).",
			ConstLabels: prometheus.Labels{"backend": backend},
		}, []string{"op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "fencegate_store_op_duration_seconds",
			Help:        "Duration of one store call of the lock API (one backend round trip on Redis and PostgreSQL).",
			ConstLabels: prometheus.Labels{"backend": backend},
			Buckets:     opDurationBuckets,
		}, []string{"op"}),
	}
	for _, op := range []string{storetelemetry.EventAcquire, storetelemetry.EventRelease, storetelemetry.EventExtend, storetelemetry.EventIsLocked, storetelemetry.EventLookup} {
		m.ops.WithLabelValues(op, storetelemetry.ResultOK)
		m.duration.WithLabelValues(op)
	}
	for _, c := range []prometheus.Collector{m.ops, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe records one event; it is a storetelemetry.TelemetryOptions.OnEvent.
func (m *StoreMetrics) Observe(e storetelemetry.LockEvent) {
	result := e.Result
	if e.Code != "" {
		result = string(e.Code)
	}
	m.ops.WithLabelValues(e.Type, result).Inc()
	m.duration.WithLabelValues(e.Type).Observe(e.Duration.Seconds())
}
