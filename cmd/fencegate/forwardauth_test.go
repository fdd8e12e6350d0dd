package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/console"
	"github.com/fencegate/fencegate/internal/serving"
	"github.com/fencegate/fencegate/lockserver"
)

// forwardAuthGateway runs the lock API's HTTP listener as serve builds it
// (the store, audit pipeline and checker of startGateway; the lock API;
// forward-auth), with the edge options ao, and returns its base URL and
// gateway.
func forwardAuthGateway(t *testing.T, cfg config.Config, set serveSettings, ao func(*auth.Authenticator) authz.Options) (string, *gateway) {
	return forwardAuthGatewayTB(t, cfg, set, ao)
}

func forwardAuthGatewayTB(t testing.TB, cfg config.Config, set serveSettings, ao func(*auth.Authenticator) authz.Options) (string, *gateway) {
	t.Helper()
	log := discardLogger()
	ctx, stop := context.WithCancel(context.Background())
	gw, err := startGateway(ctx, cfg, gatewaySettings{store: set.store}, log)
	if err != nil {
		t.Fatal(err)
	}
	ui := console.New(ctx, console.Options{Store: gw.store, Audit: gw.auditLog, Auth: set.auth, Logger: log})
	srv, err := lockserver.New(lockserver.Options{Store: gw.locks, Audit: gw.auditLog, Auth: set.auth, Registerer: prometheus.NewRegistry(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	r, err := newMainHTTPRunner(cfg, connlimit.Limits{}, srv, ui, gw.health, gw.checker, ao(set.auth), log, gw.goBG)
	if err != nil {
		t.Fatal(err)
	}
	var ls serving.Group
	ls.Add("http", r)
	done := make(chan error, 1)
	go func() { done <- ls.Run(ctx, log) }()
	t.Cleanup(func() {
		stop()
		<-done
		gw.close()
	})
	return "http://" + r.Addr(), gw
}

// decisions is how many checks the checker decided (any outcome).
func decisions(t *testing.T, g prometheus.Gatherer) float64 { return decisionsTB(t, g) }

func decisionsTB(t testing.TB, g prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "fencegate_authz_decisions_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func tokenConfig(name string, ops []string, prefixes ...string) config.Token {
	sum := auth.HashToken("secret-" + name)
	return config.Token{Name: name, SHA256: fmt.Sprintf("%x", sum[:]), Operations: ops, Prefixes: prefixes}
}

// TestForwardAuthCredential: with tokens, forward-auth answers only a
// caller presenting a token with the check operation in
// Proxy-Authorization, for keys its prefixes cover; everyone else gets
// 401/403 before any store read or decision. The binary search for a
// hidden fence (#19 item 7) then learns nothing and records nothing.
// Today's behaviour (no credential on forward-auth) is caught.
func TestForwardAuthCredential(t *testing.T) {
	for _, variant := range []struct {
		name   string
		opts   func(*auth.Authenticator) authz.Options
		broken bool
	}{
		{"correct", func(a *auth.Authenticator) authz.Options {
			return authzOptions(a, false, authz.Options{Logger: discardLogger()})
		}, false},
		{"broken: forward-auth takes no token", func(*auth.Authenticator) authz.Options { return authz.Options{Logger: discardLogger()} }, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Store = "bolt://" + filepath.Join(t.TempDir(), "fa.db") + "?fenceFloor=off"
			cfg.HTTP.Addr = "127.0.0.1:0"
			cfg.Check.HideCurrentFence = true
			cfg.Tokens = []config.Token{
				tokenConfig("writer", nil),
				tokenConfig("proxy", []string{"check"}),
				tokenConfig("orders-proxy", []string{"check"}, "orders/"),
			}
			set := serveSettings{}
			var err error
			if set.store, err = parseStoreURL(cfg.Store); err != nil {
				t.Fatal(err)
			}
			if set.auth, err = newAuthenticator(cfg.Tokens); err != nil {
				t.Fatal(err)
			}
			base, gw := forwardAuthGateway(t, cfg, set, variant.opts)
			old, err := gw.store.Acquire(t.Context(), "payments/1", time.Minute)
			if err != nil || !old.OK {
				t.Fatal(old, err)
			}
			if _, err := gw.store.Release(t.Context(), old.LockID); err != nil {
				t.Fatal(err)
			}
			cur, err := gw.store.Acquire(t.Context(), "payments/1", time.Minute)
			if err != nil || !cur.OK {
				t.Fatal(cur, err)
			}

			check := func(fence string, hdr map[string]string) (int, http.Header) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, base+authz.HTTPPath, nil)
				req.Header.Set("X-Original-Method", "PUT")
				req.Header.Set("X-Original-Uri", "/payments/1")
				req.Header.Set("X-Fence-Key", "payments/1")
				req.Header.Set("X-Fence-Token", fence)
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				return resp.StatusCode, resp.Header
			}
			bearer := func(name string) string { return "Bearer secret-" + name }

			// The attack: a binary search over the fence without a token.
			before := decisions(t, gw.reg)
			lo, hi, probes, found := uint64(0), uint64(1)<<20, 0, false
			for lo <= hi && probes < 60 && !found {
				mid := (lo + hi) / 2
				probes++
				st, h := check(fmt.Sprintf("%015d", mid), nil)
				switch {
				case st == http.StatusOK:
					found = true
				case h.Get(fencewire.HeaderReason) == "stale": // below the hidden current fence
					lo = mid + 1
				case h.Get(fencewire.HeaderReason) == "unknown": // above it
					hi = mid - 1
				default: // refused: nothing to learn
					lo, hi = 1, 0
				}
			}
			t.Logf("binary search without a token: found=%v in %d probes", found, probes)
			leaked := found || decisions(t, gw.reg) > before
			if leaked != variant.broken {
				t.Fatalf("binary search without a token: found=%v after %d probes, decisions %v→%v (broken variant %v)",
					found, probes, before, decisions(t, gw.reg), variant.broken)
			}
			if variant.broken {
				return
			}

			cases := []struct {
				name   string
				fence  string
				hdr    map[string]string
				status int
			}{
				{"no credential", cur.Fence, nil, 401},
				{"the token in Authorization is not the proxy's", cur.Fence, map[string]string{"Authorization": bearer("proxy")}, 401},
				{"unknown token", cur.Fence, map[string]string{"Proxy-Authorization": "Bearer nope"}, 401},
				{"a lock token lacks check", cur.Fence, map[string]string{"Proxy-Authorization": bearer("writer")}, 403},
				{"a check token for another prefix", cur.Fence, map[string]string{"Proxy-Authorization": bearer("orders-proxy")}, 403},
				{"check token, current fence", cur.Fence, map[string]string{"Proxy-Authorization": bearer("proxy")}, 200},
				{"check token, stale fence", old.Fence, map[string]string{"Proxy-Authorization": bearer("proxy")}, 409},
			}
			for _, tc := range cases {
				n := decisions(t, gw.reg)
				st, h := check(tc.fence, tc.hdr)
				if st != tc.status {
					t.Errorf("%s: status %d, want %d", tc.name, st, tc.status)
				}
				decided := decisions(t, gw.reg) > n
				if want := tc.status == 200 || tc.status == 409; decided != want || (h.Get(fencewire.HeaderDecisionID) != "") != want {
					t.Errorf("%s: decided %v (decision id %q), want %v", tc.name, decided, h.Get(fencewire.HeaderDecisionID), want)
				}
				if tc.status == 401 && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: WWW-Authenticate %q", tc.name, h.Get("WWW-Authenticate"))
				}
			}
		})
	}
}

