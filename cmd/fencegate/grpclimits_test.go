package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/serving"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
)

// TestLocksGRPCListenerBoundsMessages: the lock API listener as serve
// builds it refuses a message larger than a lock request can be
// (RESOURCE_EXHAUSTED, before it is decoded) and a call without a token
// (UNAUTHENTICATED, before it is read: api's TestGRPCTapRefusesBeforeReading),
// and serves an ordinary acquire. The listener with grpc-go's defaults (the
// broken variant) reads and decodes the 8 KiB request and hands it to the
// handler, which finds the key too long.
func TestLocksGRPCListenerBoundsMessages(t *testing.T) {
	const token = "tok-grpc-limits-0d6e"
	s := locktest.OpenBolt(t)
	authn, err := auth.NewAuthenticator([]auth.Token{{Name: "t", SHA256: auth.HashToken(token), Prefixes: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := lockserver.New(lockserver.Options{Store: s, Auth: authn, Logger: discardLogger(), Authenticated: connlimit.MarkTrusted})
	if err != nil {
		t.Fatal(err)
	}
	goBG := func(fn func(context.Context)) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go fn(ctx)
	}
	for _, tc := range []struct {
		name     string
		build    func() (*serving.GRPCRunner, error)
		oversize codes.Code
	}{
		{"as serve builds it", func() (*serving.GRPCRunner, error) {
			return newLocksGRPCRunner(config.Listener{Addr: "127.0.0.1:0"}, connlimit.Limits{}, srv, testHealth(t, s), discardLogger(), goBG)
		}, codes.ResourceExhausted},
		{"grpc-go defaults (broken variant)", func() (*serving.GRPCRunner, error) {
			return serving.NewGRPC("grpc", "127.0.0.1:0", nil, serving.DefaultGRPCLimits, discardLogger(), func(g *grpc.Server) {
				srv.RegisterGRPC(g)
			})
		}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.build()
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = r.Serve() }()
			t.Cleanup(r.Close)
			conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			locks := fencegatev1.NewLocksClient(conn)
			withToken := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
			ttl := proto.Int64(30000)

			_, err = locks.Acquire(withToken, &fencegatev1.AcquireRequest{Key: strings.Repeat("k", 8<<10), TtlMs: ttl})
			if got := status.Code(err); got != tc.oversize {
				t.Fatalf("8 KiB key with a token: %v, want %s", err, tc.oversize)
			}
			_, err = locks.Acquire(context.Background(), &fencegatev1.AcquireRequest{Key: strings.Repeat("k", 1<<20), TtlMs: ttl})
			if got := status.Code(err); got != codes.Unauthenticated {
				t.Fatalf("1 MiB key without a token: %v, want Unauthenticated", err)
			}
			res, err := locks.Acquire(withToken, &fencegatev1.AcquireRequest{Key: "limits/" + strings.Repeat("é", 200), TtlMs: ttl})
			if err != nil || !res.GetOk() {
				t.Fatalf("ordinary acquire: %v, %v", res, err)
			}
			if _, err := locks.Release(withToken, &fencegatev1.ReleaseRequest{LockId: res.GetLockId()}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGRPCSlotsKeepAuthenticatedCallers: on the lock API listener, a
// connection that carried a call with a valid token outlives idle
// connections that arrive after it when the listener is full. Without the
// lockserver.Options.Authenticated hook (the broken variant) it is the longest
// idle and the first closed.
func TestGRPCSlotsKeepAuthenticatedCallers(t *testing.T) {
	const token = "tok-grpc-trust-51aa"
	for _, tc := range []struct {
		name string
		hook func(context.Context)
	}{{"hooked", connlimit.MarkTrusted}, {"no hook (broken variant)", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			s := locktest.OpenBolt(t)
			authn, err := auth.NewAuthenticator([]auth.Token{{Name: "t", SHA256: auth.HashToken(token), Prefixes: []string{"*"}}})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := lockserver.New(lockserver.Options{Store: s, Auth: authn, Logger: discardLogger(), Authenticated: tc.hook})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			r, err := newLocksGRPCRunner(config.Listener{Addr: "127.0.0.1:0"}, connlimit.Limits{Max: 2, PerPeer: 2}, srv, testHealth(t, s), discardLogger(),
				func(fn func(context.Context)) { go fn(ctx) })
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = r.Serve() }()
			t.Cleanup(r.Close)

			conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			withToken := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
			if _, err := fencegatev1.NewLocksClient(conn).IsLocked(withToken, &fencegatev1.IsLockedRequest{Key: "trust/k"}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // the caller's connection is the longest idle
			for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
				c := dialFrom(t, ip, r.Addr())
				if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(300 * time.Millisecond)
			kept := r.Listener().Open(netip.MustParseAddr("127.0.0.1")) > 0
			if kept != (tc.hook != nil) {
				t.Fatalf("authenticated caller's connection kept: %v, want %v", kept, tc.hook != nil)
			}
		})
	}
}
