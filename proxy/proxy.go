package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/tracing"
)

// Source names the proxy in audit events.
const Source = "proxy"

// Defaults of the upstream transport (Options). Each bounds one thing a slow
// or broken upstream could otherwise hold forever.
const (
	DefaultDialTimeout           = 5 * time.Second  // TCP connect to the upstream
	DefaultTLSHandshakeTimeout   = 10 * time.Second // TLS handshake with the upstream
	DefaultResponseHeaderTimeout = 60 * time.Second // request sent → response headers
	DefaultIdleConnTimeout       = 90 * time.Second // pooled keep-alive connections
	DefaultExpectContinueTimeout = time.Second      // "Expect: 100-continue" wait
	// DefaultDrainLimit bounds how much of an upstream response body the
	// proxy reads on its own after the client went away, to see the
	// response complete and finish the write.
	DefaultDrainLimit = 1 << 20
)

// Route is one path prefix served by an upstream, with its fencing options.
type Route struct {
	// Name labels the route in audit events and logs.
	Name string
	// Prefix is the path prefix the route serves: "/orders" serves
	// "/orders" and everything under "/orders/", not "/ordersX". "/" serves
	// everything. The longest matching prefix wins.
	Prefix string
	// Upstream is where the route's requests go; its path is prepended to
	// the request's path (httputil.ProxyRequest.SetURL).
	Upstream *url.URL
	// Key is the lock key: a literal, or a template over path segments
	// ("orders/{2}", fencecheck.ExpandKey). Empty: the key comes from the
	// KeyHeader.
	Key string
	// KeyHeader carries the key when Key is empty (default x-fence-key).
	KeyHeader string
	// FenceHeader carries the presented fence (default x-fence-token).
	FenceHeader string
	// Policy, Mode: "" is holder, enforce.
	Policy fencecheck.Policy
	Mode   fencecheck.Mode
	// Methods are the write methods, as fencecheck.WriteMethods reads them
	// ("POST,PUT" or "*"); "" is everything but GET, HEAD and OPTIONS.
	Methods string
	// Proof is what a write must carry besides its fence (x-fence-lock-id
	// for lockId, x-fence-proof for signed); "" is none.
	Proof fencecheck.ProofMode
	// Barrier turns the write barrier on: a write under a newer fence of a
	// key is admitted only once every write under an older fence has
	// finished (this proxy has its complete response) or MaxWrite has
	// passed since its admission.
	Barrier bool
	// MaxWrite bounds a barrier write: its upstream exchange is cancelled
	// when MaxWrite has passed since its check began, so that it can never
	// still be running when the store lets a newer fence in. 0 is
	// fencecheck.DefaultMaxWrite. Ignored without Barrier.
	MaxWrite time.Duration
	// MaxWait bounds how long a barrier write under a current fence waits
	// for older writes of its key to finish before it is refused 429
	// draining (fencecheck.Request.MaxWait); 0 is fencecheck.DefaultMaxWait. Ignored
	// without Barrier.
	MaxWait time.Duration
	// PreserveHost sends the client's Host header upstream instead of the
	// upstream URL's host.
	PreserveHost bool
	// Upgrade lets the route's reads switch protocols (Connection:
	// Upgrade: WebSocket, h2c; CONNECT). Off (the default) every upgrade
	// request is refused 400: after a 101 the client and the upstream talk
	// directly, and a write sent down the tunnel is never checked. A
	// fenced write may never upgrade.
	Upgrade bool
	// BodyIdleTimeout cuts a request whose client sends no body byte for
	// this long (408, connection closed); 0 is DefaultBodyIdleTimeout.
	BodyIdleTimeout time.Duration
	// BodyTimeout bounds the whole request body, counted from the
	// request's arrival at the proxy; 0 is DefaultBodyTimeout, or MaxWrite
	// on a barrier route (where it is never longer than MaxWrite).
	BodyTimeout time.Duration
}

