package api_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// TestFollowReadiness: grpc.health.v1 is NOT_SERVING before the first
// check, then follows the store's reachability, for every service named.
func TestFollowReadiness(t *testing.T) {
	store := locktest.OpenBolt(t)
	g := newGRPCEnv(t, store, nil)
	hs := health.NewServer()
	services := []string{"", api.LocksServiceName, "other.Service"}
	for _, svc := range services {
		// What a listener set up before the follower would report.
		hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
	follow := g.srv.FollowReadiness(hs, 20*time.Millisecond, services...)
	for _, svc := range services {
		r, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("%q before the first check: %v %v, want NOT_SERVING", svc, r.GetStatus(), err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		follow(ctx)
	}()
	defer func() { cancel(); <-done }()

	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, svc := range services {
			for {
				r, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
				if err == nil && r.GetStatus() == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("health %q %v (%v), want %v", svc, r.GetStatus(), err, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
}
