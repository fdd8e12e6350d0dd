package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/fencegate/fencegate/admission"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/console"
	"github.com/fencegate/fencegate/internal/health"
	"github.com/fencegate/fencegate/internal/routereload"
	"github.com/fencegate/fencegate/internal/serving"
	"github.com/fencegate/fencegate/internal/tracing/otelenv"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/routes"
	"github.com/fencegate/fencegate/writeproof"
)

// storeOpenTimeout bounds the first connection to the store.
const storeOpenTimeout = 15 * time.Second

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// SIGHUP reloads the route table; caught from the start, so that one
	// sent while the store opens neither kills the process nor is lost.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	fs := newFlagSet("serve", "usage: fencegate serve [flags]\n\nRuns the gateway: the lock API, ext_authz, ext_proc, forward-auth, the admission\nwebhook and the console, as the config file (--config) and FENCEGATE_* say.")
	build := config.FlagsFile(fs)
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	cfg, set, err := loadServeConfig(build, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "fencegate serve: %v\n", err)
		return exitUsage
	}
	set.hup = hup
	log := newLogger(cfg.Log, stderr)
	routeRedisLogs(log)
	if err := serve(ctx, cfg, set, log); err != nil {
		log.Error("fencegate stopped", "err", err)
		return exitFailure
	}
	return exitOK
}

// serveSettings is what serve derives from the configuration before it
// opens anything, each value parsed by the package it is for.
type serveSettings struct {
	store     storeURL
	auth      *auth.Authenticator // nil: auth off
	admission admission.Options   // listener-dependent fields filled at start
	// proofs signs write proofs at acquire (nil: none configured).
	proofs *writeproof.Signer
	// verifier checks proofs at the edge: the signing keys and
	// proof.verifyKeys (nil: none configured).
	verifier *writeproof.Verifier
	tracing  otelenv.Config // from the OTEL_* variables
	// accessLog is log.access, parsed by the api package.
	accessLog lockserver.AccessLog
	// table is the route table every edge serves (nil: none; the proxy
	// listener runs when it has entries with an upstream).
	table *routes.Table
	// configFile is the config file as the start read it, once (Path "":
	// none, no reloads): a reload compares against it, so an edit made
	// while the store opens is applied, not taken as seen. hup delivers
	// SIGHUP.
	configFile config.File
	hup        <-chan os.Signal
}

// loadServeConfig loads the configuration and parses what the packages own
// (the store URL, token scopes, admission settings, the OTEL_* tracing
// variables): every problem is in one config.Problems, found before the
// store is opened, and exits 2.
func loadServeConfig(build func(func(string) string) (config.Config, config.File, error), getenv func(string) string) (config.Config, serveSettings, error) {
	var p config.Problems
	cfg, file, err := build(getenv)
	if err != nil && !errors.As(err, &p) {
		return cfg, serveSettings{}, err
	}
	set := serveSettings{configFile: file}
	add := func(where string, err error) {
		for _, line := range strings.Split(err.Error(), "\n") {
			p = append(p, where+": "+line)
		}
	}
	if set.store, err = parseStoreURL(cfg.Store); err != nil {
		add("store", err)
	}
	if set.accessLog, err = lockserver.ParseAccessLog(cfg.Log.Access); err != nil {
		add("log.access", err)
	}
	if len(cfg.Tokens) > 0 {
		if set.auth, err = newAuthenticator(cfg.Tokens); err != nil {
			add("tokens", err)
		}
	}
	if cfg.Admission.Enabled() {
		if set.admission, err = admissionOptions(cfg.Admission); err != nil {
			add("admission", err)
		}
	}
	if cfg.ValidateRoutes() == nil { // else config listed the problems
		if set.table, err = routereload.Compile(&cfg); err != nil {
			add("routes", err)
		}
	}
	if set.proofs, err = proofSigner(cfg.Proof); err != nil {
		add("proof", err)
	} else if set.verifier, err = proofVerifier(cfg.Proof); err != nil {
		add("proof", err)
	}
	if set.tracing, err = otelenv.ConfigFromEnv(getenv); err != nil {
		add("tracing", err)
	}
	if len(p) > 0 {
		return cfg, set, p
	}
	return cfg, set, nil
}

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
func serve(ctx context.Context, cfg config.Config, set serveSettings, log *slog.Logger) error {
	gw, err := startGateway(ctx, cfg, gatewaySettings{store: set.store, tracing: set.tracing, proofs: set.verifier}, log)
	if err != nil {
		return err
	}
	defer gw.close()
	// Every listener follows gw.health; a listener already bound is closed
	// when a later one fails to build.
	ls := &serving.Group{Health: gw.health, Delay: cfg.Shutdown.Delay.Std()}
	defer closeUnserved(ls)
	if err := addListeners(ctx, ls, cfg, set, gw, log); err != nil {
		return err
	}
	if set.store.backend == "bolt" {
		log.Info("using the embedded single-node store; locks and fences live in one local file (use redis://, postgres:// or firestore:// for more than one gateway)")
	}
	authState := "off"
	if set.auth != nil {
		authState = "on"
	}
	return ls.Run(ctx, log, "store", gw.caps.Backend, "store_url", config.RedactURL(cfg.Store), "time_authority", string(gw.caps.TimeAuthority), "auth", authState)
}

