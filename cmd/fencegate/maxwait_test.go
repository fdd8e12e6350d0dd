package main

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/routereload"
	"github.com/fencegate/fencegate/proxy"
)

// TestMaxWaitWiring: config restates the barrier wait's defaults of
// fencecheck and proxy, and a proxy route's maxWait reaches its table
// entry's compiled route (what the proxy serves it with).
func TestMaxWaitWiring(t *testing.T) {
	if config.DefaultMaxWaitCap != fencecheck.DefaultMaxWaitCap {
		t.Errorf("config.DefaultMaxWaitCap %s, fencecheck.DefaultMaxWaitCap %s", config.DefaultMaxWaitCap, fencecheck.DefaultMaxWaitCap)
	}
	if config.DefaultProxyMaxWait != proxy.DefaultMaxWait {
		t.Errorf("config.DefaultProxyMaxWait %s, proxy.DefaultMaxWait %s", config.DefaultProxyMaxWait, proxy.DefaultMaxWait)
	}
	cfg := config.Config{Proxy: config.Proxy{Routes: []config.ProxyRoute{{
		Prefix: "/o", Upstream: "http://127.0.0.1:1", Barrier: true, MaxWait: config.Duration(1500 * time.Millisecond),
	}}}}
	tbl, err := routereload.Compile(&cfg)
	if err != nil || tbl.Len() != 1 || tbl.Entries()[0].Route.MaxWait != 1500*time.Millisecond {
		t.Fatalf("compileTable: %+v %v", tbl.Entries(), err)
	}
}
