package proxy

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
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/internal/testutil/redistest"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/routes"
)

// heldUpstream answers every request at once, except one carrying
// X-Hold: it is held until release is closed. held receives when the held
// request has arrived; heldDone is set just before its handler returns.
type heldUpstream struct {
	srv      *httptest.Server
	held     chan struct{}
	release  chan struct{}
	heldDone atomic.Bool
	// sawOthersWhileHeld counts requests that reached the upstream while
	// the held one had not answered.
	sawOthersWhileHeld atomic.Int32
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	h := &heldUpstream{held: make(chan struct{}, 1), release: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Hold") == "" {
			if !h.heldDone.Load() {
				h.sawOthersWhileHeld.Add(1)
			}
			_, _ = io.WriteString(w, "ok")
			return
		}
		defer h.heldDone.Store(true)
		h.held <- struct{}{}
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "held ok")
	}))
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.unblock)
	return h
}

func (h *heldUpstream) unblock() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

// post sends a fenced write and returns the response (body read).
func post(ctx context.Context, t *testing.T, url, fence string, hold bool) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("X-Fence-Token", fence)
	if hold {
		req.Header.Set("X-Hold", "1")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, string(b), err
}

// sendWrite sends a fenced write in the background (held at a
// heldUpstream if hold); the channel yields its status, or -1 when it got
// no response.
func sendWrite(t *testing.T, url, fence string, hold bool) chan int {
	done := make(chan int, 1)
	go func() {
		res, _, err := post(context.Background(), t, url, fence, hold)
		if err != nil {
			done <- -1
			return
		}
		done <- res.StatusCode
	}()
	return done
}

// startHeldWrite sends W1 under fence and waits until the upstream holds
// it; the returned channel yields W1's status.
func startHeldWrite(t *testing.T, h *heldUpstream, url, fence string) chan int {
	t.Helper()
	done := sendWrite(t, url, fence, true)
	select {
	case <-h.held:
	case st := <-done:
		t.Fatalf("W1 answered %d before reaching the upstream", st)
	}
	return done
}

// behindHeldWrite serves route (Prefix "/", on key "acct", to h) through
// c and starts the barrier's scene: W1 under an older fence in flight,
// held at h, and a newer lock for W2. It returns the proxy's URL, W1's
// status channel and W2's lock.
func behindHeldWrite(t *testing.T, s lockstore.Store, c *fencecheck.Checker, h *heldUpstream, route config.Route) (string, chan int, lockstore.AcquireResult) {
	t.Helper()
	route.Match, route.Upstream, route.Key = prefix("/"), h.srv.URL, "acct"
	_, srv := serveProxy(t, c, []config.Route{route}, Options{})
	l1 := locktest.Acquire(t, s, "acct", time.Minute)
	w1 := startHeldWrite(t, h, srv.URL+"/w", l1.Fence)
	return srv.URL, w1, locktest.HandOver(t, s, l1, "acct", time.Minute)
}

// admittedAfterW1 lets W1 answer at h; then W1 and the waiting W2 must
// both succeed, W2 never having reached the upstream while W1 was in
// flight.
func admittedAfterW1(t *testing.T, h *heldUpstream, w1, w2 chan int) {
	t.Helper()
	h.unblock()
	if st := <-w1; st != 200 {
		t.Fatalf("W1 %d", st)
	}
	if st := <-w2; st != 200 {
		t.Fatalf("W2 %d, want 200 after W1 finished", st)
	}
	if h.sawOthersWhileHeld.Load() != 0 {
		t.Fatal("W2 reached the upstream while W1 was in flight")
	}
}

