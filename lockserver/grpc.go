package lockserver

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/internal/tracing"
	"github.com/fencegate/fencegate/lockstore"
)

// grpcOps maps the Locks service's methods to operations (scopes, metrics).
var grpcOps = map[string]auth.Operation{
	fencegatev1.Locks_Acquire_FullMethodName:  auth.OpAcquire,
	fencegatev1.Locks_Release_FullMethodName:  auth.OpRelease,
	fencegatev1.Locks_Extend_FullMethodName:   auth.OpExtend,
	fencegatev1.Locks_Lookup_FullMethodName:   auth.OpLookup,
	fencegatev1.Locks_IsLocked_FullMethodName: auth.OpStatus,
}

// LocksServiceName is the gRPC name of the lock service, as grpc.health.v1
// reports it.
var LocksServiceName = fencegatev1.Locks_ServiceDesc.ServiceName

// RegisterGRPC registers the fencegate.v1.Locks service and server
// reflection on gs (do not register reflection again). grpc.health.v1 is
// left to the caller, which owns the server's lifecycle (cmd/fencegate:
// internal/health).
//
// Authentication, scopes, metrics and access logs are built into the
// registered service (an interceptor applied per method, inside any
// interceptors gs was built with), so they cannot be lost by building gs
// without a server option. Panic recovery is the listener's: build gs with
// a recovering interceptor (cmd/fencegate does); a call whose handler
// panics is counted and logged here as Internal on its way there.
func (s *Server) RegisterGRPC(gs *grpc.Server) {
	desc := fencegatev1.Locks_ServiceDesc
	desc.Methods = make([]grpc.MethodDesc, len(fencegatev1.Locks_ServiceDesc.Methods))
	for i, m := range fencegatev1.Locks_ServiceDesc.Methods {
		h := m.Handler
		desc.Methods[i] = grpc.MethodDesc{
			MethodName: m.MethodName,
			Handler: func(srv any, ctx context.Context, dec func(any) error, outer grpc.UnaryServerInterceptor) (any, error) {
				return h(srv, ctx, dec, s.chainInterceptor(outer))
			},
		}
	}
	gs.RegisterService(&desc, &grpcLocks{s: s})
	reflection.Register(gs)
}

// chainInterceptor runs the server-wide interceptor (if any) outside ours.
func (s *Server) chainInterceptor(outer grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if outer == nil {
		return s.unaryInterceptor
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return s.unaryInterceptor(ctx, req, info, h)
		})
	}
}

type principalKey struct{}

func principalFrom(ctx context.Context) *auth.Principal {
	p, _ := ctx.Value(principalKey{}).(*auth.Principal)
	return p
}

// unaryInterceptor authenticates the "authorization: Bearer …" metadata,
// checks the operation scope, runs the method, turns errors into statuses
// carrying the LockError code, and records metrics and one access log line
// (a panicking method as Internal; the listener's interceptor recovers).
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	op, known := grpcOps[info.FullMethod]
	if !known {
		return h(ctx, req)
	}
	ctx, span := startOpSpan(tracing.FromGRPC(ctx), op)
	var p *auth.Principal
	panicking := true
	defer func() {
		if panicking {
			resp, err = nil, &apiError{code: lockstore.Internal, msg: "internal error"}
		}
		s.metrics.observe(op, resultOf(replyOK(resp), err), start)
		endOpSpan(span, op, transportGRPC, replyOK(resp), err)
		var st *status.Status
		if err != nil {
			ae := asAPIError(err)
			st = ae.grpcStatus()
			err = st.Err()
			if c := st.Code(); c == codes.Internal || c == codes.Unavailable || (c == codes.DeadlineExceeded && ae.code == lockstore.NetworkTimeout) {
				s.log.LogAttrs(ctx, levelFor(ae.code), "lock API call failed", slog.String("method", info.FullMethod),
					slog.String("code", string(ae.code)), slog.Any("err", ae.cause))
			}
		}
		d := time.Since(start)
		if s.access.logsGRPC(st.Code(), d) && s.log.Enabled(ctx, slog.LevelInfo) {
			s.log.LogAttrs(ctx, slog.LevelInfo, "grpc request",
				slog.String("method", info.FullMethod),
				slog.String("code", st.Code().String()),
				slog.Duration("duration", d),
				slog.String("token", tokenName(p)),
			)
		}
	}()
	resp, err = s.authorizedCall(ctx, req, op, h, &p)
	panicking = false
	return resp, err
}

// authorizedCall authenticates and authorizes the call (*p is the caller)
// and runs h.
func (s *Server) authorizedCall(ctx context.Context, req any, op auth.Operation, h grpc.UnaryHandler, p **auth.Principal) (any, error) {
	var err error
	*p, err = s.authenticate(ctx, authorizationMD(ctx))
	if err != nil {
		return nil, err
	}
	if err := authorizeOp(*p, op); err != nil {
		return nil, err
	}
	return h(context.WithValue(ctx, principalKey{}, *p), req)
}