// Validate lists every problem of the route.
func (r Route) Validate() error {
	var errs []error
	if !strings.HasPrefix(r.Prefix, "/") {
		errs = append(errs, fmt.Errorf("prefix %q must start with '/'", r.Prefix))
	} else if err := fencecheck.CheckPath(r.Prefix); err != nil {
		errs = append(errs, fmt.Errorf("prefix %q: %w", r.Prefix, err))
	}
	if r.Upstream == nil || r.Upstream.Host == "" || (r.Upstream.Scheme != "http" && r.Upstream.Scheme != "https") {
		errs = append(errs, errors.New("upstream must be an http:// or https:// URL with a host"))
	}
	if _, err := fencecheck.CompileRoute(r.spec()); err != nil {
		// Every option parsed once; a key template's syntax without
		// expanding it against a made-up path.
		errs = append(errs, err)
	}
	if r.MaxWrite < 0 {
		errs = append(errs, errors.New("maxWrite must not be negative"))
	}
	if err := r.validateMaxWait(); err != nil {
		errs = append(errs, err)
	}
	if r.BodyIdleTimeout < 0 || r.BodyTimeout < 0 {
		errs = append(errs, errors.New("bodyIdleTimeout and bodyTimeout must not be negative"))
	}
	if len(errs) == 0 {
		return nil
	}
	name := r.Name
	if name == "" {
		name = r.Prefix
	}
	return fmt.Errorf("route %q: %w", name, errors.Join(errs...))
}

// spec is the route's fencing options as fencecheck compiles them.
func (r Route) spec() fencecheck.RouteSpec {
	return fencecheck.RouteSpec{
		Name: r.Name, Key: r.Key, KeyHeader: r.KeyHeader, FenceHeader: r.FenceHeader, Policy: string(r.Policy),
		Mode: string(r.Mode), Methods: r.Methods, Proof: string(r.Proof), Barrier: r.Barrier, MaxWrite: r.MaxWrite,
		MaxWait: r.effectiveMaxWait(),
	}
}

// Options configure the proxy. The zero value is usable.
type Options struct {
	// Logger logs upstream failures and misconfigurations, never a raw
	// key, fence or lockId above debug; nil is slog.Default().
	Logger *slog.Logger
	// Transport carries requests upstream; nil is a transport with the
	// Default* timeouts above.
	Transport http.RoundTripper
	// TrustForwarded keeps the client's X-Forwarded-For (appending the
	// peer) and audits its first hop as the client. Off (the default), a
	// client's X-Forwarded-* are dropped and replaced, as
	// httputil.ProxyRequest.SetXForwarded does: only a proxy behind another
	// trusted proxy should turn it on.
	TrustForwarded bool
	// FlushInterval is httputil.ReverseProxy's: 0 flushes streamed
	// responses (unknown length, text/event-stream) at once and buffers the
	// rest; negative flushes after every write.
	FlushInterval time.Duration
	// DrainLimit bounds the bytes of a barrier write's response the proxy
	// reads after its client went away (default 1 MiB); a longer body
	// leaves the write abandoned (it expires at MaxWrite).
	DrainLimit int64

	// skipBodyBounds leaves request bodies unbounded, skipHeaders lets
	// every client header through as httputil.ReverseProxy alone would,
	// and skipRouteFolds routes by the exact match alone, only so the
	// tests can show what each prevents; production code never sets them.
	skipBodyBounds, skipHeaders, skipRouteFolds bool
	// skipTarget lets a request target with a raw '#' through (tests
	// only: the broken variant of #26 item 3).
	skipTarget bool
	// skipLogBounds logs every line in full, as before the throttle;
	// logWindow replaces DefaultLogWindow (tests only).
	skipLogBounds bool
	logWindow     time.Duration
	// maxWriteFromArrival times a barrier write's exchange from the
	// request's arrival, as before the wait could last a route's maxWait
	// (tests only: the broken variant of proxy/maxwait_test.go).
	maxWriteFromArrival bool
}

// NewTransport returns the default upstream transport: Go's default
// transport with every timeout set to the Default* constants.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	t.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	t.IdleConnTimeout = DefaultIdleConnTimeout
	t.ExpectContinueTimeout = DefaultExpectContinueTimeout
	t.MaxIdleConnsPerHost = t.MaxIdleConns // few upstream hosts; net/http's 2 per host redials beyond 2 concurrent requests
	return t
}