// TestProxyBarrierTwoWrites is the guarantee on one key: W1 admitted under
// F1 is in flight at the upstream; W2 under F2 > F1 is refused "draining"
// (429, Retry-After, never 200, never 503) after the route's maxWait; once
// W1's response is complete, W2 is admitted. The same run with the barrier
// off admits W2 while W1 is in flight: the test can fail.
func TestProxyBarrierTwoWrites(t *testing.T) {
	for _, barrier := range []bool{true, false} {
		t.Run("barrier="+strconv.FormatBool(barrier), func(t *testing.T) {
			s := locktest.OpenBolt(t, locktest.FloorOff)
			h := newHeldUpstream(t)
			c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond})
			url, w1, l2 := behindHeldWrite(t, s, c, h, config.Route{Barrier: barrier, MaxWrite: dur(time.Minute), MaxWait: dur(maxWaitIf(barrier, 50*time.Millisecond))})

			res, body, err := post(t.Context(), t, url+"/w", l2.Fence, false)
			if err != nil {
				t.Fatal(err)
			}
			if !barrier {
				if res.StatusCode != 200 || h.sawOthersWhileHeld.Load() != 1 {
					t.Fatalf("without the barrier W2 should pass while W1 is in flight: %d %q", res.StatusCode, body)
				}
				h.unblock()
				<-w1
				return
			}
			var d denial
			_ = json.Unmarshal([]byte(body), &d)
			if res.StatusCode != 429 || d.Error != "draining" || res.Header.Get("X-Fence-Reason") != "draining" {
				t.Fatalf("W2 while W1 in flight: %d %q, want 429 draining", res.StatusCode, body)
			}
			if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 || ra > fencecheck.MaxRetryAfter {
				t.Errorf("Retry-After %q", res.Header.Get("Retry-After"))
			}
			if h.sawOthersWhileHeld.Load() != 0 {
				t.Fatal("W2 reached the upstream while W1 was in flight")
			}
			h.unblock()
			if st := <-w1; st != 200 {
				t.Fatalf("W1: %d", st)
			}
			testutil.WaitFor(t, 30*time.Second, "W2 to be admitted after W1 finished", func() bool {
				res, _, err := post(t.Context(), t, url+"/w", l2.Fence, false)
				return err == nil && res.StatusCode == 200
			})
			if h.sawOthersWhileHeld.Load() != 0 {
				t.Fatal("W2 reached the upstream while W1 was in flight")
			}
		})
	}
}

// TestProxyBarrierWaitsWithinBudget: with a budget longer than W1 (the
// route's default maxWait), W2 is not refused but waits, and reaches the
// upstream only after W1's handler has answered.
func TestProxyBarrierWaitsWithinBudget(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	h := newHeldUpstream(t)
	reg := prometheus.NewRegistry()
	c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond, Registerer: reg})
	url, w1, l2 := behindHeldWrite(t, s, c, h, config.Route{Barrier: true})
	w2 := sendWrite(t, url+"/w", l2.Fence, false)
	// Give W2 time to meet W1's entry before W1 ends (the assertions
	// below hold either way; this only makes the wait likely).
	time.Sleep(200 * time.Millisecond)
	admittedAfterW1(t, h, w1, w2)
	if n := metric(t, reg, "fencegate_barrier_abandoned_total"); n != 0 {
		t.Errorf("abandoned %v", n)
	}
}

