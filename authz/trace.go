package authz

import (
	"context"

	"github.com/fencegate/fencegate/internal/tracing"
)

// grpcTraceContext is the trace context of an ext_authz call: the call's
// own metadata first (Envoy's tracer propagates into its ext_authz call,
// the call's span being the parent), else the checked request's headers
// (what the client or an earlier proxy sent).
func grpcTraceContext(ctx context.Context, headers map[string]string) context.Context {
	if tctx := tracing.FromGRPC(ctx); tracing.HasContext(tctx) {
		return tctx
	}
	return tracing.FromMap(ctx, headers)
}