// Proxy is the fencing reverse proxy: every request is matched to a route,
// a write is checked (and, on a barrier route, admitted) before it goes
// upstream, and a barrier write is finished when its response is complete.
type Proxy struct {
	checker *fencecheck.Checker
	routes  []*route // longest prefix first
	log     *slog.Logger
	trust   bool
	drain   int64
	// skipBodyBounds, skipHeaders, skipRouteFolds, skipLogBounds: Options'.
	skipBodyBounds, skipHeaders, skipRouteFolds, skipLogBounds, skipTarget bool
	// warn throttles the warn and error lines clients can cause.
	warn *logThrottle
	// preIdle, preTotal bound a request body until its route is known:
	// the strictest route's bounds.
	preIdle, preTotal time.Duration
	// foldInvariant: no reading of paths changes any route's prefix
	// (routematch.go), so a plain path needs no second match.
	foldInvariant bool
	// inflight counts barrier writes between admission and Finish/Abandon.
	inflight atomic.Int64
	// maxWriteFromArrival: Options'.
	maxWriteFromArrival bool
}

var _ http.Handler = (*Proxy)(nil)

type route struct {
	Route
	// compiled is the route's options, parsed once: what every request's
	// check is built from (fencecheck.Route.Request).
	compiled *fencecheck.Route
	methods  fencecheck.MethodSet
	rp       *httputil.ReverseProxy
	headers  headerPolicy
	// path is the prefix decoded, without a trailing "/" ("" for "/"):
	// what a request's decoded path is matched against. folded[i] is path
	// under reading i (routematch.go; the last: all readings).
	path   string
	folded []string
}

// maxWrite is the route's MaxWrite with its default.
func (r *route) maxWrite() time.Duration {
	if r.MaxWrite <= 0 {
		return fencecheck.DefaultMaxWrite
	}
	return r.MaxWrite
}

