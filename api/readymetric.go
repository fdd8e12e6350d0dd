package api

import (
	"context"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/prometheus/client_golang/prometheus"
)

// newStoreReady returns fencegate_store_ready{backend}: 1 when the store
// answers a ping within readyTimeout, 0 otherwise. It pings at scrape time
// rather than echoing the last /readyz probe, because nothing guarantees a
// probe runs (no kubelet, no gRPC health watcher) and a stale 1 would hide
// an outage from the alert that exists to report it. It covers the store
// only; the webhook's certificate has its own metric.
func newStoreReady(store lockstore.Pinger, backend string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "fencegate_store_ready",
		Help:        "1 when the lock store answers a ping within the readiness timeout, else 0 (checked at scrape).",
		ConstLabels: prometheus.Labels{"backend": backend},
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		if err := store.Ping(ctx); err != nil {
			return 0
		}
		return 1
	})
}

// backendOf names the backend under l for metric labels ("" when no
// lockstore.Describer is reachable).
func backendOf(l lockstore.Locks) string {
	if d, ok := lockstore.As[lockstore.Describer](l); ok {
		return d.Capabilities().Backend
	}
	return ""
}
