package authz

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// TestHTTPConventions: the same decisions through each proxy's way of
// naming the original request, over a real HTTP server and bolt store.
func TestHTTPConventions(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	old := locktest.Acquire(t, s, "orders/7", time.Minute)
	locktest.Release(t, s, old.LockID)
	cur := locktest.Acquire(t, s, "orders/7", time.Minute)

	srv := httptest.NewServer(NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), Options{}))
	defer srv.Close()

	type conv struct {
		name string
		// req builds the auth request for the original method and URI.
		req func(method, uri string) *http.Request
	}
	convs := []conv{
		// Route options where each proxy puts them: Caddy and Traefik in
		// the forward_auth URL's query (they copy client headers), nginx
		// and Envoy as X-Fence-Route-* headers they set themselves.
		{"forwarded (Caddy, Traefik)", func(m, u string) *http.Request {
			r, _ := http.NewRequest("GET", srv.URL+HTTPPath+"?fence_key=orders/{2}&fence_route=orders", nil)
			r.Header.Set("X-Forwarded-Method", m)
			r.Header.Set("X-Forwarded-Uri", u)
			return r
		}},
		{"original (nginx)", func(m, u string) *http.Request {
			r, _ := http.NewRequest("GET", srv.URL+HTTPPath, nil)
			r.Header.Set("X-Original-Method", m)
			r.Header.Set("X-Original-URI", u)
			r.Header.Set(fencewire.HeaderRouteKey, "orders/{2}")
			r.Header.Set(fencewire.HeaderRouteName, "orders")
			return r
		}},
		{"request itself (Envoy http_service)", func(m, u string) *http.Request {
			r, _ := http.NewRequest(m, srv.URL+HTTPPath+u, nil)
			r.Header.Set(fencewire.HeaderRouteKey, "orders/{2}")
			r.Header.Set(fencewire.HeaderRouteName, "orders")
			return r
		}},
	}
	tests := []struct {
		name     string
		method   string
		uri      string
		fence    string
		status   int
		reason   string
		verified string
	}{
		{"read", "GET", "/orders/7", "", 200, "", ""},
		{"current", "POST", "/orders/7?x=1", cur.Fence, 200, "", cur.Fence},
		{"stale", "PUT", "/orders/7", old.Fence, 409, "stale", ""},
		{"missing", "DELETE", "/orders/7", "", 428, "missing", ""},
		{"malformed", "PATCH", "/orders/7", "abc", 400, "malformed", ""},
		{"missing segment", "PATCH", "/orders", cur.Fence, 400, "malformed", ""},
	}
	for _, c := range convs {
		for _, tc := range tests {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				req := c.req(tc.method, tc.uri)
				if tc.fence != "" {
					req.Header.Set(fencewire.HeaderToken, tc.fence)
				}
				req.Header.Set(fencewire.HeaderVerified, "forged") // must never come back as verified
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
				}
				if got := resp.Header.Get(fencewire.HeaderVerified); got != tc.verified {
					t.Fatalf("%s = %q, want %q", fencewire.HeaderVerified, got, tc.verified)
				}
				if tc.reason == "" {
					return
				}
				if resp.Header.Get(fencewire.HeaderReason) != tc.reason || resp.Header.Get(fencewire.HeaderDecisionID) == "" {
					t.Fatalf("headers %v", resp.Header)
				}
				var body denialBody
				if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
					t.Fatal(err)
				}
				if body.Error != tc.reason || body.DecisionID != resp.Header.Get(fencewire.HeaderDecisionID) || body.Presented != tc.fence {
					t.Fatalf("body %+v", body)
				}
				if tc.reason == "stale" && (body.Key != "orders/7" || body.Current != cur.Fence) {
					t.Fatalf("body %+v", body)
				}
			})
		}
	}
}