// New returns a proxy serving routes, deciding with c. Every route must be
// valid (Route.Validate); the problems of all routes are returned at once.
func New(c *fencecheck.Checker, routes []Route, o Options) (*Proxy, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
	if o.DrainLimit <= 0 {
		o.DrainLimit = DefaultDrainLimit
	}
	p := &Proxy{checker: c, log: o.Logger, trust: o.TrustForwarded, drain: o.DrainLimit, skipBodyBounds: o.skipBodyBounds, skipHeaders: o.skipHeaders, skipRouteFolds: o.skipRouteFolds,
		skipLogBounds: o.skipLogBounds, skipTarget: o.skipTarget, maxWriteFromArrival: o.maxWriteFromArrival}
	window := o.logWindow
	if window <= 0 {
		window = DefaultLogWindow
	}
	p.warn = newLogThrottle(DefaultLogBurst, window)
	p.warn.off = o.skipLogBounds
	var errs []error
	seen := map[string]bool{}
	for _, r := range routes {
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		pfx := strings.TrimSuffix(r.Prefix, "/")
		if seen[pfx] {
			errs = append(errs, fmt.Errorf("route %q: prefix %q is served by another route", r.Name, r.Prefix))
			continue
		}
		seen[pfx] = true
		r.Prefix = pfx
		compiled, _ := fencecheck.CompileRoute(r.spec()) // Validate passed
		rt := &route{Route: r, compiled: compiled, methods: compiled.Methods, headers: newHeaderPolicy(r)}
		rt.path, _ = url.PathUnescape(pfx) // CheckPath passed: valid escapes, no %2F
		for i := 0; i < readings; i++ {
			rt.folded = append(rt.folded, folded(i, rt.path))
		}
		rt.rp = &httputil.ReverseProxy{
			Rewrite:        p.rewrite(rt),
			Transport:      o.Transport,
			FlushInterval:  o.FlushInterval,
			ModifyResponse: p.modifyResponse,
			ErrorHandler:   p.errorHandler(rt),
			ErrorLog:       log.New(throttledWriter{t: p.warn, log: o.Logger, bound: !o.skipLogBounds}, "", 0),
		}
		p.routes = append(p.routes, rt)
	}
	for i := 0; i < readings && len(errs) == 0; i++ {
		// Under a reading that makes two prefixes one, no request could be
		// told apart: an upstream reading it so could serve either.
		byFold := map[string]*route{}
		for _, r := range p.routes {
			if o := byFold[r.folded[i]]; o != nil {
				errs = append(errs, fmt.Errorf("route %q: prefix %q is prefix %q of route %q to an upstream that reads paths %s", r.Name, r.Prefix, o.Prefix, o.Name, foldName(i)))
				continue
			}
			byFold[r.folded[i]] = r
		}
	}
	p.foldInvariant = true
	for _, r := range p.routes {
		idle, total := r.bodyBounds()
		if p.preIdle == 0 || idle < p.preIdle {
			p.preIdle = idle
		}
		if p.preTotal == 0 || total < p.preTotal {
			p.preTotal = total
		}
		for _, f := range r.folded {
			p.foldInvariant = p.foldInvariant && f == r.path
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(p.routes) == 0 {
		return nil, errors.New("proxy: no routes")
	}
	sort.SliceStable(p.routes, func(i, j int) bool { return len(p.routes[i].path) > len(p.routes[j].path) })
	return p, nil
}

// ValidateRoutes lists every problem of a set of routes, as New would
// report them: each route's own (Route.Validate), two routes with one
// prefix, and prefixes an upstream's reading of paths makes one.
func ValidateRoutes(routes []Route) error {
	_, err := New(fencecheck.New(nil, fencecheck.Options{}), routes, Options{Transport: http.DefaultTransport})
	return err
}

// InFlight is how many barrier writes this proxy has admitted and not yet
// finished or abandoned.
func (p *Proxy) InFlight() int64 { return p.inflight.Load() }

// match returns the route of a (canonical, decoded) path, or nil.
func (p *Proxy) match(path string) *route {
	for _, r := range p.routes {
		if r.path == "" || path == r.path || strings.HasPrefix(path, r.path+"/") {
			return r
		}
	}
	return nil
}

// ctxKey carries a request's barrier write from ServeHTTP to ModifyResponse.
type ctxKey struct{}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// Bound the body before anything can answer without reading it:
	// net/http then reads the rest (up to 256 KiB) itself, under the
	// connection's read deadline, which without this is none. Until the
	// route is known the strictest route's bounds apply.
	var body *deadlineBody
	if r.Body != nil && r.Body != http.NoBody && !p.skipBodyBounds {
		body = newDeadlineBody(w, r.Body, p.preIdle, start.Add(p.preTotal))
		if err := body.arm(); err != nil {
			// A body read nothing bounds could hold the connection for
			// ever: fail closed.
			p.warn.log(r.Context(), p.log, slog.LevelError, "proxy: cannot set a read deadline on the connection", errAttr(err))
			http.Error(w, "request body cannot be bounded", http.StatusInternalServerError)
			return
		}
		r.Body = body
	}
	// A path the upstream would normalise into another one may land under
	// another route than the prefix we match: refuse it before routing.
	if err := fencecheck.CheckPath(r.URL.EscapedPath()); err != nil {
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: non-canonical path refused", errAttr(err))
		http.Error(w, "non-canonical request path", http.StatusBadRequest)
		return
	}
	if err := fencecheck.CheckTarget(r.RequestURI); err != nil && !p.skipTarget {
		// Go's server keeps a raw '#' in the path ("/orders/42#x"): no
		// client sends one, and the edges that cut there would check
		// another key than the upstream writes. Refused here for every
		// method, like a non-canonical path.
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: request target with a byte no client sends refused", errAttr(err))
		http.Error(w, "request target holds a byte no client sends", http.StatusBadRequest)
		return
	}
	rt := p.match(r.URL.Path)
	if how := p.ambiguousRoute(r.URL.Path, rt); how != "" && !p.skipRouteFolds {
		p.refuseAmbiguousPath(w, r, rt, how)
		return
	}
	if rt == nil {
		http.Error(w, "no route", http.StatusNotFound)
		return
	}
	if body != nil {
		idle, total := rt.bodyBounds()
		body.idle, body.end = idle, start.Add(total)
		_ = body.arm() // it worked a moment ago on this connection
	}

	if name := methodOverride(r.Header); name != "" && !p.skipHeaders {
		// The check decides on r.Method; an upstream that honours the
		// override would run another one (a GET passed as a read, acting
		// as a DELETE).
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: method override refused", slog.String("route", rt.Name))
		http.Error(w, "method override headers are not allowed", http.StatusBadRequest)
		return
	}
	req := p.request(r, rt)
	if wantsUpgrade(r) {
		// After a 101 the client and the upstream talk directly, for as
		// long as they like: writes sent down the tunnel are never
		// checked, and a holder that lost its lock could go on writing
		// under its old fence. A fenced write is one exchange.
		switch {
		case !rt.Upgrade:
			p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: protocol upgrade refused", slog.String("route", rt.Name))
			http.Error(w, "protocol upgrades are not allowed on this route", http.StatusBadRequest)
			return
		case req.Write && rt.compiled.Policy != fencecheck.PolicyOff:
			p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: protocol upgrade on a fenced write refused", slog.String("route", rt.Name))
			http.Error(w, "protocol upgrades are not allowed on fenced writes", http.StatusBadRequest)
			return
		}
	}
	// The check's span joins the client's trace (W3C or b3 headers); the
	// headers themselves go upstream unchanged.
	dec, _ := p.checker.Check(tracing.FromHTTP(r.Context(), r.Header), req)
	if !dec.Allowed {
		writeDenial(w, dec)
		return
	}
	if dec.WriteID == "" {
		rt.rp.ServeHTTP(w, withDecision(r.Context(), r, dec, nil, body))
		return
	}

	// A barrier write. It must be over before the store lets a newer fence
	// in, so its upstream exchange ends at MaxWrite, counted from the start
	// of the store call that admitted it (the store counts from its own
	// execution of that call, later), not from the request's arrival: the
	// wait at the barrier may have taken up to MaxWait. And it
	// no longer follows the client: a client that leaves must not cut the
	// exchange short of a response the proxy can see complete.
	admitted := admittedAt(dec, start)
	if p.maxWriteFromArrival {
		admitted = start
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), admitted.Add(rt.maxWrite()))
	defer cancel()
	if body != nil {
		// The wait at the barrier read nothing: the body's bounds count
		// from the admission, as the exchange's does.
		idle, total := rt.bodyBounds()
		body.idle, body.end = idle, admitted.Add(total)
		_ = body.arm()
	}
	bw := &barrierWrite{p: p, dec: dec}
	p.inflight.Add(1)
	// Whatever path the exchange took (error handler, a panic on a client
	// that went away), a write not finished by its response body is
	// abandoned: the entry expires at MaxWrite.
	defer bw.abandon(ctx)
	rt.rp.ServeHTTP(w, withDecision(ctx, r, dec, bw, body))
}

