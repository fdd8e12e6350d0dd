package api

import (
	"context"
	"net/http"
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
