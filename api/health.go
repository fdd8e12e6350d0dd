package api

import (
	"context"
	"net/http"
	"time"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type healthReply struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// healthz answers 200 while the process can serve HTTP at all; it touches
// no backend, so a backend outage never gets the process restarted.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, healthReply{Status: "error", Error: "use GET"})
		return
	}
	writeJSON(w, http.StatusOK, healthReply{Status: "ok"})
}

// readyz answers 200 when the store answers a ping and the Ready hook (if
// any) passes, both within readyTimeout; 503 otherwise, so a load balancer
// stops sending lock traffic to an instance whose backend is gone.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, healthReply{Status: "error", Error: "use GET"})
		return
	}
	if err := s.Ready(r.Context()); err != nil {
		s.log.Warn("readiness check failed", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, healthReply{Status: "unavailable", Error: "backend not ready"})
		return
	}
	writeJSON(w, http.StatusOK, healthReply{Status: "ok"})
}

// Ready runs the readiness checks: the store's Ping, then Options.Ready,
// within readyTimeout. The gRPC health service can poll it too.
func (s *Server) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		return err
	}
	if s.ready != nil {
		return s.ready(ctx)
	}
	return nil
}

// grpcHealthServices are the names WatchReadiness reports for: the
// server as a whole ("") and the lock service.
var grpcHealthServices = []string{"", fencegatev1.Locks_ServiceDesc.ServiceName}

// WatchReadiness keeps hs (the grpc.health.v1 service the caller
// registered) in step with Ready: SERVING or NOT_SERVING for "" and
// fencegate.v1.Locks, checked now and then every interval (0 means 5 s).
// It blocks until ctx ends; run it in a goroutine the caller owns and
// stops by cancelling ctx.
func (s *Server) WatchReadiness(ctx context.Context, hs *health.Server, interval time.Duration) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if err := s.Ready(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			st = healthpb.HealthCheckResponse_NOT_SERVING
			if last != st {
				s.log.Warn("gRPC health: not serving", "err", err)
			}
		}
		if st != last {
			for _, name := range grpcHealthServices {
				hs.SetServingStatus(name, st)
			}
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
