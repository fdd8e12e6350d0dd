package lockserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencegate/fencegate/api/wire"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/internal/tracing"
	"github.com/fencegate/fencegate/lockstore"
)

// The error body under short local names (middleware renders it too);
// errorReply is its own type only so that the positional literal
// errorReply{errorBody{…}} stays legal. The other bodies are used as
// wire.X directly.
type (
	errorReply wire.ErrorReply
	errorBody  = wire.ErrorBody
)

// opFunc runs one operation for an authenticated caller and returns the
// reply status and body, whether the outcome was a success (for metrics),
// or an error.
type opFunc func(ctx context.Context, w http.ResponseWriter, r *http.Request, p *auth.Principal) (status int, body any, ok bool, err error)

// Register adds the lock API, the audit query and the operations
// endpoints to mux, each behind Middleware:
//
//	POST /v1/locks/acquire | release | extend | lookup
//	GET  /v1/locks/status?key=K
//	GET  /v1/audit?key=K&since=MS&limit=N
//	GET  /v1/proof/keys (no token: public keys)
//	GET  /metrics when Options.Gatherer is set (/healthz and /readyz are
//	     the process's lifecycle's, cmd/fencegate mounts them)
//
// Other transports (the forward-auth endpoint) add their own routes to the
// same mux; wrap them in Middleware for the same access logging.
func (s *Server) Register(mux *http.ServeMux) {
	route := func(path string, h http.Handler) { mux.Handle(path, s.Middleware(h)) }
	route(wire.PathAcquire, s.serveOp(auth.OpAcquire, http.MethodPost, s.httpAcquire))
	route(wire.PathRelease, s.serveOp(auth.OpRelease, http.MethodPost, s.httpRelease))
	route(wire.PathExtend, s.serveOp(auth.OpExtend, http.MethodPost, s.httpExtend))
	route(wire.PathLookup, s.serveOp(auth.OpLookup, http.MethodPost, s.httpLookup))
	route(wire.PathStatus, s.serveOp(auth.OpStatus, http.MethodGet, s.httpStatus))
	route(wire.PathAudit, s.serveOp(auth.OpAudit, http.MethodGet, s.httpAudit))
	route(wire.PathProofKeys, http.HandlerFunc(s.proofKeys))
	// Unknown lock API paths get a JSON 404 rather than the mux's text one.
	route("/v1/locks/", http.HandlerFunc(notFound))
	if s.gatherer != nil {
		route("/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	}
}

// Handler returns a mux with Register's routes and a JSON 404 for
// everything else.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.Register(mux)
	mux.Handle("/", s.Middleware(http.HandlerFunc(notFound)))
	return mux
}

func notFound(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusNotFound, errorReply{errorBody{Code: lockstore.InvalidArgument, Message: "no such endpoint"}})
}

// serveOp wraps an operation with the method check (405 + Allow), bearer
// authentication (401), the per-operation scope check (403), metrics and
// error rendering. Authentication comes before the body is read, so an
// unauthenticated caller learns nothing about request validation.
func (s *Server) serveOp(op auth.Operation, method string, fn opFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			s.writeError(w, r, &apiError{code: lockstore.InvalidArgument, httpStatus: http.StatusMethodNotAllowed,
				msg: "method " + r.Method + " not allowed; use " + method})
			return
		}
		start := time.Now()
		ctx, span := startOpSpan(tracing.FromHTTP(r.Context(), r.Header), op)
		p, err := s.authenticate(r.Context(), r.Header.Get("Authorization"))
		if err == nil {
			setPrincipal(w, p)
			err = authorizeOp(p, op)
		} else if r.ContentLength != 0 {
			// The body of a caller without a credential is never read:
			// answer and close instead of letting net/http wait for it
			// (up to the read timeout, 30 s + maxWait) to reuse the
			// connection.
			w.Header().Set("Connection", "close")
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
		var (
			status int
			body   any
			ok     bool
		)
		if err == nil {
			status, body, ok, err = fn(ctx, w, r, p)
		}
		s.metrics.observe(op, resultOf(ok, err), start)
		endOpSpan(span, op, transportHTTP, ok, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, status, body)
	})
}

func (s *Server) httpAcquire(ctx context.Context, w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, bool, error) {
	var req wire.AcquireRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return 0, nil, false, err
	}
	res, err := s.acquire(ctx, p, req.Key, req.TTLMs, req.WaitMs)
	if err != nil {
		return 0, nil, false, err
	}
	if !res.OK {
		return http.StatusConflict, wire.AcquireReply{OK: false, Reason: lockstore.ReasonLocked}, false, nil
	}
	return http.StatusOK, wire.AcquireReply{OK: true, LockID: res.LockID, Fence: res.Fence, ExpiresAtMs: res.ExpiresAtMs, Proof: res.Proof}, true, nil
}

