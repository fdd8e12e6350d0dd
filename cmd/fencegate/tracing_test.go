package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// TestTracingVariablesInServeConfig: the OTEL_* variables are read with
// the configuration; one that does not parse is a problem in the same
// list (exit 2 before anything opens), not tracing silently off.
func TestTracingVariablesInServeConfig(t *testing.T) {
	load := func(env map[string]string) (serveSettings, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		build := config.FlagsFile(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		_, set, err := loadServeConfig(build, func(k string) string { return env[k] })
		return set, err
	}
	set, err := load(nil)
	if err != nil || set.tracing.Enabled {
		t.Fatalf("no variable: tracing %+v, err %v; want off", set.tracing, err)
	}
	set, err = load(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
	if err != nil || !set.tracing.Enabled {
		t.Fatalf("endpoint set: tracing %+v, err %v; want on", set.tracing, err)
	}
	_, err = load(map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"})
	var p config.Problems
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "tracing: ") || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("bad exporter: err %v, want a problem naming OTEL_TRACES_EXPORTER", err)
	}
}
