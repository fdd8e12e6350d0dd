package authz

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/routes"
)

// testTable is the route table of these tests: orders by template (its
// key from the path, signed proofs off), a named legacy entry reachable
// only by fence_route (an Exact path no request uses).
func testTable(t testing.TB, unmatched routes.Unmatched) *routes.Table {
	t.Helper()
	tbl, err := routes.Compile([]config.Route{
		{Name: "orders", Key: "orders/{2:int}", Match: config.RouteMatch{Path: config.RoutePath{Type: routes.PathTemplate, Value: "/orders/{int}"}}},
		{Name: "legacy", Key: "legacy-lock", Match: config.RouteMatch{Path: config.RoutePath{Type: routes.PathExact, Value: "/never/used"}}},
	}, routes.Options{Unmatched: unmatched})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// serveGRPCWith is serveGRPC with options.
func serveGRPCWith(t testing.TB, c *fencecheck.Checker, o Options) authv3.AuthorizationClient {
	t.Helper()
	return authv3.NewAuthorizationClient(serveOn(t, NewServer(c, o).Register))
}

// edgeStatus is the HTTP status an ext_authz answer gives the client.
func edgeStatus(t testing.TB, cl authv3.AuthorizationClient, req *authv3.CheckRequest) int {
	t.Helper()
	resp, err := cl.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.GetDeniedResponse(); d != nil {
		return int(d.GetStatus().GetCode())
	}
	return 200
}

// TestTableGovernsWhatCallersSend (#20): with a route table, the key,
// policy and proof of a write come from the table. An Istio-shaped
// ext_authz request (no context_extensions) whose client names another
// key in x-fence-key cannot change which lock governs /orders/42; a
// caller that is not trusted cannot override the entry with its own
// options or pick another entry by name; a trusted one can name an entry
// (Envoy Gateway). Each broken variant is today's behaviour for one of
// those: no table (the client's header decides), every caller trusted
// (its options win).
func TestTableGovernsWhatCallersSend(t *testing.T) {
	type check struct {
		name    string
		method  string
		path    string
		headers func(orders, payments string) map[string]string
		ext     map[string]string
		want    int
	}
	clientKey := func(orders, payments string) map[string]string {
		return map[string]string{fencewire.HeaderKey: "payments/1", fencewire.HeaderToken: payments}
	}
	checks := []check{
		{"istio: the table's key with its fence passes", "PUT", "/orders/42", func(o, _ string) map[string]string {
			return map[string]string{fencewire.HeaderToken: o}
		}, nil, 200},
		{"istio: the client's own key and its fence are refused", "PUT", "/orders/42", clientKey, nil, 409},
		{"untrusted inline options cannot override the entry", "PUT", "/orders/42", clientKey,
			map[string]string{fencewire.ExtKey: "payments/1", fencewire.ExtPolicy: "latest"}, 409},
		{"untrusted fence_route cannot pick another entry", "PUT", "/orders/42", func(_, p string) map[string]string {
			return map[string]string{fencewire.HeaderToken: p}
		}, map[string]string{fencewire.ExtRoute: "legacy"}, 409},
	}
	for _, variant := range []struct {
		name   string
		opts   func(*routes.Holder) Options
		broken bool
	}{
		{"correct", func(h *routes.Holder) Options { return Options{Routes: h} }, false},
		{"broken: no table (today: the caller's options and headers decide)", func(*routes.Holder) Options { return Options{} }, true},
		{"broken: every caller trusted", func(h *routes.Holder) Options { return Options{Routes: h, TrustLoopback: true} }, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			s := locktest.OpenBolt(t, locktest.FloorOff)
			c := fencecheck.New(s, fencecheck.Options{Timeout: time.Second})
			// orders/42's fence is 2 (its second lock), payments/1's is 1:
			// a fence of one key is never current for the other.
			locktest.Release(t, s, locktest.Acquire(t, s, "orders/42", time.Minute).LockID)
			orders := locktest.Acquire(t, s, "orders/42", time.Minute).Fence
			locktest.Release(t, s, locktest.Acquire(t, s, "legacy-lock", time.Minute).LockID)
			locktest.Acquire(t, s, "legacy-lock", time.Minute)
			payments := locktest.Acquire(t, s, "payments/1", time.Minute).Fence
			cl := serveGRPCWith(t, c, variant.opts(routes.NewHolder(testTable(t, routes.UnmatchedDeny))))
			caught := false
			for _, ck := range checks {
				got := edgeStatus(t, cl, envoyRequest(ck.method, ck.path, ck.headers(orders, payments), ck.ext))
				if got != ck.want {
					if !variant.broken {
						t.Errorf("%s: %d, want %d", ck.name, got, ck.want)
					}
					caught = true
				}
			}
			if variant.broken && !caught {
				t.Error("the broken variant passed every check")
			}
		})
	}
}

