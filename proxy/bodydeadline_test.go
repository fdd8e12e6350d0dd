package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/routes"
)

// TestProxyBodyBounds: a client that stalls mid-body, or trickles its body
// under the idle bound, is cut off (408, connection closed) within its
// route's bounds, on a plain and on a barrier route, and the barrier write
// is abandoned (nothing left in flight). The broken variant (no bounds, as
// before) keeps the stalled connection open past the bound: the test can
// fail.
func TestProxyBodyBounds(t *testing.T) {
	const (
		idle  = 500 * time.Millisecond
		total = 2 * time.Second
		// bound is the generous limit on when the proxy must have cut the
		// client (the machine may be loaded).
		bound = 8 * time.Second
	)
	for _, tc := range []struct {
		name    string
		barrier bool
		trickle bool // send a byte every idle/3 instead of stalling
		broken  bool // no body bounds: the stall must be seen to last
	}{
		{name: "stall plain route"},
		{name: "stall barrier route", barrier: true},
		{name: "trickle plain route", trickle: true},
		{name: "trickle barrier route", barrier: true, trickle: true},
		{name: "broken: stall, no bounds", broken: true},
		{name: "broken: stall barrier, no bounds", barrier: true, broken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := locktest.OpenBolt(t, locktest.FloorOff)
			l := locktest.Acquire(t, s, "k", time.Minute)
			upErr := make(chan error, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := io.ReadAll(r.Body)
				upErr <- err
			}))
			t.Cleanup(up.Close)
			rt := config.Route{Name: "r", Match: prefix("/"), Upstream: up.URL, Key: "k", BodyIdleTimeout: dur(idle), BodyTimeout: dur(total)}
			if tc.barrier {
				rt.BodyTimeout, rt.Barrier, rt.MaxWrite = 0, true, dur(total) // the total is maxWrite
			}
			p, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), []config.Route{rt}, Options{skipBodyBounds: tc.broken})
			conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "PUT /k HTTP/1.1\r\nHost: x\r\nX-Fence-Token: %s\r\nContent-Length: 1000\r\n\r\nfirst-part", l.Fence)
			start := time.Now()
			stopTrickle := make(chan struct{})
			defer close(stopTrickle)
			if tc.trickle {
				go func() {
					for {
						select {
						case <-stopTrickle:
							return
						case <-time.After(idle / 3):
							if _, err := conn.Write([]byte("x")); err != nil {
								return
							}
						}
					}
				}()
			}
			wait := bound
			if tc.broken {
				wait = total + 2*time.Second // past every bound the fixed proxy keeps
			}
			_ = conn.SetReadDeadline(time.Now().Add(wait))
			br := bufio.NewReader(conn)
			res, rerr := http.ReadResponse(br, nil)
			if tc.broken {
				if ne, ok := rerr.(net.Error); !ok || !ne.Timeout() {
					t.Fatalf("without bounds the stalled request should still be open after %v: %v %v", wait, res, rerr)
				}
				return
			}
			if rerr != nil {
				t.Fatalf("no response within %v: %v", wait, rerr)
			}
			took := time.Since(start)
			if res.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d, want 408", res.StatusCode)
			}
			if !tc.trickle && took < idle/2 {
				t.Errorf("cut after %v, before the idle bound %v", took, idle)
			}
			if tc.trickle && took < total-200*time.Millisecond {
				t.Errorf("a trickling body was cut after %v, before the total bound %v", took, total)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			// The connection is closed: it cannot carry another request.
			if _, err := br.ReadByte(); err == nil {
				t.Error("connection still open after the cut")
			}
			select {
			case err := <-upErr:
				if err == nil {
					t.Error("the upstream read a complete body")
				}
			case <-time.After(bound):
				t.Error("the upstream's body read never ended")
			}
			testutil.WaitFor(t, 30*time.Second, "the write to settle", func() bool { return p.InFlight() == 0 })
		})
	}
}

// TestProxyBodyWithinBounds: a body that arrives in pieces within the idle
// bound, and an upstream slower than the idle bound once the body is in,
// both pass: the bound is on the client's body only.
func TestProxyBodyWithinBounds(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	l := locktest.Acquire(t, s, "k", time.Minute)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(1500 * time.Millisecond) // longer than the idle bound
		_, _ = w.Write(b)
	}))
	t.Cleanup(up.Close)
	for _, barrier := range []bool{false, true} {
		rt := config.Route{Match: prefix("/"), Upstream: up.URL, Key: "k", BodyIdleTimeout: dur(500 * time.Millisecond)}
		if barrier {
			rt.Barrier, rt.MaxWrite = true, dur(time.Minute)
		}
		_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), []config.Route{rt}, Options{})
		pr, pw := io.Pipe()
		go func() {
			for i := range 3 {
				time.Sleep(200 * time.Millisecond)
				fmt.Fprintf(pw, "p%d", i)
			}
			pw.Close()
		}()
		req, _ := http.NewRequestWithContext(t.Context(), "PUT", srv.URL+"/k", pr)
		req.Header.Set("X-Fence-Token", l.Fence)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "p0p1p2" {
			t.Fatalf("barrier=%v: %d %q", barrier, res.StatusCode, b)
		}
	}
}

