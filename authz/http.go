package authz

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/tracing"
)

// HTTPPath is where the forward-auth handler is mounted, with every path
// under it (Envoy's http_service appends the original path).
const HTTPPath = "/v1/authz/check"

// HTTPHandler is the forward-auth endpoint: the same decision as the gRPC
// server, over plain HTTP.
//
// The original request is read, in order of precedence, from
// X-Forwarded-Method/X-Forwarded-Uri (Caddy, Traefik),
// X-Original-Method/X-Original-URI (nginx), or the request itself with the
// HTTPPath prefix stripped (Envoy http_service). A URI header without its
// method header leaves the method unknown, and the request is checked as a
// write (never as the auth request's own GET), with a warning naming the
// proxy config.
//
// Where route options come from depends on who can write them:
//   - X-Forwarded-* (Caddy forward_auth, Traefik forwardAuth): only the
//     auth request's query string, named like the context_extensions
//     (fence_key, fence_policy, …), which the operator writes in the
//     forward_auth URL. These proxies copy every client header to the auth
//     request, so X-Fence-Route-* headers are the client's and are
//     ignored. A query identical to the original URI's is the client's own
//     (Caddy keeps it when the forward_auth uri has no query) and is
//     ignored too, with a warning: give the uri a query of its own.
//   - X-Original-* (nginx): the X-Fence-Route-* headers, which the shipped
//     config sets itself after passing no client header, and the query
//     parameters, which win over the headers.
//   - the request itself (Envoy http_service): the X-Fence-Route-* headers
//     (headers_to_add overrides the client's; never list x-fence-route-*,
//     x-forwarded-* or x-original-* in allowed_headers). The query is the
//     client's and is never read.
//
// Allowed: 200 with x-fence-verified (a checked write) and
// x-fence-decision-id. Denied: the reason's status, x-fence-reason,
// x-fence-decision-id and the JSON body of docs/api.md.
type HTTPHandler struct {
	d decider
}

var _ http.Handler = (*HTTPHandler)(nil)

