// Package e2e runs the real fencegate binary against real stores and real
// proxies. TestMain builds the binary once; each test starts its own gateway
// on free ports and reads the addresses from the "fencegate ready" log line.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/cmd/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/internal/testutil"
)

// binary is the fencegate executable under test: the one `make test` built
// once for every package, or built by TestMain (fencegatetest.Binary).
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here runs the built binary against real services
		// (Redis, PostgreSQL, the Firestore emulator, nginx, Chromium).
		fmt.Println("e2e: every test needs the built binary and real services: skipped under -short (make test-unit); make test runs them")
		os.Exit(0)
	}
	var err error
	binary, err = fencegatetest.Binary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building fencegate:", err)
		os.Exit(1)
	}
	code := m.Run()
	fencegatetest.Cleanup()
	os.Exit(code)
}

// Gateway is one running fencegate process.
type Gateway struct {
	HTTP      string // host:port of the HTTP listener ("" if off)
	GRPC      string
	Authz     string
	Admission string
	Proxy     string // the fencing reverse proxy's listener ("" without proxy routes)
	Metrics   string // a standalone proxy's metrics listener ("" without --metrics-addr)

	cmd  *exec.Cmd
	logs *testutil.LogBuffer
	done chan struct{}
	err  error
}

// URL is the HTTP base URL.
func (g *Gateway) URL() string { return "http://" + g.HTTP }

// Logs returns everything the gateway logged so far.
func (g *Gateway) Logs() string { return g.logs.String() }

// Stop sends SIGTERM and waits for a clean exit.
func (g *Gateway) Stop(t testing.TB) {
	t.Helper()
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
		t.Errorf("gateway did not stop within 30s of SIGTERM")
	}
}

// Kill ends the process with SIGKILL (kill -9: no drain, no deregistering)
// and waits until it is gone.
func (g *Gateway) Kill(t testing.TB) {
	t.Helper()
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("process %d still running 30s after SIGKILL", g.cmd.Process.Pid)
	}
}

// StartGateway runs `fencegate serve --store storeURL args...` with every
// listener on a free loopback port (unless args set them) and waits until
// it logs that it is ready. The gateway is stopped when the test ends; its
// log is printed if the test failed.
func StartGateway(t testing.TB, storeURL string, args ...string) *Gateway {
	t.Helper()
	full := []string{"serve", "--store", storeURL, "--log-format", "json"}
	if !hasFlag(args, "--log-level") {
		full = append(full, "--log-level", "debug")
	}
	for _, l := range []string{"--http-addr", "--grpc-addr", "--authz-addr"} {
		if !hasFlag(args, l) {
			full = append(full, l, "127.0.0.1:0")
		}
	}
	full = append(full, args...)
	return startServer(t, full, "fencegate ready")
}

// StartProxy runs `fencegate proxy --store storeURL --config config args...`
// (the standalone fencing reverse proxy) and waits until it logs that it is
// ready; Gateway.Proxy is its listener. Routes and the listener address
// come from the config file.
func StartProxy(t testing.TB, storeURL, config string, args ...string) *Gateway {
	t.Helper()
	full := []string{"proxy", "--store", storeURL, "--config", config, "--log-format", "json"}
	if !hasFlag(args, "--log-level") {
		full = append(full, "--log-level", "debug")
	}
	return startServer(t, append(full, args...), "fencegate proxy ready")
}

