package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/testutil"
)

// startDebug serves the debug listener on d.Addr and returns its address.
func startDebug(t *testing.T, d config.Debug, log *slog.Logger) string {
	t.Helper()
	r, err := newDebugRunner(d, connlimit.Limits{}, log)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.Shutdown(ctx)
		<-done
	})
	return r.Addr()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	// A bounded client: a listener that never answers fails the test
	// instead of hanging it.
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestDebugListenerServesPprof: the index, a named profile and the CPU
// profile endpoint answer on the debug listener.
func TestDebugListenerServesPprof(t *testing.T) {
	addr := startDebug(t, config.Debug{Addr: "127.0.0.1:0"}, discardLogger())
	for _, c := range []struct{ path, want string }{
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/heap?debug=1", "heap profile"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
		{"/debug/pprof/cmdline", ""},
		{"/debug/pprof/profile?seconds=1", ""},
	} {
		code, body := get(t, "http://"+addr+c.path)
		if code != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d, body without %q:\n%.300s", c.path, code, c.want, body)
		}
	}
}

// TestDebugListenerWarnsOffLoopback: a loopback address starts silently; any
// other address the operator wrote starts too, with a warning naming it.
func TestDebugListenerWarnsOffLoopback(t *testing.T) {
	for _, c := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {"localhost:0", false}, {"0.0.0.0:0", true}, {":0", true}} {
		var buf bytes.Buffer
		log := testutil.Logger(&buf, slog.LevelWarn)
		startDebug(t, config.Debug{Addr: c.addr}, log)
		warned := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "not on loopback")
		if warned != c.warn {
			t.Errorf("%s: warned=%v, want %v; log:\n%s", c.addr, warned, c.warn, buf.String())
		}
	}
}

// TestDebugAddrConfig: off by default, set by --debug-addr, an address that
// is not host:port is a configuration problem.
func TestDebugAddrConfig(t *testing.T) {
	cfg, _, err := loadArgs(t)
	if err != nil || cfg.Debug.Enabled() {
		t.Fatalf("default: debug %+v, err %v; want off", cfg.Debug, err)
	}
	cfg, _, err = loadArgs(t, "--debug-addr", "127.0.0.1:6060")
	if err != nil || !cfg.Debug.Enabled() || cfg.Debug.Addr != "127.0.0.1:6060" {
		t.Fatalf("--debug-addr: debug %+v, err %v", cfg.Debug, err)
	}
	_, _, err = loadArgs(t, "--debug-addr", "nonsense")
	var p config.Problems
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "debug.addr") {
		t.Fatalf("want a debug.addr problem, got %v", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln := testutil.Listen(t)
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeDebugListener: `fencegate serve --debug-addr` serves pprof on
// that address only; the API's HTTP listener answers 404 for it.
func TestServeDebugListener(t *testing.T) {
	httpAddr, debugAddr := freeAddr(t), freeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`
store: bolt://%s
http: {addr: %q}
grpc: {addr: "off"}
authz: {addr: "off"}
admission: {addr: "off"}
debug: {addr: %q}
`, filepath.Join(t.TempDir(), "fence.db"), httpAddr, debugAddr))
	stop := startCommand(t, runServe, []string{"--config", cfg}, "fencegate ready")
	if code, body := get(t, "http://"+debugAddr+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("debug listener: %d %.200s", code, body)
	}
	if code, _ := get(t, "http://"+httpAddr+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("API listener serves /debug/pprof/: %d", code)
	}
	if code, log := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, log)
	}
}
