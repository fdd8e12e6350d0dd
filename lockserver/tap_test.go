package lockserver_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"
)

// payloads counts the messages a server read (stats.InPayload): a call's
// message is read whole, into memory, before anything decides on it.
type payloads struct{ n atomic.Int64 }

func (p *payloads) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (p *payloads) HandleConn(context.Context, stats.ConnStats)                       {}
func (p *payloads) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (p *payloads) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InPayload); ok {
		p.n.Add(1)
	}
}

// TestGRPCTapRefusesBeforeReading: with GRPCTap, a Locks call without a
// valid token is answered Unauthenticated (AuthFailed, as the interceptor
// answers it) and its message — here a 1 MiB key — is never read; a call
// with a token, and a health check without one, go through. Without the
// tap (the broken variant: the interceptor alone) the same call is
// refused only after its message was read.
func TestGRPCTapRefusesBeforeReading(t *testing.T) {
	for _, tc := range []struct {
		name string
		tap  bool
	}{{"tap", true}, {"interceptor only (broken variant)", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var authenticated atomic.Int64
			e := newEnv(t, locktest.OpenBolt(t), func(o *lockserver.Options) {
				o.Authenticated = func(context.Context) { authenticated.Add(1) }
			})
			read := &payloads{}
			opts := []grpc.ServerOption{grpc.StatsHandler(read)}
			if tc.tap {
				opts = append(opts, grpc.InTapHandle(e.srv.GRPCTap))
			}
			gs := grpc.NewServer(opts...)
			e.srv.RegisterGRPC(gs)
			healthpb.RegisterHealthServer(gs, health.NewServer())
			lis := testutil.Listen(t)
			go func() { _ = gs.Serve(lis) }()
			t.Cleanup(gs.Stop)
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			locks := fencegatev1.NewLocksClient(conn)

			big := &fencegatev1.AcquireRequest{Key: strings.Repeat("k", 1<<20), TtlMs: proto.Int64(30000)}
			for _, ctx := range []context.Context{bearer(""), bearer(unknownTok)} {
				_, err = locks.Acquire(ctx, big)
				wantStatus(t, err, codes.Unauthenticated, lockstore.AuthFailed)
			}
			if n := read.n.Load(); (n == 0) != tc.tap {
				t.Fatalf("%d messages read for calls without a valid token (tap %v)", n, tc.tap)
			}
			if authenticated.Load() != 0 {
				t.Fatalf("Authenticated called for a refused call")
			}

			before := read.n.Load()
			res, err := locks.Acquire(bearer(adminToken), &fencegatev1.AcquireRequest{Key: "tap/k", TtlMs: proto.Int64(30000)})
			if err != nil || !res.GetOk() {
				t.Fatalf("acquire with a token: %v, %v", res, err)
			}
			// The tap and the interceptor each accept the token.
			want := int64(1)
			if tc.tap {
				want = 2
			}
			if got := authenticated.Load(); got != want {
				t.Fatalf("Authenticated called %d times, want %d", got, want)
			}
			if read.n.Load() == before {
				t.Fatal("the call with a token was not read")
			}
			if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("health check without a token: %v", err)
			}
		})
	}
}
