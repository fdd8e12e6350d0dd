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
