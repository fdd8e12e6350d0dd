package connlimit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/serving"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// answerWithin is how long a legitimate caller may wait behind an attack
// before the test calls it starved: the listener's old behaviour made it
// wait for an idle connection's 2-minute timeout, so this is generous for
// a loaded machine and still far from that.
const answerWithin = 5 * time.Second

// connTestHandler: /healthz answers at once (what the attack sends),
// /slow holds its request until release is closed, /auth marks its
// connection as an authenticated caller's when mark is set.
func connTestHandler(release <-chan struct{}, mark bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/auth", func(w http.ResponseWriter, r *http.Request) {
		if mark {
			connlimit.MarkTrusted(r.Context())
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// stopNow stops r at once, open connections included: a shutdown whose
// context has already ended closes everything.
func stopNow(r serving.Runner) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Shutdown(ctx)
}

// startSlots serves h behind the connection slots, as serving.NewHTTP does.
func startSlots(t *testing.T, limits connlimit.Limits, h http.Handler) string {
	t.Helper()
	r, err := serving.NewHTTP("http", "127.0.0.1:0", nil, h, time.Minute, limits, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Serve() }()
	t.Cleanup(func() { stopNow(r) })
	return r.Addr()
}

// startOldLimit serves h behind the listener before issue #19: a plain
// cap (netutil.LimitListener) and the 2-minute idle timeout.
func startOldLimit(t *testing.T, max int, h http.Handler) string {
	t.Helper()
	ln := testutil.Listen(t)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: serving.ReadHeaderTimeout, IdleTimeout: serving.IdleTimeout}
	go func() { _ = srv.Serve(netutil.LimitListener(ln, max)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// dialFrom connects to addr from the loopback address ip (127.0.0.0/8 is
// all loopback on Linux), so one test can be several peers.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: answerWithin}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// getOn sends GET path on c and reads the answer within window.
func getOn(c net.Conn, br *bufio.Reader, path string, window time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(window))
	defer c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return err
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	return nil
}

// flood opens n keep-alive connections per ip, each sending GET path and
// then doing nothing; it waits up to window for the answers (which a
// starved listener never sends) and returns the connections.
func flood(t *testing.T, addr, path string, n int, window time.Duration, ips ...string) []net.Conn {
	t.Helper()
	var conns []net.Conn
	for _, ip := range ips {
		for range n {
			c := dialFrom(t, ip, addr)
			if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(window))
			if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				res.Body.Close()
			}
			_ = c.SetReadDeadline(time.Time{})
		}()
	}
	wg.Wait()
	return conns
}

// stillOpen counts the connections the server has not closed: a read that
// times out (nothing to read, no EOF) is an open connection.
func stillOpen(conns []net.Conn) int {
	n := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			n++
		}
	}
	return n
}

// TestConnectionSlotsServeCallersUnderAnIdleFlood: keep-alive connections
// that made one request each and went idle — more of them than the
// listener holds — do not keep a legitimate caller out: a full listener
// closes its longest-idle connection, and one peer holds at most its cap.
// The old listener (a plain cap) makes the caller wait for an idle
// timeout: the broken variant, caught.
func TestConnectionSlotsServeCallersUnderAnIdleFlood(t *testing.T) {
	const capacity = 8
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, h http.Handler) string
		// attackers are the flood's source addresses, capacity+4
		// connections each; legit is the caller's.
		attackers []string
		legit     string
		served    bool
		// maxOpen, when set, bounds the flood's connections left open.
		maxOpen int
	}{
		{"one peer, same IP as the caller", func(t *testing.T, h http.Handler) string {
			return startSlots(t, connlimit.Limits{Max: 1024, PerPeer: capacity}, h)
		}, []string{"127.0.0.1"}, "127.0.0.1", true, capacity},
		{"many peers fill the listener", func(t *testing.T, h http.Handler) string {
			return startSlots(t, connlimit.Limits{Max: capacity, PerPeer: capacity}, h)
		}, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}, "127.0.0.1", true, capacity},
		{"old LimitListener (broken variant)", func(t *testing.T, h http.Handler) string {
			return startOldLimit(t, capacity, h)
		}, []string{"127.0.0.1"}, "127.0.0.1", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.start(t, connTestHandler(nil, false))
			conns := flood(t, addr, "/healthz", capacity+4, 2*time.Second, tc.attackers...)

			c := dialFrom(t, tc.legit, addr)
			start := time.Now()
			err := getOn(c, bufio.NewReader(c), "/healthz", answerWithin)
			if tc.served != (err == nil) {
				t.Fatalf("legitimate request behind %d idle connections: %v after %v (want served: %v)",
					len(conns), err, time.Since(start).Round(time.Millisecond), tc.served)
			}
			if tc.maxOpen > 0 {
				if n := stillOpen(conns); n > tc.maxOpen {
					t.Fatalf("%d of the flood's %d connections still open, want at most %d", n, len(conns), tc.maxOpen)
				}
			}
		})
	}
}

