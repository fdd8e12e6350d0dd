// Package connlimit gives every listener its connection slots and bounds
// the requests each peer address has in flight on it: at most Limits.Max
// connections and Limits.PerPeer per remote IP (a full listener closes its
// longest-idle connection for a newcomer), at most Limits.PerPeerRequests
// requests, HTTP/2 streams, gRPC calls and streams per remote IP (one more
// is refused 429 / RESOURCE_EXHAUSTED), counted in
// fencegate_listener_connections* and
// fencegate_listener_requests_refused_total. internal/serving builds every
// listener on it; it imports nothing of ours.
package connlimit

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Connection slots. Every listener holds at most max connections and at
// most perPeer from one remote IP (IPv6: one /64). A full listener does not
// make the next caller wait for an idle connection's timeout (2 minutes):
// it closes the connection that has been idle longest and takes the
// newcomer, so idle
// connections cannot hold the slots that callers with work need. Idle means
// no request in flight: HTTP between requests (or before the first one's
// headers are read), gRPC with no RPC in flight. Connections that have
// carried an authenticated lock API call are closed only when no other
// connection is idle. Only when every slot carries a request in flight
// does a new connection wait in the kernel's accept queue, as before.
//
// A peer at its perPeer cap loses its own longest-idle connection to its
// new one; with all of its connections busy, its new connection is closed
// at once. Without that cap, one address could keep every slot busy with
// slow requests; with it, an attacker needs max/perPeer addresses to do
// so (docs/api.md "Connection limits").

// Requests in flight per peer (issue #26 item 5). Counting connections
// does not bound what one address holds: over HTTP/2 (every TLS HTTP
// listener) and gRPC a connection carries many streams, so 12 connections
// from one address held 3,000 slow requests at the proxy's upstream. Each
// listener also counts the requests (HTTP requests, h2 streams, gRPC
// calls and streams) in flight from each peer address, and answers one
// more than PerPeerRequests at once: HTTP 429 with Retry-After, gRPC
// RESOURCE_EXHAUSTED with a retry-after header.

// Defaults of config.Connections.
const (
	DefaultMax     = 1024
	DefaultPerPeer = 64
	// DefaultPerPeerRequests: what a busy proxy in front of fencegate (one
	// address) needs in flight, and as many streams as one gRPC
	// connection may carry (serving.GRPCLimits.MaxStreams).
	DefaultPerPeerRequests = 256
	// AuthzPerPeerRequests is the authz listener's default instead:
	// its peer is the operator's Envoy, whose ext_proc streams each last
	// as long as the request they govern, so one Envoy in front of a busy
	// service holds far more than 256 at once (refusing them would fail
	// its writes closed under ordinary load). A stream there holds a few
	// KiB (headers only, cmd/fencegate's authzMaxRecvMsg): 4096 bound one address to a
	// few tens of MiB. An explicit connections.maxRequestsPerPeer applies
	// to it like to every listener.
	AuthzPerPeerRequests = 4096
)

// ForAuthz is conns for the authz listener: AuthzPerPeerRequests
// unless the configuration sets the figure.
func ForAuthz(conns Limits) Limits {
	if conns.PerPeerRequests == 0 {
		conns.PerPeerRequests = AuthzPerPeerRequests
	}
	return conns
}

// Limits bounds one listener's connections.
type Limits struct {
	Max     int // connections open at once; 0 is DefaultMax
	PerPeer int // connections open at once from one IP; 0 is DefaultPerPeer, capped at Max
	// PerPeerRequests: requests in flight at once from one IP; 0 is
	// DefaultPerPeerRequests.
	PerPeerRequests int
	// Metrics, when set, counts every listener's connections.
	Metrics *Metrics
}

// Metrics are the connection slots' metrics, labelled by listener.
type Metrics struct {
	open    *prometheus.GaugeVec
	shed    *prometheus.CounterVec
	refused *prometheus.CounterVec
}

// Reasons of fencegate_listener_connections_shed_total.
const (
	shedIdle = "idle_closed"  // closed, idle, to admit a new connection
	shedPeer = "peer_refused" // a new connection over its peer's cap, all of whose connections were busy
)

// NewMetrics registers the connection slots' metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_listener_connections",
			Help: "Connections a listener holds open (at most connections.maxPerListener).",
		}, []string{"listener"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_listener_connections_shed_total",
			Help: "Connections a full listener closed: idle_closed (the longest-idle, to admit a new one), peer_refused (a new one over its peer's cap with every connection of that peer busy).",
		}, []string{"listener", "reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_listener_requests_refused_total",
			Help: "Requests (HTTP requests, HTTP/2 streams, gRPC calls and streams) a listener refused at once (HTTP 429, gRPC RESOURCE_EXHAUSTED) because their peer address already had connections.maxRequestsPerPeer in flight.",
		}, []string{"listener"}),
	}
	reg.MustRegister(m.open, m.shed, m.refused)
	return m
}

