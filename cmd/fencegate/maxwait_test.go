package main

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
)

// TestMaxWaitWiring: a proxy route's maxWait reaches proxy.Route.
func TestMaxWaitWiring(t *testing.T) {
	cfg := config.Config{Proxy: config.Proxy{Routes: []config.ProxyRoute{{
		Prefix: "/o", Upstream: "http://127.0.0.1:1", Barrier: true, MaxWait: config.Duration(1500 * time.Millisecond),
	}}}}
	routes, err := proxyRoutes(cfg.ProxyEntries())
	if err != nil || len(routes) != 1 || routes[0].MaxWait != 1500*time.Millisecond {
		t.Fatalf("proxyRoutes: %+v %v", routes, err)
	}
}
