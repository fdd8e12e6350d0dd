package config

import (
	"strings"
	"testing"
	"time"
)

// TestMaxWriteCapRefusesOperatorRoutes: a proxy barrier route whose
// maxWrite (or the 30 s default) is above check.maxWriteCap is refused at
// load, never clamped; a cap outside 1ms..24h is refused too.
func TestMaxWriteCapRefusesOperatorRoutes(t *testing.T) {
	route := func(mw time.Duration) ProxyRoute {
		return ProxyRoute{Name: "orders", Prefix: "/orders", Upstream: "http://127.0.0.1:3000", Barrier: true, MaxWrite: Duration(mw)}
	}
	for _, tc := range []struct {
		name    string
		cap     time.Duration
		route   ProxyRoute
		problem string // "" = valid
	}{
		{"within the default cap", 0, route(time.Minute), ""},
		{"over the default cap", 0, route(10 * time.Minute), "proxy.routes[0] (orders).maxWrite: 10m0s is above check.maxWriteCap 5m0s"},
		{"raised cap", time.Hour, route(10 * time.Minute), ""},
		{"the default maxWrite over a small cap", 10 * time.Second, route(0), "30s (the default) is above check.maxWriteCap"},
		{"cap above 24h", 25 * time.Hour, route(time.Minute), "check.maxWriteCap: must be between 1ms and 24h"},
		{"negative cap", -time.Second, route(time.Minute), "check.maxWriteCap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Check.MaxWriteCap = Duration(tc.cap)
			c.Proxy.Routes = []ProxyRoute{tc.route}
			wantProblem(t, &c, tc.problem)
		})
	}
}

// TestForwardAuthListener: authz.http is a listener like http: checked,
// and refused beyond loopback without tokens (it answers any key's state).
func TestForwardAuthListener(t *testing.T) {
	c := Default()
	c.Authz.HTTP.Addr = "0.0.0.0:8081"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "authz.http.addr") {
		t.Fatalf("forward-auth beyond loopback without tokens: %v", err)
	}
	c.Authz.HTTP.Addr = "nonsense"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "authz.http.addr") {
		t.Fatalf("bad address: %v", err)
	}
	c.Authz.HTTP.Addr = "127.0.0.1:8081"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// wantProblem: both validators (Validate, ValidateProxy) accept c when
// problem is "", and otherwise report a problem containing it.
func wantProblem(t *testing.T, c *Config, problem string) {
	t.Helper()
	for name, err := range map[string]error{"Validate": c.Validate(), "ValidateProxy": c.ValidateProxy()} {
		if problem == "" {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), problem) {
			t.Fatalf("%s: want a problem %q, got %v", name, problem, err)
		}
	}
}