// listenerMetrics are one listener's series (nil-safe: no metrics).
type listenerMetrics struct {
	open                       prometheus.Gauge
	idleShed, refuse, requests prometheus.Counter
}

func (m *Metrics) forListener(name string) *listenerMetrics {
	if m == nil {
		return nil
	}
	return &listenerMetrics{open: m.open.WithLabelValues(name),
		idleShed: m.shed.WithLabelValues(name, shedIdle), refuse: m.shed.WithLabelValues(name, shedPeer),
		requests: m.refused.WithLabelValues(name)}
}

func (c Limits) resolved() Limits {
	if c.Max <= 0 {
		c.Max = DefaultMax
	}
	if c.PerPeer <= 0 {
		c.PerPeer = DefaultPerPeer
	}
	if c.PerPeerRequests <= 0 {
		c.PerPeerRequests = DefaultPerPeerRequests
	}
	c.PerPeer = min(c.PerPeer, c.Max)
	return c
}

// limitWarnInterval is how often a listener logs that it is shedding
// connections: an attacker decides how often it sheds, not how often the
// log says so.
const limitWarnInterval = 10 * time.Second

// Listener is a net.Listener with connection slots (see above).
type Listener struct {
	net.Listener
	limits Limits
	name   string
	log    *slog.Logger
	m      *listenerMetrics // nil: none

	mu     sync.Mutex
	freed  *sync.Cond // a slot freed or a connection went idle
	open   map[*trackedConn]struct{}
	byAddr map[string]*trackedConn // remote address → connection, for the gRPC interceptors
	peers  map[netip.Addr]int
	closed bool
	// requests counts each peer's requests in flight (takeRequest).
	requests map[netip.Addr]int
	// requestsRefused counts refusals since the last warning.
	requestsRefused int

	// shed counts connections closed for a slot since the last warning.
	evicted, refused int
	lastWarn         time.Time
}

func NewListener(ln net.Listener, name string, limits Limits, log *slog.Logger) *Listener {
	l := &Listener{
		Listener: ln,
		limits:   limits.resolved(),
		name:     name,
		log:      log,
		m:        limits.Metrics.forListener(name),
		open:     make(map[*trackedConn]struct{}),
		byAddr:   make(map[string]*trackedConn),
		peers:    make(map[netip.Addr]int),
		requests: make(map[netip.Addr]int),
	}
	l.freed = sync.NewCond(&l.mu)
	return l
}

// Listen binds addr first, so a port in use is reported at start, before
// "ready" is logged, and gives it connection slots.
func Listen(name, addr string, limits Limits, log *slog.Logger) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	return NewListener(ln, name, limits, log), nil
}

// trackedConn is one accepted connection holding a slot.
type trackedConn struct {
	net.Conn
	l    *Listener
	peer netip.Addr
	addr string

	// Guarded by l.mu.
	busy      int       // requests in flight (HTTP: 0 or 1; gRPC: RPCs)
	hijacked  bool      // HTTP handed the connection to a handler: never idle
	idleSince time.Time // when busy last dropped to zero (or the accept)
	trusted   bool      // has carried an authenticated call
	released  bool      // its slot is free (closed or evicted)

	closeOnce sync.Once
	closeErr  error
}

func (c *trackedConn) Close() error {
	c.l.release(c)
	c.closeOnce.Do(func() { c.closeErr = c.Conn.Close() })
	return c.closeErr
}

// peerOf is the address a connection's peer is counted under: its IPv4
// address, or its IPv6 /64 (one host or site is commonly given a whole
// /64, so counting /128s would give it a cap per address it cares to use).
func peerOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			ip = ip.Unmap()
			if ip.Is6() {
				return netip.PrefixFrom(ip, 64).Masked().Addr()
			}
			return ip
		}
	}
	return netip.Addr{} // every non-TCP peer shares one count
}