// GRPCTap is a grpc.InTapHandle for a server the lock API is registered
// on. grpc-go reads a call's whole message before any interceptor runs, so
// without it a caller with no credential makes the server buffer and
// decode every message it sends (up to the server's MaxRecvMsgSize, on
// every stream at once). GRPCTap answers a fencegate.v1.Locks call without
// a valid bearer token Unauthenticated (the status the interceptor would
// give) from its headers alone, before the message is read. Other
// services (health, reflection) pass, and the interceptor still
// authenticates and authorizes every Locks call. It runs in the
// connection's reader goroutine: a hash of the token, nothing more.
func (s *Server) GRPCTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	op, known := grpcOps[info.FullMethodName]
	if !known || s.auth == nil {
		return ctx, nil
	}
	var authorization string
	if v := info.Header.Get("authorization"); len(v) == 1 {
		authorization = v[0]
	}
	start := time.Now()
	if _, err := s.authenticate(ctx, authorization); err != nil {
		s.metrics.observe(op, resultOf(false, err), start)
		st := asAPIError(err).grpcStatus()
		if d := time.Since(start); s.access.logsGRPC(st.Code(), d) && s.log.Enabled(ctx, slog.LevelInfo) {
			s.log.LogAttrs(ctx, slog.LevelInfo, "grpc request",
				slog.String("method", info.FullMethodName), // one of grpcOps
				slog.String("code", st.Code().String()),
				slog.Duration("duration", d),
				slog.String("token", ""),
			)
		}
		return ctx, st.Err()
	}
	return ctx, nil
}

// authorizationMD returns the "authorization" metadata value; several
// values are treated as none, so a proxy cannot smuggle a second token.
func authorizationMD(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 {
		return v[0]
	}
	return ""
}

// replyOK reports whether a reply is a success for metrics: ok=false
// replies are the domain failures (contention, absent lock).
func replyOK(resp any) bool {
	switch r := resp.(type) {
	case *fencegatev1.AcquireResponse:
		return r.GetOk()
	case *fencegatev1.ReleaseResponse:
		return r.GetOk()
	case *fencegatev1.ExtendResponse:
		return r.GetOk()
	case *fencegatev1.LookupResponse:
		return r.GetOk()
	case *fencegatev1.IsLockedResponse:
		return r != nil
	}
	return false
}

// grpcLocks implements fencegate.v1.Locks on the shared core; the
// interceptor has authenticated the caller and put the principal in ctx.
type grpcLocks struct {
	fencegatev1.UnimplementedLocksServer
	s *Server
}

func (g *grpcLocks) Acquire(ctx context.Context, req *fencegatev1.AcquireRequest) (*fencegatev1.AcquireResponse, error) {
	res, err := g.s.acquire(ctx, principalFrom(ctx), req.GetKey(), req.TtlMs, req.WaitMs)
	if err != nil {
		return nil, err
	}
	if !res.OK {
		return &fencegatev1.AcquireResponse{Ok: false, Reason: lockstore.ReasonLocked}, nil
	}
	return &fencegatev1.AcquireResponse{Ok: true, LockId: res.LockID, Fence: res.Fence, ExpiresAtMs: res.ExpiresAtMs, Proof: res.Proof}, nil
}

func (g *grpcLocks) Release(ctx context.Context, req *fencegatev1.ReleaseRequest) (*fencegatev1.ReleaseResponse, error) {
	res, err := g.s.release(ctx, req.GetLockId())
	if err != nil {
		return nil, err
	}
	return &fencegatev1.ReleaseResponse{Ok: res.OK}, nil
}

func (g *grpcLocks) Extend(ctx context.Context, req *fencegatev1.ExtendRequest) (*fencegatev1.ExtendResponse, error) {
	res, err := g.s.extend(ctx, req.GetLockId(), req.TtlMs)
	if err != nil {
		return nil, err
	}
	if !res.OK {
		return &fencegatev1.ExtendResponse{Ok: false}, nil
	}
	return &fencegatev1.ExtendResponse{Ok: true, ExpiresAtMs: res.ExpiresAtMs}, nil
}

func (g *grpcLocks) Lookup(ctx context.Context, req *fencegatev1.LookupRequest) (*fencegatev1.LookupResponse, error) {
	var key, lockID *string
	switch t := req.GetTarget().(type) {
	case *fencegatev1.LookupRequest_Key:
		key = &t.Key
	case *fencegatev1.LookupRequest_LockId:
		lockID = &t.LockId
	}
	info, err := g.s.lookup(ctx, principalFrom(ctx), key, lockID)
	if err != nil {
		return nil, err
	}
	if info == nil {
		return &fencegatev1.LookupResponse{Ok: false}, nil
	}
	return &fencegatev1.LookupResponse{
		Ok:           true,
		KeyHash:      info.KeyHash,
		LockIdHash:   info.LockIDHash,
		Fence:        info.Fence,
		ExpiresAtMs:  info.ExpiresAtMs,
		AcquiredAtMs: info.AcquiredAtMs,
	}, nil
}

func (g *grpcLocks) IsLocked(ctx context.Context, req *fencegatev1.IsLockedRequest) (*fencegatev1.IsLockedResponse, error) {
	locked, err := g.s.isLocked(ctx, principalFrom(ctx), req.GetKey())
	if err != nil {
		return nil, err
	}
	return &fencegatev1.IsLockedResponse{Locked: locked}, nil
}