// TestTableNamedRouteAndUnmatched: a trusted caller's fence_route names an
// entry (Envoy Gateway); a write no entry matches fails closed (503)
// unless check.unmatchedWrites is defaults, and a read always passes.
func TestTableNamedRouteAndUnmatched(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := fencecheck.New(s, fencecheck.Options{Timeout: time.Second})
	locktest.Release(t, s, locktest.Acquire(t, s, "legacy-lock", time.Minute).LockID)
	legacy := locktest.Acquire(t, s, "legacy-lock", time.Minute).Fence // 2; other's is 1
	other := locktest.Acquire(t, s, "other", time.Minute).Fence
	trusted := serveGRPCWith(t, c, Options{Routes: routes.NewHolder(testTable(t, routes.UnmatchedDeny)), TrustLoopback: true})
	untrusted := serveGRPCWith(t, c, Options{Routes: routes.NewHolder(testTable(t, routes.UnmatchedDeny))})
	defaults := serveGRPCWith(t, c, Options{Routes: routes.NewHolder(testTable(t, routes.UnmatchedDefaults))})
	named := map[string]string{fencewire.ExtRoute: "legacy"}
	for _, tc := range []struct {
		name    string
		cl      authv3.AuthorizationClient
		method  string
		headers map[string]string
		ext     map[string]string
		want    int
	}{
		{"trusted fence_route: the entry's key", trusted, "POST", map[string]string{fencewire.HeaderToken: legacy}, named, 200},
		{"trusted fence_route: another key's fence refused", trusted, "POST", map[string]string{fencewire.HeaderToken: other, fencewire.HeaderKey: "other"}, named, 409},
		{"untrusted fence_route ignored: unmatched write fails closed", untrusted, "POST", map[string]string{fencewire.HeaderToken: legacy}, named, 503},
		{"unmatched write fails closed", trusted, "POST", map[string]string{fencewire.HeaderKey: "other", fencewire.HeaderToken: other}, nil, 503},
		{"unmatched read passes", untrusted, "GET", nil, nil, 200},
		{"unmatched write with defaults: today's check", defaults, "POST", map[string]string{fencewire.HeaderKey: "other", fencewire.HeaderToken: other}, nil, 200},
		{"non-canonical path under the table: write refused", untrusted, "PUT", map[string]string{fencewire.HeaderToken: legacy}, nil, 400},
	} {
		path := "/elsewhere"
		if tc.want == 400 {
			path = "/orders//42"
		}
		if got := edgeStatus(t, tc.cl, envoyRequest(tc.method, path, tc.headers, tc.ext)); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestTableSwapsWithoutRestart: the transports read the table through the
// holder, so a swapped table governs the next request.
func TestTableSwapsWithoutRestart(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := fencecheck.New(s, fencecheck.Options{Timeout: time.Second})
	h := routes.NewHolder(nil)
	fwd := NewHTTPHandler(c, Options{Routes: h})
	put := func() int {
		r := httptest.NewRequest("PUT", HTTPPath+"/orders/42", nil)
		r.Header.Set(fencewire.HeaderKey, "payments/1")
		r.Header.Set(fencewire.HeaderToken, "000000000000001")
		w := httptest.NewRecorder()
		fwd.ServeHTTP(w, r)
		return w.Code
	}
	locktest.Acquire(t, s, "payments/1", time.Minute)
	if got := put(); got != http.StatusOK {
		t.Fatalf("no table: %d", got)
	}
	h.Store(testTable(t, routes.UnmatchedDeny))
	if got := put(); got != http.StatusConflict { // orders/42 was never locked: unknown
		t.Fatalf("with the table: %d, want 409", got)
	}
}

// TestInlineRouteCacheIsBounded: callers' options are compiled once and
// kept, and no caller grows the cache past its bound.
func TestInlineRouteCacheIsBounded(t *testing.T) {
	c := newRouteCache(8)
	a := c.get(routeOptions{key: "k", policy: "latest"})
	if c.get(routeOptions{key: "k", policy: "latest"}) != a {
		t.Error("the same options compiled twice")
	}
	for i := range 100 {
		c.get(routeOptions{key: fmt.Sprintf("k%d", i)})
	}
	if n := c.len(); n != 8 {
		t.Errorf("cache holds %d, want its bound 8", n)
	}
}

// TestTableBarrierOnExtProc: a table entry's barrier is kept on ext_proc
// for a trusted caller (here: loopback with TrustLoopback), and refused to
// an untrusted one like its own options: trust is who calls, not which
// route, or anyone reaching the port could leave barrier entries behind
// by dropping streams.
func TestTableBarrierOnExtProc(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := fencecheck.New(s, fencecheck.Options{Timeout: time.Second})
	tbl, err := routes.Compile([]config.Route{{Name: "acct", Key: "acct", Barrier: true,
		Match: config.RouteMatch{Path: config.RoutePath{Type: routes.PathExact, Value: "/acct"}}}}, routes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := locktest.Acquire(t, s, "acct", time.Minute)
	trusted := openStream(t, serveExtProcWith(t, c, Options{Routes: routes.NewHolder(tbl), TrustLoopback: true}), nil).roundTrip(write(l.Fence))
	mustAllow(t, trusted)
	untrusted := openStream(t, serveExtProcWith(t, c, Options{Routes: routes.NewHolder(tbl)}), nil).roundTrip(write(l.Fence))
	if untrusted.GetRequestHeaders() != nil {
		t.Fatal("an untrusted caller's write on a table barrier entry was admitted")
	}
	without := openStream(t, serveExtProcWith(t, c, Options{}), barrierOpts).roundTrip(write(l.Fence))
	if without.GetRequestHeaders() != nil {
		t.Fatal("an untrusted caller's barrier was admitted")
	}
}

// TestProxyOnlyTableLeavesCallersOptions: a table of proxy.routes alone
// (routes.Options.ProxyOnly: the proxy's) governs no authz request: a
// write no entry matches is checked with the caller's options, as without
// a table, where the same entries as routes: fail it closed (503). The
// broken variant is that routes: table, which the test tells apart.
func TestProxyOnlyTableLeavesCallersOptions(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := fencecheck.New(s, fencecheck.Options{Timeout: time.Second})
	other := locktest.Acquire(t, s, "other", time.Minute).Fence
	entries := []config.Route{{Name: "proxy:/p", Upstream: "http://127.0.0.1:1", Match: config.RouteMatch{Path: config.RoutePath{Value: "/p"}}}}
	for _, tc := range []struct {
		proxyOnly bool
		want      int
	}{{true, 200}, {false, 503}} {
		tbl, err := routes.Compile(entries, routes.Options{ProxyOnly: tc.proxyOnly})
		if err != nil {
			t.Fatal(err)
		}
		cl := serveGRPCWith(t, c, Options{Routes: routes.NewHolder(tbl)})
		if got := edgeStatus(t, cl, envoyRequest("POST", "/elsewhere", map[string]string{fencewire.HeaderKey: "other", fencewire.HeaderToken: other}, nil)); got != tc.want {
			t.Errorf("proxyOnly=%v: %d, want %d", tc.proxyOnly, got, tc.want)
		}
	}
}
