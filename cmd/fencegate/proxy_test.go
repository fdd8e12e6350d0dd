package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/routereload"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fencegate.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProxyCommandRejectsBadConfig: every problem is listed at once, exit 2.
func TestProxyCommandRejectsBadConfig(t *testing.T) {
	cfg := writeConfig(t, `
store: bolt://`+filepath.Join(t.TempDir(), "x.db")+`
proxy:
  addr: nonsense
  routes:
    - name: a
      prefix: orders
      upstream: ftp://x
    - name: b
      prefix: /b
      upstream: http://127.0.0.1:1
      policy: newest
      key: "b/{0}"
      maxWrite: 5s
      bodyTimeout: 48h
`)
	var stderr bytes.Buffer
	if code := runProxy(t.Context(), []string{"--config", cfg}, io.Discard, &stderr); code != exitUsage {
		t.Fatalf("exit %d, want %d: %s", code, exitUsage, stderr.String())
	}
	for _, want := range []string{"proxy.addr", "routes[0] (a).prefix", "routes[0] (a).upstream", "newest", "segment number", "set without barrier", "bodyTimeout: must be between"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if code := runProxy(t.Context(), nil, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("no config: exit %d", code)
	}
	// Routes fine one by one that an upstream routing case-insensitively
	// could not tell apart.
	cfg = writeConfig(t, `
store: bolt://`+filepath.Join(t.TempDir(), "y.db")+`
proxy:
  routes:
    - {name: a, prefix: /Orders, upstream: "http://127.0.0.1:1"}
    - {name: b, prefix: /orders, upstream: "http://127.0.0.1:1", upgrade: true}
`)
	stderr.Reset()
	if code := runProxy(t.Context(), []string{"--config", cfg}, io.Discard, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "case-insensitive") {
		t.Errorf("colliding prefixes: exit %d, want %d: %s", code, exitUsage, stderr.String())
	}
}

// TestProxyCommandServes runs `fencegate proxy` from a YAML config against
// a bolt store and an upstream, writes through it, and drains on cancel.
func TestProxyCommandServes(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "fence.db")
	s, err := bolt.Open(t.Context(), bolt.Config{Path: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(t.Context(), "orders/7", time.Minute)
	if err != nil || !l.OK {
		t.Fatal(l, err)
	}
	_ = s.Close()

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "verified=%s lockid=%s", r.Header.Get("X-Fence-Verified"), r.Header.Get("X-Fence-Lock-Id"))
	}))
	t.Cleanup(up.Close)
	ln := testutil.Listen(t)
	addr := ln.Addr().String()
	_ = ln.Close()
	cfg := writeConfig(t, fmt.Sprintf(`
store: bolt://%s
proxy:
  addr: %s
  routes:
    - name: orders
      prefix: /orders
      upstream: %s
      key: "orders/{2}"
      barrier: true
      maxWrite: 10s
`, dbPath, addr, up.URL))

	stop := startCommand(t, runProxy, []string{"--config", cfg}, "fencegate proxy ready")
	issued, _ := lockstore.ParseFence(l.Fence)
	never, _ := lockstore.FormatFence(issued + 1000)
	for _, tc := range []struct {
		fence  string
		status int
		body   string
	}{
		{l.Fence, 200, "verified=" + l.Fence + " lockid="},
		{never, 409, `"error":"unknown"`},
		{"", 428, `"error":"missing"`},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "PUT", "http://"+addr+"/orders/7", strings.NewReader("x"))
		if tc.fence != "" {
			req.Header.Set("X-Fence-Token", tc.fence)
		}
		req.Header.Set("X-Fence-Lock-Id", l.LockID)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || !strings.Contains(string(b), tc.body) {
			t.Errorf("fence %q: %d %s", tc.fence, res.StatusCode, b)
		}
	}
	if code, log := stop(); code != exitOK { // stop waits for the drain (bounded by the proxy's drain timeout)
		t.Fatalf("exit %d: %s", code, log)
	}
}