// TestForwardAuthOwnListener: with authz.http.addr, forward-auth is served
// on its own listener (with the same credential) and the lock API's HTTP
// listener no longer answers it.
func TestForwardAuthOwnListener(t *testing.T) {
	cfg := config.Default()
	cfg.Store = "bolt://" + filepath.Join(t.TempDir(), "own.db") + "?fenceFloor=off"
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Authz.HTTP.Addr = "127.0.0.1:0"
	cfg.Tokens = []config.Token{tokenConfig("proxy", []string{"check"})}
	set := serveSettings{}
	var err error
	if set.store, err = parseStoreURL(cfg.Store); err != nil {
		t.Fatal(err)
	}
	if set.auth, err = newAuthenticator(cfg.Tokens); err != nil {
		t.Fatal(err)
	}
	opts := func(a *auth.Authenticator) authz.Options {
		return authzOptions(a, false, authz.Options{Logger: discardLogger()})
	}
	base, gw := forwardAuthGateway(t, cfg, set, opts)
	srv, err := lockserver.New(lockserver.Options{Store: gw.locks, Auth: set.auth, Registerer: prometheus.NewRegistry(), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := newForwardAuthRunner(cfg.Authz.HTTP, connlimit.Limits{}, srv, gw.checker, opts(set.auth), discardLogger(), gw.goBG)
	if err != nil {
		t.Fatal(err)
	}
	var ls serving.Group
	ls.Add("authz-http", r)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ls.Run(ctx, discardLogger()) }()
	t.Cleanup(func() { stop(); <-done })

	get := func(url, credential string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url+authz.HTTPPath, nil)
		req.Header.Set("X-Original-Method", "GET")
		req.Header.Set("X-Original-Uri", "/anything")
		if credential != "" {
			req.Header.Set("Proxy-Authorization", credential)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	own := "http://" + r.Addr()
	for _, tc := range []struct {
		name, url, credential string
		want                  int
	}{
		{"own listener, check token", own, "Bearer secret-proxy", 200},
		{"own listener, no token", own, "", 401},
		{"lock API listener no longer serves it", base, "Bearer secret-proxy", 404},
	} {
		if got := get(tc.url, tc.credential); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
}

// BenchmarkForwardAuthFlood: callers without a credential hammer
// forward-auth with made-up fences (#19 item 7's flood). Reports the
// decisions (each a decision-class audit event on a write) per request:
// 0 with the check token required, 1 with today's open endpoint.
//
//	go test -run '^$' -bench BenchmarkForwardAuthFlood -cpu 16 ./cmd/fencegate
func BenchmarkForwardAuthFlood(b *testing.B) {
	for _, variant := range []struct {
		name string
		opts func(*auth.Authenticator) authz.Options
	}{
		{"check-token", func(a *auth.Authenticator) authz.Options {
			return authzOptions(a, false, authz.Options{Logger: discardLogger()})
		}},
		{"open (today)", func(*auth.Authenticator) authz.Options { return authz.Options{Logger: discardLogger()} }},
	} {
		b.Run(variant.name, func(b *testing.B) {
			cfg := config.Default()
			cfg.Store = "bolt://" + filepath.Join(b.TempDir(), "flood.db")
			cfg.HTTP.Addr = "127.0.0.1:0"
			cfg.Tokens = []config.Token{tokenConfig("proxy", []string{"check"})}
			set := serveSettings{}
			var err error
			if set.store, err = parseStoreURL(cfg.Store); err != nil {
				b.Fatal(err)
			}
			if set.auth, err = newAuthenticator(cfg.Tokens); err != nil {
				b.Fatal(err)
			}
			base, gw := forwardAuthGatewayTB(b, cfg, set, variant.opts)
			if _, err := gw.store.Acquire(b.Context(), "orders/1", time.Hour); err != nil {
				b.Fatal(err)
			}
			before := decisionsTB(b, gw.reg)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodGet, base+authz.HTTPPath, nil)
					req.Header.Set("X-Original-Method", "PUT")
					req.Header.Set("X-Original-Uri", "/orders/1")
					req.Header.Set("X-Fence-Key", "orders/1")
					req.Header.Set("X-Fence-Token", "000000000000001")
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
			b.StopTimer()
			b.ReportMetric((decisionsTB(b, gw.reg)-before)/float64(b.N), "decisions/op")
		})
	}
}
