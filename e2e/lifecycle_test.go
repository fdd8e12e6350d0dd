package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestSIGTERMTurnsUnreadyBeforeDraining runs the real binary and sends it
// SIGTERM while a client holds an HTTP keep-alive connection and a gRPC
// connection to each gRPC listener. With shutdown.delay, /readyz answers 503 (phase draining)
// and gRPC health NOT_SERVING on those connections while the same
// connections still get lock API answers; only after the delay do they
// close. The broken variant, --shutdown-delay 0s, is today's behaviour
// before this change (the listeners went straight to shutdown): the
// connection closes before any prober hears 503, and the test catches it.
func TestSIGTERMTurnsUnreadyBeforeDraining(t *testing.T) {
	const delay = 3 * time.Second
	for _, tc := range delayVariants(delay) {
		t.Run(tc.name, func(t *testing.T) {
			g := StartGateway(t, "bolt://"+filepath.Join(t.TempDir(), "fg.db"), "--shutdown-delay", tc.delay.String(), "--log-level", "info")
			err := drainOrder(t, g, tc.delay)
			orderVerdict(t, tc.broken, err)
			awaitExit(t, g, "gateway")
			if g.err != nil {
				t.Errorf("exit after SIGTERM: %v", g.err)
			}
		})
	}
}

// delayVariant is a run with --shutdown-delay delay; the broken one (0s)
// is the behaviour before the delay existed.
type delayVariant struct {
	name   string
	delay  time.Duration
	broken bool
}

// delayVariants are the SIGTERM tests' runs: with delay (correct) and
// straight to draining (broken, to be caught).
func delayVariants(delay time.Duration) []delayVariant {
	return []delayVariant{{fmt.Sprintf("shutdown delay %v", delay), delay, false}, {"broken: delay 0s (straight to draining)", 0, true}}
}

// orderVerdict fails t unless err fits the variant: nil for the correct
// one; for the broken one an error (it was caught), or the test cannot
// tell the old order from the new.
func orderVerdict(t *testing.T, broken bool, err error) {
	t.Helper()
	switch {
	case !broken && err != nil:
		t.Fatal(err)
	case broken && err == nil:
		t.Fatal("the broken variant passed: the test cannot tell the old order from the new")
	case broken:
		t.Logf("broken variant caught: %v", err)
	}
}

// awaitExit waits up to 30 s for g (what: gateway or proxy) to exit after
// SIGTERM.
func awaitExit(t *testing.T, g *Gateway, what string) {
	t.Helper()
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still running 30s after SIGTERM", what)
	}
}

// keepAlive opens one HTTP/1.1 connection to addr and returns a GET over
// it: every call reuses the connection, and an error means it closed.
func keepAlive(t *testing.T, addr string) func(path string) (int, []byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	return func(path string) (int, []byte, error) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: fencegate\r\n\r\n", path); err != nil {
			return 0, nil, err
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, nil, err
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, b, err
	}
}

// phase is the lifecycle phase of a /readyz or /healthz body.
func phase(b []byte) string {
	var r struct{ Phase string }
	_ = json.Unmarshal(b, &r)
	return r.Phase
}

