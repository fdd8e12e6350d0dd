package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/lockstore"
)

// replicationTimeout bounds one look at the store's replication (at start,
// per scrape, per /readyz).
const replicationTimeout = 2 * time.Second

// replicationModes are the values of fencegate_store_replication's mode
// label, one series each, so an alert can match mode="asynchronous".
var replicationModes = []string{lockstore.ReplicationSynchronous, lockstore.ReplicationAsynchronous,
	lockstore.ReplicationNone, lockstore.ReplicationUnknown}

// watchReplication logs the replication of a store that reports it (at
// start: PostgreSQL synchronous_standby_names/synchronous_commit, Redis
// replicas or ack=replicas) and registers fencegate_store_replication{mode},
// 1 on the mode the store reports at scrape time. It returns the reporter
// for /readyz, or nil for a store that reports nothing.
func watchReplication(ctx context.Context, store any, reg prometheus.Registerer, log *slog.Logger) (func(context.Context) (lockstore.Replication, error), error) {
	rr, ok := lockstore.As[lockstore.ReplicationReporter](store)
	if !ok {
		return nil, nil
	}
	look := func(ctx context.Context) lockstore.Replication {
		ctx, cancel := context.WithTimeout(ctx, replicationTimeout)
		defer cancel()
		r, err := rr.Replication(ctx)
		if err != nil {
			return lockstore.Replication{Mode: lockstore.ReplicationUnknown}
		}
		return r
	}
	r := look(ctx)
	level := slog.LevelInfo
	if r.Mode != lockstore.ReplicationSynchronous {
		level = slog.LevelWarn
	}
	log.Log(ctx, level, "store replication: acquires are acknowledged "+ackWording(r.Mode),
		"mode", r.Mode, "detail", r.Detail)
	if err := reg.Register(replicationCollector{look: look}); err != nil {
		return nil, err
	}
	return rr.Replication, nil
}

// replicationDesc is fencegate_store_replication.
var replicationDesc = prometheus.NewDesc("fencegate_store_replication",
	"1 on the store's replication mode, checked at scrape: synchronous (a promoted standby has every fence), asynchronous (the clock floor alone keeps fences growing across a failover), none, unknown.",
	[]string{"mode"}, nil)

// replicationCollector looks at the store once per scrape and reports one
// series per mode, 1 on the current one.
type replicationCollector struct {
	look func(context.Context) lockstore.Replication
}

func (c replicationCollector) Describe(ch chan<- *prometheus.Desc) { ch <- replicationDesc }

func (c replicationCollector) Collect(ch chan<- prometheus.Metric) {
	current := c.look(context.Background()).Mode
	for _, mode := range replicationModes {
		v := 0.0
		if mode == current {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(replicationDesc, prometheus.GaugeValue, v, mode)
	}
}

func ackWording(mode string) string {
	switch mode {
	case lockstore.ReplicationSynchronous:
		return "by a standby (a failover keeps every fence)"
	case lockstore.ReplicationAsynchronous:
		return "before the standbys have them (on a failover, the clock floor keeps fences growing; docs/fences.md)"
	case lockstore.ReplicationNone:
		return "by one server without a standby"
	}
	return "in a way the store cannot report"
}
