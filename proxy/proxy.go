package proxy

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/tracing"
	"github.com/fencegate/fencegate/routes"
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

	// skipBodyBounds leaves request bodies unbounded and skipHeaders lets
	// every client header through as httputil.ReverseProxy alone would;
	// match replaces the table's matcher (the broken variants: the
	// proxy's own prefix matcher before #27): only so the tests can show
	// what each prevents; production code never sets them.
	skipBodyBounds, skipHeaders bool
	match                       func(t *routes.Table, host string, in fencecheck.Input) (*routes.Entry, error)
	// pinTable serves the first table for ever, as the proxy's routes
	// were before #27 (tests only: the reload's broken variant).
	pinTable bool
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

// Proxy is the fencing reverse proxy: every request is matched to an entry
// of the route table (routes.Table.MatchRequest, the matcher every edge
// uses), a write is checked (and, on a barrier entry, admitted) before it
// goes to the entry's upstream, and a barrier write is finished when its
// response is complete. The table is read from a routes.Holder on every
// request, so a reload that swaps it applies to the next request; a request
// already matched finishes on the entry it matched.
type Proxy struct {
	checker *fencecheck.Checker
	holder  *routes.Holder
	o       Options      // with New's defaults filled in
	log     *slog.Logger // o.Logger
	// warn throttles the warn and error lines clients can cause.
	warn *logThrottle
	// cur is the table being served with what the proxy built for it;
	// mu serialises building it for a table a reload swapped in.
	cur atomic.Pointer[served]
	mu  sync.Mutex
	// inflight counts barrier writes between admission and Finish/Abandon.
	inflight atomic.Int64
}

var _ http.Handler = (*Proxy)(nil)

// served is one route table as the proxy serves it: a reverse proxy for
// each entry with an upstream, built once per table (not per request).
type served struct {
	table *routes.Table
	up    map[*routes.Entry]*upstream
	// preIdle, preTotal bound a request body until its entry is known:
	// the strictest upstream entry's bounds.
	preIdle, preTotal time.Duration
}

// upstream is what the proxy serves one table entry with: the entry's
// compiled options (Entry.Route, the check's) and the proxy's own
// (Entry.Upstream and the entry's preserveHost, upgrade and body bounds).
type upstream struct {
	entry    *routes.Entry
	compiled *fencecheck.Route
	url      *url.URL
	// preserveHost, upgrade: the entry's (config.Route).
	preserveHost, upgrade bool
	// bodyIdle, bodyTotal: the entry's body bounds with their defaults
	// (bodyBounds).
	bodyIdle, bodyTotal time.Duration
	headers             headerPolicy
	rp                  *httputil.ReverseProxy
}

// name is the entry's name, for logs.
func (u *upstream) name() string { return u.entry.Name }

// maxWrite is the entry's MaxWrite with its default.
func (u *upstream) maxWrite() time.Duration { return u.compiled.EffectiveMaxWrite() }

// ErrNoUpstream: the route table has no entry with an upstream, so the
// proxy would serve nothing.
var ErrNoUpstream = errors.New("proxy: no route table entry has an upstream")

// New returns a proxy serving the entries with an upstream of the table h
// holds, deciding with c. The table must have at least one such entry
// (ErrNoUpstream). The owner of h may swap the table at any time (a
// reload); the proxy builds what it serves a new table with at its first
// request.
func New(c *fencecheck.Checker, h *routes.Holder, o Options) (*Proxy, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
	if o.DrainLimit <= 0 {
		o.DrainLimit = DefaultDrainLimit
	}
	if o.match == nil {
		o.match = (*routes.Table).MatchRequest
	}
	if !HasUpstream(h.Load()) {
		return nil, ErrNoUpstream
	}
	p := &Proxy{checker: c, holder: h, o: o, log: o.Logger}
	window := o.logWindow
	if window <= 0 {
		window = DefaultLogWindow
	}
	p.warn = newLogThrottle(DefaultLogBurst, window)
	p.warn.off = o.skipLogBounds
	p.load()
	return p, nil
}

// HasUpstream reports whether some entry of t has an upstream: what a
// table must have for the proxy to serve it.
func HasUpstream(t *routes.Table) bool {
	for _, e := range t.Entries() {
		if e.Upstream != nil {
			return true
		}
	}
	return false
}

