package authz

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// forwardAuthSeeds are auth requests as the supported proxies send them
// (method, request target, header lines "Name: value").
var forwardAuthSeeds = [][3]string{
	{"GET", HTTPPath, "X-Original-Method: PUT\nX-Original-URI: /orders/42\nX-Fence-Route-Key: orders/{2}\nX-Fence-Token: 000000000000001\nX-Fence-Auth-Request: nginx"},
	{"GET", HTTPPath + "?fence_key=orders/{2:int}&fence_route=o", "X-Forwarded-Method: POST\nX-Forwarded-Uri: /orders/042\nX-Fence-Token: 000000000000001"},
	{"GET", HTTPPath + "?fence_key=orders/{2}", "X-Forwarded-Method: DELETE\nX-Forwarded-Uri: /orders/%EF%BC%94%EF%BC%92;x\nX-Fence-Token: 000000000000001"},
	{"PATCH", HTTPPath + "/orders/42;x", "X-Fence-Route-Key: orders/{2}\nX-Fence-Token: 000000000000001\nX-Fence-Token: 000000000000002"},
	{"POST", HTTPPath + "/x", "X-Fence-Key: k\nX-Fence-Token: 000000000000001\nX-Fence-Lock-Id: AAAAAAAAAAAAAAAAAAAAAA"},
	{"GET", HTTPPath, "X-Original-URI: /orders/7\nX-Fence-Key: orders/7"},
	{"PUT", HTTPPath + "/k", "X-Fence-Key: k\nX-Fence-Route-Methods: PUTT\nX-Fence-Route-Mode: dry-run"},
	{"GET", HTTPPath + "?fence_methods=POST&fence_policy=latest", "X-Forwarded-Method: PUT\nX-Forwarded-Uri: /k?fence_methods=POST\nX-Fence-Key: k"},
}

// forwardAuthRequest builds the auth request a proxy (or an attacker who
// reaches the endpoint) sends; ok is false for a target no HTTP server
// would hand to a handler.
func forwardAuthRequest(method, target, headers string) (*http.Request, bool) {
	u, err := url.ParseRequestURI(target)
	if err != nil || method == "" {
		return nil, false
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Method, r.URL, r.RequestURI = method, u, target
	for line := range strings.SplitSeq(headers, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" {
			continue
		}
		r.Header.Add(name, strings.TrimSpace(value))
	}
	return r, true
}

// forwardAuthViolation checks one answer of the handler to a request built
// by forwardAuthRequest, against a store in which no fence was ever issued
// (so no presented fence is current). It returns "" or what is wrong.
//
// The property: a write is never allowed. A 200 without
// x-fence-would-deny is acceptable only if the request could have been a
// read or unchecked: a read method appears somewhere in it, or a route
// option could have set the write methods or policy off. That check is
// deliberately conservative (it looks at every byte the request carries,
// decoded query included), so it needs no second implementation of the
// handler's parsing.
func forwardAuthViolation(r *http.Request, w *httptest.ResponseRecorder) string {
	if v := w.Header().Get(fencewire.HeaderVerified); v != "" {
		return "x-fence-verified set, but no fence is current: " + v
	}
	switch w.Code {
	case 200, 400, 403, 409, 428, 503:
	default:
		return "unexpected status " + http.StatusText(w.Code)
	}
	if w.Code != 200 {
		if w.Header().Get(fencewire.HeaderReason) == "" {
			return "a denial without x-fence-reason"
		}
		return ""
	}
	if w.Header().Get(fencewire.HeaderWouldDeny) != "" {
		return "" // dry-run / warn: observed, not enforced
	}
	var all strings.Builder
	all.WriteString(r.Method + "\n" + r.RequestURI + "\n")
	for k, vs := range r.URL.Query() {
		all.WriteString(k + "=" + strings.Join(vs, ",") + "\n")
	}
	for k, vs := range r.Header {
		all.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
	}
	s := all.String()
	for _, read := range []string{"GET", "HEAD", "OPTIONS"} {
		if strings.Contains(s, read) {
			return ""
		}
	}
	ls := strings.ToLower(s)
	if strings.Contains(ls, "off") || strings.Contains(ls, "methods") {
		return ""
	}
	return "a write was allowed without a current fence"
}

// FuzzForwardAuthRequest: the forward-auth request view never panics on
// any method, target or headers, and never allows a write without a
// current fence, whichever convention (Envoy, nginx, Caddy/Traefik) the
// headers pretend to follow.
func FuzzForwardAuthRequest(f *testing.F) {
	for _, s := range forwardAuthSeeds {
		f.Add(s[0], s[1], s[2])
	}
	s := locktest.OpenBolt(f, locktest.FloorOff) // empty: no fence was ever issued
	h := NewHTTPHandler(fencecheck.New(s, fencecheck.Options{Logger: quiet}), Options{Logger: quiet})
	f.Fuzz(func(t *testing.T, method, target, headers string) {
		r, ok := forwardAuthRequest(method, target, headers)
		if !ok {
			return
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if v := forwardAuthViolation(r, w); v != "" {
			t.Fatalf("%s %q with headers %q: %d %v: %s", method, target, headers, w.Code, w.Header(), v)
		}
	})
}

// TestForwardAuthOracleCatches: the fuzz property can fail. A handler that
// allows everything is caught on the seeds.
func TestForwardAuthOracleCatches(t *testing.T) {
	allowAll := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	caught := 0
	for _, s := range forwardAuthSeeds {
		r, ok := forwardAuthRequest(s[0], s[1], s[2])
		if !ok {
			t.Fatalf("seed %q does not build", s)
		}
		w := httptest.NewRecorder()
		allowAll.ServeHTTP(w, r)
		if forwardAuthViolation(r, w) != "" {
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("an allow-everything handler passes the fuzz property on every seed")
	}
}
