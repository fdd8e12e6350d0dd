package connlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/serving"
)

// TestPeerRequestsBoundedGRPC (#26 item 5): on a gRPC listener as serve
// builds it, streams held open from one address over three connections
// (health Watch, which anyone may open) count against
// connections.maxRequestsPerPeer: with 10, ten are served and each one
// more is refused RESOURCE_EXHAUSTED with a retry-after header, counted in
// fencegate_listener_requests_refused_total; a unary call over the limit
// is refused alike. The broken variant (no request limit) serves all 30:
// caught.
func TestPeerRequestsBoundedGRPC(t *testing.T) {
	const limit, conns, perConn = 10, 3, 10
	for _, broken := range []bool{false, true} {
		name := "limit"
		if broken {
			name = "broken: no request limit"
		}
		t.Run(name, func(t *testing.T) {
			if broken {
				connlimit.Unlimited(t)
			}
			reg := prometheus.NewRegistry()
			m := connlimit.NewMetrics(reg)
			limits := serving.DefaultGRPCLimits
			limits.Conns = connlimit.Limits{PerPeerRequests: limit, Metrics: m}
			hs := health.NewServer()
			r, err := serving.NewGRPC("grpc", "127.0.0.1:0", nil, limits, discardLogger(), func(g *grpc.Server) {
				healthpb.RegisterHealthServer(g, hs)
			})
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = r.Serve() }()
			t.Cleanup(r.Close)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()

			var (
				mu                sync.Mutex
				served, exhausted int
				retry             int
				wg                sync.WaitGroup
			)
			for range conns {
				conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				hc := healthpb.NewHealthClient(conn)
				for range perConn {
					wg.Add(1)
					go func() {
						defer wg.Done()
						st, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
						if err == nil {
							_, err = st.Recv()
						}
						mu.Lock()
						defer mu.Unlock()
						switch status.Code(err) {
						case codes.OK:
							served++
						case codes.ResourceExhausted:
							exhausted++
							if md, _ := st.Header(); len(md.Get("retry-after")) > 0 {
								retry++
							}
						default:
							t.Errorf("watch: %v", err)
						}
					}()
				}
			}
			wg.Wait() // every stream either serves (held open) or was refused
			var hdr metadata.MD
			_, unaryErr := healthpb.NewHealthClient(mustConn(t, r.Addr())).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
			refused := gathered(t, reg, "fencegate_listener_requests_refused_total", "listener", "grpc")
			t.Logf("%d streams from one address: %d served, %d RESOURCE_EXHAUSTED (%d with retry-after); a unary call then: %v; refusals counted %v",
				conns*perConn, served, exhausted, retry, status.Code(unaryErr), refused)
			switch {
			case !broken && (served != limit || exhausted != conns*perConn-limit || retry != exhausted):
				t.Fatalf("want %d served and the rest refused with retry-after", limit)
			case !broken && (status.Code(unaryErr) != codes.ResourceExhausted || len(hdr.Get("retry-after")) == 0):
				t.Fatalf("a unary call over the limit: %v (header %v)", unaryErr, hdr)
			case !broken && refused != float64(exhausted+1):
				t.Fatalf("fencegate_listener_requests_refused_total = %v, want %d", refused, exhausted+1)
			case broken && served <= limit:
				t.Fatalf("without the limit only %d served: the test cannot tell", served)
			}
		})
	}
}

func mustConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestPeerRequestsReleased: a request's slot is given back when it ends,
// so a peer that stays under the limit is never refused; the HTTP refusal
// is 429 with Retry-After and the JSON body.
func TestPeerRequestsReleased(t *testing.T) {
	ln, err := connlimit.Listen("http", "127.0.0.1:0", connlimit.Limits{PerPeerRequests: 1}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	h := ln.LimitRequests(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-gate
		}
	}))
	srv := &http.Server{Handler: h, ConnContext: connlimit.ConnContext, ConnState: ln.ConnState}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	for i := range 5 {
		resp, err := http.Get(base + "/quick")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("sequential request %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	held := make(chan struct{})
	go func() {
		defer close(held)
		if resp, err := http.Get(base + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/quick")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("refusal without Retry-After or JSON: %v", resp.Header)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a second request while one was held was never refused")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(gate)
	<-held
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/quick", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("after the held request ended: %d", rec.Code)
	}
}