// TestProxyBarrierAbandoned: W1's upstream exchange fails (the upstream
// drops the connection), so the proxy cannot know whether it committed: W1
// is abandoned, and W2 waits until W1's maxWrite has passed.
func TestProxyBarrierAbandoned(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	reg := prometheus.NewRegistry()
	c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond, Registerer: reg})
	const maxWrite = 4 * time.Second
	p, srv := serveProxy(t, c, []config.Route{{Match: prefix("/"), Upstream: up.URL, Key: "acct", Barrier: true, MaxWrite: dur(maxWrite)}}, Options{})
	l1 := locktest.Acquire(t, s, "acct", time.Minute)
	start := time.Now()
	res, _, err := post(t.Context(), t, srv.URL+"/w", l1.Fence, true)
	if err != nil || res.StatusCode != http.StatusBadGateway {
		t.Fatalf("W1: %v %v, want 502", res, err)
	}
	if p.InFlight() != 0 || metric(t, reg, "fencegate_barrier_abandoned_total") != 1 {
		t.Fatalf("in flight %d, abandoned %v", p.InFlight(), metric(t, reg, "fencegate_barrier_abandoned_total"))
	}
	l2 := locktest.HandOver(t, s, l1, "acct", time.Minute)
	res, _, _ = post(t.Context(), t, srv.URL+"/w", l2.Fence, false)
	if time.Since(start) < maxWrite && res.StatusCode != 429 {
		t.Fatalf("W2 before W1's maxWrite: %d, want 429 draining", res.StatusCode)
	}
	testutil.WaitFor(t, 30*time.Second, "W2 after W1's maxWrite", func() bool {
		res, _, err := post(t.Context(), t, srv.URL+"/w", l2.Fence, false)
		return err == nil && res.StatusCode == 200
	})
	if time.Since(start) < maxWrite {
		t.Fatal("W2 admitted before W1's maxWrite passed")
	}
}

// TestProxyBarrierClientGoesAway: the client leaves mid-response; the
// upstream has answered, so the proxy reads the rest itself and finishes
// the write (W2 is then admitted long before maxWrite).
func TestProxyBarrierClientGoesAway(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	rest := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") == "" {
			return
		}
		_, _ = io.WriteString(w, "part-1\n")
		w.(http.Flusher).Flush()
		<-rest
		_, _ = io.WriteString(w, "part-2")
	}))
	t.Cleanup(up.Close)
	reg := prometheus.NewRegistry()
	c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond, Registerer: reg})
	p, srv := serveProxy(t, c, []config.Route{{Match: prefix("/"), Upstream: up.URL, Key: "acct", Barrier: true, MaxWrite: dur(time.Hour)}}, Options{})
	l1 := locktest.Acquire(t, s, "acct", time.Minute)

	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/w", nil)
	req.Header.Set("X-Fence-Token", l1.Fence)
	req.Header.Set("X-Hold", "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(res.Body).ReadString('\n'); line != "part-1\n" {
		t.Fatalf("first part %q", line)
	}
	cancel() // the client goes away
	res.Body.Close()
	close(rest)
	testutil.WaitFor(t, 30*time.Second, "the write to settle", func() bool { return p.InFlight() == 0 })
	if n := metric(t, reg, "fencegate_barrier_abandoned_total"); n != 0 {
		t.Fatalf("abandoned %v: the upstream answered completely", n)
	}
	l2 := locktest.HandOver(t, s, l1, "acct", time.Minute)
	if res, _, err := post(t.Context(), t, srv.URL+"/w", l2.Fence, false); err != nil || res.StatusCode != 200 {
		t.Fatalf("W2: %v %v, want 200 (W1 finished)", res, err)
	}
}

// TestProxyShutdownDrains: Shutdown waits for an in-flight barrier write,
// which finishes and deregisters before Shutdown returns.
func TestProxyShutdownDrains(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	h := newHeldUpstream(t)
	c := fencecheck.New(s, fencecheck.Options{Timeout: 50 * time.Millisecond})
	p, srv := serveProxy(t, c, []config.Route{{Match: prefix("/"), Upstream: h.srv.URL, Key: "acct", Barrier: true, MaxWrite: dur(time.Hour)}}, Options{})
	l1 := locktest.Acquire(t, s, "acct", time.Minute)
	w1 := startHeldWrite(t, h, srv.URL+"/w", l1.Fence)
	shut := make(chan error, 1)
	go func() { shut <- srv.Config.Shutdown(context.Background()) }()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with a write in flight: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	h.unblock()
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if st := <-w1; st != 200 {
		t.Fatalf("W1 %d", st)
	}
	if p.InFlight() != 0 {
		t.Fatalf("in flight after Shutdown: %d", p.InFlight())
	}
	// Nothing left in the store: a newer fence is admitted at once.
	l2 := locktest.HandOver(t, s, l1, "acct", time.Minute)
	d, err := c.Check(t.Context(), fencecheck.Request{Key: "acct", Write: true, Fence: l2.Fence, Barrier: true})
	if err != nil || !d.Allowed {
		t.Fatalf("after drain: %+v %v", d, err)
	}
	_ = c.Finish(t.Context(), d)
}

