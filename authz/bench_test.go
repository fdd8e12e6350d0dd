package authz

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// BenchmarkGRPCCheckBolt: one allowed write check, Envoy-shaped, over
// loopback gRPC, reading the bolt store.
func BenchmarkGRPCCheckBolt(b *testing.B) {
	s := locktest.OpenBolt(b, locktest.FloorOff)
	r, err := s.Acquire(context.Background(), "orders/42", time.Hour)
	if err != nil || !r.OK {
		b.Fatal(err)
	}
	conn := serveGRPC(b, fencecheck.New(s, fencecheck.Options{}))
	client := authv3.NewAuthorizationClient(conn)
	req := envoyRequest("PUT", "/orders/42", map[string]string{fencewire.HeaderToken: r.Fence}, map[string]string{fencewire.ExtKey: "orders/{2}"})
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Check(context.Background(), req)
		if err != nil || resp.GetStatus().GetCode() != int32(code.Code_OK) {
			b.Fatalf("%v %v", resp, err)
		}
	}
}

// BenchmarkCheckBolt: the decision alone, in-process.
func BenchmarkCheckBolt(b *testing.B) {
	s := locktest.OpenBolt(b, locktest.FloorOff)
	r, err := s.Acquire(context.Background(), "orders/42", time.Hour)
	if err != nil || !r.OK {
		b.Fatal(err)
	}
	c := fencecheck.New(s, fencecheck.Options{})
	req := fencecheck.Request{Key: "orders/42", Fence: r.Fence, Write: true}
	for b.Loop() {
		if d, err := c.Check(context.Background(), req); err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
	}
}

// BenchmarkServerCheck: the ext_authz server's own work for the request
// BenchmarkExtAuthz (bench/) sends — a POST with the key and current fence
// in headers, no context extensions — without gRPC or a network: reading
// the request, resolving its route, building and deciding the check over
// an in-memory store, the response. What a change to the check path
// costs per check, in allocations (exact) and time.
func BenchmarkServerCheck(b *testing.B) {
	s := locktest.NewMemStore()
	r, err := s.Acquire(context.Background(), "bench/authz/0", time.Hour)
	if err != nil || !r.OK {
		b.Fatal(err)
	}
	srv := NewServer(fencecheck.New(s, fencecheck.Options{}), Options{})
	req := envoyRequest("POST", "/orders/0", map[string]string{fencewire.HeaderKey: "bench/authz/0", fencewire.HeaderToken: r.Fence}, nil)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := srv.Check(context.Background(), req)
		if err != nil || resp.GetStatus().GetCode() != int32(code.Code_OK) {
			b.Fatalf("%v %v", resp, err)
		}
	}
}
