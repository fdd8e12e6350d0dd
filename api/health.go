package api

import (
	"context"
	"net/http"
	"time"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type healthReply struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Replication is the store's, on /readyz when the store reports it.
	Replication *lockstore.Replication `json:"replication,omitempty"`
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
	reply := healthReply{Status: "ok"}
	if s.repl != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		// Informational: a store that cannot say still serves.
		if rep, err := s.repl(ctx); err == nil {
			// The mode only: /readyz takes no token, and the detail
			// names standbys (it is in the start-up log).
			reply.Replication = &lockstore.Replication{Mode: rep.Mode}
		} else {
			reply.Replication = &lockstore.Replication{Mode: lockstore.ReplicationUnknown}
		}
		cancel()
	}
	writeJSON(w, http.StatusOK, reply)
}

// Ready runs the readiness checks: the store's Ping, then Options.Ready,
// within readyTimeout. The gRPC health service can poll it too.
func (s *Server) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := s.pinger.Ping(ctx); err != nil {
		return err
	}
	if s.ready != nil {
		return s.ready(ctx)
	}
	return nil
}

// LocksServiceName is the gRPC name of the lock service, as grpc.health.v1
// reports it.
var LocksServiceName = fencegatev1.Locks_ServiceDesc.ServiceName

// DefaultReadinessInterval is how often FollowReadiness checks when given
// no interval.
const DefaultReadinessInterval = 5 * time.Second

// FollowReadiness keeps the grpc.health.v1 status of services on hs (a
// server the caller registered, on any listener) in step with Ready, so a
// health-checking proxy stops sending where /readyz would answer 503.
//
// Before it returns, it marks every service NOT_SERVING: a listener started
// afterwards never reports SERVING before the store answered, nor "unknown
// service". The returned loop checks at once, then every interval (0 means
// DefaultReadinessInterval), until ctx ends; the caller runs it in a
// goroutine it owns and stops by cancelling ctx.
func (s *Server) FollowReadiness(hs *health.Server, interval time.Duration, services ...string) func(ctx context.Context) {
	if interval <= 0 {
		interval = DefaultReadinessInterval
	}
	set := func(st healthpb.HealthCheckResponse_ServingStatus) {
		for _, name := range services {
			hs.SetServingStatus(name, st)
		}
	}
	set(healthpb.HealthCheckResponse_NOT_SERVING)
	return func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		last := healthpb.HealthCheckResponse_NOT_SERVING
		first := true
		for {
			st := healthpb.HealthCheckResponse_SERVING
			if err := s.Ready(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				st = healthpb.HealthCheckResponse_NOT_SERVING
				if last != st || first {
					s.log.Warn("gRPC health: not serving", "err", err)
				}
			}
			if st != last {
				set(st)
				last = st
			}
			first = false
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}
}
