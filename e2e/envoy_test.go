package e2e

import (
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestEdgeThroughEnvoy runs the same workload as TestEdgeThroughNginx
// through Envoy with the shipped deploy/envoy/envoy.yaml, where an envoy
// binary is installed. These machines cannot have one (no Envoy package in
// the registries they reach), so here the shipped config is proven by
// deploy/envoy's schema test and the decision by authz's Envoy-shaped gRPC
// tests; this test is what runs on a machine that has Envoy.
func TestEdgeThroughEnvoy(t *testing.T) {
	bin, err := exec.LookPath("envoy")
	if err != nil {
		t.Skip("no envoy binary on PATH: the Envoy walk-through runs where Envoy is installed (see deploy/envoy/README.md)")
	}
	rec := &recorder{}
	app := httptest.NewServer(rec)
	defer app.Close()
	g := StartGateway(t, RedisURL(t, "e2e_envoy_"+randHex(4)), "--log-level", "info", "--config", edgeConfig(t))
	edge := startEnvoy(t, bin, g.Authz, strings.TrimPrefix(app.URL, "http://"))
	run := runEdgeWorkers(t, g, edge, 20*time.Second)
	checkEdgeRun(t, g, rec, run)
}

// startEnvoy runs envoy with the shipped config, its addresses replaced.
func startEnvoy(t *testing.T, bin, authzAddr, appAddr string) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(self)), "deploy", "envoy", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hostPort := func(addr string) (string, string) {
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		return h, p
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	admin := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	text := string(raw)
	for from, to := range map[string]string{
		"port_value: 9901":  "port_value: " + second(hostPort(admin)),
		"port_value: 10000": "port_value: " + second(hostPort(listen)),
		"port_value: 9191":  "port_value: " + second(hostPort(authzAddr)),
		"port_value: 3000":  "port_value: " + second(hostPort(appAddr)),
	} {
		if strings.Count(text, from) != 1 {
			t.Fatalf("envoy.yaml should contain %q exactly once; update this test", from)
		}
		text = strings.Replace(text, from, to, 1)
	}
	conf := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf, "--base-id", fmt.Sprint(os.Getpid()%60000), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.Dial("tcp", listen); err == nil {
			_ = c.Close()
			return "http://" + listen
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy did not listen on %s", listen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func second(_, b string) string { return b }