func (s *Server) httpRelease(ctx context.Context, w http.ResponseWriter, r *http.Request, _ *auth.Principal) (int, any, bool, error) {
	var req wire.ReleaseRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return 0, nil, false, err
	}
	res, err := s.release(ctx, req.LockID)
	if err != nil {
		return 0, nil, false, err
	}
	if !res.OK {
		return http.StatusNotFound, wire.OKReply{OK: false}, false, nil
	}
	return http.StatusOK, wire.OKReply{OK: true}, true, nil
}

func (s *Server) httpExtend(ctx context.Context, w http.ResponseWriter, r *http.Request, _ *auth.Principal) (int, any, bool, error) {
	var req wire.ExtendRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return 0, nil, false, err
	}
	res, err := s.extend(ctx, req.LockID, req.TTLMs)
	if err != nil {
		return 0, nil, false, err
	}
	if !res.OK {
		return http.StatusNotFound, wire.OKReply{OK: false}, false, nil
	}
	return http.StatusOK, wire.OKReply{OK: true, ExpiresAtMs: res.ExpiresAtMs}, true, nil
}

func (s *Server) httpLookup(ctx context.Context, w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, bool, error) {
	var req wire.LookupRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return 0, nil, false, err
	}
	info, err := s.lookup(ctx, p, req.Key, req.LockID)
	if err != nil {
		return 0, nil, false, err
	}
	if info == nil {
		return http.StatusNotFound, struct{}{}, false, nil
	}
	return http.StatusOK, info, true, nil
}

func (s *Server) httpStatus(ctx context.Context, _ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, bool, error) {
	q, err := parseQuery(r)
	if err != nil {
		return 0, nil, false, err
	}
	key := q.str("key")
	if key == nil {
		return 0, nil, false, invalidArgument("query parameter key is required")
	}
	locked, err := s.isLocked(ctx, p, *key)
	if err != nil {
		return 0, nil, false, err
	}
	return http.StatusOK, wire.StatusReply{Locked: locked}, true, nil
}

func (s *Server) httpAudit(ctx context.Context, _ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, bool, error) {
	q, err := parseQuery(r)
	if err != nil {
		return 0, nil, false, err
	}
	since, err := q.int64("since", 0, 1<<62)
	if err != nil {
		return 0, nil, false, err
	}
	limit, err := q.int64("limit", lockstore.DefaultAuditLimit, lockstore.MaxAuditLimit)
	if err != nil {
		return 0, nil, false, err
	}
	if limit == 0 {
		return 0, nil, false, invalidArgument("query parameter limit must be at least 1")
	}
	events, err := s.audit(ctx, p, q.str("key"), since, int(limit))
	if err != nil {
		return 0, nil, false, err
	}
	return http.StatusOK, wire.AuditReply{Events: events}, true, nil
}

// writeError renders err as docs/api.md's error body. 5xx causes are logged
// (lockstore errors print key and lockId hashes only); the client gets the
// code and a message free of secrets.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := asAPIError(err)
	status := ae.httpStatusCode()
	setErrorCode(w, ae.code)
	if status >= 500 && status != http.StatusNotImplemented {
		s.log.LogAttrs(r.Context(), levelFor(ae.code), "lock API request failed",
			slogAttrs(r, status, ae)...)
	}
	if ae.code == lockstore.AuthFailed {
		v := `Bearer realm="fencegate"`
		if ae.wwwAuth != "" {
			v += `, error="` + ae.wwwAuth + `"`
		}
		w.Header().Set("WWW-Authenticate", v)
	}
	writeJSON(w, status, errorReply{errorBody{Code: ae.code, Message: ae.msg}})
}

// writeJSON writes body with the given status. Replies may carry a lockId,
// so they are never cached.
func writeJSON(w http.ResponseWriter, status int, body any) {
	buf := replyBufs.Get().(*bytes.Buffer)
	defer putReplyBuf(buf)
	buf.Reset()
	// Encode writes the body and the trailing newline, into a reused buffer.
	if err := json.NewEncoder(buf).Encode(body); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"Internal","message":"encoding the reply failed"}}` + "\n")
	}
	// The header values are shared, never-modified slices: Header.Set would
	// allocate one per header per reply.
	h := w.Header()
	h["Content-Type"] = jsonContentType
	// no-store unless the handler chose its caching (GET /v1/proof/keys).
	if _, set := h["Cache-Control"]; !set {
		h["Cache-Control"] = noStore
	}
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
	nosniff         = []string{"nosniff"}
)

// replyBufs are writeJSON's buffers. A buffer grown past maxPooledReply (a
// large audit page) is dropped rather than pinned in the pool.
var replyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledReply = 64 << 10

func putReplyBuf(b *bytes.Buffer) {
	if b.Cap() <= maxPooledReply {
		replyBufs.Put(b)
	}
}
