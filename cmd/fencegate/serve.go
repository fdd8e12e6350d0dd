package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/admission"
	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/certwatch"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/console"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
)

// Timeouts of the serving process. Each bounds one thing a slow or broken
// peer could otherwise hold forever.
const (
	storeOpenTimeout  = 15 * time.Second // first connection to the store
	readHeaderTimeout = 10 * time.Second // slowloris guard on every HTTP listener
	idleTimeout       = 2 * time.Minute  // keep-alive connections
	shutdownTimeout   = 20 * time.Second // draining in-flight requests on SIGTERM
	readTimeout       = 30 * time.Second // a request's body (≤ 64 KiB), on top of any waitMs
	readinessInterval = 5 * time.Second  // how often gRPC health follows the store
	readinessTimeout  = 2 * time.Second  // one readiness check
)

func runServe(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	build := config.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	cfg, err := build(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "fencegate serve: %v\n", err)
		return exitUsage
	}
	log := newLogger(cfg.Log, stderr)
	routeRedisLogs(log)
	if err := serve(ctx, cfg, log); err != nil {
		var ce configError
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "fencegate serve: invalid configuration: %v\n", ce.err)
			return exitUsage
		}
		log.Error("fencegate stopped", "err", err)
		return exitFailure
	}
	return exitOK
}

// configError is a configuration problem found while wiring (a token digest
// the authenticator refuses, an admission resource that does not parse):
// the operator's to fix, so it exits 2 like config.Validate's problems, and
// it is found before the store is opened.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs the gateway until ctx ends, then drains and stops.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	// What derives from the configuration alone is checked before the
	// store is opened.
	var auth *api.Authenticator
	if len(cfg.Tokens) > 0 {
		a, err := newAuthenticator(cfg.Tokens)
		if err != nil {
			return configError{err}
		}
		auth = a
	}
	var admOpts admission.Options
	if cfg.Admission.Enabled() {
		o, err := admissionOptions(cfg.Admission)
		if err != nil {
			return configError{err}
		}
		admOpts = o
	}

	retention := lockstore.AuditRetention{MaxEvents: cfg.Audit.MaxEvents, MaxAge: cfg.Audit.MaxAge.Std()}
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	store, err := openStore(octx, cfg.Store, retention, log)
	cancel()
	if err != nil {
		return err
	}
	defer store.Close()
	caps := store.Capabilities()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Background work, each piece owned here and stopped before the store closes.
	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(context.Background())
	defer func() { stopBG(); bg.Wait() }()
	goBG := func(fn func(context.Context)) {
		bg.Add(1)
		go func() { defer bg.Done(); fn(bgCtx) }()
	}

	auditLog, ok := store.(lockstore.AuditLog)
	if !ok {
		return fmt.Errorf("store %s keeps no audit log", caps.Backend)
	}
	auditor := fencecheck.NewAuditor(auditLog, fencecheck.AuditorOptions{QueueSize: cfg.Audit.QueueSize, Logger: log, Registerer: reg})
	goBG(func(ctx context.Context) { _ = auditor.Run(ctx) })
	defer auditor.Close() // flushes queued events; runs before stopBG (defers are LIFO)

	checker := fencecheck.New(store, fencecheck.Options{
		Timeout: cfg.Check.Timeout.Std(), Audit: auditor, AuditRawKeys: cfg.Check.AuditRawKeys,
		Registerer: reg, Logger: log,
	})

	// The webhook is built first so that /readyz also covers its
	// certificate: a pod whose webhook cannot serve must not get traffic.
	var admissionRunner *httpRunner
	var ready func(context.Context) error
	if cfg.Admission.Enabled() {
		r, h, err := newAdmissionRunner(cfg.Admission, admOpts, checker, reg, log, goBG)
		if err != nil {
			return err
		}
		admissionRunner = r
		ready = func(context.Context) error {
			if !h.Ready() {
				return errors.New("admission webhook certificate not loaded")
			}
			return nil
		}
	}
	ui := console.New(ctx, console.Options{Store: store, Audit: auditLog, Auth: auth, RawKeys: cfg.Check.AuditRawKeys, Logger: log})
	srv, err := api.New(api.Options{
		Store: ui.Record(store), Audit: auditLog, Auth: auth, MaxWait: cfg.Locks.MaxWait.Std(), OpTimeout: cfg.Locks.OpTimeout.Std(),
		Registerer: reg, Gatherer: reg, Logger: log, Ready: ready,
	})
	if err != nil {
		return err
	}

	var servers []runner
	var addrs []any

	if cfg.HTTP.Enabled() {
		mux := http.NewServeMux()
		srv.Register(mux)
		ui.Register(mux, srv.Middleware)
		fwd := authz.NewHTTPHandler(checker, authz.Options{Logger: log})
		mux.Handle(authz.HTTPPath, srv.Middleware(fwd))
		mux.Handle(authz.HTTPPath+"/", srv.Middleware(fwd))
		// A waiting acquire holds its request for up to maxWait, and Go
		// cancels a request whose connection passes ReadTimeout.
		r, err := newHTTPRunner("http", cfg.HTTP.Addr, cfg.HTTP.TLS, mux, readTimeout+cfg.Locks.MaxWait.Std(), log, goBG)
		if err != nil {
			return err
		}
		servers = append(servers, r)
		addrs = append(addrs, "http", r.addr())
	}
	if cfg.GRPC.Enabled() {
		r, err := newGRPCRunner("grpc", cfg.GRPC.Addr, cfg.GRPC.TLS, log, goBG, func(g *grpc.Server) *health.Server {
			srv.RegisterGRPC(g)
			// Health follows the store's readiness, like /readyz.
			// NOT_SERVING until the first check answers: never SERVING
			// before the store was reached, never "unknown service".
			hs := health.NewServer()
			for _, name := range []string{"", "fencegate.v1.Locks"} {
				hs.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
			}
			healthpb.RegisterHealthServer(g, hs)
			goBG(func(ctx context.Context) { srv.WatchReadiness(ctx, hs, 0) })
			return hs
		})
		if err != nil {
			return err
		}
		servers = append(servers, r)
		addrs = append(addrs, "grpc", r.addr())
	}
	if cfg.Authz.Enabled() {
		r, err := newGRPCRunner("authz", cfg.Authz.Addr, cfg.Authz.TLS, log, goBG, func(g *grpc.Server) *health.Server {
			as := authz.NewServer(checker, authz.Options{Logger: log})
			as.Register(g)
			// Envoy health-checks this listener: report NOT_SERVING while
			// the store is unreachable, as /readyz does.
			goBG(func(ctx context.Context) { followReadiness(ctx, as.Health(), srv.Ready, "", authz.ServiceName) })
			return as.Health()
		})
		if err != nil {
			return err
		}
		servers = append(servers, r)
		addrs = append(addrs, "authz", r.addr())
	}
	if admissionRunner != nil {
		servers = append(servers, admissionRunner)
		addrs = append(addrs, "admission", admissionRunner.addr())
	}

	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errc <- s.serve() }()
	}

	authState := "on"
	if auth == nil {
		authState = "off"
	}
	attrs := append([]any{"store", caps.Backend, "store_url", config.RedactURL(cfg.Store), "time_authority", string(caps.TimeAuthority), "auth", authState}, addrs...)
	log.Info("fencegate ready: every listener is up", attrs...)
	if strings.HasPrefix(cfg.Store, "bolt:") {
		log.Info("using the embedded single-node store; locks and fences live in one local file (use redis://, postgres:// or firestore:// for more than one gateway)")
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight requests", "timeout", shutdownTimeout)
	case serveErr = <-errc:
		log.Error("a listener failed; shutting down", "err", serveErr)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); s.shutdown(sctx) }()
	}
	wg.Wait()
	return serveErr
}