// TestHTTPQueryOptions: route options in the auth request's query are
// honoured only when the original URI came from a header; with Envoy's
// http_service the query is the client's own and must not switch the
// check off.
func TestHTTPQueryOptions(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), Options{})

	// nginx style: the proxy wrote the query; policy off is honoured.
	r := httptest.NewRequest("GET", HTTPPath+"?fence_policy=off", nil)
	r.Header.Set("X-Original-Method", "POST")
	r.Header.Set("X-Original-URI", "/a")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("proxy's own fence_policy=off: %d", w.Code)
	}

	// Envoy style: the client wrote the query; it is ignored.
	r = httptest.NewRequest("POST", HTTPPath+"/a?fence_policy=off&fence_key=a", nil)
	r.Header.Set(fencewire.HeaderKey, "a")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 428 {
		t.Fatalf("client's fence_policy=off in the original query: %d, want 428", w.Code)
	}

	// Which path the check sees: HTTPPath is stripped only as a whole
	// segment prefix. The key template {1} names the first segment of
	// what remains, and a fence nobody was issued is denied "unknown" with
	// that key in the body (no segment at all is 400 malformed).
	for _, tc := range []struct {
		path, key string
		status    int
	}{
		{HTTPPath, "", 400},             // the original path is "/"
		{HTTPPath + "/", "", 400},       // likewise
		{HTTPPath + "/a/b", "a", 409},   // stripped: /a/b
		{HTTPPath + "x/y", "v1", 409},   // a look-alike is not stripped: /v1/authz/checkx/y
		{"/v1/authz/chec/k", "v1", 409}, // nor is a shorter one
		{HTTPPath + "/v1/x", "v1", 409}, // stripped once, not twice
		{HTTPPath + "/c%2Fd", "", 400},  // the stripped path is checked like any other
	} {
		r = httptest.NewRequest("PUT", tc.path, nil)
		r.Header.Set(fencewire.HeaderRouteKey, "{1}")
		r.Header.Set(fencewire.HeaderToken, "000000000000009")
		w = httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var body denialBody
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: body %q: %v", tc.path, w.Body.Bytes(), err)
		}
		if w.Code != tc.status || body.Key != tc.key {
			t.Errorf("%s: %d key %q, want %d key %q", tc.path, w.Code, body.Key, tc.status, tc.key)
		}
	}
}

// TestHTTPNginxMapping: with x-fence-auth-request: nginx every denial is a
// 403 carrying the real status and body in headers.
func TestHTTPNginxMapping(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	old := locktest.Acquire(t, s, "k", time.Minute)
	locktest.Release(t, s, old.LockID)
	locktest.Acquire(t, s, "k", time.Minute)
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), Options{})
	for _, tc := range []struct {
		key, fence string
		status     int
	}{{"k", old.Fence, 409}, {"k", "", 428}, {"ключ", "000000000000001", 409}} {
		r := httptest.NewRequest("GET", HTTPPath, nil)
		r.Header.Set("X-Original-Method", "POST")
		r.Header.Set("X-Original-URI", "/k")
		r.Header.Set(fencewire.HeaderAuthRequest, "nginx")
		r.Header.Set(fencewire.HeaderKey, tc.key)
		if tc.fence != "" {
			r.Header.Set(fencewire.HeaderToken, tc.fence)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 403 || w.Header().Get(fencewire.HeaderStatus) != strconv.Itoa(tc.status) {
			t.Fatalf("%+v: code %d, %s %q", tc, w.Code, fencewire.HeaderStatus, w.Header().Get(fencewire.HeaderStatus))
		}
		// The header carries the body byte for byte (the shipped config
		// replays it), on one line: encoding/json escapes control bytes.
		hb := w.Header().Get(fencewire.HeaderBody)
		if hb != w.Body.String() || strings.ContainsAny(hb, "\r\n") {
			t.Fatalf("header body %q, body %q", hb, w.Body.String())
		}
		var fromHeader, fromBody denialBody
		if err := json.Unmarshal([]byte(hb), &fromHeader); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &fromBody); err != nil {
			t.Fatal(err)
		}
		if fromHeader != fromBody || fromBody.Key != tc.key {
			t.Fatalf("header body %+v != body %+v", fromHeader, fromBody)
		}
	}
}

// TestHTTPBackendDown: a closed store is 503 with reason unavailable.
func TestHTTPBackendDown(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	r0 := locktest.Acquire(t, s, "k", time.Minute)
	_ = s.Close()
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), Options{})
	r := httptest.NewRequest("POST", HTTPPath+"/k", nil)
	r.Header.Set(fencewire.HeaderKey, "k")
	r.Header.Set(fencewire.HeaderToken, r0.Fence)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 503 || w.Header().Get(fencewire.HeaderReason) != "unavailable" {
		t.Fatalf("code %d, reason %q", w.Code, w.Header().Get(fencewire.HeaderReason))
	}
}

// TestHTTPDryRun: a would-deny passes with x-fence-would-deny and without
// x-fence-verified, and is audited with mode dry-run.
func TestHTTPDryRun(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	old := locktest.Acquire(t, s, "k", time.Minute)
	locktest.Release(t, s, old.LockID)
	locktest.Acquire(t, s, "k", time.Minute)
	a := fencecheck.NewAuditor(s, fencecheck.AuditorOptions{})
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{Audit: a}), Options{})
	r := httptest.NewRequest("POST", HTTPPath+"/k", nil)
	r.Header.Set(fencewire.HeaderKey, "k")
	r.Header.Set(fencewire.HeaderToken, old.Fence)
	r.Header.Set(fencewire.HeaderRouteMode, "dry-run")
	r.Header.Set(fencewire.HeaderRouteName, "rollout")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || w.Header().Get(fencewire.HeaderWouldDeny) != "stale" || w.Header().Get(fencewire.HeaderVerified) != "" {
		t.Fatalf("code %d headers %v", w.Code, w.Header())
	}
	_ = a.Close()
	evs, err := s.QueryAudit(t.Context(), lockstore.AuditQuery{})
	if err != nil || len(evs) != 1 || evs[0].Mode != "dry-run" || evs[0].Route != "rollout" ||
		evs[0].Source != SourceHTTP || evs[0].DecisionID != w.Header().Get(fencewire.HeaderDecisionID) {
		t.Fatalf("audit %+v %v", evs, err)
	}
}