// wantsUpgrade reports whether r asks to leave HTTP request/response for a
// tunnel: Connection: Upgrade (WebSocket, h2c), an Upgrade or
// HTTP2-Settings header even without it (an upstream or a later hop may
// honour it), or CONNECT (a tunnel by definition; also HTTP/2's extended
// CONNECT for WebSocket).
func wantsUpgrade(r *http.Request) bool {
	return httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade") ||
		len(r.Header["Upgrade"]) > 0 || len(r.Header["Http2-Settings"]) > 0 || r.Method == http.MethodConnect
}

// refuseAmbiguousPath answers a path that an upstream reading it another
// way (case-insensitively, say) would route elsewhere: 400 malformed, as
// an input that cannot be read one way, with a decision id and an audit
// event, whatever the route's method rules, policy or mode (no route's
// rules apply to a path without one route).
func (p *Proxy) refuseAmbiguousPath(w http.ResponseWriter, r *http.Request, rt *route, how string) {
	name := ""
	if rt != nil {
		name = rt.Name
	}
	dec, _ := p.checker.Check(r.Context(), fencecheck.Request{
		Write: true, Ambiguous: true, Policy: fencecheck.PolicyHolder, Mode: fencecheck.ModeEnforce,
		Route: name, Source: Source, Peer: p.clientAddr(r), Method: r.Method, Path: r.URL.EscapedPath(),
	})
	p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: path routes elsewhere when read another way; refused",
		slog.String("route", name), slog.String("reading", how), slog.String("decisionId", dec.DecisionID))
	writeDenial(w, dec)
}

