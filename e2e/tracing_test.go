package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/internal/certwatch/certtest"
	"github.com/fencegate/fencegate/internal/testutil"
)

// otlpReceiver is an OTLP/gRPC trace collector: the real
// opentelemetry.proto.collector.trace.v1.TraceService, keeping what the
// gateway exports.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	Addr string

	mu      sync.Mutex
	spans   []*tracepb.Span
	res     []*commonpb.KeyValue // every resource attribute received
	arrived chan struct{}        // signalled (without blocking) on each export
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	l := testutil.Listen(t)
	r := &otlpReceiver{Addr: l.Addr().String(), arrived: make(chan struct{}, 1)}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, r)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(l) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		r.res = append(r.res, rs.GetResource().GetAttributes()...)
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// snapshot returns the spans and resource attributes received so far.
func (r *otlpReceiver) snapshot() ([]*tracepb.Span, []*commonpb.KeyValue) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...), append([]*commonpb.KeyValue(nil), r.res...)
}

// waitFor waits until a span named name in trace traceID has arrived.
func (r *otlpReceiver) waitFor(t *testing.T, name string, traceID []byte) *tracepb.Span {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		spans, _ := r.snapshot()
		for _, s := range spans {
			if s.GetName() == name && string(s.GetTraceId()) == string(traceID) {
				return s
			}
		}
		select {
		case <-r.arrived:
		case <-deadline:
			t.Fatalf("no %s span in trace %x after 60s; got %d spans: %s", name, traceID, len(spans), describeSpans(spans))
			return nil
		}
	}
}

func describeSpans(spans []*tracepb.Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "\n  %s trace=%x parent=%x", s.GetName(), s.GetTraceId(), s.GetParentSpanId())
	}
	return b.String()
}

// traceParent is a W3C traceparent of a fresh trace and parent span.
type traceParent struct{ traceID, spanID []byte }

func newTraceParent() traceParent {
	tid, _ := hex.DecodeString(randHex(16))
	sid, _ := hex.DecodeString(randHex(8))
	return traceParent{tid, sid}
}

func (p traceParent) String() string {
	return fmt.Sprintf("00-%x-%x-01", p.traceID, p.spanID)
}

// setTracingEnv points the gateways the test starts at rec (rec nil: no
// OTEL variable at all), after clearing every OTEL variable that could
// change the outcome.
func setTracingEnv(t *testing.T, rec *otlpReceiver, extra ...string) {
	for _, v := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_PROPAGATORS", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_BSP_SCHEDULE_DELAY"} {
		t.Setenv(v, "")
	}
	if rec != nil {
		t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rec.Addr)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
		t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	}
	for i := 0; i+1 < len(extra); i += 2 {
		t.Setenv(extra[i], extra[i+1])
	}
}

// tracedGateway is a gateway on a bolt store with every listener on,
// the admission webhook's included, and a client trusting its certificate.
type tracedGateway struct {
	*Gateway
	hc *http.Client
}

func startTracedGateway(t *testing.T) tracedGateway {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	ca := certtest.NewCA(t, "webhook-ca")
	cert, key := ca.Server(t, "fencegate-webhook", "127.0.0.1").Write(t, filepath.Join(dir, "tls"))
	g := StartGateway(t, "bolt://"+filepath.Join(dir, "fg.db"),
		"--admission-addr", "127.0.0.1:0", "--admission-tls-cert", cert, "--admission-tls-key", key)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	return tracedGateway{g, hc}
}

// tracedTraffic is one of each traced request, with the secrets they carry
// (key, lockId, fence) and the trace context each was sent with.
type tracedTraffic struct {
	secrets []string
	acquire traceParent // HTTP acquire, traceparent header
	check   traceParent // forward-auth check, traceparent header
	extMD   traceParent // ext_authz Check, traceparent in the call's metadata
	extHdr  traceParent // the same Check: traceparent in the checked request's headers (loses to metadata)
	extOnly traceParent // ext_authz Check with the checked request's header only
	release traceParent // gRPC release, traceparent metadata
	review  traceParent // AdmissionReview with a stale fence, traceparent header
}

