package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/certwatch"
	"github.com/fencegate/fencegate/internal/health"
)

// HTTP listener timeouts. Each bounds one thing a slow or broken peer could
// otherwise hold forever.
const (
	readHeaderTimeout = 10 * time.Second // slowloris guard on every HTTP listener
	idleTimeout       = 2 * time.Minute  // keep-alive connections
	readTimeout       = 30 * time.Second // a request's body (≤ 64 KiB), on top of any waitMs
)

// Every listener holds at most maxConnsPerListener connections and
// maxConnsPerPeer from one IP (connlimit.go: a full listener closes its
// longest-idle connection instead of making a newcomer wait), so a flood of
// idle connections on one listener can neither starve the others, the
// store's pool or /healthz of descriptors, nor keep callers with work out.

// maxHeaderBytes bounds an HTTP request's header block (net/http's default
// is 1 MiB, per connection). Envoy's default limit is 60 KiB and nginx's
// 4 × 8 KiB; fencegate reads a few headers of bounded size.
const maxHeaderBytes = 64 << 10

// grpcLimits are the gRPC transport's bounds on connections that do nothing.
type grpcLimits struct {
	// conns are the listener's connection slots.
	conns connLimits
	// maxRecvMsg bounds one received message (grpc-go's default is 4
	// MiB); what a service's messages need, and no more, since a message
	// is read whole before any handler sees it. Zero: grpc-go's default.
	maxRecvMsg int
	// maxHeaderList bounds a call's header block (grpc-go's default is
	// 16 MiB). Zero: grpc-go's default.
	maxHeaderList uint32
	// readBuffer is each connection's read buffer (grpc-go's default is
	// 32 KiB, held for the connection's life): with 1024 connections per
	// listener, what an idle connection costs matters more than batching
	// reads of large messages, which these services do not have.
	readBuffer int
	// idleMethods are the RPCs that leave their connection idle for the
	// connection slots (idleMethods; a test's broken variant: none).
	idleMethods map[string]bool
	// tap runs on each new call before its message is read (nil: none):
	// the lock API rejects a call without a valid token there.
	tap tap.ServerInHandle
	// handshake bounds the HTTP/2 preface and settings exchange: a peer
	// that connects and sends nothing, or only the preface, is dropped.
	handshake time.Duration
	// maxIdle closes (GOAWAY) a connection that has had no RPC for this
	// long. Clients reconnect transparently; a peer that opened the
	// connection only to hold it loses it.
	maxIdle time.Duration
	// keepaliveTime and keepaliveTimeout: the server pings a connection
	// that has been silent this long and closes it when the ping is not
	// answered in time, so a vanished peer (no FIN) does not keep it open.
	keepaliveTime, keepaliveTimeout time.Duration
	// minPingInterval is the keepalive enforcement policy: a client pinging
	// more often is sent GOAWAY (too_many_pings); pings without an RPC in
	// flight are allowed, as Envoy and grpc-go clients send them.
	minPingInterval time.Duration
	// maxStreams bounds concurrent RPCs per connection, and so the
	// goroutines one client can hold (a waiting acquire holds its stream
	// for up to maxWait).
	maxStreams uint32
	// streamWorkers is the number of long-lived goroutines that run RPCs
	// (grpc.NumStreamWorkers); past them grpc-go starts a goroutine per
	// RPC as it does with none. A fresh goroutine's small stack grows by
	// copying on every check (the check and go-redis call chains are
	// deep): the ext_authz CPU profile showed ~10% of the process's CPU in
	// stack growth, which workers, whose stacks stay grown, do not pay.
	streamWorkers uint32
}

var defaultGRPCLimits = grpcLimits{
	handshake:        10 * time.Second,
	maxIdle:          2 * time.Minute, // as HTTP's idleTimeout
	keepaliveTime:    time.Minute,
	keepaliveTimeout: 20 * time.Second,
	minPingInterval:  10 * time.Second,
	maxStreams:       256,
	streamWorkers:    64,
	readBuffer:       8 << 10,
	idleMethods:      idleMethods,
}