// load returns what the proxy serves the holder's table with, building it
// once per table.
func (p *Proxy) load() *served {
	t := p.holder.Load()
	if s := p.cur.Load(); s != nil && (s.table == t || p.o.pinTable) {
		return s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.cur.Load(); s != nil && s.table == t {
		return s
	}
	s := p.build(t)
	p.cur.Store(s)
	return s
}

// build makes a reverse proxy for each entry of t with an upstream. The
// upstream transport (its connection pools) is shared by every table.
func (p *Proxy) build(t *routes.Table) *served {
	s := &served{table: t, up: map[*routes.Entry]*upstream{}}
	for _, e := range t.Entries() {
		if e.Upstream == nil {
			continue
		}
		u := &upstream{entry: e, compiled: e.Route, url: e.Upstream, preserveHost: e.Config.PreserveHost, upgrade: e.Config.Upgrade,
			headers: newHeaderPolicy(e.Route)}
		u.bodyIdle, u.bodyTotal = bodyBounds(e)
		u.rp = &httputil.ReverseProxy{
			Rewrite:        p.rewrite(u),
			Transport:      p.o.Transport,
			FlushInterval:  p.o.FlushInterval,
			ModifyResponse: p.modifyResponse,
			ErrorHandler:   p.errorHandler(u),
			ErrorLog:       log.New(throttledWriter{t: p.warn, log: p.log, bound: !p.o.skipLogBounds}, "", 0),
		}
		s.up[e] = u
		if s.preIdle == 0 || u.bodyIdle < s.preIdle {
			s.preIdle = u.bodyIdle
		}
		if s.preTotal == 0 || u.bodyTotal < s.preTotal {
			s.preTotal = u.bodyTotal
		}
	}
	if len(s.up) == 0 {
		// A reload left no upstream entry (cmd refuses such a table while
		// the proxy serves): every request is refused 404, its body
		// bounded by the defaults.
		s.preIdle, s.preTotal = DefaultBodyIdleTimeout, DefaultBodyTimeout
	}
	return s
}

// InFlight is how many barrier writes this proxy has admitted and not yet
// finished or abandoned.
func (p *Proxy) InFlight() int64 { return p.inflight.Load() }

// ctxKey carries a request's barrier write from ServeHTTP to ModifyResponse.
type ctxKey struct{}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// One table for the whole request: a reload swaps the holder, never
	// the entry a request already matched.
	s := p.load()
	// Bound the body before anything can answer without reading it:
	// net/http then reads the rest (up to 256 KiB) itself, under the
	// connection's read deadline, which without this is none. Until the
	// entry is known the strictest entry's bounds apply.
	var body *deadlineBody
	if r.Body != nil && r.Body != http.NoBody && !p.o.skipBodyBounds {
		body = newDeadlineBody(w, r.Body, s.preIdle, start.Add(s.preTotal))
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
	// another entry than the one matched: refuse it before routing.
	if err := fencecheck.CheckPath(r.URL.EscapedPath()); err != nil {
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: non-canonical path refused", errAttr(err))
		http.Error(w, "non-canonical request path", http.StatusBadRequest)
		return
	}
	if err := fencecheck.CheckTarget(r.RequestURI); err != nil && !p.o.skipTarget {
		// Go's server keeps a raw '#' in the path ("/orders/42#x"): no
		// client sends one, and the edges that cut there would check
		// another key than the upstream writes. Refused here for every
		// method, like a non-canonical path.
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: request target with a byte no client sends refused", errAttr(err))
		http.Error(w, "request target holds a byte no client sends", http.StatusBadRequest)
		return
	}
	in := p.input(r).WithMethods() // the method readings once, for the match and the check
	// The table's own matcher, as every edge matches: host (canonical),
	// path (and every reading of it an upstream may apply), method (and
	// every reading of it: case, override headers, _method).
	e, err := p.o.match(s.table, r.Host, in)
	if err != nil {
		p.refuseUnroutable(w, r, s.table, in, err)
		return
	}
	rt := s.up[e]
	if rt == nil {
		// No entry, or one without an upstream (an authz edge's entry, or
		// one this proxy does not serve): the proxy has nowhere to send
		// it, and no other entry may take it under weaker options.
		name := ""
		if e != nil {
			name = e.Name
		}
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: no upstream for the request's route table entry", slog.String("route", name))
		http.Error(w, "no route", http.StatusNotFound)
		return
	}
	if body != nil {
		body.idle, body.end = rt.bodyIdle, start.Add(rt.bodyTotal)
		_ = body.arm() // it worked a moment ago on this connection
	}

	if name := methodOverride(r.Header); name != "" && !p.o.skipHeaders {
		// An upstream that honours the override would run another method
		// than the request's; the check reads every override as a method
		// too (fencecheck.Input.Methods), but the proxy forwards none.
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: method override refused", slog.String("route", rt.name()))
		http.Error(w, "method override headers are not allowed", http.StatusBadRequest)
		return
	}
	req, kerr := rt.compiled.Request(in)
	if kerr != nil {
		// An empty key is denied 400 malformed without a store read.
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: key template did not expand", slog.String("route", rt.name()), errAttr(kerr))
	}
	if wantsUpgrade(r) {
		// After a 101 the client and the upstream talk directly, for as
		// long as they like: writes sent down the tunnel are never
		// checked, and a holder that lost its lock could go on writing
		// under its old fence. A fenced write is one exchange.
		switch {
		case !rt.upgrade:
			p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: protocol upgrade refused", slog.String("route", rt.name()))
			http.Error(w, "protocol upgrades are not allowed on this route", http.StatusBadRequest)
			return
		case req.Write && rt.compiled.Policy != fencecheck.PolicyOff:
			p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: protocol upgrade on a fenced write refused", slog.String("route", rt.name()))
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
	if p.o.maxWriteFromArrival {
		admitted = start
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), admitted.Add(rt.maxWrite()))
	defer cancel()
	if body != nil {
		// The wait at the barrier read nothing: the body's bounds count
		// from the admission, as the exchange's does.
		body.idle, body.end = rt.bodyIdle, admitted.Add(rt.bodyTotal)
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

// refuseUnroutable answers a request the table cannot route
// (routes.Table.MatchRequest's error: a path or method that selects another
// entry when read another way, a malformed Host where entries name hosts):
// 400 malformed, with a decision id and an audit event, as every edge
// refuses such a write (routes.Table.Refuse). A read is refused too: the
// other edges let it pass to whatever the proxy in front picks, but here the
// proxy is what picks, and it has no one entry to send it to.
func (p *Proxy) refuseUnroutable(w http.ResponseWriter, r *http.Request, t *routes.Table, in fencecheck.Input, err error) {
	req := t.Refuse(in)
	req.Write = true
	dec, _ := p.checker.Check(r.Context(), req)
	p.log.LogAttrs(r.Context(), slog.LevelDebug, "proxy: request has no one route table entry; refused",
		errAttr(err), slog.String("decisionId", dec.DecisionID))
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

// input is r as every edge hands a request to the table and the check
// (routes.Table.MatchRequest, fencecheck.Route.Request). net/http keeps
// every copy of a header, so a comma in a key is the key's own.
func (p *Proxy) input(r *http.Request) fencecheck.Input {
	h := r.Header
	path := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery // for the _method parameter (fencecheck.Input.Overrides)
	}
	return fencecheck.Input{
		Method: r.Method, Path: path,
		Header: h.Get, Count: func(lc string) int { return len(h.Values(lc)) },
		Peer: p.clientAddr(r), Source: Source, CanFinish: true, Trusted: true,
	}
}

// clientAddr is the client: the audit's peer and the barrier's per-client
// waiter share (fencecheck). Without trustForwarded the TCP peer; with it,
// the last X-Forwarded-For entry, the one the trusted proxy in front
// appended (the earlier entries are whatever the client sent, so keying
// the share on them would let one client be any number of clients).
func (p *Proxy) clientAddr(r *http.Request) string {
	if p.o.TrustForwarded {
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

// rewrite builds the upstream request: the entry's upstream URL,
// X-Forwarded-*, and the fence headers the upstream may rely on.
func (p *Proxy) rewrite(rt *upstream) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		if !p.o.skipHeaders {
			rt.headers.strip(pr.Out.Header)
		}
		if p.o.TrustForwarded {
			// ReverseProxy drops the client's X-Forwarded-* before
			// Rewrite; a trusted chain keeps its hops.
			if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
				pr.Out.Header["X-Forwarded-For"] = append([]string(nil), prior...)
			}
		}
		pr.SetURL(rt.url)
		pr.SetXForwarded()
		if p.o.TrustForwarded {
			for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v := pr.In.Header.Get(h); v != "" {
					pr.Out.Header.Set(h, v)
				}
			}
		}
		if rt.preserveHost {
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
	res.Body = &completionBody{rc: res.Body, bw: ex.bw, ctx: res.Request.Context(), drain: p.o.DrainLimit}
	return nil
}

func (p *Proxy) errorHandler(rt *upstream) func(http.ResponseWriter, *http.Request, error) {
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
		if p.o.skipLogBounds {
			ea = slog.Any("error", err)
		}
		p.warn.log(r.Context(), p.log, level, msg,
			slog.String("route", rt.name()), slog.String("upstream", rt.url.Redacted()), ea)
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
