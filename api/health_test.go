package api_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestWatchReadiness: grpc.health.v1 follows the store's reachability.
func TestWatchReadiness(t *testing.T) {
	store := openStore(t)
	g := newGRPCEnv(t, store, nil)
	hs := health.NewServer()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.srv.WatchReadiness(ctx, hs, 20*time.Millisecond)
	}()
	defer func() { cancel(); <-done }()

	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for {
			r, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "fencegate.v1.Locks"})
			if err == nil && r.GetStatus() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health %v (%v), want %v", r.GetStatus(), err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
}