func withDecision(ctx context.Context, r *http.Request, dec fencecheck.Decision, bw *barrierWrite, body *deadlineBody) *http.Request {
	return r.WithContext(context.WithValue(ctx, ctxKey{}, &exchange{dec: dec, bw: bw, body: body}))
}

// exchange is what the proxy knows of a request on its way upstream.
type exchange struct {
	dec  fencecheck.Decision
	bw   *barrierWrite // nil unless admitted under the barrier
	body *deadlineBody // nil for a request without a body
}

// request turns r into the check's request, as every edge does
// (fencecheck.Route.Request). net/http keeps every copy of a header, so a
// comma in a key is the key's own.
func (p *Proxy) request(r *http.Request, rt *route) fencecheck.Request {
	h := r.Header
	path := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery // for the _method parameter (fencecheck.Input.Overrides)
	}
	req, err := rt.compiled.Request(fencecheck.Input{
		Method: r.Method, Path: path,
		Header: h.Get, Count: func(lc string) int { return len(h.Values(lc)) },
		Peer: p.clientAddr(r), Source: Source, CanFinish: true, Trusted: true,
	})
	if err != nil {
		// An empty key is denied 400 malformed without a store read.
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: key template did not expand", slog.String("route", rt.Name), errAttr(err))
	}
	return req
}

// clientAddr is the client: the audit's peer and the barrier's per-client
// waiter share (fencecheck). Without trustForwarded the TCP peer; with it,
// the last X-Forwarded-For entry, the one the trusted proxy in front
// appended (the earlier entries are whatever the client sent, so keying
// the share on them would let one client be any number of clients).
func (p *Proxy) clientAddr(r *http.Request) string {
	if p.trust {
		if xffs := r.Header.Values("X-Forwarded-For"); len(xffs) > 0 {
			last := xffs[len(xffs)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if last = strings.TrimSpace(last); last != "" {
				return last
			}
		}
	}
	return r.RemoteAddr
}

// writeDenial answers a denial exactly as the other edges do: the reason's
// status, x-fence-reason, x-fence-decision-id, Retry-After for draining and too-many-writes,
// and the JSON body of docs/api.md.
func writeDenial(w http.ResponseWriter, dec fencecheck.Decision) {
	hd := w.Header()
	for _, kv := range fencecheck.DenialHeaders(dec) {
		hd.Set(kv[0], kv[1])
	}
	hd.Set("Cache-Control", "no-store")
	body := fencecheck.DenialJSON(dec)
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(dec.Status)
	_, _ = w.Write(body)
}

// rewrite builds the upstream request: the route's upstream URL,
// X-Forwarded-*, and the fence headers the upstream may rely on.
func (p *Proxy) rewrite(rt *route) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		if !p.skipHeaders {
			rt.headers.strip(pr.Out.Header)
		}
		if p.trust {
			// ReverseProxy drops the client's X-Forwarded-* before
			// Rewrite; a trusted chain keeps its hops.
			if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
				pr.Out.Header["X-Forwarded-For"] = append([]string(nil), prior...)
			}
		}
		pr.SetURL(rt.Upstream)
		pr.SetXForwarded()
		if p.trust {
			for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v := pr.In.Header.Get(h); v != "" {
					pr.Out.Header.Set(h, v)
				}
			}
		}
		if rt.PreserveHost {
			pr.Out.Host = pr.In.Host
		}
		ex, _ := pr.In.Context().Value(ctxKey{}).(*exchange)
		out := pr.Out.Header
		out.Del(fencewire.HeaderLockID)
		out.Del(fencewire.HeaderVerified)
		out.Del(fencewire.HeaderWouldDeny)
		out.Del(fencewire.HeaderDecisionID)
		if ex == nil {
			return
		}
		if fencecheck.Verified(ex.dec) {
			out.Set(fencewire.HeaderVerified, ex.dec.Presented)
		}
		if ex.dec.WouldDeny {
			out.Set(fencewire.HeaderWouldDeny, string(ex.dec.Reason))
		}
		if ex.dec.DecisionID != "" {
			out.Set(fencewire.HeaderDecisionID, ex.dec.DecisionID)
		}
	}
}