// serverOptions turns the limits into gRPC server options; a zero field
// leaves grpc-go's default.
func (l grpcLimits) serverOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if l.handshake > 0 {
		opts = append(opts, grpc.ConnectionTimeout(l.handshake))
	}
	if l.maxStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(l.maxStreams))
	}
	if l.streamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(l.streamWorkers))
	}
	if l.maxRecvMsg > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(l.maxRecvMsg))
	}
	if l.maxHeaderList > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(l.maxHeaderList))
	}
	if l.tap != nil {
		opts = append(opts, grpc.InTapHandle(l.tap))
	}
	if l.readBuffer > 0 {
		opts = append(opts, grpc.ReadBufferSize(l.readBuffer))
	}
	opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionIdle: l.maxIdle,
		Time:              l.keepaliveTime,
		Timeout:           l.keepaliveTimeout,
	}))
	if l.minPingInterval > 0 {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.minPingInterval,
			PermitWithoutStream: true,
		}))
	}
	return opts
}

// shutdownTimeout bounds draining in-flight requests on SIGTERM.
const shutdownTimeout = 20 * time.Second

// listeners are the listeners serve runs, in start order, and the
// lifecycle they all follow.
type listeners struct {
	runners []runner
	addrs   []any // name, address pairs for the ready log line
	// health is the lifecycle every listener follows (internal/health):
	// run moves it to ready when all serve, and to draining, for every
	// listener at once, when the shutdown begins. Nil: no readiness
	// (tests of one listener).
	health *health.Readiness
	// delay is shutdown.delay: how long the listeners keep serving, all
	// reporting unready, before they drain, so that a load balancer
	// polling /readyz or gRPC health stops sending first.
	delay time.Duration
	// drain bounds draining on shutdown; zero is shutdownTimeout. A
	// fencing proxy raises it to let barrier writes finish (maxWrite).
	drain time.Duration
	// name is the process's name in the ready line ("fencegate" when
	// empty; the standalone proxy says "fencegate proxy").
	name string
	// served is set by run: from then on run's shutdown owns the runners.
	served bool
}

func (ls *listeners) add(name string, r runner) {
	ls.runners = append(ls.runners, r)
	ls.addrs = append(ls.addrs, name, r.addr())
}

// closeUnserved closes every listener already bound when run was never
// reached (a later listener failed to build): none is left bound. After
// run it does nothing. Serve and proxy defer it.
func (ls *listeners) closeUnserved() {
	if ls.served || !closeBuiltOnError {
		return
	}
	for _, r := range ls.runners {
		r.close()
	}
	ls.runners = nil
}

// closeBuiltOnError is true in the gateway; a test sets it false for the
// broken variant that leaked bound listeners when a later one failed.
var closeBuiltOnError = true

// run serves every listener (each already bound), moves the lifecycle to
// ready and logs "fencegate ready" with attrs and their addresses. When
// ctx ends or a listener fails it shuts down in three steps: every
// listener reports unready at once (health: draining); they keep serving
// for ls.delay; then they drain within ls.drain. It returns the failure.
func (ls *listeners) run(ctx context.Context, log *slog.Logger, attrs ...any) error {
	ls.served = true
	drain := ls.drain
	if drain <= 0 {
		drain = shutdownTimeout
	}
	errc := make(chan error, len(ls.runners))
	for _, r := range ls.runners {
		go func() { errc <- r.serve() }()
	}
	if ls.health != nil {
		ls.health.Serve()
	}
	name := ls.name
	if name == "" {
		name = "fencegate"
	}
	log.Info(name+" ready: every listener is up", append(attrs, ls.addrs...)...)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: every listener reports unready, then drains", "delay", ls.delay, "timeout", drain)
	case serveErr = <-errc:
		log.Error("a listener failed; shutting down", "err", serveErr)
	}
	if ls.health != nil {
		ls.health.Drain()
	}
	if ls.delay > 0 {
		t := time.NewTimer(ls.delay)
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
		go func() { defer wg.Done(); r.shutdown(sctx) }()
	}
	wg.Wait()
	if ls.health != nil {
		ls.health.Stop()
	}
	return serveErr
}

