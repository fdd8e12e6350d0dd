package authz

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// serveExtProc runs ext_authz and ext_proc on one real gRPC listener, as
// `fencegate serve` does (trusting its loopback callers), and returns an
// ext_proc client.
func serveExtProc(t testing.TB, c *fencecheck.Checker) extprocv3.ExternalProcessorClient {
	return serveExtProcWith(t, c, Options{TrustLoopback: true})
}

// serveExtProcWith is serveExtProc with the transports' options.
func serveExtProcWith(t testing.TB, c *fencecheck.Checker, o Options) extprocv3.ExternalProcessorClient {
	t.Helper()
	return extprocv3.NewExternalProcessorClient(serveOn(t, NewServer(c, o).Register, NewExtProc(c, o).Register))
}

// envoyHeaders builds the request_headers message as Envoy's ext_proc
// filter sends it: pseudo-headers first, lowercase keys, values in
// raw_value, one entry per copy.
func envoyHeaders(method, path string, kv ...string) *extprocv3.ProcessingRequest {
	hs := []*corev3.HeaderValue{
		{Key: ":authority", RawValue: []byte("api.example")},
		{Key: ":path", RawValue: []byte(path)},
		{Key: ":method", RawValue: []byte(method)},
		{Key: ":scheme", RawValue: []byte("http")},
		{Key: "user-agent", RawValue: []byte("test")},
	}
	for i := 0; i < len(kv); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	attrs, _ := structpb.NewStruct(map[string]any{"source.address": "10.1.2.3:40000"})
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: method == "GET"}},
		Attributes: map[string]*structpb.Struct{"envoy.filters.http.ext_proc": attrs},
	}
}

func envoyResponseHeaders(status int) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte(strconv.Itoa(status))},
			{Key: "content-type", RawValue: []byte("application/json")},
		}}}}}
}