// TestProxyStoreDown: a store that cannot answer fails every write closed
// (503 unavailable), barrier or not; reads still pass.
func TestProxyStoreDown(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	up, _ := recorder(t)
	c := fencecheck.New(s, fencecheck.Options{})
	_, srv := serveProxy(t, c, []config.Route{
		{Match: prefix("/b"), Upstream: up.URL, Key: "acct", Barrier: true},
		{Match: prefix("/p"), Upstream: up.URL, Key: "acct"},
	}, Options{})
	l := locktest.Acquire(t, s, "acct", time.Minute)
	_ = s.Close()
	for _, path := range []string{"/b", "/p"} {
		res, body, err := post(t.Context(), t, srv.URL+path, l.Fence, false)
		if err != nil || res.StatusCode != 503 || res.Header.Get("X-Fence-Reason") != "unavailable" {
			t.Fatalf("%s: %v %q %v, want 503 unavailable", path, res, body, err)
		}
	}
	if res, _ := do(t, "GET", srv.URL+"/b", nil, ""); res.StatusCode != 200 {
		t.Fatalf("read: %d", res.StatusCode)
	}
}

// TestProxyNeedsUpstream: a table with no entry to send anything to is
// refused (the entries' own problems are routes.Compile's, tested there).
func TestProxyNeedsUpstream(t *testing.T) {
	for _, h := range []*routes.Holder{nil, routes.NewHolder(nil), routes.NewHolder(table(t, []config.Route{{Name: "authz-only", Key: "k"}}))} {
		if _, err := New(fencecheck.New(nil, fencecheck.Options{}), h, Options{}); !errors.Is(err, ErrNoUpstream) {
			t.Errorf("%v, want ErrNoUpstream", err)
		}
	}
}

// TestProxyBarrierAcrossReplicas: two proxies, each with its own checker
// and its own connection to one Redis store (two replicas). W1 is in
// flight through replica A; W2 under a newer fence through replica B is
// refused draining, and admitted once W1 has finished at A.
func TestProxyBarrierAcrossReplicas(t *testing.T) {
	ns := fmt.Sprintf("proxytest%d", time.Now().UnixNano())
	sa, sb := redistest.Open(t, ns), redistest.Open(t, ns)
	h := newHeldUpstream(t)
	route := []config.Route{{Match: prefix("/"), Upstream: h.srv.URL, Key: "acct", Barrier: true, MaxWrite: dur(time.Minute), MaxWait: dur(100 * time.Millisecond)}}
	_, a := serveProxy(t, fencecheck.New(sa, fencecheck.Options{Timeout: 100 * time.Millisecond}), route, Options{})
	_, b := serveProxy(t, fencecheck.New(sb, fencecheck.Options{Timeout: 100 * time.Millisecond}), route, Options{})
	l1 := locktest.Acquire(t, sa, "acct", time.Minute)
	w1 := startHeldWrite(t, h, a.URL+"/w", l1.Fence)
	l2 := locktest.HandOver(t, sb, l1, "acct", time.Minute)
	res, body, err := post(t.Context(), t, b.URL+"/w", l2.Fence, false)
	if err != nil || res.StatusCode != 429 {
		t.Fatalf("W2 at replica B while W1 is in flight at A: %v %q %v, want 429 draining", res, body, err)
	}
	h.unblock()
	if st := <-w1; st != 200 {
		t.Fatalf("W1 %d", st)
	}
	testutil.WaitFor(t, 30*time.Second, "W2 at replica B after W1 finished", func() bool {
		res, _, err := post(t.Context(), t, b.URL+"/w", l2.Fence, false)
		return err == nil && res.StatusCode == 200
	})
	if h.sawOthersWhileHeld.Load() != 0 {
		t.Fatal("W2 reached the upstream while W1 was in flight")
	}
}

