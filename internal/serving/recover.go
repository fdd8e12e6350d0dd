package serving

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/wire"
	"github.com/fencegate/fencegate/lockstore"
)

// Panic recovery, applied once per listener where listeners are built, so
// that a bug in one handler fails that one request (closed: 500 or
// INTERNAL, which Envoy, forward-auth proxies and the API server treat as a
// denial) instead of crashing every listener. The transports do not
// recover themselves; they only make sure their metrics and access logs
// count a panicking request as an internal error.

// internalStatus is the answer to a panicking RPC: INTERNAL with the lock
// API's ErrorInfo (docs/api.md), which ext_authz and health clients ignore.
var internalStatus = func() *status.Status {
	st := status.New(codes.Internal, "internal error")
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(lockstore.Internal), Domain: wire.ErrorDomain}); err == nil {
		return withInfo
	}
	return st
}()

// recoverUnary turns a panic in a unary handler into INTERNAL for that call.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				logPanic(log, "panic in gRPC handler", "method", info.FullMethod, v)
				resp, err = nil, internalStatus.Err()
			}
		}()
		return h(ctx, req)
	}
}

// recoverStream does the same for streaming handlers (grpc.health.v1 Watch).
func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if v := recover(); v != nil {
				logPanic(log, "panic in gRPC handler", "method", info.FullMethod, v)
				err = internalStatus.Err()
			}
		}()
		return h(srv, ss)
	}
}

// recoverHTTP turns a panic in h into a 500, unless the handler had already
// started its reply (a started reply cannot become a 500; the client sees
// it cut short). http.ErrAbortHandler, net/http's way to abort a reply on
// purpose, passes through.
func recoverHTTP(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &startWatcher{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				// The route is the mux pattern, never the path: paths can carry keys.
				logPanic(log, "panic in HTTP handler", "route", r.Pattern, v)
				if !sw.started {
					http.Error(w, "internal error", http.StatusInternalServerError)
				}
			}
		}()
		h.ServeHTTP(sw, r)
	})
}

func logPanic(log *slog.Logger, msg, where, name string, v any) {
	log.Error(msg, where, name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
}

// startWatcher notes whether a reply has started.
type startWatcher struct {
	http.ResponseWriter
	started bool
}

func (s *startWatcher) WriteHeader(code int) {
	if code >= 200 { // 1xx informational replies do not start the reply
		s.started = true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *startWatcher) Write(b []byte) (int, error) {
	s.started = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *startWatcher) Unwrap() http.ResponseWriter { return s.ResponseWriter }
