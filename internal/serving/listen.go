// Package serving builds and runs fencegate's listeners: one HTTP and one
// gRPC constructor with the header, message, keepalive and timeout bounds
// (NewHTTP, NewGRPC), each on internal/connlimit's connection slots and
// behind the one panic recovery per listener (recover.go), net/http's
// error lines rate-limited (errorlog.go); and Group, the lifecycle every
// listener of a process follows (ready once all serve; on shutdown all
// unready at once, shutdown.delay, then each drains). cmd/fencegate wires
// the transports' handlers into it; no transport imports it.
package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/certwatch"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/health"
)

// HTTP listener timeouts. Each bounds one thing a slow or broken peer could
// otherwise hold forever.
const (
	ReadHeaderTimeout = 10 * time.Second // slowloris guard on every HTTP listener
	IdleTimeout       = 2 * time.Minute  // keep-alive connections
	ReadTimeout       = 30 * time.Second // a request's body (≤ 64 KiB), on top of any waitMs
)

// Every listener holds at most connlimit.DefaultMax connections and
// connlimit.DefaultPerPeer from one IP (internal/connlimit: a full listener closes its
// longest-idle connection instead of making a newcomer wait), so a flood of
// idle connections on one listener can neither starve the others, the
// store's pool or /healthz of descriptors, nor keep callers with work out.

// MaxHeaderBytes bounds an HTTP request's header block (net/http's default
// is 1 MiB, per connection). Envoy's default limit is 60 KiB and nginx's
// 4 × 8 KiB; fencegate reads a few headers of bounded size.
const MaxHeaderBytes = 64 << 10

// GRPCLimits are the gRPC transport's bounds on connections that do nothing.
type GRPCLimits struct {
	// Conns are the listener's connection slots.
	Conns connlimit.Limits
	// MaxRecvMsg bounds one received message (grpc-go's default is 4
	// MiB); what a service's messages need, and no more, since a message
	// is read whole before any handler sees it. Zero: grpc-go's default.
	MaxRecvMsg int
	// MaxHeaderList bounds a call's header block (grpc-go's default is
	// 16 MiB). Zero: grpc-go's default.
	MaxHeaderList uint32
	// ReadBuffer is each connection's read buffer (grpc-go's default is
	// 32 KiB, held for the connection's life): with 1024 connections per
	// listener, what an idle connection costs matters more than batching
	// reads of large messages, which these services do not have.
	ReadBuffer int
	// IdleMethods are the RPCs that leave their connection idle for the
	// connection slots (idleMethods; a test's broken variant: none).
	IdleMethods map[string]bool
	// Tap runs on each new call before its message is read (nil: none):
	// the lock API rejects a call without a valid token there.
	Tap tap.ServerInHandle
	// Handshake bounds the HTTP/2 preface and settings exchange: a peer
	// that connects and sends nothing, or only the preface, is dropped.
	Handshake time.Duration
	// MaxIdle closes (GOAWAY) a connection that has had no RPC for this
	// long. Clients reconnect transparently; a peer that opened the
	// connection only to hold it loses it.
	MaxIdle time.Duration
	// KeepaliveTime and keepaliveTimeout: the server pings a connection
	// that has been silent this long and closes it when the ping is not
	// answered in time, so a vanished peer (no FIN) does not keep it open.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MinPingInterval is the keepalive enforcement policy: a client pinging
	// more often is sent GOAWAY (too_many_pings); pings without an RPC in
	// flight are allowed, as Envoy and grpc-go clients send them.
	MinPingInterval time.Duration
	// MaxStreams bounds concurrent RPCs per connection, and so the
	// goroutines one client can hold (a waiting acquire holds its stream
	// for up to maxWait).
	MaxStreams uint32
	// StreamWorkers is the number of long-lived goroutines that run RPCs
	// (grpc.NumStreamWorkers); past them grpc-go starts a goroutine per
	// RPC as it does with none. A fresh goroutine's small stack grows by
	// copying on every check (the check and go-redis call chains are
	// deep): the ext_authz CPU profile showed ~10% of the process's CPU in
	// stack growth, which workers, whose stacks stay grown, do not pay.
	StreamWorkers uint32
}

var DefaultGRPCLimits = GRPCLimits{
	Handshake:        10 * time.Second,
	MaxIdle:          2 * time.Minute, // as HTTP's IdleTimeout
	KeepaliveTime:    time.Minute,
	KeepaliveTimeout: 20 * time.Second,
	MinPingInterval:  10 * time.Second,
	MaxStreams:       256,
	StreamWorkers:    64,
	ReadBuffer:       8 << 10,
	IdleMethods:      connlimit.IdleMethods,
}