// stream is one Envoy-shaped ext_proc stream: route options go in the
// gRPC initial metadata, as ExtProcPerRoute.overrides.grpc_initial_metadata
// sends them.
type stream struct {
	t      testing.TB
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func openStream(t testing.TB, c extprocv3.ExternalProcessorClient, opts map[string]string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ctx = metadata.NewOutgoingContext(ctx, metadata.New(opts))
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &stream{t: t, s: s, cancel: cancel}
}

func (st *stream) roundTrip(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	st.t.Helper()
	if err := st.s.Send(req); err != nil {
		st.t.Fatal(err)
	}
	resp, err := st.s.Recv()
	if err != nil {
		st.t.Fatal(err)
	}
	return resp
}

func mutationOf(hr *extprocv3.HeadersResponse) (set map[string]string, removed []string) {
	set = map[string]string{}
	m := hr.GetResponse().GetHeaderMutation()
	for _, h := range m.GetSetHeaders() {
		set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return set, m.GetRemoveHeaders()
}

func immediateOf(t testing.TB, resp *extprocv3.ProcessingResponse) (int, map[string]string, denialBody) {
	t.Helper()
	ir := resp.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("want an ImmediateResponse, got %v", resp)
	}
	hs := map[string]string{}
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		hs[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	var b denialBody
	if err := json.Unmarshal(ir.GetBody(), &b); err != nil {
		t.Fatalf("body %q: %v", ir.GetBody(), err)
	}
	return int(ir.GetStatus().GetCode()), hs, b
}

// TestExtProcDecisions: allowed requests continue with the ext_authz
// header mutations and complete on response headers; each denial is an
// ImmediateResponse with ext_authz's status, headers and body.
func TestExtProcDecisions(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	k := locktest.NewDecisionKeys(t, s)
	old, cur, gone := k.Old, k.Cur, k.Gone
	otherID, _ := lockstore.NewLockID()
	c := serveExtProc(t, fencecheck.New(s, fencecheck.Options{}))

	tests := []struct {
		name     string
		method   string
		path     string
		kv       []string
		opts     map[string]string
		status   int // 0: allowed
		reason   string
		current  string
		verified string
	}{
		{name: "read", method: "GET", path: "/orders/1"},
		{name: "current", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, cur.Fence, fencewire.HeaderLockID, cur.LockID}, verified: cur.Fence},
		{name: "template", method: "PUT", path: "/orders/1?x", kv: []string{fencewire.HeaderToken, cur.Fence}, opts: map[string]string{fencewire.ExtKey: "orders/{2}"}, verified: cur.Fence},
		{name: "metadata barrier current", method: "PUT", path: "/orders/1", kv: []string{fencewire.HeaderToken, cur.Fence},
			opts: map[string]string{fencewire.ExtKey: "orders/{2}", fencewire.ExtBarrier: "on", fencewire.ExtMaxWrite: "10s"}, verified: cur.Fence},
		{name: "missing", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1"}, status: 428, reason: "missing"},
		{name: "malformed", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, "7"}, status: 400, reason: "malformed"},
		{name: "fence sent twice", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, cur.Fence, fencewire.HeaderToken, old.Fence}, status: 400, reason: "malformed"},
		{name: "stale", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, old.Fence}, status: 409, reason: "stale", current: cur.Fence},
		{name: "unknown", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, "000000000000099"}, status: 409, reason: "unknown", current: cur.Fence},
		{name: "not held", method: "POST", path: "/orders/2", kv: []string{fencewire.HeaderKey, "orders/2", fencewire.HeaderToken, gone.Fence}, status: 409, reason: "not-held", current: gone.Fence},
		{name: "wrong owner", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, cur.Fence, fencewire.HeaderLockID, otherID}, status: 409, reason: "wrong-owner", current: cur.Fence},
		{name: "bad policy", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, cur.Fence}, opts: map[string]string{fencewire.ExtPolicy: "newest"}, status: 503, reason: "unavailable"},
		{name: "bad barrier", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, cur.Fence}, opts: map[string]string{fencewire.ExtBarrier: "maybe"}, status: 503, reason: "unavailable"},
		{name: "bad max write", method: "POST", path: "/orders/1", kv: []string{fencewire.HeaderKey, "orders/1", fencewire.HeaderToken, cur.Fence}, opts: map[string]string{fencewire.ExtBarrier: "on", fencewire.ExtMaxWrite: "forever"}, status: 503, reason: "unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := openStream(t, c, tc.opts)
			resp := st.roundTrip(envoyHeaders(tc.method, tc.path, tc.kv...))
			if tc.status != 0 {
				code, hs, body := immediateOf(t, resp)
				if code != tc.status || body.Error != tc.reason || body.Current != tc.current || hs[fencewire.HeaderReason] != tc.reason ||
					hs[fencewire.HeaderDecisionID] != body.DecisionID || body.DecisionID == "" || hs["content-type"] != "application/json" {
					t.Fatalf("denial %d %v %+v", code, hs, body)
				}
				if _, err := st.s.Recv(); !errors.Is(err, io.EOF) {
					t.Fatalf("the stream should end after a denial: %v", err)
				}
				return
			}
			hr := resp.GetRequestHeaders()
			if hr == nil {
				t.Fatalf("want a request-headers response, got %v", resp)
			}
			set, removed := mutationOf(hr)
			if !slices.Contains(removed, fencewire.HeaderLockID) || set[fencewire.HeaderVerified] != tc.verified {
				t.Fatalf("mutation set %v removed %v", set, removed)
			}
			if tc.verified == "" && !slices.Contains(removed, fencewire.HeaderVerified) {
				t.Errorf("a client's own %s must be removed", fencewire.HeaderVerified)
			}
			if resp := st.roundTrip(envoyResponseHeaders(200)); resp.GetResponseHeaders() == nil {
				t.Fatalf("want a response-headers response, got %v", resp)
			}
			_ = st.s.CloseSend()
			if _, err := st.s.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("stream end: %v", err)
			}
		})
	}
}

// extProcBarrier sets up key "acct" under fence F1 with a checker whose
// budget is short, so a blocked write is answered "draining" at once.
func extProcBarrier(t *testing.T) (lockstore.Store, extprocv3.ExternalProcessorClient, *prometheus.Registry) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	reg := prometheus.NewRegistry()
	return s, serveExtProc(t, fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond, Registerer: reg})), reg
}

