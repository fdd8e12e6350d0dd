package health

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// newStoreReady returns fencegate_store_ready{backend}: 1 when the store
// answers a ping within timeout, 0 otherwise. It pings at scrape time
// rather than echoing the last /readyz probe, because nothing guarantees a
// probe runs (no kubelet, no gRPC health watcher) and a stale 1 would hide
// an outage from the alert that exists to report it. It covers the store
// only (not the phase, nor the webhook's certificate, which has its own
// metric).
func newStoreReady(store Store, timeout time.Duration) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "fencegate_store_ready",
		Help:        "1 when the lock store answers a ping within the readiness timeout, else 0 (checked at scrape).",
		ConstLabels: prometheus.Labels{"backend": store.Capabilities().Backend},
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := store.Ping(ctx); err != nil {
			return 0
		}
		return 1
	})
}