// tunnelUpstream switches protocols for every request that asks to
// (Connection: Upgrade) and reports each line the client then sends down the
// tunnel; other requests get 200.
func tunnelUpstream(t *testing.T) (*httptest.Server, chan string) {
	t.Helper()
	lines := make(chan string, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lines <- "request " + r.Method + " " + r.URL.Path
		if !strings.EqualFold(r.Header.Get("Connection"), "Upgrade") {
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
		_ = brw.Flush()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			lines <- "tunnel " + strings.TrimSpace(line)
		}
	}))
	t.Cleanup(up.Close)
	return up, lines
}

// TestProxyUpgrades: a route refuses protocol upgrades (WebSocket, h2c,
// an Upgrade header alone) unless it has upgrade: true, reads included;
// with it, reads may upgrade but a fenced write still may not. The allowed
// case shows what the refusal prevents: after the 101 a PUT sent down the
// tunnel reaches the upstream unchecked.
func TestProxyUpgrades(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	l := locktest.Acquire(t, s, "k", time.Minute)
	up, lines := tunnelUpstream(t)
	u := up.URL
	_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), []config.Route{
		{Name: "fenced", Match: prefix("/fenced"), Upstream: u, Key: "k", Barrier: true},
		{Name: "off", Match: prefix("/off"), Upstream: u, Policy: string(fencecheck.PolicyOff)},
		{Name: "ws", Match: prefix("/ws"), Upstream: u, Key: "k", Upgrade: true},
	}, Options{})
	ws := "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	h2c := "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
	for _, tc := range []struct {
		name, method, path, headers string
		want                        int // 400 refused, 101 tunnel
	}{
		{"websocket read, fenced route", "GET", "/fenced/1", ws, 400},
		{"h2c read, fenced route", "GET", "/fenced/1", h2c, 400},
		{"Upgrade header alone", "GET", "/fenced/1", "Upgrade: websocket\r\n", 400},
		{"h2c settings alone", "GET", "/fenced/1", "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n", 400},
		{"websocket read, policy off route", "GET", "/off/1", ws, 400},
		{"fenced write on an upgrade route", "POST", "/ws/1", ws + "X-Fence-Token: " + l.Fence + "\r\nContent-Length: 0\r\n", 400},
		{"allowed: websocket read on an upgrade route", "GET", "/ws/1", ws, 101},
		{"allowed: h2c read on an upgrade route", "GET", "/ws/1", h2c, 101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n", tc.method, tc.path, tc.headers)
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.want)
			}
			if tc.want != 101 {
				select {
				case l := <-lines:
					t.Fatalf("a refused upgrade reached the upstream: %s", l)
				case <-time.After(50 * time.Millisecond):
				}
				return
			}
			if l := <-lines; l != "request GET "+tc.path {
				t.Fatalf("upstream saw %q", l)
			}
			fmt.Fprintf(conn, "PUT /ws/1 HTTP/1.1\r\n")
			select {
			case l := <-lines:
				if l != "tunnel PUT /ws/1 HTTP/1.1" {
					t.Fatalf("tunnel carried %q", l)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("nothing crossed the tunnel")
			}
		})
	}
	// Without upgrade headers the same requests pass.
	if res, _ := do(t, "GET", srv.URL+"/fenced/1", nil, ""); res.StatusCode != 200 {
		t.Fatalf("plain read: %d", res.StatusCode)
	}
	if res, _ := do(t, "POST", srv.URL+"/fenced/1", map[string]string{"X-Fence-Token": l.Fence}, "x"); res.StatusCode != 200 {
		t.Fatalf("plain write: %d", res.StatusCode)
	}
}

// maxWaitIf is d on a barrier route, 0 (unset) elsewhere.
func maxWaitIf(barrier bool, d time.Duration) time.Duration {
	if barrier {
		return d
	}
	return 0
}