// addListeners builds serve's listeners into ls, in start order: the
// webhook first (so that /readyz also covers its certificate: a pod whose
// webhook cannot serve must not get traffic), then the lock API's, the
// edges' and debug.
func addListeners(ctx context.Context, ls *serving.Group, cfg config.Config, set serveSettings, gw *gateway, log *slog.Logger) error {
	if cfg.Admission.Enabled() {
		r, err := newAdmissionListener(cfg.Admission, set.admission, gw, log)
		if err != nil {
			return err
		}
		ls.Add("admission", r)
	}
	srv, ui, err := newLockAPI(ctx, cfg, set, gw, log)
	if err != nil {
		return err
	}
	table, drain := serveTable(set, gw, log)
	proxied := proxy.HasUpstream(set.table) // the proxy listener serves the table too
	if proxied {
		// In-flight barrier writes finish and deregister, for as long as
		// the table as last reloaded asks.
		ls.Drain, ls.DrainAtLeast = max(serving.ShutdownTimeout, cfg.Drain()), drain
	}
	edge := edgeOptions(cfg, set, table, log)
	checker, conns, hs, goBG := gw.checker, gw.conns, gw.health, gw.goBG
	// Both gRPC listeners' health follows gw.health: NOT_SERVING until
	// every listener serves and the first check passes, NOT_SERVING again
	// from the instant a shutdown begins.
	for _, l := range []struct {
		name  string
		on    bool
		build func() (serving.Runner, error)
	}{
		{"http", cfg.HTTP.Enabled(), func() (serving.Runner, error) {
			return newMainHTTPRunner(cfg, conns, srv, ui, hs, checker, edge, log, goBG)
		}},
		{"grpc", cfg.GRPC.Enabled(), func() (serving.Runner, error) { return newLocksGRPCRunner(cfg.GRPC, conns, srv, hs, log, goBG) }},
		{"authz", cfg.Authz.Enabled(), func() (serving.Runner, error) {
			return newAuthzRunner(cfg.Authz.Listener, connlimit.ForAuthz(conns), hs, checker, edge, log, goBG)
		}},
		{"authz-http", cfg.Authz.HTTP.Enabled(), func() (serving.Runner, error) {
			return newForwardAuthRunner(cfg.Authz.HTTP, conns, srv, checker, edge, log, goBG)
		}},
		{"proxy", proxied, func() (serving.Runner, error) {
			r, _, err := newProxyRunner(cfg.Proxy, conns, table, checker, log, goBG)
			return r, err
		}},
		{"debug", cfg.Debug.Enabled(), func() (serving.Runner, error) { return newDebugRunner(cfg.Debug, conns, log) }},
	} {
		if !l.on {
			continue
		}
		r, err := l.build()
		if err != nil {
			return err
		}
		ls.Add(l.name, r)
	}
	return nil
}

