package authz

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/routes"
)

// dialerFrom dials from a given loopback source address: Linux routes all
// of 127/8 to lo, so a caller can be 127.0.0.6, where Istio's sidecar
// connects every inbound caller from.
func dialerFrom(src string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
}

// trustTable: orders governed by a key template; "open" (policy off) and
// "acct" (the barrier) reachable only by name, which only a trusted caller
// may use.
func trustTable(t *testing.T) *routes.Table {
	tbl, err := routes.Compile([]config.Route{
		{Name: "orders", Key: "orders/{2:int}", Match: config.RouteMatch{Path: config.RoutePath{Type: routes.PathTemplate, Value: "/orders/{int}"}}},
		{Name: "open", Policy: "off", Match: config.RouteMatch{Path: config.RoutePath{Type: routes.PathExact, Value: "/never/open"}}},
		{Name: "acct", Key: "acct", Barrier: true, Match: config.RouteMatch{Path: config.RoutePath{Type: routes.PathExact, Value: "/never/acct"}}},
	}, routes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// trustedFrom reports, per edge, whether a caller from src was trusted:
// its fence_route naming "open" let an unfenced write to /orders/42
// through (ext_authz, forward-auth), and its barrier write through
// fence_route "acct" was admitted (ext_proc).
func trustedFrom(t *testing.T, c *fencecheck.Checker, o Options, src, fence string) map[string]bool {
	t.Helper()
	lis := testutil.Listen(t)
	g := grpc.NewServer()
	NewServer(c, o).Register(g)
	NewExtProc(c, o).Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	d := dialerFrom(src)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	out := map[string]bool{}
	out["ext_authz"] = edgeStatus(t, authv3.NewAuthorizationClient(conn), envoyRequest("PUT", "/orders/42", nil, map[string]string{fencewire.ExtRoute: "open"})) == 200
	st := openStream(t, extprocv3.NewExternalProcessorClient(conn), map[string]string{fencewire.ExtRoute: "acct"})
	resp := st.roundTrip(envoyHeaders("POST", "/orders/42", fencewire.HeaderToken, fence))
	out["ext_proc"] = resp.GetRequestHeaders() != nil
	if out["ext_proc"] {
		st.roundTrip(envoyResponseHeaders(201)) // finish the admitted write
	}
	fwd := httptest.NewServer(NewHTTPHandler(c, o))
	t.Cleanup(fwd.Close)
	cl := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	req, _ := http.NewRequest("GET", fwd.URL+HTTPPath, nil)
	req.Header.Set("X-Original-Method", "PUT")
	req.Header.Set("X-Original-URI", "/orders/42")
	req.Header.Set(fencewire.HeaderRouteName, "open")
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	out["forward-auth"] = res.StatusCode == 200
	return out
}

// TestLoopbackTrust: #26 item 9. Loopback trust is the explicit
// TrustLoopback (check.trustLoopback, off by default), and 127.0.0.6 is
// never trusted: behind an Istio sidecar every inbound caller connects
// from there. A caller bound to 127.0.0.6 cannot pick an entry with
// fence_route or ask for the barrier on any edge, with TrustLoopback on
// or off; one from 127.0.0.1 can only with it on. The broken variant
// (trustSidecar: 127.0.0.6 is loopback like any other, as before) is
// caught.
func TestLoopbackTrust(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := fencecheck.New(s, fencecheck.Options{Timeout: time.Second, MaxWriteCap: fencecheck.DefaultMaxWriteCap})
	fence := locktest.Acquire(t, s, "acct", time.Minute).Fence
	tbl := routes.NewHolder(trustTable(t))
	for _, tc := range []struct {
		name   string
		o      Options
		src    string
		want   bool
		broken bool
	}{
		{"default, 127.0.0.1", Options{Routes: tbl}, "127.0.0.1", false, false},
		{"default, 127.0.0.6", Options{Routes: tbl}, "127.0.0.6", false, false},
		{"trustLoopback, 127.0.0.1", Options{Routes: tbl, TrustLoopback: true}, "127.0.0.1", true, false},
		{"trustLoopback, 127.0.0.2", Options{Routes: tbl, TrustLoopback: true}, "127.0.0.2", true, false},
		{"trustLoopback, 127.0.0.6", Options{Routes: tbl, TrustLoopback: true}, "127.0.0.6", false, false},
		{"broken: 127.0.0.6 trusted as loopback", Options{Routes: tbl, TrustLoopback: true, trustSidecar: true}, "127.0.0.6", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := trustedFrom(t, c, tc.o, tc.src, fence)
			caught := false
			for edge, trusted := range got {
				if trusted != tc.want {
					caught = true
					if !tc.broken {
						t.Errorf("%s: a caller from %s trusted %v, want %v", edge, tc.src, trusted, tc.want)
					}
				}
			}
			if tc.broken && !caught {
				t.Errorf("the broken variant passed: %v", got)
			}
		})
	}
}