// ServerOptions turns the limits into gRPC server options; a zero field
// leaves grpc-go's default.
func (l GRPCLimits) ServerOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if l.Handshake > 0 {
		opts = append(opts, grpc.ConnectionTimeout(l.Handshake))
	}
	if l.MaxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(l.MaxStreams))
	}
	if l.StreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(l.StreamWorkers))
	}
	if l.MaxRecvMsg > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(l.MaxRecvMsg))
	}
	if l.MaxHeaderList > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(l.MaxHeaderList))
	}
	if l.Tap != nil {
		opts = append(opts, grpc.InTapHandle(l.Tap))
	}
	if l.ReadBuffer > 0 {
		opts = append(opts, grpc.ReadBufferSize(l.ReadBuffer))
	}
	opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionIdle: l.MaxIdle,
		Time:              l.KeepaliveTime,
		Timeout:           l.KeepaliveTimeout,
	}))
	if l.MinPingInterval > 0 {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.MinPingInterval,
			PermitWithoutStream: true,
		}))
	}
	return opts
}

// ShutdownTimeout bounds draining in-flight requests on SIGTERM.
const ShutdownTimeout = 20 * time.Second

// MaxHTTP2Streams bounds the streams of one HTTP/2 connection (Go's
// default is 250; nginx's 128): what one connection may ask of the
// per-peer request budget at once.
const MaxHTTP2Streams = 100

// Group is the listeners a serving command runs, in start order, and the
// lifecycle they all follow.
type Group struct {
	runners []Runner
	addrs   []any // name, address pairs for the ready log line
	// Health is the lifecycle every listener follows (internal/health):
	// run moves it to ready when all serve, and to draining, for every
	// listener at once, when the shutdown begins. Nil: no readiness
	// (tests of one listener).
	Health *health.Readiness
	// Delay is shutdown.delay: how long the listeners keep serving, all
	// reporting unready, before they drain, so that a load balancer
	// polling /readyz or gRPC health stops sending first.
	Delay time.Duration
	// drain bounds draining on shutdown; zero is ShutdownTimeout. A
	// fencing proxy raises it to let barrier writes finish (maxWrite).
	Drain time.Duration
	// DrainAtLeast, when set, is read as the shutdown begins: the drain
	// is at least what it returns (a fencing proxy's barrier entries as
	// the route table was last reloaded, which may ask for longer than
	// the start's).
	DrainAtLeast func() time.Duration
	// Name is the process's name in the ready line ("fencegate" when
	// empty; the standalone proxy says "fencegate proxy").
	Name string
	// served is set by run: from then on run's shutdown owns the runners.
	served bool
}

func (ls *Group) Add(name string, r Runner) {
	ls.runners = append(ls.runners, r)
	ls.addrs = append(ls.addrs, name, r.Addr())
}

// CloseUnserved closes every listener already bound when run was never
// reached (a later listener failed to build): none is left bound. After
// run it does nothing. Serve and proxy defer it.
func (ls *Group) CloseUnserved() {
	if ls.served {
		return
	}
	for _, r := range ls.runners {
		r.Close()
	}
	ls.runners = nil
}

// Run serves every listener (each already bound), moves the lifecycle to
// ready and logs "fencegate ready" with attrs and their addresses. When
// ctx ends or a listener fails it shuts down in three steps: every
// listener reports unready at once (health: draining); they keep serving
// for ls.Delay; then they drain within ls.Drain. It returns the failure.
func (ls *Group) Run(ctx context.Context, log *slog.Logger, attrs ...any) error {
	ls.served = true
	drain := ls.Drain
	if drain <= 0 {
		drain = ShutdownTimeout
	}
	errc := make(chan error, len(ls.runners))
	for _, r := range ls.runners {
		go func() { errc <- r.Serve() }()
	}
	if ls.Health != nil {
		ls.Health.Serve()
	}
	name := ls.Name
	if name == "" {
		name = "fencegate"
	}
	log.Info(name+" ready: every listener is up", append(attrs, ls.addrs...)...)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		log.Error("a listener failed; shutting down", "err", serveErr)
	}
	if ls.DrainAtLeast != nil {
		drain = max(drain, ls.DrainAtLeast())
	}
	if serveErr == nil {
		log.Info("shutting down: every listener reports unready, then drains", "delay", ls.Delay, "timeout", drain)
	}
	if ls.Health != nil {
		ls.Health.Drain()
	}
	if ls.Delay > 0 {
		t := time.NewTimer(ls.Delay)
		select {
		case <-t.C:
		case err := <-errc:
			// A listener died during the delay: nothing to wait for.
			t.Stop()
			if serveErr == nil {
				serveErr = err
			}
		}
		log.Info("shutdown delay over: draining in-flight requests", "timeout", drain)
	}
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range ls.runners {
		wg.Add(1)
		go func() { defer wg.Done(); r.Shutdown(sctx) }()
	}
	wg.Wait()
	if ls.Health != nil {
		ls.Health.Stop()
	}
	return serveErr
}