// TestHTTPMissingMethodHeader: an auth request that names the original URI
// but not its method (nginx's own auth_request example sets only
// X-Original-URI; the subrequest itself is always GET) must not be taken
// for a read: the method is unknown, so it is checked as a write, and the
// proxy config is named at warn.
func TestHTTPMissingMethodHeader(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	var logs bytes.Buffer
	log := testutil.Logger(&logs, slog.LevelWarn)
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), Options{Logger: log})
	for _, uriHeader := range []string{"X-Original-URI", "X-Forwarded-Uri"} {
		for _, query := range []string{"", "?fence_methods=POST,PUT,DELETE", "?fence_methods=GET"} {
			logs.Reset()
			r := httptest.NewRequest("GET", HTTPPath+query, nil) // the auth request's own method: GET
			r.Header.Set(uriHeader, "/orders/7")
			r.Header.Set(fencewire.HeaderKey, "orders/7") // no fence
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 428 || w.Header().Get(fencewire.HeaderReason) != "missing" {
				t.Errorf("%s only%s: %d %q, want 428 missing (unknown method is a write)",
					uriHeader, query, w.Code, w.Header().Get(fencewire.HeaderReason))
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "method header") {
				t.Errorf("%s only%s: no warning naming the method header: %q", uriHeader, query, logs.String())
			}
		}
	}
	// With the method header, a read is still a read, and nothing is logged.
	logs.Reset()
	r := httptest.NewRequest("GET", HTTPPath, nil)
	r.Header.Set("X-Original-Method", "GET")
	r.Header.Set("X-Original-URI", "/orders/7")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || logs.Len() != 0 {
		t.Fatalf("GET with its method header: %d, logs %q", w.Code, logs.String())
	}
}

// TestHTTPForwardedRouteOptions: Caddy's forward_auth and Traefik's
// forwardAuth copy every client header to the auth request, so with the
// X-Forwarded-* convention X-Fence-Route-* headers are the client's and are
// ignored: route options come only from the forward_auth URL's query. With
// X-Original-* (nginx, whose shipped config passes no client header) and
// with the request itself (Envoy, whose headers_to_add override the
// client's) the headers stay the route's options.
func TestHTTPForwardedRouteOptions(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	cur := locktest.Acquire(t, s, "orders/7", time.Minute)
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), Options{})
	forwarded := func(query string, hdr map[string]string) *http.Request {
		r := httptest.NewRequest("GET", HTTPPath+query, nil)
		r.Header.Set("X-Forwarded-Method", "PUT")
		r.Header.Set("X-Forwarded-Uri", "/orders/7")
		r.Header.Set(fencewire.HeaderKey, "orders/7")
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		return r
	}
	tests := []struct {
		name   string
		req    *http.Request
		status int
	}{
		{"client's policy off", forwarded("", map[string]string{fencewire.HeaderRoutePolicy: "off"}), 428},
		{"client's dry-run", forwarded("", map[string]string{fencewire.HeaderRouteMode: "dry-run"}), 428},
		{"client's write methods", forwarded("", map[string]string{fencewire.HeaderRouteMethods: "X"}), 428},
		{"client's key", forwarded("?fence_route=orders", map[string]string{
			fencewire.HeaderRouteKey: "mine", fencewire.HeaderToken: cur.Fence}), 200}, // the header key orders/7, not "mine"
		{"client's key, checked", forwarded("", map[string]string{
			fencewire.HeaderRouteKey: "mine", fencewire.HeaderToken: "000000000000009"}), 409},
		{"client's fence header", forwarded("", map[string]string{
			fencewire.HeaderRouteHeader: "x-mine", "X-Mine": cur.Fence}), 428},
		{"operator's query policy off", forwarded("?fence_policy=off", nil), 200},
		{"operator's query beats client's header", forwarded("?fence_policy=holder", map[string]string{fencewire.HeaderRoutePolicy: "off"}), 428},
		{"nginx-style header options kept", func() *http.Request {
			r := httptest.NewRequest("GET", HTTPPath, nil)
			r.Header.Set("X-Original-Method", "PUT")
			r.Header.Set("X-Original-URI", "/orders/7")
			r.Header.Set(fencewire.HeaderRoutePolicy, "off")
			return r
		}(), 200},
		{"Envoy-style header options kept", func() *http.Request {
			r := httptest.NewRequest("PUT", HTTPPath+"/orders/7", nil)
			r.Header.Set(fencewire.HeaderRouteMethods, "POST")
			return r
		}(), 200},
	}
	for _, tc := range tests {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, tc.req)
		if w.Code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Header().Get(fencewire.HeaderReason), tc.status)
		}
	}
}

