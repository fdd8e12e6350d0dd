package tracing

import (
	"context"
	"net/http"
	"testing"

	"google.golang.org/grpc/metadata"
)

// TestTracingOffAllocatesNothing: before Enable, what a check's hot path
// calls (extraction from headers, metadata or a header map, a span start
// and end) allocates nothing. The same measure after Enable, with only the
// API's no-op provider installed, does allocate: the measure can fail.
func TestTracingOffAllocatesNothing(t *testing.T) {
	h := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	m := map[string]string{"traceparent": h.Get("traceparent")}
	gctx := metadata.NewIncomingContext(context.Background(), metadata.New(m))
	hotPath := func() {
		_, a := Start(FromHTTP(context.Background(), h), SpanCheck)
		_, b := Start(FromMap(context.Background(), m), SpanCheck)
		_, c := Start(FromGRPC(gctx), SpanCheck)
		a.End()
		b.End()
		c.End()
	}
	if Enabled() {
		t.Fatal("tracing enabled before Enable")
	}
	if n := testing.AllocsPerRun(100, hotPath); n != 0 {
		t.Errorf("tracing off: %v allocations per check, want 0", n)
	}
	Enable()
	if n := testing.AllocsPerRun(100, hotPath); n == 0 {
		t.Errorf("tracing on allocates nothing either: the measure above proves nothing")
	}
}