// TestConnectionSlotsPeerCap: a peer whose connections all carry slow
// requests cannot take the listener's other slots: its next connection is
// closed at once, and another peer is served. Without the per-peer cap (the
// old listener) the busy peer holds every slot.
func TestConnectionSlotsPeerCap(t *testing.T) {
	const capacity, perPeer = 8, 4
	for _, tc := range []struct {
		name   string
		start  func(t *testing.T, h http.Handler) string
		served bool
	}{
		{"slots", func(t *testing.T, h http.Handler) string {
			return startSlots(t, connlimit.Limits{Max: capacity, PerPeer: perPeer}, h)
		}, true},
		{"old LimitListener (broken variant)", func(t *testing.T, h http.Handler) string {
			return startOldLimit(t, capacity, h)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			addr := tc.start(t, connTestHandler(release, false))
			// Slow requests from one peer, more than the listener holds.
			busy := flood(t, addr, "/slow", capacity+2, 500*time.Millisecond, "127.0.0.2")

			c := dialFrom(t, "127.0.0.1", addr)
			err := getOn(c, bufio.NewReader(c), "/healthz", answerWithin)
			if tc.served != (err == nil) {
				t.Fatalf("request beside %d busy connections of one peer: %v (want served: %v)", len(busy), err, tc.served)
			}
			if tc.served {
				if n := stillOpen(busy); n != perPeer {
					t.Fatalf("the busy peer holds %d connections, want its cap %d", n, perPeer)
				}
			}
		})
	}
}

// TestConnectionSlotsKeepAuthenticatedCallers: when a full listener must
// close an idle connection, it closes one that never carried an
// authenticated call before one that did, however long each has been
// idle. Without the mark (Options.Authenticated not wired: the broken
// variant) the caller's connection, idle longest, is the one closed.
func TestConnectionSlotsKeepAuthenticatedCallers(t *testing.T) {
	const capacity = 4
	for _, tc := range []struct {
		name string
		mark bool
	}{{"marked", true}, {"not marked (broken variant)", false}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startSlots(t, connlimit.Limits{Max: capacity, PerPeer: capacity}, connTestHandler(nil, tc.mark))
			c := dialFrom(t, "127.0.0.1", addr)
			br := bufio.NewReader(c)
			if err := getOn(c, br, "/auth", answerWithin); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // the caller's connection is the longest idle
			flood(t, addr, "/healthz", 2, 2*time.Second, "127.0.0.2", "127.0.0.3", "127.0.0.4")
			open := stillOpen([]net.Conn{c}) == 1
			if open != tc.mark {
				t.Fatalf("authenticated caller's idle connection open after the flood: %v, want %v", open, tc.mark)
			}
		})
	}
}

// TestGRPCSlotsServeCallersUnderAnIdleFlood: gRPC connections that
// finished the handshake and went idle, more than the listener holds, do
// not keep a health check out until they are reaped (max idle 2 minutes):
// the full listener closes the longest idle. The old listener makes the
// check wait: DeadlineExceeded, the broken variant, caught.
func TestGRPCSlotsServeCallersUnderAnIdleFlood(t *testing.T) {
	const capacity = 8
	register := func(g *grpc.Server) {
		hs := health.NewServer()
		healthpb.RegisterHealthServer(g, hs)

	}
	for _, tc := range []struct {
		name   string
		start  func(t *testing.T) string
		served bool
	}{
		{"slots", func(t *testing.T) string {
			limits := serving.DefaultGRPCLimits
			limits.Conns = connlimit.Limits{Max: capacity, PerPeer: capacity}
			r, err := serving.NewGRPC("grpc", "127.0.0.1:0", nil, limits, discardLogger(), register)
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = r.Serve() }()
			t.Cleanup(r.Close)
			return r.Addr()
		}, true},
		{"old LimitListener (broken variant)", func(t *testing.T) string {
			ln := testutil.Listen(t)
			g := grpc.NewServer(serving.DefaultGRPCLimits.ServerOptions()...)
			register(g)
			go func() { _ = g.Serve(netutil.LimitListener(ln, capacity)) }()
			t.Cleanup(g.Stop)
			return ln.Addr().String()
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.start(t)
			// Finished handshakes first (every other one of openIdle's),
			// so the flood holds the slots as the attack's did.
			conns := testutil.OpenIdleH2(t, addr, 3*capacity)
			time.Sleep(200 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
			defer cancel()
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if tc.served != (err == nil) {
				t.Fatalf("health check behind %d idle connections: %v (want served: %v)", len(conns), err, tc.served)
			}
		})
	}
}

// gathered is the value of the series of name with exactly the label
// pairs given, as reg exposes it (0: no such series).
func gathered(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel())*2 != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if !slices.Contains(labelPairs(labels), lp.GetName()+"="+lp.GetValue()) {
					continue series
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func labelPairs(kv []string) []string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, kv[i]+"="+kv[i+1])
	}
	return out
}