// TestHTTPForwardedClientQuery: with X-Forwarded-* the route options come
// from the auth URL's query. Caddy's forward_auth keeps the client's query
// there when its uri has none, and a client can copy the operator's query
// into its own request: a query identical to the original URI's cannot be
// told from the client's, so a write fails closed (503) instead of falling
// back to the defaults; a read still passes.
func TestHTTPForwardedClientQuery(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	cur := locktest.Acquire(t, s, "payments/42", time.Minute)
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), Options{})
	check := func(method, query, uri string) int {
		r := httptest.NewRequest("GET", HTTPPath+query, nil)
		r.Header.Set("X-Forwarded-Method", method)
		r.Header.Set("X-Forwarded-Uri", uri)
		r.Header.Set(fencewire.HeaderKey, "payments/42")
		r.Header.Set(fencewire.HeaderToken, cur.Fence) // a fence replayed from a denial, and no proof
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	const operator = "?fence_route=payments&fence_key=payments/{2}&fence_proof=lockId"
	if got := check("PUT", operator, "/payments/42"); got != 403 {
		t.Fatalf("lockId route, no lockId: %d, want 403 bad-proof", got)
	}
	// The downgrade: the client appends the operator's query to its own URI.
	if got := check("PUT", operator, "/payments/42"+operator); got != 503 {
		t.Fatalf("client copied the operator's query: %d, want 503 (options unknowable: fail closed), never a default route", got)
	}
	// Caddy without a query on its uri, the client's query copied over.
	if got := check("PUT", "?fence_policy=off&fence_mode=dry-run", "/orders/7?fence_policy=off&fence_mode=dry-run"); got != 503 {
		t.Fatalf("client's own query copied to the auth request: %d, want 503", got)
	}
	if got := check("GET", operator, "/payments/42"+operator); got != 200 {
		t.Fatalf("a read with the same query: %d, want 200", got)
	}
}

// TestHTTPDuplicateFenceHeaders: Header.Get reads the first copy, an
// upstream may read the last: a fence input sent twice is 400 malformed.
func TestHTTPDuplicateFenceHeaders(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	old := locktest.Acquire(t, s, "k", time.Minute)
	locktest.Release(t, s, old.LockID)
	cur := locktest.Acquire(t, s, "k", time.Minute)
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{}), Options{})
	for _, dup := range [][3]string{
		{fencewire.HeaderToken, cur.Fence, old.Fence},
		{fencewire.HeaderKey, "k", "other"},
		{fencewire.HeaderLockID, cur.LockID, old.LockID},
	} {
		r := httptest.NewRequest("POST", HTTPPath+"/k", nil)
		r.Header.Set(fencewire.HeaderKey, "k")
		r.Header.Set(fencewire.HeaderToken, cur.Fence)
		r.Header.Set(dup[0], dup[1])
		r.Header.Add(dup[0], dup[2])
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 400 || w.Header().Get(fencewire.HeaderReason) != "malformed" {
			t.Errorf("%s twice: %d %q, want 400 malformed", dup[0], w.Code, w.Header().Get(fencewire.HeaderReason))
		}
	}
}

// TestHTTPNoOriginalRequest: a proxy that names no original request (no
// X-Forwarded-*, no X-Original-*, and no path after /v1/authz/check, which
// Envoy's http_service always appends) is checked as a write: an nginx
// auth subrequest is always GET, so its own method would let every write
// pass as a read.
func TestHTTPNoOriginalRequest(t *testing.T) {
	h := NewHTTPHandler(fencecheck.New(locktest.OpenBolt(t, locktest.FloorOff), fencecheck.Options{}), Options{})
	for _, path := range []string{HTTPPath, HTTPPath + "?x=1"} {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set(fencewire.HeaderKey, "orders/7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 428 {
			t.Fatalf("%s with no original request: %d, want 428 (a write without a fence)", path, w.Code)
		}
	}
	// Envoy's http_service: the original path follows the prefix, and the
	// request's own method is the original's.
	r := httptest.NewRequest("GET", HTTPPath+"/orders/7", nil)
	r.Header.Set(fencewire.HeaderKey, "orders/7")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("Envoy-style read: %d, want 200", w.Code)
	}
}