// NewHTTPHandler returns the forward-auth handler deciding with c.
func NewHTTPHandler(c *fencecheck.Checker, o Options) *HTTPHandler {
	return &HTTPHandler{d: newDecider(c, o)}
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who := httpCaller(r, h.d.trustLoopback, h.d.trustSidecar)
	if h.d.authenticate != nil {
		// Before anything is read or decided: a caller without the
		// credential learns nothing and costs no store read, no audit event.
		scope, err := h.d.authenticate(r.Header.Get(HeaderCredential))
		if err != nil {
			writeCredentialError(w, r, err)
			return
		}
		who = caller{trusted: true, scope: scope}
	}
	v, conv := originalRequest(r)
	v.caller = who
	if v.methodUnknown {
		h.d.log.LogAttrs(r.Context(), slog.LevelWarn,
			"authz: the auth request does not name the original request's method (no method header); checking it as a write. "+
				"The proxy config should send the method and URI headers (X-Original-Method with X-Original-URI, "+
				"X-Forwarded-Method with X-Forwarded-Uri), or, as Envoy's http_service does, the original path after "+HTTPPath)
	}
	var ro routeOptions
	if conv != convForwarded {
		// nginx (whose shipped config passes no client header and sets
		// these itself) and Envoy http_service (whose headers_to_add
		// override the client's): the headers are the route's.
		ro = routeOptions{
			key:     r.Header.Get(fencewire.HeaderRouteKey),
			header:  r.Header.Get(fencewire.HeaderRouteHeader),
			policy:  r.Header.Get(fencewire.HeaderRoutePolicy),
			mode:    r.Header.Get(fencewire.HeaderRouteMode),
			methods: r.Header.Get(fencewire.HeaderRouteMethods),
			name:    r.Header.Get(fencewire.HeaderRouteName),
			barrier: r.Header.Get(fencewire.HeaderRouteBarrier),
			proof:   r.Header.Get(fencewire.HeaderRouteProof),
		}
	}
	trustedQuery := conv != convRequest
	if conv == convForwarded && r.URL.RawQuery != "" && r.URL.RawQuery == uriQuery(v.path) {
		// Caddy's forward_auth keeps the client's query when its uri has
		// none, so this query may be the client's; or the client copied
		// the operator's query into its own request. Either way the route's
		// options cannot be told from the client's: falling back to the
		// defaults would let a client drop fence_proof=signed or a key
		// template, so writes fail closed.
		trustedQuery = false
		ro.err = errAmbiguousRouteQuery
		h.d.log.LogAttrs(r.Context(), slog.LevelWarn,
			"authz: the auth request's query equals the client's own; its writes fail closed. "+
				"Put the route options in the forward_auth uri's query (at least ?fence_route=NAME)")
	}
	if trustedQuery {
		q := r.URL.Query()
		for name, dst := range map[string]*string{fencewire.ExtKey: &ro.key, fencewire.ExtHeader: &ro.header, fencewire.ExtPolicy: &ro.policy,
			fencewire.ExtMode: &ro.mode, fencewire.ExtMethods: &ro.methods, fencewire.ExtRoute: &ro.name, fencewire.ExtBarrier: &ro.barrier, fencewire.ExtMaxWrite: &ro.maxWrite, fencewire.ExtProof: &ro.proof, fencewire.ExtMaxWait: &ro.maxWait} {
			if val := q.Get(name); val != "" {
				*dst = val
			}
		}
	}
	dec, err := h.d.decide(tracing.FromHTTP(r.Context(), r.Header), v, ro)
	if errors.Is(err, errKeyOutOfScope) {
		writeCredentialError(w, r, err)
		return
	}

	hd := w.Header()
	hd.Set("Cache-Control", "no-store") // an auth answer is for this request only
	if dec.DecisionID != "" {
		hd.Set(fencewire.HeaderDecisionID, dec.DecisionID)
	}
	if dec.Allowed {
		if verified(dec) {
			hd.Set(fencewire.HeaderVerified, dec.Presented)
		}
		if dec.WouldDeny {
			hd.Set(fencewire.HeaderWouldDeny, string(dec.Reason))
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	body := denialJSON(dec)
	status := dec.Status
	for _, kv := range fencecheck.DenialHeaders(dec) {
		hd.Set(kv[0], kv[1]) // content type, reason, decision id, Retry-After
	}
	if strings.EqualFold(r.Header.Get(fencewire.HeaderAuthRequest), "nginx") {
		// The body as it is: encoding/json escapes every control byte, so
		// it fits a header as one line, and the shipped config replays it
		// byte for byte (non-ASCII as UTF-8, which nginx passes through).
		hd.Set(fencewire.HeaderStatus, strconv.Itoa(status))
		hd.Set(fencewire.HeaderBody, string(body))
		status = http.StatusForbidden
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// convention says where the original request came from.
type convention int

const (
	convRequest   convention = iota // the auth request itself (Envoy http_service)
	convForwarded                   // X-Forwarded-Method/-Uri (Caddy, Traefik)
	convOriginal                    // X-Original-Method/-URI (nginx)
)

// uriQuery is the raw query of a request URI ("" when none).
func uriQuery(uri string) string {
	if i := strings.IndexByte(uri, '#'); i >= 0 {
		uri = uri[:i]
	}
	if _, q, ok := strings.Cut(uri, "?"); ok {
		return q
	}
	return ""
}

// originalRequest recovers the request the proxy is asking about, and the
// convention that named it.
func originalRequest(r *http.Request) (requestView, convention) {
	v := requestView{
		header: func(lc string) string { return r.Header.Get(lc) },
		count:  func(lc string) int { return len(r.Header.Values(lc)) },
		peer:   clientAddr(r),
		source: SourceHTTP,
	}
	for _, c := range [...]struct {
		conv                          convention
		method, uriHeader, hostHeader string
	}{
		{convForwarded, "X-Forwarded-Method", "X-Forwarded-Uri", "X-Forwarded-Host"},
		{convOriginal, "X-Original-Method", "X-Original-Uri", "X-Original-Host"},
	} {
		m, u := r.Header.Get(c.method), r.Header.Get(c.uriHeader)
		if m == "" && u == "" {
			continue
		}
		v.method, v.path = m, u
		// Not the auth request's own Host: the proxy addressed that to
		// fencegate. Without the header, where entries name hosts, the
		// table refuses writes (routes.ErrBadHost).
		v.host = r.Header.Get(c.hostHeader)
		if v.method == "" && u != "" {
			// Not the auth request's own method: nginx's auth subrequest
			// is always GET, so every write would pass as a read. The
			// method is unknown, and an unknown method is a write.
			v.methodUnknown = true
		} else if v.method == "" {
			v.method = r.Method
		}
		if v.path == "" {
			v.path = "/"
		}
		return v, c.conv
	}
	v.method, v.host = r.Method, r.Host
	// The request target as sent, not r.URL.EscapedPath(): that re-encodes
	// a path it finds invalidly encoded (raw UTF-8, say), so the key
	// template would judge another spelling than the upstream receives.
	v.path = r.URL.EscapedPath()
	query := ""
	if strings.HasPrefix(r.RequestURI, "/") {
		v.path, query, _ = strings.Cut(r.RequestURI, "?")
	}
	if rest, ok := strings.CutPrefix(v.path, HTTPPath); ok && (rest == "" || rest[0] == '/') {
		v.path = rest
	}
	if v.path != "" && query != "" {
		// The query is the client's: never route options, but read for a
		// _method override (fencecheck.Input.Overrides).
		v.path += "?" + query
	}
	if v.path == "" {
		// Envoy's http_service always appends the original path to its
		// path_prefix, so a bare /v1/authz/check with neither convention's
		// headers is another proxy that names no original request (an
		// nginx auth_request without X-Original-*, whose subrequest is
		// always GET): its own method says nothing, and an unknown method
		// is a write.
		v.path, v.methodUnknown = "/", true
	}
	return v, convRequest
}

// clientAddr is the client as the proxy saw it, for audit only (never for
// a decision): the first X-Forwarded-For hop, X-Real-Ip, or the peer.
func clientAddr(r *http.Request) string {
	if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
		first, _, _ := strings.Cut(xff, ",")
		return strings.TrimSpace(first)
	}
	if ip := r.Header.Get("X-Real-Ip"); ip != "" {
		return ip
	}
	if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return net.JoinHostPort(host, port)
	}
	return r.RemoteAddr
}

// errAmbiguousRouteQuery: with X-Forwarded-* the route options come from
// the auth URL's query, and this one is identical to the client's own.
var errAmbiguousRouteQuery = errors.New("authz: the forward-auth query equals the client's request query, so the route's options cannot be told from the client's")

// writeCredentialError answers a forward-auth request refused before any
// decision: 401 without a valid credential, 403 for a credential that may
// not call forward-auth or check this key. The body is the lock API's
// error body (code AuthFailed); there is no decision id, and no audit
// event. nginx's auth_request passes both statuses through as they are.
func writeCredentialError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg, hint := http.StatusUnauthorized, "forward-auth needs a token with the check operation in "+HeaderCredential, "invalid_token"
	switch {
	case errors.Is(err, ErrForbidden):
		status, msg, hint = http.StatusForbidden, "this token may not call forward-auth (it lacks the check operation)", "insufficient_scope"
	case errors.Is(err, errKeyOutOfScope):
		status, msg, hint = http.StatusForbidden, "this token has no scope for the key", "insufficient_scope"
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Type", "application/json")
	hd.Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusUnauthorized {
		// Proxy-Authenticate would be the header for Proxy-Authorization,
		// but it belongs with 407, which no auth_request proxy passes.
		hd.Set("WWW-Authenticate", `Bearer realm="fencegate-check", error="`+hint+`"`)
	}
	body := fmt.Sprintf(`{"error":{"code":"AuthFailed","message":%q}}`, msg)
	if status == http.StatusForbidden && strings.EqualFold(r.Header.Get(fencewire.HeaderAuthRequest), "nginx") {
		// nginx passes a 403 without its body: the shipped config replays
		// this one, as every denial's.
		hd.Set(fencewire.HeaderStatus, strconv.Itoa(status))
		hd.Set(fencewire.HeaderBody, body)
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body+"\n")
}
