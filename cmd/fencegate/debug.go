package main

import (
	"log/slog"
	"net/http"
	"net/http/pprof"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/serving"
)

// newDebugRunner binds the opt-in profiling listener: net/http/pprof on a
// mux of its own (never http.DefaultServeMux, which the pprof package's
// init also fills, and never the API's listener), without auth — profiles
// show request paths and memory, so the listener belongs on loopback. A
// non-loopback address is served because the operator wrote it, with a
// warning saying what it exposes.
func newDebugRunner(d config.Debug, conns connlimit.Limits, log *slog.Logger) (*serving.HTTPRunner, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // the named profiles: heap, allocs, goroutine, block, mutex, …
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if !config.IsLoopback(d.Addr) {
		log.Warn("the debug listener is not on loopback: anyone who reaches it can read profiles, goroutine stacks and the command line, unauthenticated",
			"addr", d.Addr)
	}
	return serving.NewHTTP("debug", d.Addr, nil, mux, serving.ReadTimeout, conns, log)
}
