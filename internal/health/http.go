package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/fencegate/fencegate/lockstore"
)

// reply is the body of /healthz and /readyz.
type reply struct {
	// Status is "ok" (200) or "unavailable" (503); "error" for a method
	// other than GET or HEAD.
	Status string `json:"status"`
	// Phase is the lifecycle phase: starting, ready, draining, stopped.
	Phase string `json:"phase,omitempty"`
	Error string `json:"error,omitempty"`
	// Replication is the store's mode, on a ready /readyz when the store
	// reports it.
	Replication *lockstore.Replication `json:"replication,omitempty"`
}

// Register mounts /healthz and /readyz on mux, each behind wrap (the
// access log; nil: none).
func (r *Readiness) Register(mux *http.ServeMux, wrap func(http.Handler) http.Handler) {
	if wrap == nil {
		wrap = func(h http.Handler) http.Handler { return h }
	}
	mux.Handle("/healthz", wrap(http.HandlerFunc(r.Healthz)))
	mux.Handle("/readyz", wrap(http.HandlerFunc(r.Readyz)))
}

// Healthz answers 200 while the process serves HTTP at all, draining
// included: it touches no backend, so neither a store outage nor a
// shutdown gets the process restarted by a liveness probe.
func (r *Readiness) Healthz(w http.ResponseWriter, req *http.Request) {
	if !getOrHead(w, req) {
		return
	}
	writeJSON(w, http.StatusOK, reply{Status: "ok", Phase: r.Phase().String()})
}

// Readyz answers 200 when Check passes; 503 otherwise, with the phase, so
// a load balancer stops sending to an instance that is starting, draining
// or whose store is gone. The error says which of those it is, never the
// store's own error (/readyz takes no token; the log has the detail).
func (r *Readiness) Readyz(w http.ResponseWriter, req *http.Request) {
	if !getOrHead(w, req) {
		return
	}
	err := r.Check(req.Context())
	var ep errPhase
	switch {
	case errors.As(err, &ep):
		writeJSON(w, http.StatusServiceUnavailable, reply{Status: "unavailable", Phase: Phase(ep).String(), Error: Phase(ep).String()})
		return
	case err != nil:
		r.log.Warn("readiness check failed", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, reply{Status: "unavailable", Phase: Ready.String(), Error: "backend not ready"})
		return
	}
	rep := reply{Status: "ok", Phase: Ready.String()}
	if r.o.Replication != nil {
		ctx, cancel := context.WithTimeout(req.Context(), r.o.Timeout)
		// The mode only: the detail names standbys (it is in the
		// start-up log).
		if got, err := r.o.Replication(ctx); err == nil {
			rep.Replication = &lockstore.Replication{Mode: got.Mode}
		} else {
			rep.Replication = &lockstore.Replication{Mode: lockstore.ReplicationUnknown}
		}
		cancel()
	}
	writeJSON(w, http.StatusOK, rep)
}

func getOrHead(w http.ResponseWriter, req *http.Request) bool {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeJSON(w, http.StatusMethodNotAllowed, reply{Status: "error", Error: "use GET"})
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