// runner is one listener with its server.
type runner interface {
	addr() string
	serve() error
	shutdown(ctx context.Context)
	// close releases the bound listener of a runner never served.
	close()
}

// listen binds addr first, so a port in use is reported at start, before
// "ready" is logged, and gives it connection slots (connlimit.go).
func listen(name, addr string, conns connLimits, log *slog.Logger) (*limitListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	return newLimitListener(ln, name, conns, log), nil
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
	ln  *limitListener
	srv *http.Server
	tls bool
}

// newHTTPRunner binds an HTTP listener (HTTPS when tc is set) serving h
// behind the panic recovery, with the connection slots conns. readTimeout
// bounds reading one request.
func newHTTPRunner(name, addr string, tc *tls.Config, h http.Handler, readTimeout time.Duration, conns connLimits, log *slog.Logger) (*httpRunner, error) {
	log = log.With("listener", name)
	ln, err := listen(name, addr, conns, log)
	if err != nil {
		return nil, err
	}
	return &httpRunner{ln: ln, tls: tc != nil, srv: &http.Server{
		Handler:           recoverHTTP(ln.limitRequests(h), log),
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxHTTP2Streams},
		TLSConfig:         tc,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         ln.connState,
		ConnContext:       connContext,
		ErrorLog:          serverErrorLog(log),
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

func (r *httpRunner) close() { _ = r.ln.Close() }

func (r *httpRunner) shutdown(ctx context.Context) {
	if err := r.srv.Shutdown(ctx); err != nil {
		_ = r.srv.Close()
	}
}

// bodiless serves a handler that reads no request body (forward-auth: the
// check is in the headers). A request that carries a body anyway is
// answered at once and its connection closed: net/http would otherwise read
// the unread body before writing the reply, and a proxy (or a peer) that
// announces a body and sends none would hold the check for the listener's
// read timeout, which the lock API sets to 30 s plus maxWait.
func bodiless(h http.Handler) http.Handler {
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

type grpcRunner struct {
	ln  *limitListener
	srv *grpc.Server
}

// newGRPCRunner builds a gRPC listener with the panic recovery and the
// connection limits; register adds the services (and the health service,
// which follows the process's health.Readiness).
func newGRPCRunner(name, addr string, tc *tls.Config, limits grpcLimits, log *slog.Logger, register func(*grpc.Server)) (*grpcRunner, error) {
	log = log.With("listener", name)
	ln, err := listen(name, addr, limits.conns, log)
	if err != nil {
		return nil, err
	}
	opts := append(limits.serverOptions(),
		grpc.ChainUnaryInterceptor(recoverUnary(log), ln.busyUnary()),
		grpc.ChainStreamInterceptor(recoverStream(log), ln.busyStream(limits.idleMethods)))
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	g := grpc.NewServer(opts...)
	register(g)
	return &grpcRunner{ln: ln, srv: g}, nil
}

func (r *grpcRunner) addr() string { return r.ln.Addr().String() }
func (r *grpcRunner) serve() error { return r.srv.Serve(r.ln) }
func (r *grpcRunner) close()       { r.srv.Stop(); _ = r.ln.Close() }

// shutdown lets in-flight RPCs finish (new calls are refused: GOAWAY),
// then stops hard at the deadline. Health reported NOT_SERVING already,
// since the shutdown began (listeners.run).
func (r *grpcRunner) shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() { r.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.srv.Stop()
		<-done
	}
}
