// Package otelenv builds fencegate's OpenTelemetry TracerProvider from the
// standard OTEL_* environment variables, and installs it (with the
// propagators that read the incoming trace context) as the global one that
// fencecheck, api, authz and admission start their spans from.
//
// Tracing is off unless the environment asks for it: with none of the
// variables below set, Setup installs nothing, starts no goroutine and
// builds no exporter, and every span those packages start is the OTel API's
// no-op span.
//
// Variables read here (the exporter, batch processor and sampler read their
// own standard variables, listed in README.md "Tracing"):
//
//	OTEL_SDK_DISABLED=true           off, whatever else is set
//	OTEL_TRACES_EXPORTER             "otlp" on, "none" off; unset: on iff an
//	                                 OTLP endpoint variable is set
//	OTEL_EXPORTER_OTLP_ENDPOINT,
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//	OTEL_EXPORTER_OTLP_PROTOCOL,
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL  "grpc" or "http/protobuf" (default)
//	OTEL_PROPAGATORS                 tracecontext, baggage, b3, b3multi, none
//	                                 (default b3,tracecontext,baggage: the
//	                                 last to find a context wins, so W3C's)
package otelenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencegate/fencegate/internal/tracing"
)

// Protocols of the OTLP exporter.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Config is what the environment asks for; ConfigFromEnv reads it.
type Config struct {
	// Enabled says whether spans are exported at all.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTPProtobuf.
	Protocol string
	// Propagators are the OTEL_PROPAGATORS names, in extraction order.
	Propagators []string
}

// defaultPropagators: W3C first for Envoy's OpenTelemetry tracer, b3 for
// its Zipkin tracer (single and multi header; on extraction the b3
// propagator reads both). Extraction runs in order and the last to find a
// context wins, so b3 goes first: a request carrying both keeps W3C's.
var defaultPropagators = []string{"b3", "tracecontext", "baggage"}

// ConfigFromEnv reads the variables in the package doc through getenv. An
// unusable value is an error naming the variable: tracing asked for but
// misspelt must not silently stay off.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return c, nil
	}
	switch e := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); e {
	case "none":
		return c, nil
	case "otlp":
		c.Enabled = true
	case "":
		c.Enabled = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return c, fmt.Errorf("otelenv: OTEL_TRACES_EXPORTER=%q is not supported (want otlp or none)", e)
	}
	if !c.Enabled {
		return c, nil
	}
	c.Protocol = ProtocolHTTPProtobuf // the OTLP spec's default
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			if p != ProtocolGRPC && p != ProtocolHTTPProtobuf {
				return c, fmt.Errorf("otelenv: %s=%q is not supported (want grpc or http/protobuf)", v, p)
			}
			c.Protocol = p
			break
		}
	}
	c.Propagators = defaultPropagators
	if ps := strings.TrimSpace(getenv("OTEL_PROPAGATORS")); ps != "" {
		c.Propagators = nil
		for _, p := range strings.Split(ps, ",") {
			switch p = strings.TrimSpace(p); p {
			case "tracecontext", "baggage", "b3", "b3multi":
				c.Propagators = append(c.Propagators, p)
			case "none", "":
			default:
				return c, fmt.Errorf("otelenv: OTEL_PROPAGATORS names %q (supported: tracecontext, baggage, b3, b3multi, none)", p)
			}
		}
	}
	return c, nil
}

// Options configure Setup.
type Options struct {
	// ServiceVersion becomes the resource's service.version.
	ServiceVersion string
	// Store is the backend name stamped on every span as tracing.AttrStore.
	Store string
	// Logger receives export errors (warn); nil is slog.Default().
	Logger *slog.Logger
}

// Setup builds the TracerProvider c asks for and installs it, with c's
// propagators, as the OTel globals. It returns the function that flushes
// and stops it (bounded by its context); when c is not Enabled it installs
// nothing and the function does nothing.
func Setup(ctx context.Context, c Config, o Options) (shutdown func(context.Context) error, err error) {
	if !c.Enabled {
		return func(context.Context) error { return nil }, nil
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	// The exporters read the endpoint, headers, TLS, timeout and
	// compression variables themselves.
	var exp sdktrace.SpanExporter
	switch c.Protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	case ProtocolHTTPProtobuf:
		exp, err = otlptracehttp.New(ctx)
	default:
		err = fmt.Errorf("unknown protocol %q", c.Protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("otelenv: OTLP exporter: %w", err)
	}
	// service.name defaults to "fencegate"; OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES override (later options win).
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", "fencegate"),
			attribute.String("service.version", o.ServiceVersion)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("otelenv: resource: %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER(_ARG), default
	// parentbased_always_on; the batcher from OTEL_BSP_*.
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(storeStamp{attribute.String(tracing.AttrStore, o.Store)}),
		sdktrace.WithBatcher(exp),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagatorOf(c.Propagators))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed", "err", err)
	}))
	tracing.Enable()
	return tp.Shutdown, nil
}

func propagatorOf(names []string) propagation.TextMapPropagator {
	var ps []propagation.TextMapPropagator
	for _, n := range names {
		switch n {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "b3":
			ps = append(ps, b3.New())
		case "b3multi":
			ps = append(ps, b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader)))
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...)
}

// storeStamp puts the store backend on every span when it starts: the
// instrumented packages do not know which backend they run on.
type storeStamp struct{ kv attribute.KeyValue }

func (s storeStamp) OnStart(_ context.Context, sp sdktrace.ReadWriteSpan) { sp.SetAttributes(s.kv) }
func (storeStamp) OnEnd(sdktrace.ReadOnlySpan)                            {}
func (storeStamp) Shutdown(context.Context) error                         { return nil }
func (storeStamp) ForceFlush(context.Context) error                       { return nil }