func newAuthenticator(tokens []config.Token) (*api.Authenticator, error) {
	ts := make([]api.Token, 0, len(tokens))
	for _, t := range tokens {
		sum, err := api.ParseTokenHash(t.SHA256)
		if err != nil {
			return nil, fmt.Errorf("token %q: %w", t.Name, err)
		}
		ts = append(ts, api.Token{Name: t.Name, SHA256: sum, Prefixes: t.Prefixes, Operations: t.Operations})
	}
	return api.NewAuthenticator(ts)
}

// runner is one listener with its server.
type runner interface {
	addr() string
	serve() error
	shutdown(ctx context.Context)
}

// listen binds addr first, so a port in use is reported at start, before
// "ready" is logged.
func listen(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	return ln, nil
}

// serverTLS loads a listener's certificate (re-read on change) or returns
// nil when the listener is plaintext.
func serverTLS(name string, t config.TLS, log *slog.Logger, goBG func(func(context.Context))) (*tls.Config, *certwatch.Watcher, error) {
	if !t.Enabled() {
		return nil, nil, nil
	}
	w, err := certwatch.New(t.CertFile, t.KeyFile, certwatch.Options{Logger: log.With("listener", name), ClientCAFile: t.ClientCAFile})
	if err != nil {
		return nil, nil, fmt.Errorf("%s TLS: %w", name, err)
	}
	goBG(func(ctx context.Context) { _ = w.Run(ctx) })
	return w.ServerConfig(&tls.Config{MinVersion: tls.VersionTLS12}), w, nil
}

type httpRunner struct {
	ln  net.Listener
	srv *http.Server
	tls bool
}

