package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/internal/tracing/otelenv"
)

// tracingFlushTimeout bounds the flush of queued spans at exit.
const tracingFlushTimeout = 5 * time.Second

// setupTracing installs the OTLP trace exporter when c (read from the
// OTEL_* environment by otelenv.ConfigFromEnv; off by default) asks for one
// and returns the function that flushes and stops it, to be deferred so
// that it runs after the listeners have drained. store names the backend on
// every span.
func setupTracing(ctx context.Context, c otelenv.Config, store string, log *slog.Logger) (stop func(), err error) {
	shutdown, err := otelenv.Setup(ctx, c, otelenv.Options{ServiceVersion: version, Store: store, Logger: log})
	if err != nil {
		return nil, err
	}
	if c.Enabled {
		log.Info("tracing on", "protocol", c.Protocol, "propagators", c.Propagators)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("tracing: flushing spans at exit failed", "err", err)
		}
	}, nil
}