// Accept returns the next connection that gets a slot. Connections over
// their peer's cap are closed here and never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// admit gives c a slot, closing idle connections to make room, or closes
// c when its peer's connections are all busy. It waits only while every
// slot carries a request in flight.
func (l *Listener) admit(c net.Conn) *trackedConn {
	peer := peerOf(c.RemoteAddr())
	var victims []*trackedConn
	defer func() {
		for _, v := range victims {
			_ = v.Close()
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.peers[peer] >= l.limits.PerPeer {
		v := l.longestIdle(func(o *trackedConn) bool { return o.peer == peer })
		if v == nil {
			l.refused++
			if l.m != nil {
				l.m.refuse.Inc()
			}
			l.warnLocked()
			_ = c.Close()
			return nil
		}
		l.releaseLocked(v)
		victims = append(victims, v)
		l.shedLocked()
	}
	for len(l.open) >= l.limits.Max {
		if l.closed {
			_ = c.Close()
			return nil
		}
		if v := l.longestIdle(nil); v != nil {
			l.releaseLocked(v)
			victims = append(victims, v)
			l.shedLocked()
			continue
		}
		l.freed.Wait()
	}
	l.warnLocked()
	tc := &trackedConn{Conn: c, l: l, peer: peer, addr: c.RemoteAddr().String(), idleSince: time.Now()}
	l.open[tc] = struct{}{}
	l.byAddr[tc.addr] = tc
	l.peers[peer]++
	if l.m != nil {
		l.m.open.Inc()
	}
	return tc
}

// Open is how many connections peer (an IPv4 address, or an IPv6 /64's
// first address) holds open on the listener.
func (l *Listener) Open(peer netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peers[peer]
}

// shedLocked counts an idle connection closed for a newcomer.
func (l *Listener) shedLocked() {
	l.evicted++
	if l.m != nil {
		l.m.idleShed.Inc()
	}
}

// longestIdle returns the open connection (among those match accepts; nil:
// all) idle the longest, preferring any that never carried an
// authenticated call; nil when none is idle.
func (l *Listener) longestIdle(match func(*trackedConn) bool) *trackedConn {
	var best *trackedConn
	for c := range l.open {
		if c.busy > 0 || c.hijacked || (match != nil && !match(c)) {
			continue
		}
		if best == nil || (best.trusted && !c.trusted) ||
			(best.trusted == c.trusted && c.idleSince.Before(best.idleSince)) {
			best = c
		}
	}
	return best
}

func (l *Listener) release(c *trackedConn) {
	l.mu.Lock()
	l.releaseLocked(c)
	l.mu.Unlock()
}

func (l *Listener) releaseLocked(c *trackedConn) {
	if c.released {
		return
	}
	c.released = true
	delete(l.open, c)
	if l.byAddr[c.addr] == c {
		delete(l.byAddr, c.addr)
	}
	if l.peers[c.peer]--; l.peers[c.peer] <= 0 {
		delete(l.peers, c.peer)
	}
	if l.m != nil {
		l.m.open.Dec()
	}
	l.freed.Broadcast()
}

// warnLocked logs, at most once per limitWarnInterval, how many
// connections were closed for a slot since the last line. The line
// carries counts only: no peer address an attacker could make it repeat.
func (l *Listener) warnLocked() {
	if l.evicted == 0 && l.refused == 0 && l.requestsRefused == 0 {
		return
	}
	now := time.Now()
	if now.Sub(l.lastWarn) < limitWarnInterval {
		return
	}
	l.lastWarn = now
	l.log.Warn("listener at its connection limits: closed idle connections to admit new ones, and refused connections and requests from peers at their cap",
		"listener", l.name, "idle_closed", l.evicted, "peer_refused", l.refused, "requests_refused", l.requestsRefused,
		"max_conns", l.limits.Max, "max_conns_per_peer", l.limits.PerPeer, "max_requests_per_peer", l.limits.PerPeerRequests)
	l.evicted, l.refused, l.requestsRefused = 0, 0, 0
}

// takeRequest counts a request in flight from peer, or refuses it (false)
// when the peer already has PerPeerRequests in flight on this listener.
// Every taken request is given back with doneRequest.
func (l *Listener) takeRequest(peer netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.requests[peer] >= l.limits.PerPeerRequests && !unlimitedRequests {
		l.requestsRefused++
		if l.m != nil {
			l.m.requests.Inc()
		}
		l.warnLocked()
		return false
	}
	l.requests[peer]++
	return true
}

func (l *Listener) doneRequest(peer netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.requests[peer]--; l.requests[peer] <= 0 {
		delete(l.requests, peer)
	}
}

// unlimitedRequests turns the per-peer request limit off: only so a test
// can show that it catches the listener without it.
var unlimitedRequests = false

// requestRetryAfter is the Retry-After (seconds) of a request refused for
// its peer's requests in flight: they are slow ones, by construction.
const requestRetryAfter = "1"

// LimitRequests is the HTTP side of the per-peer request limit: every
// HTTP listener's handler (the proxy's included) runs behind it, so over
// HTTP/2 each stream counts.
func (l *Listener) LimitRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var peer netip.Addr
		if tc, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			peer = tc.peer
		} else if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			peer = peerOf(net.TCPAddrFromAddrPort(ap))
		}
		if !l.takeRequest(peer) {
			w.Header().Set("Retry-After", requestRetryAfter)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":"too-many-requests","message":"too many requests in flight from this address (connections.maxRequestsPerPeer)"}` + "\n"))
			return
		}
		defer l.doneRequest(peer)
		h.ServeHTTP(w, r)
	})
}

