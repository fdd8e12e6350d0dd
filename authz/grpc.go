package authz

import (
	"cmp"
	"context"
	"net"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
)

// ServiceName is the gRPC service Envoy's ext_authz filter calls; it is
// also the name its health is reported under.
const ServiceName = "envoy.service.auth.v3.Authorization"

// Server is the Envoy ext_authz v3 gRPC server. Create it with NewServer and
// Register it on a grpc.Server of its own listener.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	d      decider
	health *health.Server
}

var _ authv3.AuthorizationServer = (*Server)(nil)

// NewServer returns an ext_authz server deciding with c.
func NewServer(c *fencecheck.Checker, o Options) *Server {
	return &Server{d: newDecider(c, o), health: health.NewServer()}
}

// Register registers the Authorization service and grpc.health.v1 (serving
// for "" and ServiceName) on g.
func (s *Server) Register(g *grpc.Server) {
	authv3.RegisterAuthorizationServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// Health returns the health server, so the owner can report NOT_SERVING
// while draining (Shutdown) before stopping the listener.
func (s *Server) Health() *health.Server { return s.health }

// Check answers one ext_authz request. It never returns an error: a check
// that could not decide is answered UNAVAILABLE with a 503 denial, so Envoy
// fails closed whatever its failure_mode_allow says.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	attrs := req.GetAttributes()
	hr := attrs.GetRequest().GetHttp()
	headers := hr.GetHeaders()
	// The headers map holds one (comma-joined) value per name; header_map
	// lists every copy, so it is counted.
	count := func(lc string) int {
		if _, ok := headers[lc]; ok {
			return 1
		}
		return 0
	}
	if len(headers) == 0 && hr.GetHeaderMap() != nil {
		// Envoy sends header_map instead of headers with encode_raw_headers.
		headers = make(map[string]string, len(hr.GetHeaderMap().GetHeaders()))
		copies := make(map[string]int, len(hr.GetHeaderMap().GetHeaders()))
		for _, h := range hr.GetHeaderMap().GetHeaders() {
			v := h.GetValue()
			if len(h.GetRawValue()) > 0 {
				v = string(h.GetRawValue())
			}
			k := strings.ToLower(h.GetKey())
			headers[k] = v
			copies[k]++
		}
		count = func(lc string) int { return copies[lc] }
	}
	v := requestView{
		method: hr.GetMethod(),
		host:   cmp.Or(hr.GetHost(), headers[":authority"]),
		path:   hr.GetPath(),
		header: func(lc string) string { return headers[lc] },
		count:  count,
		peer:   peerAddr(attrs.GetSource()),
		source: SourceGRPC,
		caller: grpcCaller(ctx, s.d.trustLoopback, s.d.trustSidecar),
	}
	dec, _ := s.d.decide(grpcTraceContext(ctx, headers), v, optionsFromMap(attrs.GetContextExtensions()))
	return checkResponse(dec), nil
}

func checkResponse(dec fencecheck.Decision) *authv3.CheckResponse {
	if !dec.Allowed {
		c := code.Code_PERMISSION_DENIED
		if dec.Reason == fencecheck.ReasonUnavailable {
			c = code.Code_UNAVAILABLE
		}
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(c), Message: "fence check: " + string(dec.Reason)},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode(dec.Status)},
				Headers: []*corev3.HeaderValueOption{
					setHeader("content-type", "application/json"),
					setHeader(fencewire.HeaderReason, string(dec.Reason)),
					setHeader(fencewire.HeaderDecisionID, dec.DecisionID),
				},
				Body: string(denialJSON(dec)),
			}},
		}
	}
	// Sized for the most headers a reply carries, so the appends below
	// never reallocate (this runs on every allowed write).
	ok := &authv3.OkHttpResponse{
		Headers:         make([]*corev3.HeaderValueOption, 0, 3),
		HeadersToRemove: append(make([]string, 0, 3), fencewire.HeaderLockID),
	}
	if verified(dec) {
		// Overwrite, so a client cannot smuggle its own value upstream.
		ok.Headers = append(ok.Headers, setHeader(fencewire.HeaderVerified, dec.Presented))
	} else {
		ok.HeadersToRemove = append(ok.HeadersToRemove, fencewire.HeaderVerified)
	}
	if dec.DecisionID != "" {
		ok.Headers = append(ok.Headers, setHeader(fencewire.HeaderDecisionID, dec.DecisionID))
	}
	if dec.WouldDeny {
		ok.Headers = append(ok.Headers, setHeader(fencewire.HeaderWouldDeny, string(dec.Reason)))
	} else {
		ok.HeadersToRemove = append(ok.HeadersToRemove, fencewire.HeaderWouldDeny)
	}
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(code.Code_OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok},
	}
}

// verified reports whether dec allowed a write on a fence it checked (not a
// read, not policy off, not a dry-run would-deny).
func verified(dec fencecheck.Decision) bool { return fencecheck.Verified(dec) }

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

func peerAddr(p *authv3.AttributeContext_Peer) string {
	sa := p.GetAddress().GetSocketAddress()
	if sa == nil {
		return ""
	}
	return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
}
