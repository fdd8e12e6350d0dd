package config

import (
	"testing"
	"time"
)

// TestMaxWait: a proxy route's maxWait is read; refused without the
// barrier, outside 1ms..24h, and above check.maxWaitCap (its default too);
// the cap and check.barrierMaxWaiters are checked; the drain on SIGTERM
// covers a write that waits its maxWait before its maxWrite.
func TestMaxWait(t *testing.T) {
	route := func(barrier bool, mw time.Duration) ProxyRoute {
		return ProxyRoute{Name: "orders", Prefix: "/orders", Upstream: "http://127.0.0.1:3000", Barrier: barrier, MaxWait: Duration(mw)}
	}
	for _, tc := range []struct {
		name    string
		cap     time.Duration
		waiters int
		route   ProxyRoute
		problem string // "" = valid
	}{
		{"default", 0, 0, route(true, 0), ""},
		{"set", 0, 0, route(true, 2*time.Second), ""},
		{"without the barrier", 0, 0, route(false, 2*time.Second), "proxy.routes[0] (orders).maxWait: set without barrier: true"},
		{"negative", 0, 0, route(true, -time.Second), "maxWait: must be between 1ms and 24h"},
		{"over the default cap", 0, 0, route(true, time.Minute), "maxWait: 1m0s is above check.maxWaitCap 30s"},
		{"raised cap", time.Hour, 0, route(true, time.Minute), ""},
		{"the default over a small cap", time.Second, 0, route(true, 0), "maxWait: 5s (the default) is above check.maxWaitCap 1s"},
		{"cap above 24h", 25 * time.Hour, 0, route(true, 0), "check.maxWaitCap: must be between 1ms and 24h"},
		{"waiters negative", 0, -1, route(true, 0), "check.barrierMaxWaiters"},
		{"waiters set", 0, 64, route(true, 0), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Check.MaxWaitCap, c.Check.BarrierMaxWaiters = Duration(tc.cap), tc.waiters
			c.Proxy.Routes = []ProxyRoute{tc.route}
			wantProblem(t, &c, tc.problem)
		})
	}
	cfg, err := load(t, []string{"--config", writeFile(t, "check: {maxWaitCap: 10s, barrierMaxWaiters: 32}\nproxy:\n  routes:\n    - {prefix: /o, upstream: 'http://127.0.0.1:1', barrier: true, maxWait: 2s, maxWrite: 10s}\n")}, nil)
	if err != nil || cfg.Check.MaxWaitCap.Std() != 10*time.Second || cfg.Check.BarrierMaxWaiters != 32 || cfg.Proxy.Routes[0].MaxWait.Std() != 2*time.Second {
		t.Fatalf("load: %+v %+v %v", cfg.Check, cfg.Proxy.Routes, err)
	}
	if d := cfg.Drain(); d != 20*time.Second {
		t.Errorf("Drain() = %v, want the 20 s default (2 s + 10 s + 5 s is less)", d)
	}
	cfg.Proxy.Routes[0].MaxWrite = Duration(20 * time.Second)
	if d := cfg.Drain(); d != 27*time.Second {
		t.Errorf("Drain() = %v, want maxWait 2 s + maxWrite 20 s + 5 s", d)
	}
}
