package authz

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lockstore"
)

// ExtProcServiceName is the gRPC service Envoy's ext_proc filter calls; it
// is also the name its health is reported under.
const ExtProcServiceName = "envoy.service.ext_proc.v3.ExternalProcessor"

// SourceExtProc names the ext_proc transport in audit events.
const SourceExtProc = "authz-extproc"

// MetadataNamespace is the metadata_context namespace (forwarded by the
// ext_proc filter's metadata_options) whose string fields are read as
// route options, under the same names as context_extensions.
const MetadataNamespace = "fencegate"

// ExtProc is the Envoy ext_proc v3 server: the same decision as ext_authz
// at the request headers, and, because it also sees the response, the write
// barrier's completion (see fencecheck). Register it on the authz gRPC
// listener next to Server.
//
// The filter must run with processing_mode request_header_mode SEND,
// response_header_mode SEND, bodies NONE, trailers SKIP (deploy/envoy/
// envoy-extproc.yaml). Route options (the context_extensions names:
// fence_key, fence_policy, fence_proof, …, plus fence_barrier, fence_max_write
// and fence_max_wait) come
// from the stream's gRPC initial metadata (the per-route
// ExtProcPerRoute.overrides.grpc_initial_metadata), falling back to the
// string fields of metadata_context's "fencegate" namespace.
//
// Per stream (one HTTP request):
//   - request headers: the decision. A denial is an ImmediateResponse with
//     the status, headers and JSON body of an ext_authz denial (and
//     Retry-After for "draining" and "too-many-writes"); the stream ends. An allowed request
//     continues with x-fence-lock-id removed and x-fence-verified,
//     x-fence-decision-id, x-fence-would-deny set or removed as ext_authz
//     does.
//   - response headers: a write admitted under the barrier is finished —
//     unless the status is one Envoy also answers itself when the upstream
//     exchange failed or timed out (408, 413, any 5xx; upstreamCompleted),
//     where the API may still commit: that write is abandoned, its entry
//     expires at maxWrite.
//   - a stream that ends without response headers: the write is abandoned.
//
// Completion is at the response headers, not the end of the body: an API
// answers once it has committed, and with bodies NONE the filter never
// shows the body.
type ExtProc struct {
	extprocv3.UnimplementedExternalProcessorServer
	d decider
}

var _ extprocv3.ExternalProcessorServer = (*ExtProc)(nil)

// NewExtProc returns an ext_proc server deciding with c.
func NewExtProc(c *fencecheck.Checker, o Options) *ExtProc {
	return &ExtProc{d: newDecider(c, o)}
}

// Register registers the ExternalProcessor service on g. Health is the
// owner's (Server.Register's health server; set ExtProcServiceName there).
func (s *ExtProc) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
}