// grpcPeer is the peer address a gRPC call is counted under.
func grpcPeer(ctx context.Context) netip.Addr {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return peerOf(p.Addr)
	}
	return netip.Addr{}
}

// errPeerRequests is a gRPC call refused for its peer's calls in flight.
var errPeerRequests = status.Error(codes.ResourceExhausted, "too many calls in flight from this address (connections.maxRequestsPerPeer)")

// refuseCall sends the retry-after header of a refused call.
func refuseCall(set func(metadata.MD) error) error {
	_ = set(metadata.Pairs("retry-after", requestRetryAfter))
	return errPeerRequests
}

func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.freed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// setBusy moves c's in-flight count by delta; at zero it is idle from now.
func (l *Listener) setBusy(c *trackedConn, delta int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.busy = max(c.busy+delta, 0)
	if c.busy == 0 {
		c.idleSince = time.Now()
		l.freed.Broadcast()
	}
}

// trackedOf finds the slot of a connection net/http hands a hook, under
// its TLS layer.
func trackedOf(c net.Conn) *trackedConn {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	tc, _ := c.(*trackedConn)
	return tc
}

// ConnState is the http.Server hook that tells the listener which of its
// connections are idle.
func (l *Listener) ConnState(c net.Conn, s http.ConnState) {
	tc := trackedOf(c)
	if tc == nil {
		return
	}
	switch s {
	case http.StateActive:
		l.mu.Lock()
		tc.busy = 1
		l.mu.Unlock()
	case http.StateIdle:
		l.mu.Lock()
		tc.busy = 0
		tc.idleSince = time.Now()
		l.freed.Broadcast()
		l.mu.Unlock()
	case http.StateHijacked:
		l.mu.Lock()
		tc.hijacked = true
		l.mu.Unlock()
	}
}

type connKey struct{}

// ConnContext is the http.Server hook that lets a handler reach its
// connection's slot (MarkTrusted).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc := trackedOf(c); tc != nil {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// MarkTrusted records that the connection serving ctx carried an
// authenticated call: under pressure it is closed after the others.
func MarkTrusted(ctx context.Context) {
	if tc, ok := ctx.Value(connKey{}).(*trackedConn); ok {
		tc.l.mu.Lock()
		tc.trusted = true
		tc.l.mu.Unlock()
	}
}

// The gRPC side of ConnState: interceptors count the RPCs in flight on each
// of the listener's connections (found by the peer address grpc-go puts in
// every call's context, which is the accepted connection's), except the
// methods in idle: a stream anyone may open and keep open
// (grpc.health.v1.Health/Watch needs no credential) would otherwise make
// its connection busy forever. Interceptors rather than a stats.Handler:
// with one, grpc-go copies each call's metadata and builds an event per
// header and message, on every call of every listener.

// IdleMethods are the RPCs that do not make a connection busy.
var IdleMethods = map[string]bool{healthpb.Health_Watch_FullMethodName: true}

// grpcConn is the slot of the connection serving ctx, or nil.
func (l *Listener) grpcConn(ctx context.Context) *trackedConn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}
	addr := p.Addr.String()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byAddr[addr]
}

// UnaryInterceptor marks the connection busy while a unary call runs, and puts
// its slot in the call's context (MarkTrusted).
func (l *Listener) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p := grpcPeer(ctx)
		if !l.takeRequest(p) {
			return nil, refuseCall(func(md metadata.MD) error { return grpc.SetHeader(ctx, md) })
		}
		defer l.doneRequest(p)
		tc := l.grpcConn(ctx)
		if tc == nil {
			return h(ctx, req)
		}
		l.setBusy(tc, 1)
		defer l.setBusy(tc, -1)
		return h(context.WithValue(ctx, connKey{}, tc), req)
	}
}

// StreamInterceptor marks the connection busy while a stream other than those in
// idle is open.
func (l *Listener) StreamInterceptor(idle map[string]bool) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		// Every stream counts against its peer's requests in flight, the
		// idle ones (health Watch) included: they are not free either.
		p := grpcPeer(ss.Context())
		if !l.takeRequest(p) {
			return refuseCall(ss.SetHeader)
		}
		defer l.doneRequest(p)
		if idle[info.FullMethod] {
			return h(srv, ss)
		}
		tc := l.grpcConn(ss.Context())
		if tc == nil {
			return h(srv, ss)
		}
		l.setBusy(tc, 1)
		defer l.setBusy(tc, -1)
		return h(srv, ss)
	}
}
