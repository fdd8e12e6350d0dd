package authz

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/routes"
)

// methodEdge sends one request (method, target, header pairs) through an
// edge and returns the status its client would see (200: allowed).
type methodEdge struct {
	name string
	do   func(t *testing.T, method, target string, kv ...string) int
}

// methodEdges serves o on ext_authz, ext_proc and forward-auth (the
// X-Original-* of the shipped nginx config, the X-Forwarded-* of Caddy
// and Traefik, and Envoy's http_service).
func methodEdges(t *testing.T, c *fencecheck.Checker, o Options) []methodEdge {
	authzCl := serveGRPCWith(t, c, o)
	procCl := serveExtProcWith(t, c, o)
	fwd := httptest.NewServer(NewHTTPHandler(c, o))
	t.Cleanup(fwd.Close)
	forward := func(conv string) func(t *testing.T, method, target string, kv ...string) int {
		return func(t *testing.T, method, target string, kv ...string) int {
			url := fwd.URL + HTTPPath
			if conv == "forwarded" {
				url += "?fence_route=x" // Caddy/Traefik: options in the auth URL's query
			}
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			switch conv {
			case "original":
				req.Header.Set("X-Original-Method", method)
				req.Header.Set("X-Original-URI", target)
			case "forwarded":
				req.Header.Set("X-Forwarded-Method", method)
				req.Header.Set("X-Forwarded-Uri", target)
			case "request":
				// Envoy http_service: the original method and path.
				if req, err = http.NewRequest(method, fwd.URL+HTTPPath+"/PLACEHOLDER", nil); err != nil {
					t.Fatal(err)
				}
				req.URL.Opaque = HTTPPath + target
			}
			for i := 0; i+1 < len(kv); i += 2 {
				req.Header.Add(kv[i], kv[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
	}
	return []methodEdge{
		{"ext_authz", func(t *testing.T, method, target string, kv ...string) int {
			h := map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				h[strings.ToLower(kv[i])] = kv[i+1]
			}
			return edgeStatus(t, authzCl, envoyRequest(method, target, h, nil))
		}},
		{"ext_proc", func(t *testing.T, method, target string, kv ...string) int {
			lower := make([]string, len(kv))
			for i := range kv {
				lower[i] = kv[i]
				if i%2 == 0 {
					lower[i] = strings.ToLower(kv[i])
				}
			}
			resp := openStream(t, procCl, nil).roundTrip(envoyHeaders(method, target, lower...))
			if ir := resp.GetImmediateResponse(); ir != nil {
				return int(ir.GetStatus().GetCode())
			}
			return 200
		}},
		{"forward-auth (X-Original-*)", forward("original")},
		{"forward-auth (X-Forwarded-*)", forward("forwarded")},
		{"forward-auth (Envoy http_service)", forward("request")},
	}
}

// TestMethodSpellingEveryEdge: #26 item 2 on every authz edge. With an
// entry for POST, PUT, PATCH and DELETE and a catch-all with policy off,
// a DELETE without a fence is refused 428; "delete", "Delete", a GET with
// a method-override header or _method parameter naming DELETE must not
// pass through the catch-all: they select another entry under another
// reading of the method, and are refused 400. The broken variant
// (exactMethod: the table matched on the method as sent, as before) let
// them through, 200: the upstreams that upper-case the method, or honour
// the override, ran a DELETE no fence governed.
func TestMethodSpellingEveryEdge(t *testing.T) {
	tbl, err := routes.Compile([]config.Route{
		{Name: "orders", Key: "orders/{2:int}", Match: config.RouteMatch{Methods: []string{"POST", "PUT", "PATCH", "DELETE"},
			Path: config.RoutePath{Type: routes.PathTemplate, Value: "/orders/{int}"}}},
		{Name: "open", Policy: "off"},
	}, routes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := locktest.OpenBolt(t, locktest.FloorOff)
	c := fencecheck.New(s, fencecheck.Options{Timeout: time.Second})
	fence := locktest.Acquire(t, s, "orders/42", time.Minute).Fence
	cases := []struct {
		method, target string
		kv             []string
		want           int
	}{
		{"DELETE", "/orders/42", nil, 428},
		{"DELETE", "/orders/42", []string{fencewire.HeaderToken, fence}, 200},
		{"delete", "/orders/42", nil, 400},
		{"Delete", "/orders/42", nil, 400},
		{"delete", "/orders/42", []string{fencewire.HeaderToken, fence}, 400},
		{"GET", "/orders/42", nil, 200},
		{"GET", "/orders/42", []string{"X-HTTP-Method-Override", "DELETE"}, 400},
		{"GET", "/orders/42", []string{"X-HTTP-Method", "delete"}, 400},
		{"GET", "/orders/42", []string{"X-Method-Override", "PUT"}, 400},
		{"POST", "/orders/42", []string{"X-HTTP-Method-Override", "DELETE"}, 428},
		{"GET", "/orders/42?_method=DELETE", nil, 400},
		{"POST", "/orders/42?_method=DELETE", []string{fencewire.HeaderToken, fence}, 200},
		// #26 item 3: a raw '#' in a write's target.
		{"PUT", "/orders/42#x", []string{fencewire.HeaderToken, fence}, 400},
		{"GET", "/orders/42#x", nil, 200},
	}
	for _, variant := range []struct {
		name   string
		o      Options
		broken bool
	}{
		{"correct", Options{Routes: routes.NewHolder(tbl)}, false},
		{"broken: the method as sent alone", Options{Routes: routes.NewHolder(tbl), exactMethod: true}, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			for _, e := range methodEdges(t, c, variant.o) {
				caught := 0
				for _, tc := range cases {
					if e.name == "forward-auth (Envoy http_service)" && strings.Contains(tc.target, "#") {
						continue // not a request target net/http sends
					}
					got := e.do(t, tc.method, tc.target, tc.kv...)
					if got != tc.want {
						caught++
						if !variant.broken {
							t.Errorf("%s: %s %s %v: %d, want %d", e.name, tc.method, tc.target, tc.kv, got, tc.want)
						}
					}
				}
				if variant.broken && caught == 0 {
					t.Errorf("%s: the broken variant passed every case", e.name)
				}
			}
		})
	}
}