// startServer runs the binary with args until it logs a line whose msg
// starts with readyMsg, and reads the listeners' addresses from that line.
func startServer(t testing.TB, full []string, readyMsg string) *Gateway {
	t.Helper()
	cmd := exec.Command(binary, full...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "FENCEGATE_CONFIG=") // no stray config from the environment
	logs := &testutil.LogBuffer{}
	pr, pw := io.Pipe()
	cmd.Stdout = logs
	cmd.Stderr = io.MultiWriter(logs, pw)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fencegate: %v", err)
	}
	g := &Gateway{cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() {
		g.err = cmd.Wait()
		pw.Close()
		close(g.done)
	}()
	t.Cleanup(func() {
		g.Stop(t)
		if t.Failed() {
			t.Logf("fencegate log:\n%s", g.Logs())
		}
	})

	ready := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasPrefix(fmt.Sprint(line["msg"]), readyMsg) {
				ready <- line
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case line := <-ready:
		str := func(k string) string { s, _ := line[k].(string); return s }
		g.HTTP, g.GRPC, g.Authz, g.Admission, g.Proxy, g.Metrics = str("http"), str("grpc"), str("authz"), str("admission"), str("proxy"), str("metrics")
	case <-g.done:
		t.Fatalf("fencegate exited before it was ready (%v):\n%s", g.err, g.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("fencegate not ready after 60s:\n%s", g.Logs())
	}
	return g
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// Store is one store kind the e2e tests run against.
type Store struct {
	Name string
	URL  string
}

// Stores returns a fresh, isolated namespace on every store kind: a new
// bolt file; a new key prefix on REDIS_URL; new tables on DATABASE_URL; new
// collections on the Firestore emulator. A missing service fails the test:
// `make test` starts them (scripts/testenv).
func Stores(t testing.TB) []Store {
	t.Helper()
	ns := "e2e_" + randHex(4)
	return []Store{
		{"bolt", "bolt://" + filepath.Join(t.TempDir(), "fencegate.db")},
		{"redis", RedisURL(t, ns)},
		{"postgres", PostgresURL(t, ns)},
		{"firestore", FirestoreURL(t, ns)},
	}
}

// RedisURL is REDIS_URL with a fresh key prefix.
func RedisURL(t testing.TB, ns string) string {
	return withParams(t, need(t, "REDIS_URL"), url.Values{"prefix": {ns}})
}

// PostgresURL is DATABASE_URL with fresh table names.
func PostgresURL(t testing.TB, ns string) string {
	return withParams(t, need(t, "DATABASE_URL"), url.Values{
		"table": {ns + "_locks"}, "fenceTable": {ns + "_fences"}, "auditTable": {ns + "_audit"},
		"barrierTable": {ns + "_writes"},
	})
}

// FirestoreURL names a fresh project on the emulator at FIRESTORE_EMULATOR_HOST.
func FirestoreURL(t testing.TB, ns string) string {
	need(t, "FIRESTORE_EMULATOR_HOST")
	return "firestore://" + strings.ReplaceAll(ns, "_", "-")
}

func need(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Fatalf("%s is not set: run the tests with `make test`, which starts throwaway Redis, PostgreSQL and the Firestore emulator (scripts/testenv)", env)
	}
	return v
}

func withParams(t testing.TB, raw string, extra url.Values) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse %q: %v", raw, err)
	}
	q := u.Query()
	for k, v := range extra {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Call is one HTTP request against a gateway.
type Call struct {
	Method, Path string
	Body         string // sent as application/json unless ContentType says otherwise
	ContentType  string
	Token        string
	Header       http.Header
}

// Reply is the answer to a Call.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	JSON   map[string]any
}

// Do sends c to base and decodes a JSON reply (if any).
func Do(t testing.TB, base string, c Call) Reply {
	t.Helper()
	var body io.Reader
	if c.Body != "" {
		body = strings.NewReader(c.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, c.Method, base+c.Path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	if c.Body != "" {
		ct := c.ContentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.Method, c.Path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := Reply{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	if len(bytes.TrimSpace(raw)) > 0 {
		_ = json.Unmarshal(raw, &r.JSON)
	}
	return r
}

// waitReady polls /readyz: the first call to a cold Firestore emulator can
// take longer than the 2 s readiness budget.
func waitReady(t testing.TB, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := Do(t, base, Call{Method: "GET", Path: "/readyz"})
		if r.Status == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after 30s: %s", r.Status, r.Body)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
