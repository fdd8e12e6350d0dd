package otelenv

import (
	"bytes"
	"context"
	"net/http"
	"reflect"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/tracing"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestTracingConfigFromEnv: off unless asked; OTEL_SDK_DISABLED wins; an
// endpoint alone turns it on; the protocol defaults to http/protobuf, the
// traces-specific variable wins; a misspelt value is an error, not
// silently off.
func TestTracingConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		enabled bool
		proto   string
		props   []string
		err     string
	}{
		{name: "unset"},
		{name: "protocol alone", env: []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_BSP_SCHEDULE_DELAY", "100"}},
		{name: "exporter otlp", env: []string{"OTEL_TRACES_EXPORTER", "otlp"}, enabled: true, proto: ProtocolHTTPProtobuf, props: defaultPropagators},
		{name: "endpoint", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, enabled: true, proto: ProtocolHTTPProtobuf, props: defaultPropagators},
		{name: "traces endpoint", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces"}, enabled: true, proto: ProtocolHTTPProtobuf, props: defaultPropagators},
		{name: "none wins over endpoint", env: []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}},
		{name: "sdk disabled wins", env: []string{"OTEL_SDK_DISABLED", "TRUE", "OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "bogus"}},
		{name: "sdk disabled false", env: []string{"OTEL_SDK_DISABLED", "false", "OTEL_TRACES_EXPORTER", "otlp"}, enabled: true, proto: ProtocolHTTPProtobuf, props: defaultPropagators},
		{name: "grpc", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, enabled: true, proto: ProtocolGRPC, props: defaultPropagators},
		{name: "traces protocol wins", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}, enabled: true, proto: ProtocolHTTPProtobuf, props: defaultPropagators},
		{name: "propagators", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_PROPAGATORS", "tracecontext, b3multi"}, enabled: true, proto: ProtocolHTTPProtobuf, props: []string{"tracecontext", "b3multi"}},
		{name: "propagators none", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_PROPAGATORS", "none"}, enabled: true, proto: ProtocolHTTPProtobuf},
		{name: "bad exporter", env: []string{"OTEL_TRACES_EXPORTER", "jaeger"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "bad protocol", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "bad propagator", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_PROPAGATORS", "xray"}, err: "OTEL_PROPAGATORS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ConfigFromEnv(envOf(tc.env...))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Enabled != tc.enabled || c.Protocol != tc.proto || !reflect.DeepEqual(c.Propagators, tc.props) {
				t.Fatalf("config = %+v, want enabled %v protocol %q propagators %v", c, tc.enabled, tc.proto, tc.props)
			}
		})
	}
}

// sdkGoroutines returns the stacks of goroutines running OTel SDK code.
func sdkGoroutines(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "go.opentelemetry.io/otel/sdk") || strings.Contains(g, "go.opentelemetry.io/otel/exporters") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// TestTracingOffSetsNothingUp: with no variable set, Setup installs no
// provider or propagator and starts no goroutine: spans are the API's
// no-op. The same checks on an enabled setup (pointed at a closed port)
// find the SDK, so they would catch tracing that sets itself up anyway.
func TestTracingOffSetsNothingUp(t *testing.T) {
	if g := sdkGoroutines(t); g != "" {
		t.Fatalf("SDK goroutines before the test:\n%s", g)
	}
	tpBefore, propBefore := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	installed := func() bool {
		_, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider)
		return sdk || otel.GetTracerProvider() != tpBefore || otel.GetTextMapPropagator() != propBefore
	}
	recording := func() bool {
		_, sp := tracing.Start(context.Background(), tracing.SpanCheck)
		defer sp.End()
		return sp.IsRecording()
	}

	c, err := ConfigFromEnv(envOf())
	if err != nil {
		t.Fatal(err)
	}
	shutdown, err := Setup(t.Context(), c, Options{Store: "bolt"})
	if err != nil {
		t.Fatal(err)
	}
	if g := sdkGoroutines(t); g != "" {
		t.Errorf("tracing off started SDK goroutines:\n%s", g)
	}
	if installed() || tracing.Enabled() {
		t.Errorf("tracing off installed a global provider or propagator, or enabled spans")
	}
	if recording() {
		t.Errorf("tracing off: a started span records")
	}
	if err := shutdown(t.Context()); err != nil {
		t.Errorf("shutdown: %v", err)
	}

	// The broken variant: the same checks see a set-up SDK.
	l := testutil.Listen(t)
	addr := l.Addr().String()
	l.Close() // nothing listens: the exporter's sends fail, which is fine here
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	c, err = ConfigFromEnv(envOf("OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
	if err != nil {
		t.Fatal(err)
	}
	shutdown, err = Setup(t.Context(), c, Options{Store: "bolt"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		otel.SetTracerProvider(tpBefore)
		otel.SetTextMapPropagator(propBefore)
	})
	// The SDK starts its goroutines as it sets up, not necessarily before
	// Setup returns: wait for them (bounded) rather than look once.
	deadline := time.Now().Add(5 * time.Second)
	for sdkGoroutines(t) == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if sdkGoroutines(t) == "" {
		t.Errorf("an enabled setup shows no SDK goroutine within 5 s: the check above proves nothing")
	}
	if !installed() || !recording() || !tracing.Enabled() {
		t.Errorf("an enabled setup installed nothing: the checks above prove nothing")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // do not wait on the closed port
	_ = shutdown(ctx)
}

// TestTracingDefaultPropagators: the default propagators read what Envoy
// sends with either tracer: W3C traceparent (OpenTelemetry), b3 single and
// multi header (Zipkin); with both, W3C's context wins. The same carriers
// reach tracing.FromGRPC and tracing.FromMap.
func TestTracingDefaultPropagators(t *testing.T) {
	tracing.Enable() // what Setup does after installing the propagator
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagatorOf(defaultPropagators))
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	const (
		w3cTrace = "0af7651916cd43dd8448eb211c80319c"
		w3cSpan  = "b7ad6b7169203331"
		b3Trace  = "80f198ee56343ba864fe8b2a57d3eff7"
		b3Span   = "e457b5a2e4d86bd1"
	)
	traceparent := "00-" + w3cTrace + "-" + w3cSpan + "-01"
	for _, tc := range []struct {
		name          string
		h             map[string]string
		trace, parent string
	}{
		{"traceparent", map[string]string{"traceparent": traceparent}, w3cTrace, w3cSpan},
		{"b3 single", map[string]string{"b3": b3Trace + "-" + b3Span + "-1"}, b3Trace, b3Span},
		{"b3 multi", map[string]string{"x-b3-traceid": b3Trace, "x-b3-spanid": b3Span, "x-b3-sampled": "1"}, b3Trace, b3Span},
		{"both", map[string]string{"traceparent": traceparent, "b3": b3Trace + "-" + b3Span + "-1"}, w3cTrace, w3cSpan},
		{"none", map[string]string{}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hh := http.Header{}
			for k, v := range tc.h {
				hh.Set(k, v)
			}
			for via, ctx := range map[string]context.Context{
				"http": tracing.FromHTTP(t.Context(), hh),
				"map":  tracing.FromMap(t.Context(), tc.h),
				"grpc": tracing.FromGRPC(metadata.NewIncomingContext(t.Context(), metadata.New(tc.h))),
			} {
				sc := trace.SpanContextFromContext(ctx)
				if tc.trace == "" {
					if sc.IsValid() {
						t.Errorf("%s: context %v from no header", via, sc)
					}
					continue
				}
				if sc.TraceID().String() != tc.trace || sc.SpanID().String() != tc.parent || !sc.IsRemote() {
					t.Errorf("%s: trace %s span %s remote %v, want %s %s remote", via, sc.TraceID(), sc.SpanID(), sc.IsRemote(), tc.trace, tc.parent)
				}
			}
		})
	}
}