// Process runs one HTTP request's stream.
func (s *ExtProc) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	var (
		dec     fencecheck.Decision
		decided bool   // the request headers were checked
		settled = true // no barrier write to settle until one is admitted
	)
	defer func() {
		if !settled {
			// The stream ended (Envoy reset it, the client went away, the
			// upstream never answered) before the response headers.
			s.d.checker.Abandon(context.WithoutCancel(ctx), dec)
		}
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || ctx.Err() != nil {
				return nil
			}
			return err
		}
		var resp *extprocv3.ProcessingResponse
		switch r := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			dec, decided = s.decide(ctx, req, r.RequestHeaders), true
			if !dec.Allowed {
				return stream.Send(immediateResponse(dec))
			}
			settled = dec.WriteID == ""
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: upstreamMutation(dec)}}}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			if !settled {
				settled = true
				if st := responseStatus(r.ResponseHeaders); !upstreamCompleted(st) {
					s.d.checker.Abandon(ctx, dec)
				} else {
					_ = s.d.checker.Finish(context.WithoutCancel(ctx), dec) // counted and logged there
				}
			}
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}}
		// A filter configured to send more than the headers still gets an
		// answer to each message, so that the request is never stalled.
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		default:
			continue
		}
		if !decided {
			// Anything before the request headers (a filter set to skip
			// them, a route override) would pass unchecked: fail closed.
			s.d.log.LogAttrs(ctx, slog.LevelWarn, "authz: ext_proc message before the request headers; failing closed (send request headers: request_header_mode SEND)")
			return stream.Send(immediateResponse(fencecheck.Decision{Reason: fencecheck.ReasonUnavailable, Status: fencecheck.StatusOf(fencecheck.ReasonUnavailable)}))
		}
		if req.GetObservabilityMode() {
			continue // Envoy does not read answers in observability mode
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (s *ExtProc) decide(ctx context.Context, req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) fencecheck.Decision {
	headers := map[string]string{}
	copies := map[string]int{}
	for _, hv := range h.GetHeaders().GetHeaders() {
		v := hv.GetValue()
		if len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		k := strings.ToLower(hv.GetKey())
		headers[k] = v
		copies[k]++
	}
	v := requestView{
		method:    headers[":method"],
		host:      cmp.Or(headers[":authority"], headers["host"]),
		path:      headers[":path"],
		header:    func(lc string) string { return headers[lc] },
		count:     func(lc string) int { return copies[lc] },
		peer:      extProcPeer(req),
		source:    SourceExtProc,
		canFinish: true,
		caller:    grpcCaller(ctx, s.d.trustLoopback, s.d.trustSidecar),
	}
	if v.method == "" {
		v.methodUnknown = true // checked as a write
	}
	dec, _ := s.d.decide(ctx, v, extProcOptions(ctx, req))
	return dec
}

// extProcOptions reads the route options: metadata_context's "fencegate"
// namespace, overridden by the stream's gRPC initial metadata.
func extProcOptions(ctx context.Context, req *extprocv3.ProcessingRequest) routeOptions {
	m := map[string]string{}
	if ns := req.GetMetadataContext().GetFilterMetadata()[MetadataNamespace]; ns != nil {
		for k, v := range ns.GetFields() {
			if str := v.GetStringValue(); str != "" {
				m[k] = str
			}
		}
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, k := range routeOptionNames {
			if vs := md.Get(k); len(vs) > 0 && vs[len(vs)-1] != "" {
				m[k] = vs[len(vs)-1]
			}
		}
	}
	return optionsFromMap(m)
}

// extProcPeer is the client's address from the request attributes Envoy
// sends when the filter lists "source.address" in request_attributes.
func extProcPeer(req *extprocv3.ProcessingRequest) string {
	for _, st := range req.GetAttributes() {
		if v := st.GetFields()["source.address"].GetStringValue(); v != "" {
			return v
		}
	}
	return ""
}

func responseStatus(h *extprocv3.HttpHeaders) int {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.GetKey() == ":status" {
			v := hv.GetValue()
			if len(hv.GetRawValue()) > 0 {
				v = string(hv.GetRawValue())
			}
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// upstreamMutation is what an allowed request's headers become, exactly as
// ext_authz's OkHttpResponse sets them.
func upstreamMutation(dec fencecheck.Decision) *extprocv3.HeaderMutation {
	m := &extprocv3.HeaderMutation{RemoveHeaders: []string{fencewire.HeaderLockID}}
	if verified(dec) {
		m.SetHeaders = append(m.SetHeaders, rawHeader(fencewire.HeaderVerified, dec.Presented))
	} else {
		m.RemoveHeaders = append(m.RemoveHeaders, fencewire.HeaderVerified)
	}
	if dec.DecisionID != "" {
		m.SetHeaders = append(m.SetHeaders, rawHeader(fencewire.HeaderDecisionID, dec.DecisionID))
	} else {
		m.RemoveHeaders = append(m.RemoveHeaders, fencewire.HeaderDecisionID)
	}
	if dec.WouldDeny {
		m.SetHeaders = append(m.SetHeaders, rawHeader(fencewire.HeaderWouldDeny, string(dec.Reason)))
	} else {
		m.RemoveHeaders = append(m.RemoveHeaders, fencewire.HeaderWouldDeny)
	}
	return m
}

// immediateResponse is a denial, as ext_authz's DeniedHttpResponse.
func immediateResponse(dec fencecheck.Decision) *extprocv3.ProcessingResponse {
	ir := &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(dec.Status)},
		Headers: &extprocv3.HeaderMutation{},
		Body:    fencecheck.DenialJSON(dec),
		Details: "fence_check_" + strings.ReplaceAll(string(dec.Reason), "-", "_"),
	}
	for _, kv := range fencecheck.DenialHeaders(dec) {
		ir.Headers.SetHeaders = append(ir.Headers.SetHeaders, rawHeader(kv[0], kv[1]))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
}

// rawHeader sets a header, overwriting: Envoy's ext_proc reads raw_value
// (it rejects a mutation with value set when it sends raw values).
func rawHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// parseBarrier reads fence_barrier and fence_max_write. The barrier is
// asked for by "on", "true", "1" or "yes"; "", "off", "false", "0", "no"
// leave it off; anything else is a route error (fail closed).
func parseBarrier(on, maxWrite string) (bool, time.Duration, error) {
	var barrier bool
	switch strings.ToLower(strings.TrimSpace(on)) {
	case "", "off", "false", "0", "no":
	case "on", "true", "1", "yes":
		barrier = true
	default:
		return false, 0, fmt.Errorf("authz: %s %q is not on or off", fencewire.ExtBarrier, on)
	}
	var d time.Duration
	if maxWrite != "" {
		var err error
		if d, err = time.ParseDuration(maxWrite); err != nil || d < time.Millisecond || d > lockstore.MaxWriteLimit {
			return false, 0, fmt.Errorf("authz: %s %q is not a duration between 1ms and %s", fencewire.ExtMaxWrite, maxWrite, lockstore.MaxWriteLimit)
		}
	}
	return barrier, d, nil
}

// upstreamCompleted reports whether a response status, as ext_proc sees it,
// can be the upstream's complete answer. Envoy answers 408 (request,
// stream-idle or max-stream-duration timeouts), 413 and 5xx itself when
// the exchange failed, and ext_proc cannot tell those from the upstream's
// own: they are abandoned (the entry expires at maxWrite), which only ever
// delays a newer fence, never lets it in early.
func upstreamCompleted(status int) bool {
	return status != 0 && status != 408 && status != 413 && status < 500
}