// newAdmissionListener builds the webhook's listener, and makes readiness
// wait for its certificate.
func newAdmissionListener(c config.Admission, o admission.Options, gw *gateway, log *slog.Logger) (serving.Runner, error) {
	r, h, err := newAdmissionRunner(c, o, gw.conns, gw.checker, gw.reg, gw.health, log, gw.goBG)
	if err != nil {
		return nil, err
	}
	gw.health.AddCheck(health.Check{Name: "admission webhook", Ready: func(context.Context) error {
		if !h.Ready() {
			return errors.New("certificate not loaded")
		}
		return nil
	}})
	return r, nil
}

// newLockAPI builds the lock API and the console. The console reads the
// store (lockstore.As finds its LockLister) and records the lock
// operations the API serves for its timeline.
func newLockAPI(ctx context.Context, cfg config.Config, set serveSettings, gw *gateway, log *slog.Logger) (*lockserver.Server, *console.Console, error) {
	ui := console.New(ctx, console.Options{Store: gw.store, Audit: gw.auditLog, Auth: set.auth, RawKeys: cfg.Check.AuditRawKeys, Logger: log})
	srv, err := lockserver.New(lockserver.Options{
		Store: ui.Record(gw.locks), Audit: gw.auditLog, Auth: set.auth, MaxWait: cfg.Locks.MaxWait.Std(), OpTimeout: cfg.Locks.OpTimeout.Std(),
		Registerer: gw.reg, Gatherer: gw.reg, Logger: log, AccessLog: set.accessLog, Proofs: set.proofs,
		Authenticated: connlimit.MarkTrusted,
	})
	return srv, ui, err
}

// serveTable puts the route table in the one holder every edge reads
// (the proxy listener's included), and starts what swaps it: the reloader
// (SIGHUP, a changed config file or routesFile) when there is a config
// file; else a SIGHUP is only logged. While the proxy listener serves, a
// table with no upstream entry is refused.
func serveTable(set serveSettings, gw *gateway, log *slog.Logger) (*routes.Holder, func() time.Duration) {
	table := routes.NewHolder(set.table)
	var drain func() time.Duration
	switch {
	case set.configFile.Path != "":
		rl := routereload.New(set.configFile, set.hup, table, gw.reg, log)
		if proxy.HasUpstream(set.table) {
			rl.Accept = acceptProxyTable
		}
		drain = rl.Drain
		gw.goBG(rl.Run)
	case set.hup != nil:
		gw.goBG(func(ctx context.Context) {
			for {
				select {
				case <-ctx.Done():
					return
				case <-set.hup:
					log.Warn("SIGHUP ignored: no config file to reload the route table from (--config or FENCEGATE_CONFIG)")
				}
			}
		})
	}
	if set.table != nil {
		log.Info("route table loaded", "routes", set.table.Len(), "hash", set.table.Hash(), "unmatched_writes", string(set.table.Unmatched()))
	}
	return table, drain
}

// edgeOptions are the authz edges' options over the route table.
func edgeOptions(cfg config.Config, set serveSettings, table *routes.Holder, log *slog.Logger) authz.Options {
	if cfg.Check.TrustLoopback {
		log.Warn("check.trustLoopback: authz callers from loopback (never 127.0.0.6) are trusted as the operator's proxy (fence_route, inline options, the barrier); "+
			"behind a mesh sidecar every inbound caller is loopback: use authz.tls.clientCAFile there", "trust_loopback", true)
	}
	return authzOptions(set.auth, cfg.Check.TrustLoopback, authz.Options{Logger: log, Routes: table})
}

