package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/internal/health"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

func openStore(t *testing.T) lockstore.Store {
	t.Helper()
	s, err := bolt.Open(context.Background(), bolt.Config{Path: filepath.Join(t.TempDir(), "locks.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type answer struct {
	status int
	Status string `json:"status"`
	Phase  string `json:"phase"`
	Error  string `json:"error"`
}

func get(t *testing.T, h http.HandlerFunc, method string) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(method, "/", nil))
	var a answer
	if method != http.MethodHead {
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
			t.Fatalf("%q: %v", rec.Body.String(), err)
		}
	}
	a.status = rec.Code
	return a
}

func grpcStatus(t *testing.T, hs *grpchealth.Server, svc string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
	if err != nil {
		t.Fatalf("%q: %v", svc, err)
	}
	return r.GetStatus()
}

// TestPhases: /readyz, /healthz and gRPC health through every phase.
// Starting and draining are 503 with the phase named; draining is
// NOT_SERVING at once, for good, and /healthz stays 200 throughout.
func TestPhases(t *testing.T) {
	store := openStore(t)
	reg := prometheus.NewRegistry()
	r, err := health.New(health.Options{Store: store, Interval: 10 * time.Millisecond, Registerer: reg,
		Replication: func(context.Context) (lockstore.Replication, error) {
			return lockstore.Replication{Mode: "none", Detail: "names a standby"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	hs := grpchealth.NewServer()
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING) // what a listener set up before would say
	r.Follow(hs, "", "svc")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	want := func(phase string, ready int, serving healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		if a := get(t, r.Readyz, http.MethodGet); a.status != ready || a.Phase != phase {
			t.Errorf("%s: /readyz %d %+v, want %d", phase, a.status, a, ready)
		}
		if a := get(t, r.Healthz, http.MethodGet); a.status != 200 || a.Phase != phase {
			t.Errorf("%s: /healthz %d %+v", phase, a.status, a)
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, svc := range []string{"", "svc"} {
			for grpcStatus(t, hs, svc) != serving {
				if time.Now().After(deadline) {
					t.Fatalf("%s: gRPC %q %v, want %v", phase, svc, grpcStatus(t, hs, svc), serving)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	want("starting", 503, healthpb.HealthCheckResponse_NOT_SERVING)
	r.Serve()
	want("ready", 200, healthpb.HealthCheckResponse_SERVING)
	rec := httptest.NewRecorder()
	r.Readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if got := rec.Body.String(); got != `{"status":"ok","phase":"ready","replication":{"mode":"none"}}`+"\n" {
		t.Errorf("ready body %s (the mode only: /readyz takes no token)", got)
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 1 || mfs[0].GetName() != "fencegate_store_ready" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("fencegate_store_ready: %v %v, want 1", mfs, err)
	}
	r.Drain()
	// No wait: the instant Drain returns, every status is unready.
	if st := grpcStatus(t, hs, "svc"); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("right after Drain: %v", st)
	}
	want("draining", 503, healthpb.HealthCheckResponse_NOT_SERVING)
	// A health server followed after the drain began reports it too.
	late := grpchealth.NewServer()
	r.Follow(late, "svc")
	if st := grpcStatus(t, late, "svc"); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("followed while draining: %v", st)
	}
	time.Sleep(50 * time.Millisecond) // Run ticks: it must not bring SERVING back
	want("draining", 503, healthpb.HealthCheckResponse_NOT_SERVING)
	r.Stop()
	want("stopped", 503, healthpb.HealthCheckResponse_NOT_SERVING)
	if a := get(t, r.Readyz, http.MethodPost); a.status != 405 {
		t.Errorf("POST /readyz: %d", a.status)
	}
}

// TestChecksFollowDependencies: while ready, /readyz and gRPC health
// follow the store and the extra checks, and say "backend not ready"
// (never the store's error) when one fails.
func TestChecksFollowDependencies(t *testing.T) {
	store := openStore(t)
	var certOK atomic.Bool
	certOK.Store(true)
	r, err := health.New(health.Options{Store: store, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.AddCheck(health.Check{Name: "cert", Ready: func(context.Context) error {
		if !certOK.Load() {
			return errors.New("certificate not loaded")
		}
		return nil
	}})
	hs := grpchealth.NewServer()
	r.Follow(hs, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r.Serve()
	if a := get(t, r.Readyz, http.MethodGet); a.status != 200 {
		t.Fatalf("ready: %+v", a)
	}
	certOK.Store(false)
	if a := get(t, r.Readyz, http.MethodGet); a.status != 503 || a.Phase != "ready" || a.Error != "backend not ready" {
		t.Errorf("failing check: %+v", a)
	}
	certOK.Store(true)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if a := get(t, r.Readyz, http.MethodGet); a.status != 503 || a.Error != "backend not ready" {
		t.Errorf("closed store: %+v", a)
	}
	deadline := time.Now().Add(10 * time.Second)
	for grpcStatus(t, hs, "") != healthpb.HealthCheckResponse_NOT_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("gRPC health still SERVING with the store closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
