package lockserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

// DefaultMaxWait is the cap on waitMs when Options.MaxWait is zero.
const DefaultMaxWait = 30 * time.Second

// Options configure a Server. The zero value of every field but Store is
// usable.
type Options struct {
	// Store serves the lock operations. Required. fencegate_locks_held
	// counts with the lockstore.HeldCounter lockstore.As finds in it, if
	// any; its lockstore.Describer names the backend in metrics.
	// Readiness is not the API's (internal/health).
	Store lockstore.Locks
	// Audit serves GET /v1/audit. Nil answers 501 with code
	// ServiceUnavailable and a message saying the audit log is off.
	Audit lockstore.AuditLog
	// Auth checks bearer tokens. Nil turns auth off (the loopback dev
	// mode); New logs a warning saying so.
	Auth *auth.Authenticator
	// MaxWait caps waitMs; a larger waitMs is 400 InvalidArgument. Zero
	// means DefaultMaxWait.
	MaxWait time.Duration
	// OpTimeout bounds each store call a request makes (the request's own
	// deadline, if sooner, wins); past it the answer is 504 NetworkTimeout.
	// Zero means DefaultOpTimeout.
	OpTimeout time.Duration
	// Registerer receives the metrics. Nil keeps them in a private
	// registry (counted, not exported).
	Registerer prometheus.Registerer
	// Gatherer, when set, is served at GET /metrics.
	Gatherer prometheus.Gatherer
	// Logger receives access logs and errors. Nil means slog.Default().
	Logger *slog.Logger
	// Proofs signs a write proof for every acquired fence and serves its
	// public keys at GET /v1/proof/keys; nil signs none.
	Proofs *writeproof.Signer
	// AccessLog selects the HTTP requests that get an access log line;
	// the zero value is AccessErrors.
	AccessLog AccessLog
	// Authenticated, when set, is called with the request's context each
	// time a bearer token is accepted (HTTP, gRPC and GRPCTap):
	// cmd/fencegate keeps such a caller's connection longer when its
	// listener is full.
	Authenticated func(ctx context.Context)
}

// Server is the lock API over HTTP/JSON and gRPC. Build one per process
// with New and serve it on both transports: they share metrics and auth.
type Server struct {
	store     boundedLocks
	opTimeout time.Duration
	auditLog  lockstore.AuditLog
	auth      *auth.Authenticator
	maxWait   time.Duration
	gatherer  prometheus.Gatherer
	log       *slog.Logger
	access    AccessLog
	onAuth    func(ctx context.Context)
	metrics   *metrics

	fenceWarnings prometheus.Counter // fences issued past FenceWarn (fencemetric.go)
	proofs        *writeproof.Signer
}

// New validates o and registers the metrics.
func New(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("api: Options.Store is required")
	}
	if o.MaxWait < 0 {
		return nil, errors.New("api: Options.MaxWait must not be negative")
	}
	opTimeout := o.OpTimeout
	if opTimeout <= 0 {
		opTimeout = DefaultOpTimeout
	}
	s := &Server{
		store:     boundedLocks{Locks: o.Store, d: opTimeout},
		opTimeout: opTimeout,
		auditLog:  o.Audit,
		auth:      o.Auth,
		onAuth:    o.Authenticated,
		maxWait:   o.MaxWait,
		gatherer:  o.Gatherer,
		log:       o.Logger,
		access:    o.AccessLog,
		proofs:    o.Proofs,
	}
	if s.maxWait == 0 {
		s.maxWait = DefaultMaxWait
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	reg := o.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg, o.Store, s.log)
	if err != nil {
		return nil, fmt.Errorf("api: registering metrics: %w", err)
	}
	s.fenceWarnings = newFenceWarnings()
	for _, c := range []prometheus.Collector{s.fenceWarnings} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("api: registering metrics: %w", err)
		}
	}
	s.metrics = m
	if s.auth == nil {
		s.log.Warn("lock API authentication is off: any caller that reaches the listener can take and release locks")
	}
	return s, nil
}

// authenticate maps an Authorization value to a principal; nil, nil when
// auth is off.
func (s *Server) authenticate(ctx context.Context, authorization string) (*auth.Principal, error) {
	if s.auth == nil {
		return nil, nil
	}
	p, err := s.auth.Authenticate(authorization)
	if err != nil {
		ae := &apiError{code: lockstore.AuthFailed, msg: err.Error()}
		if errors.Is(err, auth.ErrInvalidToken) {
			ae.wwwAuth = "invalid_token"
		}
		return nil, ae
	}
	if s.onAuth != nil {
		s.onAuth(ctx)
	}
	return p, nil
}