func sendTracedTraffic(t *testing.T, g tracedGateway) tracedTraffic {
	t.Helper()
	tr := tracedTraffic{acquire: newTraceParent(), check: newTraceParent(), extMD: newTraceParent(),
		extHdr: newTraceParent(), extOnly: newTraceParent(), release: newTraceParent(), review: newTraceParent()}
	key := "orders/secret-" + randHex(8)
	objName, objNS := "obj-"+randHex(6), "ns-"+randHex(6)

	h := http.Header{}
	h.Set("traceparent", tr.acquire.String())
	r := Do(t, g.URL(), Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"` + key + `","ttlMs":60000}`, Header: h})
	lockID, _ := r.JSON["lockId"].(string)
	fence, _ := r.JSON["fence"].(string)
	if r.Status != 200 || lockID == "" || fence == "" {
		t.Fatalf("acquire: %d %s", r.Status, r.Body)
	}
	tr.secrets = []string{key, lockID, fence, objName, objNS}

	h = http.Header{}
	h.Set("traceparent", tr.check.String())
	h.Set("X-Fence-Key", key)
	h.Set("X-Fence-Token", fence)
	h.Set("X-Fence-Lock-Id", lockID)
	h.Set("X-Original-Method", "PUT")
	h.Set("X-Original-URI", "/orders/"+key)
	if r := Do(t, g.URL(), Call{Method: "GET", Path: "/v1/authz/check", Header: h}); r.Status != 200 {
		t.Fatalf("forward-auth check: %d %s %v", r.Status, r.Body, r.Header)
	}

	ext := authv3.NewAuthorizationClient(dialGRPC(t, g.Authz))
	checkReq := func(headers map[string]string) *authv3.CheckRequest {
		hs := map[string]string{":method": "POST", ":path": "/" + key, ":authority": "api.example",
			"x-fence-key": key, "x-fence-token": fence, "x-fence-lock-id": lockID}
		for k, v := range headers {
			hs[k] = v
		}
		return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/" + key, Host: "api.example", Headers: hs}}}}
	}
	ctx := metadata.AppendToOutgoingContext(rpcCtx(t), "traceparent", tr.extMD.String())
	resp, err := ext.Check(ctx, checkReq(map[string]string{"traceparent": tr.extHdr.String()}))
	if err != nil || resp.GetStatus().GetCode() != 0 {
		t.Fatalf("ext_authz Check (metadata): %v %v", resp, err)
	}
	resp, err = ext.Check(rpcCtx(t), checkReq(map[string]string{"traceparent": tr.extOnly.String()}))
	if err != nil || resp.GetStatus().GetCode() != 0 {
		t.Fatalf("ext_authz Check (headers): %v %v", resp, err)
	}

	// Before the release: the fence is current, a lower one stale.
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
		"name": objName, "namespace": objNS,
		"annotations": map[string]string{"fencegate.io/key": key, "fencegate.io/fence": fmt.Sprintf("%015d", 0)}}}
	body, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "UPDATE",
			"kind":     map[string]any{"group": "", "version": "v1", "kind": "ConfigMap"},
			"resource": map[string]any{"group": "", "version": "v1", "resource": "configmaps"},
			"name":     objName, "namespace": objNS, "userInfo": map[string]any{"username": "u"},
			"object": obj, "oldObject": obj}})
	hreq, err := http.NewRequestWithContext(rpcCtx(t), "POST", "https://"+g.Admission+"/admission/validate", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("traceparent", tr.review.String())
	hresp, err := g.hc.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if hresp.StatusCode != 200 || !bytes.Contains(raw, []byte(`"allowed":false`)) {
		t.Fatalf("stale review: %d %s", hresp.StatusCode, raw)
	}

	ctx = metadata.AppendToOutgoingContext(rpcCtx(t), "traceparent", tr.release.String())
	rel, err := fencegatev1.NewLocksClient(dialGRPC(t, g.GRPC)).Release(ctx, &fencegatev1.ReleaseRequest{LockId: lockID})
	if err != nil || !rel.GetOk() {
		t.Fatalf("gRPC release: %v %v", rel, err)
	}
	return tr
}

// TestTracingSpans: with the standard OTEL variables set, the gateway
// exports a span per lock operation and edge check over OTLP/gRPC, each a
// child of the trace context the request came with (W3C traceparent in
// HTTP headers, gRPC metadata, or for ext_authz the checked request's
// headers when the call's metadata has none), carrying the documented
// attributes and never a key, lockId or fence.
func TestTracingSpans(t *testing.T) {
	rec := startOTLPReceiver(t)
	setTracingEnv(t, rec)
	g := startTracedGateway(t)
	tr := sendTracedTraffic(t, g)

	type want struct {
		name   string
		parent traceParent
		attrs  map[string]string
	}
	common := map[string]string{"fencegate.store": "bolt"}
	checkAttrs := map[string]string{"fencegate.decision": "allow", "fencegate.policy": "holder",
		"fencegate.mode": "enforce", "fencegate.status": "200", "fencegate.write": "true"}
	for _, w := range []want{
		{"fencegate.lock.acquire", tr.acquire, map[string]string{"fencegate.op": "acquire", "fencegate.result": "ok", "fencegate.transport": "http"}},
		{"fencegate.check", tr.check, merge(checkAttrs, map[string]string{"fencegate.source": "authz-http"})},
		{"fencegate.check", tr.extMD, merge(checkAttrs, map[string]string{"fencegate.source": "authz-grpc"})},
		{"fencegate.check", tr.extOnly, merge(checkAttrs, map[string]string{"fencegate.source": "authz-grpc"})},
		{"fencegate.lock.release", tr.release, map[string]string{"fencegate.op": "release", "fencegate.result": "ok", "fencegate.transport": "grpc"}},
	} {
		s := rec.waitFor(t, w.name, w.parent.traceID)
		if string(s.GetParentSpanId()) != string(w.parent.spanID) {
			t.Errorf("%s: parent span %x, want the caller's %x", w.name, s.GetParentSpanId(), w.parent.spanID)
		}
		if s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("%s: kind %v, want server", w.name, s.GetKind())
		}
		got := attrMap(s.GetAttributes())
		for k, v := range merge(common, w.attrs) {
			if got[k] != v {
				t.Errorf("%s: attribute %s = %q, want %q (all: %v)", w.name, k, got[k], v, got)
			}
		}
		if w.name == "fencegate.check" && len(got["fencegate.decision_id"]) != 12 {
			t.Errorf("%s: decision_id %q, want the 12-character decision id", w.name, got["fencegate.decision_id"])
		}
	}
	// The review is a server span under the API server's context; its
	// check an internal span under the review.
	review := rec.waitFor(t, "fencegate.admission.review", tr.review.traceID)
	check := rec.waitFor(t, "fencegate.check", tr.review.traceID)
	if string(review.GetParentSpanId()) != string(tr.review.spanID) || review.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("review span: parent %x kind %v, want %x server", review.GetParentSpanId(), review.GetKind(), tr.review.spanID)
	}
	if string(check.GetParentSpanId()) != string(review.GetSpanId()) || check.GetKind() != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("review's check span: parent %x kind %v, want the review %x, internal", check.GetParentSpanId(), check.GetKind(), review.GetSpanId())
	}
	for s, want := range map[*tracepb.Span]map[string]string{
		review: {"fencegate.admission.operation": "UPDATE", "fencegate.admission.resource": "configmaps",
			"fencegate.admission.allowed": "false", "fencegate.admission.dry_run": "false", "fencegate.status": "409", "fencegate.store": "bolt"},
		check: {"fencegate.decision": "deny", "fencegate.reason": "stale", "fencegate.status": "409",
			"fencegate.source": "admission", "fencegate.route": "configmaps", "fencegate.store": "bolt"},
	} {
		got := attrMap(s.GetAttributes())
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: attribute %s = %q, want %q (all: %v)", s.GetName(), k, got[k], v, got)
			}
		}
	}

	// The checked request's traceparent lost to the call's metadata.
	g.Stop(t) // flushes every queued span
	spans, res := rec.snapshot()
	for _, s := range spans {
		if string(s.GetTraceId()) == string(tr.extHdr.traceID) {
			t.Errorf("%s joined the checked request's trace although the call's metadata carried one", s.GetName())
		}
	}
	if l := spanLeaks(spans, res, tr.secrets); len(l) > 0 {
		t.Errorf("spans carry secrets:\n%s", strings.Join(l, "\n"))
	}
	if got := attrMap(res)["service.name"]; got != "fencegate" {
		t.Errorf("resource service.name = %q, want fencegate", got)
	}
}

// TestTracingOffByDefault: the same traffic exports nothing when tracing is
// not asked for: with OTEL_SDK_DISABLED=true over a full configuration, or
// OTEL_TRACES_EXPORTER=none, the receiver gets no span (checked after the
// gateway exited, which flushes whatever it had); with no OTEL variable the
// gateway does not set tracing up at all (internal/tracing/otelenv's tests show no
// SDK goroutine then; here, no "tracing on" line).
func TestTracingOffByDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rec   bool
		extra []string
	}{
		{"unset", false, nil},
		{"sdk-disabled", true, []string{"OTEL_SDK_DISABLED", "true"}},
		{"exporter-none", true, []string{"OTEL_TRACES_EXPORTER", "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := startOTLPReceiver(t)
			env := rec
			if !tc.rec {
				env = nil
			}
			setTracingEnv(t, env, tc.extra...)
			g := startTracedGateway(t)
			sendTracedTraffic(t, g)
			g.Stop(t)
			if spans, _ := rec.snapshot(); len(spans) > 0 {
				t.Errorf("%d spans exported with tracing off:%s", len(spans), describeSpans(spans))
			}
			if strings.Contains(g.Logs(), `"tracing on"`) {
				t.Errorf("gateway set tracing up with tracing off")
			}
		})
	}
}

// TestTracingLeakChecker: the checker TestTracingSpans relies on finds a
// secret wherever an exporter could put it (an attribute nested in an
// array or map, an event, a link, a name, a status message, the resource),
// and stays quiet on clean spans.
func TestTracingLeakChecker(t *testing.T) {
	secret := "0123456789abcdef0123456789abcdef"
	str := func(s string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
	}
	kv := func(k string, v *commonpb.AnyValue) *commonpb.KeyValue { return &commonpb.KeyValue{Key: k, Value: v} }
	clean := func() *tracepb.Span {
		return &tracepb.Span{Name: "fencegate.check", Attributes: []*commonpb.KeyValue{kv("fencegate.decision", str("allow"))}}
	}
	if l := spanLeaks([]*tracepb.Span{clean()}, nil, []string{secret}); len(l) != 0 {
		t.Fatalf("clean span reported: %v", l)
	}
	leaky := map[string]func(s *tracepb.Span) []*commonpb.KeyValue{
		"attribute": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Attributes = append(s.Attributes, kv("fencegate.lock_id", str(secret)))
			return nil
		},
		"array": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Attributes = append(s.Attributes, kv("x", &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{
				ArrayValue: &commonpb.ArrayValue{Values: []*commonpb.AnyValue{str("a"), str("key=" + secret)}}}}))
			return nil
		},
		"kvlist": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Attributes = append(s.Attributes, kv("x", &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{
				KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{kv("inner", str(secret))}}}}))
			return nil
		},
		"bytes": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Attributes = append(s.Attributes, kv("x", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte(secret)}}))
			return nil
		},
		"attribute key": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Attributes = append(s.Attributes, kv("k."+secret, str("v")))
			return nil
		},
		"event": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Events = append(s.Events, &tracepb.Span_Event{Name: "exception", Attributes: []*commonpb.KeyValue{kv("exception.message", str("lock "+secret+" gone"))}})
			return nil
		},
		"link": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Links = append(s.Links, &tracepb.Span_Link{Attributes: []*commonpb.KeyValue{kv("x", str(secret))}})
			return nil
		},
		"name": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Name = "GET /orders/" + secret
			return nil
		},
		"status": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.Status = &tracepb.Status{Message: "release " + secret}
			return nil
		},
		"trace state": func(s *tracepb.Span) []*commonpb.KeyValue {
			s.TraceState = "fg=" + secret
			return nil
		},
		"resource": func(*tracepb.Span) []*commonpb.KeyValue {
			return []*commonpb.KeyValue{kv("host.name", str(secret))}
		},
	}
	for name, leak := range leaky {
		s := clean()
		res := leak(s)
		if l := spanLeaks([]*tracepb.Span{s}, res, []string{"unrelated", secret}); len(l) != 1 {
			t.Errorf("%s: a secret in it was reported %d times, want once: %v", name, len(l), l)
		}
	}
}

// spanLeaks lists every place in spans and the resource attributes where
// one of secrets occurs: names, attribute keys and values (nested values
// included), events, links, status messages and trace state.
func spanLeaks(spans []*tracepb.Span, res []*commonpb.KeyValue, secrets []string) []string {
	var out []string
	check := func(where, s string) {
		for _, sec := range secrets {
			if sec != "" && strings.Contains(s, sec) {
				out = append(out, fmt.Sprintf("%s: %q", where, s))
			}
		}
	}
	var value func(where string, v *commonpb.AnyValue)
	attrs := func(where string, kvs []*commonpb.KeyValue) {
		for _, kv := range kvs {
			check(where+" key", kv.GetKey())
			value(where+" "+kv.GetKey(), kv.GetValue())
		}
	}
	value = func(where string, v *commonpb.AnyValue) {
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			check(where, x.StringValue)
		case *commonpb.AnyValue_BytesValue:
			check(where, string(x.BytesValue))
		case *commonpb.AnyValue_ArrayValue:
			for _, e := range x.ArrayValue.GetValues() {
				value(where+"[]", e)
			}
		case *commonpb.AnyValue_KvlistValue:
			attrs(where, x.KvlistValue.GetValues())
		}
	}
	attrs("resource", res)
	for _, s := range spans {
		where := "span " + s.GetName()
		check(where+" name", s.GetName())
		check(where+" trace state", s.GetTraceState())
		check(where+" status", s.GetStatus().GetMessage())
		attrs(where, s.GetAttributes())
		for _, e := range s.GetEvents() {
			check(where+" event", e.GetName())
			attrs(where+" event "+e.GetName(), e.GetAttributes())
		}
		for _, l := range s.GetLinks() {
			check(where+" link trace state", l.GetTraceState())
			attrs(where+" link", l.GetAttributes())
		}
	}
	return out
}

// attrMap renders attributes as strings (ints and bools by %v).
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch x := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		default:
			m[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return m
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