var barrierOpts = map[string]string{fencewire.ExtKey: "acct", fencewire.ExtBarrier: "on", fencewire.ExtMaxWrite: "1m"}

func write(fence string) *extprocv3.ProcessingRequest {
	return envoyHeaders("POST", "/acct", fencewire.HeaderToken, fence)
}

func mustAllow(t *testing.T, resp *extprocv3.ProcessingResponse) {
	t.Helper()
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("want allowed, got %v", resp)
	}
}

func mustDrain(t *testing.T, resp *extprocv3.ProcessingResponse) {
	t.Helper()
	code, hs, body := immediateOf(t, resp)
	if code != 429 || body.Error != "draining" || hs[fencewire.HeaderReason] != "draining" {
		t.Fatalf("want 429 draining, got %d %v %+v", code, hs, body)
	}
	if ra, err := strconv.Atoi(hs["retry-after"]); err != nil || ra < 1 {
		t.Fatalf("retry-after %q", hs["retry-after"])
	}
}

// TestExtProcBarrierTwoStreams: W1 (F1) admitted on one stream; W2 (F2 > F1)
// on another stream is refused draining until W1's response headers
// arrive, then admitted. With the barrier off, W2 passes while W1 is in
// flight: the test can fail.
func TestExtProcBarrierTwoStreams(t *testing.T) {
	for _, barrier := range []string{"on", "off"} {
		t.Run("barrier="+barrier, func(t *testing.T) {
			s, c, _ := extProcBarrier(t)
			opts := map[string]string{fencewire.ExtKey: "acct", fencewire.ExtBarrier: barrier, fencewire.ExtMaxWrite: "1m"}
			l1 := locktest.Acquire(t, s, "acct", time.Minute)
			w1 := openStream(t, c, opts)
			mustAllow(t, w1.roundTrip(write(l1.Fence)))
			locktest.Release(t, s, l1.LockID)
			l2 := locktest.Acquire(t, s, "acct", time.Minute)

			resp := openStream(t, c, opts).roundTrip(write(l2.Fence))
			if barrier == "off" {
				mustAllow(t, resp)
				return
			}
			mustDrain(t, resp)
			w1.roundTrip(envoyResponseHeaders(201)) // W1 completes
			mustAllow(t, openStream(t, c, opts).roundTrip(write(l2.Fence)))
		})
	}
}

// TestExtProcStreamEndsWithoutResponse: a stream that ends before the
// response headers abandons its write: newer fences wait for maxWrite.
// So does a 504 response (Envoy's own answer to an upstream timeout).
func TestExtProcStreamEndsWithoutResponse(t *testing.T) {
	// 408, 413 and 5xx are what Envoy answers itself when the exchange
	// failed (timeouts, limits, resets): the upstream may still commit.
	for _, how := range []string{"cancel", "close", "504", "408", "500", "413"} {
		t.Run(how, func(t *testing.T) {
			s, c, reg := extProcBarrier(t)
			l1 := locktest.Acquire(t, s, "acct", time.Minute)
			w1 := openStream(t, c, barrierOpts)
			mustAllow(t, w1.roundTrip(write(l1.Fence)))
			switch how {
			case "cancel":
				w1.cancel()
			case "close":
				_ = w1.s.CloseSend()
			default:
				code, _ := strconv.Atoi(how)
				w1.roundTrip(envoyResponseHeaders(code))
			}
			waitMetric(t, reg, "fencegate_barrier_abandoned_total", 1)
			locktest.Release(t, s, l1.LockID)
			l2 := locktest.Acquire(t, s, "acct", time.Minute)
			mustDrain(t, openStream(t, c, barrierOpts).roundTrip(write(l2.Fence)))
		})
	}
}

// TestExtProcStoreDown: a closed store fails closed (503 unavailable),
// with or without the barrier.
func TestExtProcStoreDown(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	l := locktest.Acquire(t, s, "acct", time.Minute)
	_ = s.Close()
	c := serveExtProc(t, fencecheck.New(s, fencecheck.Options{}))
	for _, opts := range []map[string]string{barrierOpts, {fencewire.ExtKey: "acct"}} {
		code, hs, _ := immediateOf(t, openStream(t, c, opts).roundTrip(write(l.Fence)))
		if code != 503 || hs[fencewire.HeaderReason] != "unavailable" {
			t.Fatalf("%v: %d %v", opts, code, hs)
		}
	}
}

