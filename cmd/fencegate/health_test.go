package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/health"
	"github.com/fencegate/fencegate/internal/serving"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
)

// gatedStore is the real store whose Ping waits until the test opens the
// gate: the first readiness check is still out while the test looks.
type gatedStore struct {
	lockstore.Store
	gate chan struct{}
}

func (s gatedStore) Ping(ctx context.Context) error {
	select {
	case <-s.gate:
		return s.Store.Ping(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestGRPCHealthStartsNotServing: both gRPC listeners, built as serve
// builds them, answer NOT_SERVING (never SERVING, never "unknown
// service") until the first readiness check answers, then SERVING.
func TestGRPCHealthStartsNotServing(t *testing.T) {
	s := locktest.OpenBolt(t)
	store := gatedStore{Store: s, gate: make(chan struct{})}
	log := discardLogger()
	srv, err := lockserver.New(lockserver.Options{Store: store, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := health.New(health.Options{Store: store, Logger: log, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	checker := fencecheck.New(store, fencecheck.Options{Logger: log})

	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(context.Background())
	goBG := func(fn func(context.Context)) {
		bg.Add(1)
		go func() { defer bg.Done(); fn(bgCtx) }()
	}
	goBG(hs.Run)
	l := config.Listener{Addr: "127.0.0.1:0"}
	locks, err := newLocksGRPCRunner(l, connlimit.Limits{}, srv, hs, log, goBG)
	if err != nil {
		t.Fatal(err)
	}
	az, err := newAuthzRunner(l, connlimit.Limits{}, hs, checker, authz.Options{Logger: log}, log, goBG)
	if err != nil {
		t.Fatal(err)
	}
	ls := serving.Group{Health: hs}
	ls.Add("grpc", locks)
	ls.Add("authz", az)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ls.Run(ctx, log) }()
	t.Cleanup(func() {
		stop()
		<-done
		stopBG()
		bg.Wait()
	})

	check := func(addr, svc string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: svc}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("%s %q: %v", addr, svc, err)
		}
		return res.GetStatus()
	}
	targets := []struct{ addr, svc string }{
		{locks.Addr(), ""}, {locks.Addr(), lockserver.LocksServiceName},
		{az.Addr(), ""}, {az.Addr(), authz.ServiceName},
	}
	for _, tg := range targets {
		if st := check(tg.addr, tg.svc); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("%s %q before the first readiness answer: %v, want NOT_SERVING", tg.addr, tg.svc, st)
		}
	}
	close(store.gate)
	for _, tg := range targets {
		deadline := time.Now().Add(30 * time.Second)
		for check(tg.addr, tg.svc) != healthpb.HealthCheckResponse_SERVING {
			if time.Now().After(deadline) {
				t.Fatalf("%s %q not SERVING 30 s after the store answered", tg.addr, tg.svc)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestAuthzRegisterAloneServes: authz.Server.Register reports SERVING at
// once. It is what the authz listener answered before the store was
// reached when serve did not mark it NOT_SERVING first; this is how the
// test above can fail.
func TestAuthzRegisterAloneServes(t *testing.T) {
	s := locktest.OpenBolt(t)
	as := authz.NewServer(fencecheck.New(s, fencecheck.Options{Logger: discardLogger()}), authz.Options{Logger: discardLogger()})
	as.Register(grpc.NewServer())
	res, err := as.Health().Check(context.Background(), &healthpb.HealthCheckRequest{Service: authz.ServiceName})
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("%v %v: the broken variant no longer serves early; the test above proves nothing new", res.GetStatus(), err)
	}
}

// testHealth is a lifecycle over store, already serving, its gRPC health
// kept current until the test ends.
func testHealth(t testing.TB, store lockstore.Store) *health.Readiness {
	t.Helper()
	hs, err := health.New(health.Options{Store: store, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hs.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	hs.Serve()
	return hs
}