// awaitUnready polls /readyz over get until it answers 503 with phase
// draining; an error if the connection closes first.
func awaitUnready(get func(string) (int, []byte, error), sent time.Time) error {
	for {
		st, b, err := get("/readyz")
		if err != nil {
			return fmt.Errorf("the connection closed %v after SIGTERM before /readyz answered 503: %w", time.Since(sent), err)
		}
		if st == http.StatusServiceUnavailable {
			if phase(b) != "draining" {
				return fmt.Errorf("/readyz after SIGTERM: %d %s, want phase draining", st, b)
			}
			return nil
		}
		if time.Since(sent) > 10*time.Second {
			return fmt.Errorf("/readyz still %d %s 10s after SIGTERM", st, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitClosed polls path over get until the connection closes, and
// checks that it closed no sooner than most of delay after sent.
func awaitClosed(get func(string) (int, []byte, error), path string, sent time.Time, delay time.Duration) (time.Duration, error) {
	for {
		if _, _, err := get(path); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return 0, fmt.Errorf("the connection hung: %w", err)
			}
			break
		}
		if time.Since(sent) > delay+20*time.Second {
			return 0, errors.New("the connection still answers long after the delay")
		}
		time.Sleep(50 * time.Millisecond)
	}
	closed := time.Since(sent)
	if closed < delay*3/4 {
		return closed, fmt.Errorf("the connection closed %v after SIGTERM, before the %v delay", closed, delay)
	}
	return closed, nil
}

// drainOrder sends SIGTERM to g and returns the first property of the
// shutdown order that fails: /readyz must turn 503 (phase draining) on a
// connection that stays open, that connection must still answer a lock
// API call afterwards and gRPC health must say NOT_SERVING on an existing
// connection, and the connection must close only about delay after
// SIGTERM.
func drainOrder(t *testing.T, g *Gateway, delay time.Duration) error {
	t.Helper()
	get := keepAlive(t, g.HTTP)
	if st, b, err := get("/readyz"); err != nil || st != 200 || phase(b) != "ready" {
		t.Fatalf("/readyz before SIGTERM: %d %s %v", st, b, err)
	}
	// The lock API's gRPC listener and the authz listener (Envoy
	// health-checks it), each on a connection opened before SIGTERM.
	locks := healthpb.NewHealthClient(dialGRPC(t, g.GRPC))
	authz := healthpb.NewHealthClient(dialGRPC(t, g.Authz))
	health := func() (healthpb.HealthCheckResponse_ServingStatus, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := locks.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return 0, fmt.Errorf("grpc listener: %w", err)
		}
		a, err := authz.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"})
		if err != nil {
			return 0, fmt.Errorf("authz listener: %w", err)
		}
		if a.GetStatus() != r.GetStatus() {
			return 0, fmt.Errorf("grpc listener %v, authz listener %v", r.GetStatus(), a.GetStatus())
		}
		return r.GetStatus(), err
	}
	if st, err := health(); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health before SIGTERM: %v %v", st, err)
	}

	sent := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// 1. /readyz turns 503 on the open connection, which never closes
	//    first.
	if err := awaitUnready(get, sent); err != nil {
		return err
	}
	unready := time.Now()
	// 2. The same connection still serves the lock API, and gRPC health
	//    says NOT_SERVING on the connection opened before.
	if st, b, err := get("/v1/locks/status?key=orders/1"); err != nil || st != 200 {
		return fmt.Errorf("lock API on the open connection after /readyz turned 503: %d %s %v", st, b, err)
	}
	if st, err := health(); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		return fmt.Errorf("gRPC health during the delay: %v %v, want NOT_SERVING", st, err)
	}
	// 3. Connections close only once the delay is over.
	closed, err := awaitClosed(get, "/healthz", sent, delay)
	if err != nil {
		return err
	}
	t.Logf("SIGTERM → /readyz 503: %v; → connection closed: %v (delay %v)", unready.Sub(sent), closed, delay)
	return nil
}

// TestProxySIGTERMTurnsUnreadyBeforeDraining: the standalone `fencegate
// proxy` follows the same lifecycle. After SIGTERM its metrics listener's
// /readyz answers 503 (phase draining) while a connection to the proxy
// listener still gets the upstream's answers; that connection closes only
// after the delay. The broken variant (--shutdown-delay 0s) is caught.
func TestProxySIGTERMTurnsUnreadyBeforeDraining(t *testing.T) {
	const delay = 3 * time.Second
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "upstream\n") }))
	defer app.Close()
	for _, tc := range delayVariants(delay) {
		t.Run(tc.name, func(t *testing.T) {
			p := StartProxy(t, "bolt://"+filepath.Join(t.TempDir(), "fg.db"), proxyRoutesConfig(t, route("r", app.URL, false, "")),
				"--log-level", "info", "--metrics-addr", "127.0.0.1:0", "--shutdown-delay", tc.delay.String())
			err := func() error {
				metrics, proxied := keepAlive(t, p.Metrics), keepAlive(t, p.Proxy)
				if st, b, err := metrics("/readyz"); err != nil || st != 200 || phase(b) != "ready" {
					t.Fatalf("/readyz before SIGTERM: %d %s %v", st, b, err)
				}
				if st, b, err := proxied("/r/1"); err != nil || st != 200 {
					t.Fatalf("GET through the proxy before SIGTERM: %d %s %v", st, b, err)
				}
				sent := time.Now()
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				if err := awaitUnready(metrics, sent); err != nil {
					return err
				}
				if st, b, err := proxied("/r/2"); err != nil || st != 200 {
					return fmt.Errorf("GET through the proxy after /readyz turned 503: %d %s %v", st, b, err)
				}
				closed, err := awaitClosed(proxied, "/r/3", sent, delay)
				t.Logf("SIGTERM → proxy connection closed: %v", closed)
				return err
			}()
			orderVerdict(t, tc.broken, err)
			awaitExit(t, p, "proxy")
		})
	}
}
