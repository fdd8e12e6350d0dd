// Package tracing names fencegate's spans and their attributes, and reads
// the incoming trace context (W3C traceparent, b3) from HTTP headers and
// gRPC metadata. It uses the OpenTelemetry API only: the packages that
// start spans (fencecheck, api, authz, admission) import it, and whether
// any span is recorded and exported is decided once, in cmd/fencegate, by
// tracing/otelenv, which calls Enable. Until then every span is the API's
// no-op span and nothing is extracted.
//
// Span attributes never carry a raw key, lockId, token or fence: a span
// leaves the process for whatever trace backend the operator runs.
package tracing

import (
	"context"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// Span names. A lock operation's span is SpanLockPrefix + the operation
// ("acquire", "release", "extend", "lookup", "status", "audit").
const (
	SpanCheck           = "fencegate.check"
	SpanLockPrefix      = "fencegate.lock."
	SpanAdmissionReview = "fencegate.admission.review"
)

// Attribute keys.
const (
	// fencegate.check
	AttrDecision   = "fencegate.decision"    // allow, deny, would-deny
	AttrReason     = "fencegate.reason"      // fencecheck.Reason; absent when allowed
	AttrPolicy     = "fencegate.policy"      // holder, latest, off
	AttrMode       = "fencegate.mode"        // enforce, dry-run, warn
	AttrStatus     = "fencegate.status"      // the HTTP status the transport answers
	AttrDecisionID = "fencegate.decision_id" // as in the response header and audit event
	AttrRoute      = "fencegate.route"       // the route's configured name
	AttrSource     = "fencegate.source"      // authz-grpc, authz-http, admission
	AttrWrite      = "fencegate.write"       // whether the request counted as a write

	// fencegate.lock.*
	AttrOp        = "fencegate.op"        // the operation
	AttrResult    = "fencegate.result"    // ok, fail, or the LockError code
	AttrTransport = "fencegate.transport" // http or grpc

	// fencegate.admission.review
	AttrAdmissionOperation = "fencegate.admission.operation" // CREATE, UPDATE, DELETE, ...
	AttrAdmissionResource  = "fencegate.admission.resource"  // group/version/resource
	AttrAdmissionAllowed   = "fencegate.admission.allowed"
	AttrAdmissionDryRun    = "fencegate.admission.dry_run"

	// every span, set by tracing/otelenv: the store backend
	AttrStore = "fencegate.store"
)

// InstrumentationName names fencegate's tracer.
const InstrumentationName = "github.com/fencegate/fencegate"

// tracer follows the global TracerProvider, including one installed after
// this package was initialised.
var tracer = otel.Tracer(InstrumentationName)

// enabled is set once a TracerProvider that records was installed.
var enabled atomic.Bool

// Enable turns span starts and trace context extraction on; until then they
// return at once, without allocating (a check's hot path pays nothing for
// tracing it does not use). tracing/otelenv calls it after installing the
// global TracerProvider and propagator; a program that installs its own
// calls it too.
func Enable() { enabled.Store(true) }

// Enabled reports whether Enable was called.
func Enabled() bool { return enabled.Load() }

// Start starts span name under ctx. It is a server span when ctx holds no
// span of this process (the request's entry point, its parent, if any,
// being the caller's), else an internal one. Before Enable it returns ctx
// and the no-op span it holds.
func Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	kind := trace.SpanKindInternal
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() || sc.IsRemote() {
		kind = trace.SpanKindServer
	}
	return tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

// FromHTTP returns ctx with the trace context of h, if any.
func FromHTTP(ctx context.Context, h http.Header) context.Context {
	if !enabled.Load() {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(h))
}

// FromGRPC returns ctx with the trace context of its incoming gRPC
// metadata, if any.
func FromGRPC(ctx context.Context) context.Context {
	if !enabled.Load() {
		return ctx
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, mdCarrier(md))
}

// FromMap returns ctx with the trace context of headers, a map with
// lower-case names (as in an ext_authz CheckRequest), if any.
func FromMap(ctx context.Context, headers map[string]string) context.Context {
	if !enabled.Load() {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(headers))
}

// HasContext reports whether ctx carries a valid span context.
func HasContext(ctx context.Context) bool {
	return trace.SpanContextFromContext(ctx).IsValid()
}

// mdCarrier reads gRPC metadata (lower-case keys) as a TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }

func (c mdCarrier) Keys() []string {
	ks := make([]string, 0, len(c))
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}
