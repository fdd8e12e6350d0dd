package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestReloadPastAFIFO (#26 item 8), through the binary: the ConfigMap
// symlink swapped to a FIFO and SIGHUP, then to a valid table and SIGHUP:
// the valid table serves within seconds (before: 7 s later the old table
// still served, and every later reload waited on the FIFO). The FIFO's
// reload is logged as failed; the broken variant (a blocking read) is
// caught by cmd/fencegate's TestReloadPastAFIFO.
func TestReloadPastAFIFO(t *testing.T) {
	one := "routes:\n  - {name: a, match: {path: {value: /a}}, key: a}\n"
	two := one + "  - {name: b, match: {path: {value: /b}}, key: b}\n"
	cfg, swap := configMapDir(t, one)
	g := StartGateway(t, "bolt://./fifo.db", "--config", cfg, "--log-level", "info")
	if n := metricValue(t, g.URL(), "fencegate_routes_entries"); n != 1 {
		t.Fatalf("fencegate_routes_entries = %v at start", n)
	}
	dir := filepath.Dir(cfg)
	fifoDir := filepath.Join(dir, "..fifo")
	if err := os.Mkdir(fifoDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifoDir, "config.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..fifo", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the FIFO's reload to fail", func() bool {
		return strings.Contains(g.Logs(), "not a regular file")
	})
	swap(two)
	start := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the valid table after the FIFO", func() bool {
		return metricValue(t, g.URL(), "fencegate_routes_entries") == 2
	})
	t.Logf("the valid table served %v after its SIGHUP", time.Since(start).Round(time.Millisecond))
}