// TestProxyBodyBoundsHTTP2: over HTTP/2 (TLS) the bound is the stream's
// read deadline: a stalled body is answered 408 within the bound, and the
// broken variant (no bounds) still waits.
func TestProxyBodyBoundsHTTP2(t *testing.T) {
	const idle = 500 * time.Millisecond
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			s := locktest.OpenBolt(t, locktest.FloorOff)
			l := locktest.Acquire(t, s, "k", time.Minute)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.ReadAll(r.Body) }))
			t.Cleanup(up.Close)
			p, err := New(fencecheck.New(s, fencecheck.Options{}), routes.NewHolder(table(t, []config.Route{{Match: prefix("/"), Upstream: up.URL, Key: "k", BodyIdleTimeout: dur(idle), Barrier: true, MaxWrite: dur(time.Minute)}})),
				Options{skipBodyBounds: broken})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(p)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			t.Cleanup(srv.Close)
			pr, pw := io.Pipe()
			t.Cleanup(func() { pw.Close() })
			go func() { _, _ = io.WriteString(pw, "first-part") }()
			req, _ := http.NewRequestWithContext(t.Context(), "PUT", srv.URL+"/k", pr)
			req.Header.Set("X-Fence-Token", l.Fence)
			client := srv.Client()
			client.Timeout = 4 * time.Second
			res, err := client.Do(req)
			if broken {
				if err == nil {
					res.Body.Close()
					t.Fatalf("without bounds the stalled stream was answered: %d", res.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("no answer within the client's 4 s: %v", err)
			}
			res.Body.Close()
			if res.ProtoMajor != 2 || res.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("%s %d, want HTTP/2 408", res.Proto, res.StatusCode)
			}
			testutil.WaitFor(t, 30*time.Second, "the write to settle", func() bool { return p.InFlight() == 0 })
		})
	}
}

// TestProxyBodyBoundedWhenRefused: a request refused without its body being
// read (non-canonical or ambiguous path, no route, method override,
// upgrade, a denial) still has its body bounded: net/http reads the rest
// itself after the answer, and a client that stalls there is cut within
// the bound. The broken variant (no bounds) keeps every one open.
func TestProxyBodyBoundedWhenRefused(t *testing.T) {
	const idle = 500 * time.Millisecond
	s := locktest.OpenBolt(t, locktest.FloorOff)
	up, _ := recorder(t)
	u := up.URL
	entries := []config.Route{
		{Name: "orders", Match: prefix("/orders"), Upstream: u, Key: "orders/{2}", BodyIdleTimeout: dur(idle)},
		{Name: "other", Match: prefix("/other"), Upstream: u, BodyIdleTimeout: dur(time.Hour)},
	}
	cases := []struct {
		name, line, headers string
		status              int
	}{
		{"non-canonical path", "PUT /orders//1", "", 400},
		{"ambiguous path", "PUT /ORDERS/1", "", 400},
		{"no route", "PUT /nowhere", "", 404},
		{"method override", "POST /orders/1", "X-HTTP-Method-Override: DELETE\r\n", 400},
		{"upgrade", "POST /orders/1", "Connection: Upgrade\r\nUpgrade: websocket\r\n", 400},
		{"denial", "PUT /orders/1", "", 428},
	}
	for _, broken := range []bool{false, true} {
		_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), entries, Options{skipBodyBounds: broken})
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/broken=%v", tc.name, broken), func(t *testing.T) {
				t.Parallel()
				conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: x\r\n%sContent-Length: 1000\r\n\r\nfirst-part", tc.line, tc.headers)
				wait := 8 * time.Second
				if broken {
					wait = 3 * time.Second // well past the bound
				}
				_ = conn.SetReadDeadline(time.Now().Add(wait))
				br := bufio.NewReader(conn)
				res, err := http.ReadResponse(br, nil)
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != tc.status {
						t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
					}
					// The answer is out; the connection must not linger
					// on the unread body.
					_, err = br.ReadByte()
				} else if !broken {
					t.Fatalf("no answer: %v", err)
				}
				// (Without bounds, net/http reads the unread body before it
				// answers at all: even the answer never comes.)
				ne, timedOut := err.(net.Error)
				timedOut = timedOut && ne.Timeout()
				switch {
				case broken && !timedOut:
					t.Fatalf("without bounds the stalled body should hold the connection: %v", err)
				case !broken && (err == nil || timedOut):
					t.Fatalf("the connection outlived the bound: %v", err)
				}
			})
		}
	}
}
