package authz

import (
	"context"
	"errors"
	"log/slog"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/routes"
)

// Sources name the transport in audit events.
const (
	SourceGRPC = "authz-grpc"
	SourceHTTP = "authz-http"
)

// Options configure the transports. The zero value is usable.
type Options struct {
	// Logger logs misconfigured routes and failed checks, never a raw key,
	// fence or lockId above debug; nil is slog.Default().
	Logger *slog.Logger
	// Authenticate, when set, guards forward-auth: every request must
	// carry a credential in Proxy-Authorization (HeaderCredential), which
	// Authenticate turns into the keys the caller may check, or into
	// ErrUnauthenticated (401) or ErrForbidden (403). Such a caller is
	// trusted. nil: forward-auth answers whoever reaches it (auth off).
	Authenticate func(credential string) (KeyScope, error)
	// TrustLoopback trusts callers connecting from a loopback address (the
	// same host or pod) as the operator's proxy (config
	// check.trustLoopback; off by default). 127.0.0.6, where Istio's
	// sidecar connects every inbound caller from, is never trusted. Off,
	// only a gRPC caller with a verified client certificate, or a
	// forward-auth caller with a credential, is trusted. Only a trusted
	// caller may name a table entry (fence_route), send inline options
	// over a table, or ask for the write barrier.
	TrustLoopback bool
	// Routes, when it holds a table (config routes:), governs requests as
	// resolve says; the owner swaps the table on reload. nil, empty or
	// proxy-only (routes.Table.ProxyOnly: proxy.routes alone, the proxy's
	// table): every request takes its caller's options.
	Routes *routes.Holder

	// exactMethod: the decider's; trustSidecar trusts 127.0.0.6 like any
	// loopback peer, as before #26 (tests only: broken variants).
	exactMethod, trustSidecar bool
}

// requestView is what both transports extract from their wire format.
type requestView struct {
	method string
	// methodUnknown: the proxy named the original URI but not its method;
	// the request is checked as a write whatever the route's methods say.
	methodUnknown bool
	host          string                 // the original request's host (any port), for the route table
	path          string                 // may carry a query string; it is cut off here
	header        func(lc string) string // by lowercase name: the value (one copy)
	count         func(lc string) int    // by lowercase name: how many copies the request carried
	peer          string
	source        string
	// canFinish: the transport sees the upstream's response and reports
	// completion (ext_proc), so a route may ask for the write barrier.
	canFinish bool
	// caller is who asks: whether it is trusted, which keys it may check.
	caller caller
}

// input is the view as fencecheck.Route.Request reads it. Every authz
// transport hands over duplicate headers joined with commas (Envoy's
// headers map, nginx's $http_ variables), so a comma in a key header
// cannot be told from two keys.
func (v requestView) input(trusted bool) fencecheck.Input {
	return fencecheck.Input{
		Method: v.method, MethodUnknown: v.methodUnknown, Path: v.path,
		Header: v.header, Count: v.count, CommaJoined: true,
		Peer: v.peer, Source: v.source, CanFinish: v.canFinish, Trusted: trusted,
	}
}

// decider turns a requestView and a route's options into a fencecheck
// Request and decides it. It is shared by the gRPC and HTTP transports so
// that both read the same inputs the same way.
type decider struct {
	checker       *fencecheck.Checker
	log           *slog.Logger
	authenticate  func(string) (KeyScope, error)
	trustLoopback bool
	routes        *routes.Holder
	inline        *routeCache
	// exactMethod matches the table on the method as sent alone: the
	// broken variant (before #26) the tests show caught; never set
	// otherwise.
	exactMethod bool
	// trustSidecar: Options' (tests only).
	trustSidecar bool
}

func newDecider(c *fencecheck.Checker, o Options) decider {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return decider{checker: c, log: o.Logger, authenticate: o.Authenticate, trustLoopback: o.TrustLoopback,
		routes: o.Routes, inline: newRouteCache(routeCacheSize), exactMethod: o.exactMethod, trustSidecar: o.trustSidecar}
}

// resolve picks the route governing a request (#20), in order: the table
// entry a trusted caller names (fence_route); a trusted caller's inline
// options; the table entry the request's host, path and method match.
// Without a table every caller's options apply, as before the table. With
// one, a caller that is not trusted cannot choose or override an entry:
// its options are ignored (under check.unmatchedWrites: defaults, they
// govern the requests no entry matches). refuse: a path the table cannot
// route (not canonical, a raw '#', or a path or method that selects
// another entry when read another way).
func (d decider) resolve(tbl *routes.Table, v requestView, ro routeOptions) (rt *fencecheck.Route, refuse error) {
	if tbl == nil || tbl.ProxyOnly() { // proxy.routes alone: the proxy's table, not ours
		return d.inline.get(ro), nil
	}
	if v.caller.trusted {
		if e := tbl.Named(ro.name); e != nil {
			return e.Route, nil
		}
		if ro.inline() {
			return d.inline.get(ro), nil
		}
	}
	// Every reading of the method (its case, an override header or
	// _method parameter): readings that select different entries select
	// none (routes.ErrAmbiguousMethod), so a client cannot pick a weaker
	// entry by spelling the method another way.
	e, err := tbl.MatchRequest(v.host, v.input(v.caller.trusted))
	if d.exactMethod {
		e, err = tbl.MatchMethods(v.host, v.path, []string{v.method})
	}
	switch {
	case err != nil:
		return nil, err
	case e != nil:
		return e.Route, nil
	case tbl.Unmatched() == routes.UnmatchedDefaults:
		return d.inline.get(ro), nil
	}
	return tbl.NoRoute(), nil
}

func (d decider) decide(ctx context.Context, v requestView, ro routeOptions) (fencecheck.Decision, error) {
	// One table for the whole request: a reload swaps the holder, never
	// the table a request already resolved against.
	tbl := d.routes.Load()
	rt, refuse := d.resolve(tbl, v, ro)
	var req fencecheck.Request
	if refuse != nil {
		req = tbl.Refuse(v.input(v.caller.trusted))
		if req.Write {
			d.log.LogAttrs(ctx, slog.LevelDebug, "authz: the route table cannot route this path; writes refused", slog.Any("error", refuse))
		}
	} else {
		var kerr error
		// Trust is who calls, never which route: a table entry's barrier
		// from an untrusted caller is refused like its own (a dropped
		// ext_proc stream would leave an entry holding the key's next
		// holder back for maxWrite).
		req, kerr = rt.Request(v.input(v.caller.trusted))
		if kerr != nil {
			level := slog.LevelDebug
			if errors.Is(kerr, fencecheck.ErrBadTemplate) || errors.Is(kerr, fencecheck.ErrRouteOption) {
				level = slog.LevelWarn // the route's configuration, not the client
			}
			d.log.LogAttrs(ctx, level, "authz: fence_key did not expand", slog.String("route", rt.Name), slog.Any("error", kerr))
		} else if req.Ambiguous && req.Write {
			d.log.LogAttrs(ctx, slog.LevelDebug, "authz: a fence input header was sent more than once", slog.String("route", rt.Name))
		}
	}
	if req.Write && v.caller.scope != nil {
		// A key the backend would refuse is the checker's to answer
		// (malformed); a valid key outside the credential's prefixes is
		// refused here, before any store read or audit event.
		if nk, err := lockstore.NormalizeKey(req.Key); err == nil && !v.caller.scope(nk) {
			return fencecheck.Decision{}, errKeyOutOfScope
		}
	}
	return d.checker.Check(ctx, req)
}

func denialJSON(dec fencecheck.Decision) []byte { return fencecheck.DenialJSON(dec) }