// TestServeMountsProxy: `fencegate serve` with proxy.routes runs the proxy
// listener (here the only one), and refuses bad route options with exit 2.
func TestServeMountsProxy(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "fence.db")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "verified=%s", r.Header.Get("X-Fence-Verified"))
	}))
	t.Cleanup(up.Close)

	bad := writeConfig(t, fmt.Sprintf(`
store: bolt://%s
proxy:
  routes:
    - {prefix: /o, upstream: %s, policy: newest}
`, dbPath, up.URL))
	var stderr bytes.Buffer
	if code := runServe(t.Context(), []string{"--config", bad}, io.Discard, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "newest") {
		t.Fatalf("bad route: exit %d: %s", code, stderr.String())
	}

	ln := testutil.Listen(t)
	addr := ln.Addr().String()
	_ = ln.Close()
	cfg := writeConfig(t, fmt.Sprintf(`
store: bolt://%s
http: {addr: "off"}
grpc: {addr: "off"}
authz: {addr: "off"}
admission: {addr: "off"}
proxy:
  addr: %s
  routes:
    - {prefix: /, upstream: %s, key: "k", barrier: true}
`, dbPath, addr, up.URL))
	stop := startCommand(t, runServe, []string{"--config", cfg}, "fencegate ready")
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+addr+"/x", nil)
	req.Header.Set("X-Fence-Token", "000000000000001")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 409 || !strings.Contains(string(b), `"error":"unknown"`) {
		t.Fatalf("write on a never-locked key: %d %s", res.StatusCode, b)
	}
	if code, log := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, log)
	}
}

// startCommand runs a serving subcommand (runServe, runProxy) with args
// until the test ends, and waits up to 30 s for its ready line. stop ends
// it and returns its exit code and log.
func startCommand(t *testing.T, run func(context.Context, []string, io.Writer, io.Writer) int, args []string, ready string) (stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stderr := &testutil.LogBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, io.Discard, stderr) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), ready) {
		select {
		case code := <-done:
			t.Fatalf("exited %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() (int, string) {
		cancel()
		return <-done, stderr.String()
	}
}

// TestProxyCommandReloads: `fencegate proxy`, and the proxy listener of
// `fencegate serve`, reload the route table on SIGHUP (the file poll is
// slowed to an hour, so SIGHUP alone applies it):
// a moved upstream serves the next request; a table that does not load,
// and one with no upstream entry, are refused and the served one kept.
// The broken variant (SIGHUP ignored, no reloader: the proxy before #27)
// keeps serving the first upstream, and the test catches it.
func TestProxyCommandReloads(t *testing.T) {
	defer func(d time.Duration) { routereload.PollInterval = d }(routereload.PollInterval)
	routereload.PollInterval = time.Hour
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		via, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		fmt.Fprintf(w, "via=%s", via)
	}))
	t.Cleanup(up.Close)
	for _, tc := range []struct {
		name          string
		run           func(context.Context, []string, io.Writer, io.Writer) int
		ready, listen string
		broken        bool
	}{
		{"proxy", runProxy, "fencegate proxy ready", "", false},
		{"serve", runServe, "fencegate ready", `http: {addr: "off"}` + "\ngrpc: {addr: \"off\"}\nauthz: {addr: \"off\"}\nadmission: {addr: \"off\"}\n", false},
		{"proxy-broken", runProxy, "fencegate proxy ready", "", true},
	} {
		broken := tc.broken
		t.Run(tc.name, func(t *testing.T) {
			proxyIgnoresHUP = broken
			t.Cleanup(func() { proxyIgnoresHUP = false })
			ln := testutil.Listen(t)
			addr := ln.Addr().String()
			_ = ln.Close()
			head := fmt.Sprintf("store: bolt://%s\nproxy: {addr: %s}\n%s", filepath.Join(t.TempDir(), "fence.db"), addr, tc.listen)
			entry := func(upstream, more string) string {
				return head + "routes:\n  - {name: a, match: {path: {value: /a}}, key: k, upstream: " + upstream + more + "}\n"
			}
			path := writeConfig(t, entry(up.URL+"/one", ""))
			write := func(body string) {
				if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			stop := startCommand(t, tc.run, []string{"--config", path}, tc.ready)
			via := func() string {
				res, err := http.Get("http://" + addr + "/a/1")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				return string(b)
			}
			hup := func() {
				if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
			if v := via(); v != "via=one" {
				t.Fatalf("before the reload: %q", v)
			}
			write(entry(up.URL+"/two", ""))
			hup()
			reloaded := false
			for deadline := time.Now().Add(3 * time.Second); !reloaded && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				reloaded = via() == "via=two"
			}
			if broken {
				if reloaded {
					t.Fatal("the proxy without a reloader reloaded: the test cannot tell")
				}
				stop()
				return
			}
			if !reloaded {
				t.Fatalf("SIGHUP did not move the upstream: %q", via())
			}
			for _, bad := range []string{
				entry(up.URL+"/three", ", policy: newest"),
				head + "routes:\n  - {name: a, match: {path: {value: /a}}, key: k}\n",
			} {
				write(bad)
				hup()
				time.Sleep(300 * time.Millisecond)
				if v := via(); v != "via=two" {
					t.Errorf("after a table that does not serve: %q, want the served one kept", v)
				}
			}
			code, log := stop()
			if code != exitOK || strings.Count(log, "route table reload failed") < 2 || !strings.Contains(log, "no entry has an upstream") {
				t.Fatalf("exit %d: %s", code, log)
			}
		})
	}
}
