package main

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/routereload"
)

// TestMaxWaitWiring: a proxy route's maxWait reaches its table entry's
// compiled route (what the proxy serves it with).
func TestMaxWaitWiring(t *testing.T) {
	cfg := config.Config{Proxy: config.Proxy{Routes: []config.ProxyRoute{{
		Prefix: "/o", Upstream: "http://127.0.0.1:1", Barrier: true, MaxWait: config.Duration(1500 * time.Millisecond),
	}}}}
	tbl, err := routereload.Compile(&cfg)
	if err != nil || tbl.Len() != 1 || tbl.Entries()[0].Route.MaxWait != 1500*time.Millisecond {
		t.Fatalf("compileTable: %+v %v", tbl.Entries(), err)
	}
}
