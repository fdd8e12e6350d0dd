package lockserver

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/internal/tracing"
)

// Transports, for the span's tracing.AttrTransport.
const (
	transportHTTP = "http"
	transportGRPC = "grpc"
)

// startOpSpan starts the span of one lock operation under ctx, which holds
// the caller's trace context (tracing.FromHTTP, tracing.FromGRPC).
func startOpSpan(ctx context.Context, op auth.Operation) (context.Context, trace.Span) {
	name, ok := opSpanNames[op]
	if !ok {
		name = tracing.SpanLockPrefix + string(op)
	}
	return tracing.Start(ctx, name)
}

// opSpanNames are the span names of the lock operations, built once: the
// concatenation allocated on every request, tracing on or off.
var opSpanNames = func() map[auth.Operation]string {
	ops := auth.APIOps()
	m := make(map[auth.Operation]string, len(ops))
	for _, op := range ops {
		m[op] = tracing.SpanLockPrefix + string(op)
	}
	return m
}()

// endOpSpan records the outcome and ends sp: the operation, the transport
// and the metric result (ok, fail, or the LockError code), never the key,
// lockId or token. Only failures the server answers 5xx for mark the span
// an error; the caller's mistakes and contention are outcomes.
func endOpSpan(sp trace.Span, op auth.Operation, transport string, ok bool, err error) {
	if sp.IsRecording() {
		sp.SetAttributes(
			attribute.String(tracing.AttrOp, string(op)),
			attribute.String(tracing.AttrTransport, transport),
			attribute.String(tracing.AttrResult, resultOf(ok, err)),
		)
		if err != nil {
			if ae := asAPIError(err); ae.httpStatusCode() >= 500 {
				sp.SetStatus(codes.Error, string(ae.code))
			}
		}
	}
	sp.End()
}