// Runner is one listener with its server.
type Runner interface {
	Addr() string
	Serve() error
	Shutdown(ctx context.Context)
	// Close releases the bound listener of a Runner never served.
	Close()
}

// ServerTLS loads a listener's certificate (re-read on change) or returns
// nil when the listener is plaintext.
func ServerTLS(name string, t config.TLS, log *slog.Logger, goBG func(func(context.Context))) (*tls.Config, *certwatch.Watcher, error) {
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

type HTTPRunner struct {
	ln  *connlimit.Listener
	srv *http.Server
	tls bool
}

// NewHTTP binds an HTTP listener (HTTPS when tc is set) serving h
// behind the panic recovery, with the connection slots conns. readTimeout
// bounds reading one request.
func NewHTTP(name, addr string, tc *tls.Config, h http.Handler, readTimeout time.Duration, conns connlimit.Limits, log *slog.Logger) (*HTTPRunner, error) {
	log = log.With("listener", name)
	ln, err := connlimit.Listen(name, addr, conns, log)
	if err != nil {
		return nil, err
	}
	return &HTTPRunner{ln: ln, tls: tc != nil, srv: &http.Server{
		Handler:           recoverHTTP(ln.LimitRequests(h), log),
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: MaxHTTP2Streams},
		TLSConfig:         tc,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ConnState:         ln.ConnState,
		ConnContext:       connlimit.ConnContext,
		ErrorLog:          serverErrorLog(log),
	}}, nil
}

func (r *HTTPRunner) Addr() string { return r.ln.Addr().String() }

func (r *HTTPRunner) Serve() error {
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

func (r *HTTPRunner) Close() { _ = r.ln.Close() }

func (r *HTTPRunner) Shutdown(ctx context.Context) {
	if err := r.srv.Shutdown(ctx); err != nil {
		_ = r.srv.Close()
	}
}

// Bodiless serves a handler that reads no request body (forward-auth: the
// check is in the headers). A request that carries a body anyway is
// answered at once and its connection closed: net/http would otherwise read
// the unread body before writing the reply, and a proxy (or a peer) that
// announces a body and sends none would hold the check for the listener's
// read timeout, which the lock API sets to 30 s plus maxWait.
func Bodiless(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			w.Header().Set("Connection", "close")
			// Nothing more is read from this connection: the draining read
			// fails at once instead of waiting.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
		h.ServeHTTP(w, r)
	})
}

type GRPCRunner struct {
	ln  *connlimit.Listener
	srv *grpc.Server
}

// NewGRPC builds a gRPC listener with the panic recovery and the
// connection limits; register adds the services (and the health service,
// which follows the process's health.Readiness).
func NewGRPC(name, addr string, tc *tls.Config, limits GRPCLimits, log *slog.Logger, register func(*grpc.Server)) (*GRPCRunner, error) {
	log = log.With("listener", name)
	ln, err := connlimit.Listen(name, addr, limits.Conns, log)
	if err != nil {
		return nil, err
	}
	opts := append(limits.ServerOptions(),
		grpc.ChainUnaryInterceptor(recoverUnary(log), ln.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(recoverStream(log), ln.StreamInterceptor(limits.IdleMethods)))
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	g := grpc.NewServer(opts...)
	register(g)
	return &GRPCRunner{ln: ln, srv: g}, nil
}

// Listener is the runner's listener, with its connection slots.
func (r *GRPCRunner) Listener() *connlimit.Listener { return r.ln }

func (r *GRPCRunner) Addr() string { return r.ln.Addr().String() }
func (r *GRPCRunner) Serve() error { return r.srv.Serve(r.ln) }
func (r *GRPCRunner) Close()       { r.srv.Stop(); _ = r.ln.Close() }

// Shutdown lets in-flight RPCs finish (new calls are refused: GOAWAY),
// then stops hard at the deadline. Health reported NOT_SERVING already,
// since the shutdown began (Group.Run).
func (r *GRPCRunner) Shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() { r.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.srv.Stop()
		<-done
	}
}
