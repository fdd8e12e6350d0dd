package serving

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/testutil"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// testLimits are DefaultGRPCLimits scaled down so idle connections are
// reaped in seconds.
var testLimits = GRPCLimits{
	Conns:            connlimit.Limits{Max: 4, PerPeer: 4},
	Handshake:        300 * time.Millisecond,
	MaxIdle:          300 * time.Millisecond,
	KeepaliveTime:    time.Second,
	KeepaliveTimeout: time.Second,
	MinPingInterval:  time.Second,
	MaxStreams:       16,
}

// reapWindow is how long the test gives the server to close idle
// connections: grpc-go closes a max-idle connection whose peer never acks
// the GOAWAY ping 5 s after the first GOAWAY, so this is several times what
// a loaded machine needs.
const reapWindow = 30 * time.Second

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startGRPCHealth serves grpc.health.v1 (SERVING) on a loopback gRPC
// listener built as serve builds them, with limits.
func startGRPCHealth(t *testing.T, limits GRPCLimits) string {
	t.Helper()
	r, err := NewGRPC("grpc", "127.0.0.1:0", nil, limits, discardLogger(), func(g *grpc.Server) {
		hs := health.NewServer()
		healthpb.RegisterHealthServer(g, hs)

	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r.Shutdown(ctx)
		<-done
	})
	return r.Addr()
}

// reaped counts the connections the server closes within window. It reads
// (and drops) whatever the server sends, so a GOAWAY never blocks it.
func reaped(conns []net.Conn, window time.Duration) int {
	deadline := time.Now().Add(window)
	var mu sync.Mutex
	var wg sync.WaitGroup
	n := 0
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return // still open at the deadline
			}
			mu.Lock()
			n++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return n
}

func healthCheck(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	return err
}

// TestGRPCIdleConnectionsAreReaped: connections that send the preface and
// then nothing, more of them than the listener accepts, are closed by the
// server, and a health check made behind them is answered. Against the
// old listener (no limits) the idle connections stay open.
func TestGRPCIdleConnectionsAreReaped(t *testing.T) {
	t.Run("limits", func(t *testing.T) {
		addr := startGRPCHealth(t, testLimits)
		conns := testutil.OpenIdleH2(t, addr, 3*testLimits.Conns.Max)
		// The check waits in the accept queue until idle connections
		// are reaped; it must not need a slot of its own.
		ctx, cancel := context.WithTimeout(context.Background(), reapWindow)
		defer cancel()
		if err := healthCheck(ctx, addr); err != nil {
			t.Fatalf("health behind %d idle connections: %v", len(conns), err)
		}
		if n := reaped(conns, reapWindow); n != len(conns) {
			t.Fatalf("%d of %d idle connections reaped within %v", n, len(conns), reapWindow)
		}
	})
	t.Run("no limits (the old listener) keeps them", func(t *testing.T) {
		addr := startGRPCHealth(t, GRPCLimits{Conns: connlimit.Limits{Max: 1 << 20, PerPeer: 1 << 20}})
		conns := testutil.OpenIdleH2(t, addr, 3*testLimits.Conns.Max)
		ctx, cancel := context.WithTimeout(context.Background(), reapWindow)
		defer cancel()
		if err := healthCheck(ctx, addr); err != nil {
			t.Fatal(err)
		}
		// The limits variant closes every connection within ~5 s; this
		// shorter look is enough to see that nothing here closes them.
		if n := reaped(conns, 8*time.Second); n != 0 {
			t.Fatalf("%d idle connections closed without limits: the probe cannot tell", n)
		}
	})
}

// TestForwardAuthDoesNotWaitForABody: a forward-auth request announcing a
// body it never sends is answered at once and its connection closed, not
// held for the lock API's read timeout (which a waiting acquire needs).
func TestForwardAuthDoesNotWaitForABody(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        func(http.Handler) http.Handler
		window   time.Duration // how long the test waits for the reply
		answered bool
	}{
		{"Bodiless", Bodiless, reapWindow, true},
		// Shorter look: the point is only that there is no reply by then.
		{"plain handler (broken variant)", func(h http.Handler) http.Handler { return h }, 5 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle("/check", tc.h(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusOK)
			})))
			r, err := NewHTTP("http", "127.0.0.1:0", nil, mux, time.Hour, connlimit.Limits{}, discardLogger())
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = r.Serve() }()
			t.Cleanup(func() { r.srv.Close() })

			c, err := net.Dial("tcp", r.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(tc.window))
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if !tc.answered {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("reply %v, %v: the broken variant answered, the probe cannot tell", res, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("no reply within %v: %v", tc.window, err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK || !res.Close {
				t.Fatalf("status %d, close %v", res.StatusCode, res.Close)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("connection not closed after the reply: %v", err)
			}
		})
	}
}