// TestConnectionSlotsMetrics: the open gauge follows the slots and the
// shed counter counts each reason.
func TestConnectionSlotsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	limits := connlimit.Limits{Max: 2, PerPeer: 2, Metrics: connlimit.NewMetrics(reg)}
	release := make(chan struct{})
	defer close(release)
	// entered tells when a /slow request's handler runs: its connection
	// is busy then (a fixed wait was not always long enough under -race
	// on a loaded machine).
	entered := make(chan struct{}, 4)
	h := connTestHandler(release, false)
	addr := startSlots(t, limits, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
		}
		h.ServeHTTP(w, r)
	}))
	flood(t, addr, "/healthz", 3, 2*time.Second, "127.0.0.2") // the third closes the first
	flood(t, addr, "/slow", 2, 500*time.Millisecond, "127.0.0.3")
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the two slow requests never reached the handler")
		}
	}
	flood(t, addr, "/slow", 1, 500*time.Millisecond, "127.0.0.3")
	open := gathered(t, reg, "fencegate_listener_connections", "listener", "http")
	idle := gathered(t, reg, "fencegate_listener_connections_shed_total", "listener", "http", "reason", "idle_closed")
	refused := gathered(t, reg, "fencegate_listener_connections_shed_total", "listener", "http", "reason", "peer_refused")
	// 127.0.0.3's two slow requests took the slots of 127.0.0.2's idle
	// connections; its third found both of its own busy.
	if open != 2 || idle != 3 || refused != 1 {
		t.Fatalf("open %v, idle_closed %v, peer_refused %v; want 2, 3, 1", open, idle, refused)
	}
}

// TestPeerOf: IPv4 peers count per address (an IPv4-mapped IPv6 one as
// its IPv4 address), IPv6 peers per /64.
func TestPeerOf(t *testing.T) {
	tcp := func(s string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(s), Port: 1} }
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"10.0.0.1", "10.0.0.1", true},
		{"10.0.0.1", "10.0.0.2", false},
		{"::ffff:10.0.0.1", "10.0.0.1", true},
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9", true},
		{"2001:db8:1:2::1", "2001:db8:1:3::1", false},
	} {
		if got := connlimit.PeerOf(tcp(tc.a)) == connlimit.PeerOf(tcp(tc.b)); got != tc.same {
			t.Errorf("%s and %s counted as one peer: %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

// TestGRPCSlotsHealthWatchIsIdle: connections that hold only a health
// Watch stream (which needs no credential) and fill the listener do not
// keep a health check out: a Watch leaves its connection idle. Counting
// the Watch as a request in flight (the broken variant) keeps every slot
// busy and the check waits.
func TestGRPCSlotsHealthWatchIsIdle(t *testing.T) {
	const capacity = 4
	for _, tc := range []struct {
		name   string
		idle   map[string]bool
		served bool
	}{
		{"watch is idle", connlimit.IdleMethods, true},
		{"watch counted (broken variant)", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limits := serving.DefaultGRPCLimits
			limits.Conns = connlimit.Limits{Max: capacity, PerPeer: capacity}
			limits.IdleMethods = tc.idle
			r, err := serving.NewGRPC("grpc", "127.0.0.1:0", nil, limits, discardLogger(), func(g *grpc.Server) {
				hs := health.NewServer()
				healthpb.RegisterHealthServer(g, hs)
				_ = hs
			})
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = r.Serve() }()
			t.Cleanup(r.Close)

			for i := range capacity {
				ip := fmt.Sprintf("127.0.0.%d", 2+i)
				conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
					grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
						d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
						return d.DialContext(ctx, "tcp", a)
					}))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				w, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Recv(); err != nil { // the stream is open on the server
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
			defer cancel()
			conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if tc.served != (err == nil) {
				t.Fatalf("health check beside %d Watch-only connections: %v (want served: %v)", capacity, err, tc.served)
			}
		})
	}
}

// TestAuthzRequestsPerPeer: the authz listener's one peer is Envoy, whose
// ext_proc streams last as long as their requests: unset, its figure is
// connlimit.AuthzPerPeerRequests, not the 256 of the other listeners; a figure
// the configuration sets applies to it as to every listener.
func TestAuthzRequestsPerPeer(t *testing.T) {
	if got := connlimit.Resolved(connlimit.ForAuthz(connlimit.Limits{})).PerPeerRequests; got != connlimit.AuthzPerPeerRequests {
		t.Errorf("authz default %d, want %d", got, connlimit.AuthzPerPeerRequests)
	}
	if got := connlimit.Resolved(connlimit.Limits{}).PerPeerRequests; got != connlimit.DefaultPerPeerRequests {
		t.Errorf("other listeners' default %d, want %d", got, connlimit.DefaultPerPeerRequests)
	}
	if got := connlimit.Resolved(connlimit.ForAuthz(connlimit.Limits{PerPeerRequests: 50})).PerPeerRequests; got != 50 {
		t.Errorf("authz with the figure set: %d, want 50", got)
	}
}