// modifyResponse hands a barrier write's response body to a reader that
// finishes the write when the body has been read to its end.
func (p *Proxy) modifyResponse(res *http.Response) error {
	ex, _ := res.Request.Context().Value(ctxKey{}).(*exchange)
	if ex == nil || ex.bw == nil {
		return nil
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Upgrades of fenced writes are refused before the check; one that
		// gets here anyway is abandoned (its entry expires at maxWrite),
		// never finished while the connection may still carry writes.
		ex.bw.abandon(res.Request.Context())
		return nil
	}
	if res.Body == nil || res.Body == http.NoBody {
		ex.bw.finish(res.Request.Context()) // the upstream's answer is all there is
		return nil
	}
	res.Body = &completionBody{rc: res.Body, bw: ex.bw, ctx: res.Request.Context(), drain: p.drain}
	return nil
}

func (p *Proxy) errorHandler(rt *route) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		// The write (if it was one) is abandoned by ServeHTTP's defer: the
		// upstream may or may not have committed it.
		status := http.StatusBadGateway
		if errors.Is(err, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
		level, msg := slog.LevelWarn, "proxy: upstream exchange failed"
		if ex, _ := r.Context().Value(ctxKey{}).(*exchange); ex != nil && ex.body != nil && ex.body.timedOut.Load() {
			// The client, not the upstream, was too slow: its connection
			// cannot carry another request (the body is unread).
			status = http.StatusRequestTimeout
			w.Header().Set("Connection", "close")
			level, msg = slog.LevelInfo, "proxy: request body passed its route's bounds; exchange cut"
		}
		ea := errAttr(err)
		if p.skipLogBounds {
			ea = slog.Any("error", err)
		}
		p.warn.log(r.Context(), p.log, level, msg,
			slog.String("route", rt.Name), slog.String("upstream", rt.Upstream.Redacted()), ea)
		w.WriteHeader(status)
	}
}

// barrierWrite is one write admitted under the barrier, settled once:
// finished (the response was complete) or abandoned.
type barrierWrite struct {
	p       *Proxy
	dec     fencecheck.Decision
	settled atomic.Bool
}

func (b *barrierWrite) finish(ctx context.Context) {
	if b.settled.CompareAndSwap(false, true) {
		_ = b.p.checker.Finish(ctx, b.dec) // a failure is counted and logged there
		b.p.inflight.Add(-1)
	}
}

func (b *barrierWrite) abandon(ctx context.Context) {
	if b.settled.CompareAndSwap(false, true) {
		b.p.checker.Abandon(ctx, b.dec)
		b.p.inflight.Add(-1)
	}
}

// completionBody finishes its write when the upstream body has been read to
// EOF without error. If the body is closed early (the client went away),
// it reads the rest (up to drain bytes) to see the response complete; an
// upstream read error or an unfinished body abandons the write.
type completionBody struct {
	rc    io.ReadCloser
	bw    *barrierWrite
	ctx   context.Context
	drain int64
	eof   bool
	err   error
}

func (b *completionBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil && b.err == nil:
		b.err = err
	}
	return n, err
}

func (b *completionBody) Close() error {
	if !b.eof && b.err == nil {
		n, err := io.Copy(io.Discard, io.LimitReader(b.rc, b.drain))
		switch {
		case err != nil:
			b.err = err
		case n < b.drain:
			b.eof = true
		default:
			// Exactly at the limit: complete only if nothing follows.
			var one [1]byte
			if m, rerr := b.rc.Read(one[:]); m == 0 && rerr == io.EOF {
				b.eof = true
			}
		}
	}
	cerr := b.rc.Close()
	if b.eof && b.err == nil {
		b.bw.finish(b.ctx)
	} else {
		b.bw.abandon(b.ctx)
	}
	return cerr
}
