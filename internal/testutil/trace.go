package testutil

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencegate/fencegate/internal/tracing"
)

// RecordSpans installs, as the OTel globals, an SDK tracer provider that
// keeps every ended span in memory and the W3C trace-context propagator,
// enables tracing, and puts the previous globals back at cleanup. The
// globals are process-wide: a test that calls it must not run in parallel
// with another that does.
func RecordSpans(tb testing.TB) *tracetest.InMemoryExporter {
	tb.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tracing.Enable()
	tb.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	return exp
}