// TestBarrierRefusedWhereItCannotWork: ext_authz and forward-auth cannot
// report completion, so a route asking them for the barrier fails its
// writes closed (503), never silently unprotected; reads still pass.
func TestBarrierRefusedWhereItCannotWork(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	l := locktest.Acquire(t, s, "k", time.Minute)
	ch := fencecheck.New(s, fencecheck.Options{})
	conn := serveGRPC(t, ch)
	resp, err := authv3.NewAuthorizationClient(conn).Check(t.Context(), envoyRequest("POST", "/k",
		map[string]string{fencewire.HeaderKey: "k", fencewire.HeaderToken: l.Fence}, map[string]string{fencewire.ExtBarrier: "on"}))
	if err != nil {
		t.Fatal(err)
	}
	assertUnavailable(t, resp)
	resp, _ = authv3.NewAuthorizationClient(conn).Check(t.Context(), envoyRequest("GET", "/k", nil, map[string]string{fencewire.ExtBarrier: "on"}))
	if resp.GetOkResponse() == nil {
		t.Fatalf("a read passes: %v", resp)
	}

	srv := httptest.NewServer(NewHTTPHandler(ch, Options{}))
	t.Cleanup(srv.Close)
	for _, set := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set(fencewire.HeaderRouteBarrier, "on") },
		func(r *http.Request) { r.URL.RawQuery = fencewire.ExtBarrier + "=on" },
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+HTTPPath, nil)
		req.Header.Set("X-Original-Method", "POST")
		req.Header.Set("X-Original-Uri", "/k")
		req.Header.Set(fencewire.HeaderKey, "k")
		req.Header.Set(fencewire.HeaderToken, l.Fence)
		set(req)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 503 || res.Header.Get(fencewire.HeaderReason) != "unavailable" {
			t.Fatalf("forward-auth with the barrier: %d %v", res.StatusCode, res.Header)
		}
	}
}

func waitMetric(t *testing.T, g prometheus.Gatherer, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) > 0 && mf.GetMetric()[0].GetCounter().GetValue() >= want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %v", name, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestExtProcMetadataContextOptions: route options also come from the
// forwarded metadata_context namespace "fencegate"; the gRPC initial
// metadata wins over it.
func TestExtProcMetadataContextOptions(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	l := locktest.Acquire(t, s, "orders/7", time.Minute)
	c := serveExtProc(t, fencecheck.New(s, fencecheck.Options{}))
	ns, _ := structpb.NewStruct(map[string]any{fencewire.ExtKey: "orders/{2}", fencewire.ExtPolicy: "newest"})
	withMeta := func() *extprocv3.ProcessingRequest {
		r := envoyHeaders("POST", "/orders/7", fencewire.HeaderToken, l.Fence)
		r.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataNamespace: ns}}
		return r
	}
	if code, _, _ := immediateOf(t, openStream(t, c, nil).roundTrip(withMeta())); code != 503 {
		t.Fatalf("policy from metadata_context not read: %d", code)
	}
	resp := openStream(t, c, map[string]string{fencewire.ExtPolicy: "holder"}).roundTrip(withMeta())
	if set, _ := mutationOf(resp.GetRequestHeaders()); set[fencewire.HeaderVerified] != l.Fence {
		t.Fatalf("key from metadata_context, policy from initial metadata: %v", resp)
	}
}

// TestExtProcBodyBeforeHeaders: a stream whose first message is not the
// request headers (the filter set to skip them, a route override) would
// pass unchecked; it is answered 503 unavailable.
func TestExtProcBodyBeforeHeaders(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := serveExtProc(t, fencecheck.New(s, fencecheck.Options{}))
	body := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte("x"), EndOfStream: true}}}
	code, _, _ := immediateOf(t, openStream(t, c, map[string]string{fencewire.ExtKey: "acct"}).roundTrip(body))
	if code != 503 {
		t.Fatalf("a body before any headers: %d, want 503", code)
	}
}