func newHTTPRunner(name, addr string, t config.TLS, h http.Handler, readTimeout time.Duration, log *slog.Logger, goBG func(func(context.Context))) (*httpRunner, error) {
	tc, _, err := serverTLS(name, t, log, goBG)
	if err != nil {
		return nil, err
	}
	ln, err := listen(name, addr)
	if err != nil {
		return nil, err
	}
	return &httpRunner{ln: ln, tls: tc != nil, srv: &http.Server{
		Handler:           h,
		TLSConfig:         tc,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}, nil
}

func (r *httpRunner) addr() string { return r.ln.Addr().String() }

func (r *httpRunner) serve() error {
	var err error
	if r.tls {
		err = r.srv.ServeTLS(r.ln, "", "")
	} else {
		err = r.srv.Serve(r.ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (r *httpRunner) shutdown(ctx context.Context) {
	if err := r.srv.Shutdown(ctx); err != nil {
		_ = r.srv.Close()
	}
}

type grpcRunner struct {
	ln     net.Listener
	srv    *grpc.Server
	health *health.Server
}

// newGRPCRunner builds a gRPC listener; register adds the services and
// returns the health server that shutdown turns to NOT_SERVING first.
func newGRPCRunner(name, addr string, t config.TLS, log *slog.Logger, goBG func(func(context.Context)), register func(*grpc.Server) *health.Server) (*grpcRunner, error) {
	tc, _, err := serverTLS(name, t, log, goBG)
	if err != nil {
		return nil, err
	}
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(recoverUnary(log.With("listener", name)))}
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	g := grpc.NewServer(opts...)
	hs := register(g)
	ln, err := listen(name, addr)
	if err != nil {
		return nil, err
	}
	return &grpcRunner{ln: ln, srv: g, health: hs}, nil
}

// recoverUnary turns a panic in a handler into INTERNAL for that call
// instead of a crash of every listener. For ext_authz, Envoy then fails the
// request closed.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
		}()
		return h(ctx, req)
	}
}

// followReadiness keeps hs in step with ready for the named services,
// checking every readinessInterval until ctx ends.
func followReadiness(ctx context.Context, hs *health.Server, ready func(context.Context) error, services ...string) {
	t := time.NewTicker(readinessInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, readinessTimeout)
		st := healthpb.HealthCheckResponse_SERVING
		if ready(cctx) != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		for _, s := range services {
			hs.SetServingStatus(s, st)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *grpcRunner) addr() string { return r.ln.Addr().String() }
func (r *grpcRunner) serve() error { return r.srv.Serve(r.ln) }

// shutdown reports NOT_SERVING (so health-checking proxies stop sending),
// lets in-flight RPCs finish, then stops hard at the deadline.
func (r *grpcRunner) shutdown(ctx context.Context) {
	if r.health != nil {
		r.health.Shutdown()
	}
	done := make(chan struct{})
	go func() { r.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.srv.Stop()
		<-done
	}
}

// admissionOptions parses the webhook's settings; the listener-dependent
// fields (certificate readiness, metrics, logger) are filled when it starts.
func admissionOptions(c config.Admission) (admission.Options, error) {
	policy, err := fencecheck.ParsePolicy(c.Policy)
	if err != nil {
		return admission.Options{}, fmt.Errorf("admission.policy: %w", err)
	}
	mode, err := fencecheck.ParseMode(c.Mode)
	if err != nil {
		return admission.Options{}, fmt.Errorf("admission.mode: %w", err)
	}
	var resources []admission.Resource
	for _, s := range c.Resources {
		r, err := admission.ParseResource(s)
		if err != nil {
			return admission.Options{}, fmt.Errorf("admission.resources: %w", err)
		}
		resources = append(resources, r)
	}
	o := admission.Options{
		Annotations:    admission.Annotations{Key: c.KeyAnnotation, Fence: c.FenceAnnotation},
		Policy:         policy,
		Mode:           mode,
		Resources:      resources,
		ServiceAccount: c.ServiceAccount,
		ExemptUsers:    c.ExemptUsers,
		ExemptGroups:   c.ExemptGroups,
	}
	return o, o.Validate()
}

func newAdmissionRunner(c config.Admission, o admission.Options, checker *fencecheck.Checker, reg prometheus.Registerer, log *slog.Logger, goBG func(func(context.Context))) (*httpRunner, *admission.Handler, error) {
	tc, w, err := serverTLS("admission", c.TLS, log, goBG)
	if err != nil {
		return nil, nil, err
	}
	o.CertReady, o.Registerer, o.Logger = w.Ready, reg, log
	h, err := admission.New(checker, o)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(admission.Path, h)
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !h.Ready() {
			http.Error(rw, "certificate not loaded", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(rw, "ok\n")
	})
	ln, err := listen("admission", c.Addr)
	if err != nil {
		return nil, nil, err
	}
	return &httpRunner{ln: ln, tls: true, srv: &http.Server{
		Handler:           mux,
		TLSConfig:         tc,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}, h, nil
}
