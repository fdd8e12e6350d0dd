package lockserver

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/lockstore"
)

// Metric outcomes besides the LockError codes.
const (
	resultOK   = "ok"
	resultFail = "fail" // contention (acquire) or an absent lock (release, extend, lookup)
)

// heldCountTimeout bounds the store call behind fencegate_locks_held, so a
// slow backend cannot stall a Prometheus scrape past its own timeout.
const heldCountTimeout = 2 * time.Second

// opDurationBuckets start at 100µs (an in-process bolt acquire) and reach
// past the default 30 s maximum wait, which acquire durations include.
var opDurationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// metrics are the lock-op metrics shared by the HTTP and gRPC transports.
type metrics struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// bound holds each operation's common series (results ok and fail,
	// its duration), bound once: WithLabelValues per request hashes the
	// labels and looks the series up under a lock. Read-only after
	// newMetrics.
	bound map[auth.Operation]boundOp
}

type boundOp struct {
	ok, fail prometheus.Counter
	duration prometheus.Observer
}

func newMetrics(reg prometheus.Registerer, store lockstore.Locks, log *slog.Logger) (*metrics, error) {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_lock_ops_total",
			Help: "Lock API operations by operation and result (ok, fail = locked/absent, or the LockError code).",
		}, []string{"op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fencegate_lock_op_duration_seconds",
			Help:    "Lock API operation latency, including server-side waiting (waitMs) for acquire.",
			Buckets: opDurationBuckets,
		}, []string{"op"}),
	}
	// Pre-create the common series so rate() works from the first scrape.
	m.bound = make(map[auth.Operation]boundOp, len(auth.APIOps()))
	for _, op := range auth.APIOps() {
		m.bound[op] = boundOp{
			ok:       m.ops.WithLabelValues(string(op), resultOK),
			fail:     m.ops.WithLabelValues(string(op), resultFail),
			duration: m.duration.WithLabelValues(string(op)),
		}
	}
	cs := []prometheus.Collector{m.ops, m.duration}
	if hc, ok := lockstore.As[lockstore.HeldCounter](store); ok {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencegate_locks_held",
			Help: "Live locks in the store (NaN when the store could not count in time).",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), heldCountTimeout)
			defer cancel()
			n, err := hc.CountHeld(ctx)
			if err != nil {
				log.Warn("counting held locks failed", "err", err)
				return math.NaN()
			}
			return float64(n)
		}))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records one finished operation.
func (m *metrics) observe(op auth.Operation, result string, start time.Time) {
	b, ok := m.bound[op]
	if !ok {
		m.ops.WithLabelValues(string(op), result).Inc()
		m.duration.WithLabelValues(string(op)).Observe(time.Since(start).Seconds())
		return
	}
	switch result {
	case resultOK:
		b.ok.Inc()
	case resultFail:
		b.fail.Inc()
	default:
		m.ops.WithLabelValues(string(op), result).Inc()
	}
	b.duration.Observe(time.Since(start).Seconds())
}

// resultOf is the metric result label of an operation's outcome.
func resultOf(ok bool, err error) string {
	if err != nil {
		return string(asAPIError(err).code)
	}
	if ok {
		return resultOK
	}
	return resultFail
}
