package authz

import (
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fencecheck"
)

// HTTPPath is where the forward-auth handler is mounted, with every path
// under it (Envoy's http_service appends the original path).
const HTTPPath = "/v1/authz/check"

// Headers of the HTTP forward-auth convention.
const (
	// Route options as request headers, for proxies that set per-location
	// headers on the auth request (nginx proxy_set_header, Envoy
	// authorization_request.headers_to_add). A proxy that forwards client
	// headers to the auth request must overwrite or clear these.
	HeaderRouteKey     = "x-fence-route-key"
	HeaderRouteHeader  = "x-fence-route-header"
	HeaderRoutePolicy  = "x-fence-route-policy"
	HeaderRouteMode    = "x-fence-route-mode"
	HeaderRouteMethods = "x-fence-route-methods"
	HeaderRouteName    = "x-fence-route-name"

	// HeaderAuthRequest selects a proxy's status mapping. "nginx": nginx's
	// auth_request passes only 2xx, 401 and 403, so every denial is answered
	// 403 and the real status, and the JSON body, travel in HeaderStatus and
	// HeaderBody for the shipped nginx config to replay.
	HeaderAuthRequest = "x-fence-auth-request"
	HeaderStatus      = "x-fence-status"
	HeaderBody        = "x-fence-body"
)

// HTTPHandler is the forward-auth endpoint: the same decision as the gRPC
// server, over plain HTTP.
//
// The original request is read, in order of precedence, from
// X-Forwarded-Method/X-Forwarded-Uri (Caddy, Traefik),
// X-Original-Method/X-Original-URI (nginx), or the request itself with the
// HTTPPath prefix stripped (Envoy http_service). A URI header without its
// method header leaves the method unknown, and the request is checked as a
// write (never as the auth request's own GET), with a warning naming the
// proxy config. Route options come from the
// X-Fence-Route-* headers and, when the original URI came from a header
// (so that the auth request's own query is the proxy's, not the client's),
// from query parameters named like the context_extensions (fence_key, …),
// which win over the headers.
//
// Allowed: 200 with x-fence-verified (a checked write) and
// x-fence-decision-id. Denied: the reason's status, x-fence-reason,
// x-fence-decision-id and the JSON body of API.md.
type HTTPHandler struct {
	d decider
}

var _ http.Handler = (*HTTPHandler)(nil)

// NewHTTPHandler returns the forward-auth handler deciding with c.
func NewHTTPHandler(c *fencecheck.Checker, o Options) *HTTPHandler {
	return &HTTPHandler{d: newDecider(c, o)}
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v, trustedQuery := originalRequest(r)
	if v.methodUnknown {
		h.d.log.LogAttrs(r.Context(), slog.LevelWarn,
			"authz: the auth request names the original URI but not its method; checking it as a write. "+
				"The proxy config should send the method header (X-Original-Method with X-Original-URI, "+
				"X-Forwarded-Method with X-Forwarded-Uri)")
	}
	ro := routeOptions{
		key:     r.Header.Get(HeaderRouteKey),
		header:  r.Header.Get(HeaderRouteHeader),
		policy:  r.Header.Get(HeaderRoutePolicy),
		mode:    r.Header.Get(HeaderRouteMode),
		methods: r.Header.Get(HeaderRouteMethods),
		name:    r.Header.Get(HeaderRouteName),
	}
	if trustedQuery {
		q := r.URL.Query()
		for name, dst := range map[string]*string{ExtKey: &ro.key, ExtHeader: &ro.header, ExtPolicy: &ro.policy,
			ExtMode: &ro.mode, ExtMethods: &ro.methods, ExtRoute: &ro.name} {
			if val := q.Get(name); val != "" {
				*dst = val
			}
		}
	}
	dec, _ := h.d.decide(r.Context(), v, ro)

	hd := w.Header()
	hd.Set("Cache-Control", "no-store") // an auth answer is for this request only
	if dec.DecisionID != "" {
		hd.Set(HeaderDecisionID, dec.DecisionID)
	}
	if dec.Allowed {
		if verified(dec) {
			hd.Set(HeaderVerified, dec.Presented)
		}
		if dec.WouldDeny {
			hd.Set(HeaderWouldDeny, string(dec.Reason))
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	body := denialJSON(dec)
	status := dec.Status
	hd.Set("Content-Type", "application/json")
	hd.Set(HeaderReason, string(dec.Reason))
	if strings.EqualFold(r.Header.Get(HeaderAuthRequest), "nginx") {
		hd.Set(HeaderStatus, strconv.Itoa(status))
		hd.Set(HeaderBody, asciiJSON(body))
		status = http.StatusForbidden
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// originalRequest recovers the request the proxy is asking about, and
// whether the auth request's own query string is the proxy's (true when
// the original URI came from a header).
func originalRequest(r *http.Request) (requestView, bool) {
	v := requestView{
		header: func(lc string) string { return r.Header.Get(lc) },
		peer:   clientAddr(r),
		source: SourceHTTP,
	}
	for _, conv := range [...][2]string{
		{"X-Forwarded-Method", "X-Forwarded-Uri"},
		{"X-Original-Method", "X-Original-Uri"},
	} {
		m, u := r.Header.Get(conv[0]), r.Header.Get(conv[1])
		if m == "" && u == "" {
			continue
		}
		v.method, v.path = m, u
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
		return v, true
	}
	v.method = r.Method
	v.path = r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(v.path, HTTPPath); ok && (rest == "" || rest[0] == '/') {
		v.path = rest
	}
	if v.path == "" {
		v.path = "/"
	}
	return v, false
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