// closeUnserved closes the listeners ls already bound when serve or proxy
// fails before running them (serving.Group.CloseUnserved).
func closeUnserved(ls *serving.Group) {
	if closeBuiltOnError {
		ls.CloseUnserved()
	}
}

// closeBuiltOnError is true in the gateway; a test sets it false for the
// broken variant that leaked bound listeners when a later one failed.
var closeBuiltOnError = true

// newMainHTTPRunner builds the HTTP listener: the lock API, forward-auth,
// health (/healthz, /readyz: hs) and metrics.
func newMainHTTPRunner(cfg config.Config, conns connlimit.Limits, srv *lockserver.Server, ui *console.Console, hs *health.Readiness, checker *fencecheck.Checker, ao authz.Options, log *slog.Logger, goBG func(func(context.Context))) (*serving.HTTPRunner, error) {
	tc, _, err := serving.ServerTLS("http", cfg.HTTP.TLS, log, goBG)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	srv.Register(mux)
	hs.Register(mux, srv.Middleware)
	ui.Register(mux, srv.Middleware)
	if !cfg.Authz.HTTP.Enabled() {
		mountForwardAuth(mux, srv, checker, ao)
	}
	// A waiting acquire holds its request for up to maxWait, and Go
	// cancels a request whose connection passes ReadTimeout.
	maxWait := cfg.Locks.MaxWait.Std()
	if maxWait == 0 {
		maxWait = lockserver.DefaultMaxWait
	}
	return serving.NewHTTP("http", cfg.HTTP.Addr, tc, mux, serving.ReadTimeout+maxWait, conns, log)
}

// Message bounds of the gRPC listeners (grpc.MaxRecvMsgSize; grpc-go's
// default is 4 MiB, read whole before any handler or interceptor runs).
const (
	// locksMaxRecvMsg: a lock API request is a key (≤ 512 bytes after
	// NFC, at most 3 × that before), a lockId, a TTL and a wait.
	locksMaxRecvMsg = 4 << 10
	// authzMaxRecvMsg: an ext_authz CheckRequest or ext_proc
	// ProcessingRequest carries the request's headers (Envoy's default
	// max_request_headers_kb is 60) and attributes, never a body
	// (deploy/envoy: no with_request_body, body mode NONE).
	authzMaxRecvMsg = 128 << 10
	// locksMaxHeaderList, authzMaxHeaderList bound a call's HTTP/2 header
	// block (grpc-go's default is 16 MiB): a token and tracing headers;
	// Envoy's own metadata on its check calls.
	locksMaxHeaderList = 16 << 10
	authzMaxHeaderList = 32 << 10
)

// connsOf turns the configuration's connection limits into connlimit.Limits.
func connsOf(c config.Connections) connlimit.Limits {
	return connlimit.Limits{Max: c.MaxPerListener, PerPeer: c.MaxPerPeer, PerPeerRequests: c.MaxRequestsPerPeer}
}

// newLocksGRPCRunner builds the gRPC lock API listener. A Locks call
// without a valid token is refused before its message is read
// (lockserver.Server.GRPCTap).
func newLocksGRPCRunner(l config.Listener, conns connlimit.Limits, srv *lockserver.Server, hs *health.Readiness, log *slog.Logger, goBG func(func(context.Context))) (*serving.GRPCRunner, error) {
	limits := serving.DefaultGRPCLimits
	limits.Conns, limits.MaxRecvMsg, limits.MaxHeaderList, limits.Tap = conns, locksMaxRecvMsg, locksMaxHeaderList, srv.GRPCTap
	return newGRPCListener("grpc", l, limits, log, goBG, func(g *grpc.Server) {
		srv.RegisterGRPC(g)
		hs.GRPC(g, "", lockserver.LocksServiceName)
	})
}

