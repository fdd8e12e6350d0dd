package bench

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/lockserver"
)

// The listeners every server in the benchmarks runs on, in process or in a
// child: the floors' and fencegate's alike, so a floor differs from its
// subject only in what answers the request.
//
// They mirror internal/serving (cmd/fencegate/listen.go until #27 moved it;
// its settings were unexported in package main): maxConnsPerListener, the HTTP timeouts of
// newMainHTTPRunner, defaultGRPCLimits.serverOptions and the panic-recovery
// interceptors of newGRPCRunner. A change there must be copied here, or the
// floors stop being the stack fencegate really runs on. Not mirrored: the
// connection slots (connlimit.go; here a plain cap — they add two
// uncontended mutex operations per request, in net/http's ConnState hook or
// a gRPC stats handler) and the per-listener message bounds and the lock
// API's tap (the benchmarks send small requests with a token); the
// `fencegate serve` children have all of it.
const (
	maxConnsPerListener = 1024
	httpReadHeader      = 10 * time.Second
	httpIdle            = 2 * time.Minute
	// httpRead is the main HTTP listener's read timeout: 30 s plus the
	// lock API's maximum wait (lockserver.DefaultMaxWait).
	httpRead = 30*time.Second + lockserver.DefaultMaxWait
)

// grpcStreamWorkers is cmd/fencegate's defaultGRPCLimits.streamWorkers:
// RPCs run on long-lived goroutines whose stacks stay grown, instead of a
// fresh goroutine per RPC whose stack grows by copying on every deep call.
const grpcStreamWorkers = 64

// grpcServerOptions are the options cmd/fencegate's gRPC listeners (lock API
// and ext_authz) build their grpc.Server with, TLS aside.
func grpcServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.MaxConcurrentStreams(256),
		grpc.NumStreamWorkers(grpcStreamWorkers),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: 2 * time.Minute,
			Time:              time.Minute,
			Timeout:           20 * time.Second,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.ReadBufferSize(8 << 10),
		grpc.ChainUnaryInterceptor(recoverUnary),
		grpc.ChainStreamInterceptor(recoverStream),
	}
}

// recoverUnary and recoverStream stand in for cmd/fencegate's panic
// recovery (a deferred recover around each handler), so the floors pay for
// the same interceptor chain. They answer INTERNAL; the benchmarks never
// panic.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	return h(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return h(srv, ss)
}

// recoverHTTP stands in for cmd/fencegate's HTTP panic recovery: a
// deferred recover and a ResponseWriter wrapper noting whether the reply
// has started (a 500 can only replace a reply not yet started).
func recoverHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &startWatcher{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				if !sw.started {
					http.Error(w, "internal error", http.StatusInternalServerError)
				}
			}
		}()
		h.ServeHTTP(sw, r)
	})
}

// startWatcher notes whether a reply has started.
type startWatcher struct {
	http.ResponseWriter
	started bool
}

func (s *startWatcher) WriteHeader(code int) {
	if code >= 200 {
		s.started = true
	}
	s.ResponseWriter.WriteHeader(code)
}

// listenLoopback binds 127.0.0.1 on a free port, capped at
// maxConnsPerListener as cmd/fencegate's listeners are.
func listenLoopback() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, maxConnsPerListener), nil
}

// listenGRPC starts a grpc.Server with grpcServerOptions on a loopback
// listener, lets register add its services, and returns the listener's
// address. The server and the goroutine serving it end at cleanup.
func listenGRPC(tb testing.TB, register func(*grpc.Server)) string {
	tb.Helper()
	lis, err := listenLoopback()
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer(grpcServerOptions()...)
	register(gs)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	tb.Cleanup(func() {
		gs.Stop()
		<-served
	})
	return lis.Addr().String()
}

// dialGRPC is the one client connection (one HTTP/2 connection) the
// workers share, as a proxy's would be; closed at cleanup.
func dialGRPC(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("grpc client: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// serveHTTP serves h on a loopback listener through an http.Server with
// cmd/fencegate's main-listener timeouts and returns its base URL. The
// server is closed at cleanup.
func serveHTTP(tb testing.TB, h http.Handler) string {
	tb.Helper()
	lis, err := listenLoopback()
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	srv := &http.Server{
		Handler:           recoverHTTP(h),
		ReadHeaderTimeout: httpReadHeader,
		ReadTimeout:       httpRead,
		IdleTimeout:       httpIdle,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	tb.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			tb.Errorf("http server: %v", err)
		}
	})
	return "http://" + lis.Addr().String()
}