// newAuthzRunner builds the Envoy ext_authz listener; Envoy health-checks
// it (authz registers the health service, whose status hs sets).
func newAuthzRunner(l config.Listener, conns connlimit.Limits, hs *health.Readiness, checker *fencecheck.Checker, ao authz.Options, log *slog.Logger, goBG func(func(context.Context))) (*serving.GRPCRunner, error) {
	limits := serving.DefaultGRPCLimits
	limits.Conns, limits.MaxRecvMsg, limits.MaxHeaderList = conns, authzMaxRecvMsg, authzMaxHeaderList
	return newGRPCListener("authz", l, limits, log, goBG, func(g *grpc.Server) {
		as := authz.NewServer(checker, ao)
		as.Register(g)
		authz.NewExtProc(checker, ao).Register(g)
		hs.Follow(as.Health(), "", authz.ServiceName, authz.ExtProcServiceName)
	})
}

// newGRPCListener builds one of serve's gRPC listeners with its TLS.
func newGRPCListener(name string, l config.Listener, limits serving.GRPCLimits, log *slog.Logger, goBG func(func(context.Context)), register func(*grpc.Server)) (*serving.GRPCRunner, error) {
	tc, _, err := serving.ServerTLS(name, l.TLS, log, goBG)
	if err != nil {
		return nil, err
	}
	return serving.NewGRPC(name, l.Addr, tc, limits, log, register)
}

// newAuthenticator builds the token set; its error lists every problem
// auth.NewAuthenticator finds (names, operations, duplicate secrets).
func newAuthenticator(tokens []config.Token) (*auth.Authenticator, error) {
	ts := make([]auth.Token, 0, len(tokens))
	for i, t := range tokens {
		sum, err := auth.ParseTokenHash(t.SHA256)
		if err != nil || sum == ([32]byte{}) {
			// config.Validate reported the digest. A stand-in no secret
			// hashes to keeps the token's other problems in the report;
			// this Authenticator is never used.
			sum = sha256.Sum256(fmt.Appendf(nil, "fencegate: token %d has no usable digest", i))
		}
		ts = append(ts, auth.Token{Name: t.Name, SHA256: sum, Prefixes: t.Prefixes, Operations: t.Operations})
	}
	return auth.NewAuthenticator(ts)
}

// admissionOptions parses the webhook's settings, every problem joined;
// the listener-dependent fields (certificate readiness, metrics, logger)
// are filled when it starts.
func admissionOptions(c config.Admission) (admission.Options, error) {
	var errs []error
	policy, err := fencecheck.ParsePolicy(c.Policy)
	if err != nil {
		errs = append(errs, fmt.Errorf("policy: %w", err))
	}
	mode, err := fencecheck.ParseMode(c.Mode)
	if err != nil {
		errs = append(errs, fmt.Errorf("mode: %w", err))
	}
	var resources []admission.Resource
	for _, s := range c.Resources {
		r, err := admission.ParseResource(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("resources: %w", err))
			continue
		}
		resources = append(resources, r)
	}
	if len(errs) > 0 {
		return admission.Options{}, errors.Join(errs...)
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

// newAdmissionRunner builds the webhook's listener: the webhook, and
// /healthz and /readyz of the process's lifecycle hs.
func newAdmissionRunner(c config.Admission, o admission.Options, conns connlimit.Limits, checker *fencecheck.Checker, reg prometheus.Registerer, hs *health.Readiness, log *slog.Logger, goBG func(func(context.Context))) (*serving.HTTPRunner, *admission.Handler, error) {
	tc, w, err := serving.ServerTLS("admission", c.TLS, log, goBG)
	if err != nil {
		return nil, nil, err
	}
	o.CertReady, o.Registerer, o.Logger = w.Ready, reg, log
	reg.MustRegister(w.ExpiryCollector("admission"))
	h, err := admission.New(checker, o)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(admission.Path, h)
	hs.Register(mux, nil)
	r, err := serving.NewHTTP("admission", c.Addr, tc, mux, serving.ReadTimeout, conns, log)
	if err != nil {
		return nil, nil, err
	}
	return r, h, nil
}
