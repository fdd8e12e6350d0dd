package lockserver_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// grpcEnv serves an lockserver.Server's Locks service on a loopback listener.
type grpcEnv struct {
	*env
	conn   *grpc.ClientConn
	client fencegatev1.LocksClient
	outer  atomic.Int64 // calls seen by the server-wide interceptor
}

func newGRPCEnv(t testing.TB, store lockstore.Store, mutate func(*lockserver.Options)) *grpcEnv {
	t.Helper()
	g := &grpcEnv{env: newEnv(t, store, mutate)}
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		g.outer.Add(1)
		return h(ctx, req)
	}))
	g.srv.RegisterGRPC(gs)
	lis := testutil.Listen(t)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() { gs.Stop(); <-served })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	g.conn = conn
	g.client = fencegatev1.NewLocksClient(conn)
	return g
}

func bearer(token string) context.Context {
	ctx := context.Background()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx
}

// wantStatus checks a gRPC error's code and its ErrorInfo LockError code.
func wantStatus(t *testing.T, err error, code codes.Code, lockCode lockstore.Code) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || err == nil {
		t.Fatalf("error %v, want status %s", err, code)
	}
	if st.Code() != code {
		t.Errorf("status %s (%s), want %s", st.Code(), st.Message(), code)
	}
	if got := lockserver.CodeFromStatus(st); got != lockCode {
		t.Errorf("ErrorInfo reason %q, want %q (details %v)", got, lockCode, st.Details())
	}
}

func TestGRPC(t *testing.T) {
	g := newGRPCEnv(t, locktest.OpenBolt(t), nil)
	admin := bearer(adminToken)

	held, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "orders/held", TtlMs: proto.Int64(60_000)})
	if err != nil || !held.GetOk() {
		t.Fatalf("acquire: %v %v", held, err)
	}
	if !lockIDRe.MatchString(held.GetLockId()) || !fenceRe.MatchString(held.GetFence()) || held.GetExpiresAtMs() < time.Now().UnixMilli()+55_000 {
		t.Errorf("acquire reply %v", held)
	}

	t.Run("acquire default ttl", func(t *testing.T) {
		r, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "orders/dflt"})
		if err != nil || !r.GetOk() {
			t.Fatalf("%v %v", r, err)
		}
		if d := r.GetExpiresAtMs() - time.Now().UnixMilli(); d < 25_000 || d > 35_000 {
			t.Errorf("expiry in %dms, want about 30000", d)
		}
	})

	t.Run("contention is ok=false, not an error", func(t *testing.T) {
		r, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "orders/held"})
		if err != nil || r.GetOk() || r.GetReason() != "locked" || r.GetLockId() != "" {
			t.Fatalf("%v %v", r, err)
		}
	})

	t.Run("wait runs out is ok=false", func(t *testing.T) {
		start := time.Now()
		r, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "orders/held", WaitMs: proto.Int64(400)})
		if err != nil || r.GetOk() || r.GetReason() != "locked" {
			t.Fatalf("%v %v", r, err)
		}
		if el := time.Since(start); el < 350*time.Millisecond {
			t.Errorf("answered after %v, before the 400ms wait", el)
		}
	})

	t.Run("lookup by key and lockId", func(t *testing.T) {
		byKey, err := g.client.Lookup(admin, &fencegatev1.LookupRequest{Target: &fencegatev1.LookupRequest_Key{Key: "orders/held"}})
		if err != nil || !byKey.GetOk() || byKey.GetFence() != held.GetFence() ||
			byKey.GetKeyHash() != lockstore.HashKey("orders/held") || byKey.GetLockIdHash() != lockstore.HashKey(held.GetLockId()) {
			t.Fatalf("by key: %v %v", byKey, err)
		}
		byID, err := g.client.Lookup(admin, &fencegatev1.LookupRequest{Target: &fencegatev1.LookupRequest_LockId{LockId: held.GetLockId()}})
		if err != nil || !proto.Equal(byID, byKey) {
			t.Fatalf("by lockId: %v %v, want %v", byID, err, byKey)
		}
		absent, err := g.client.Lookup(admin, &fencegatev1.LookupRequest{Target: &fencegatev1.LookupRequest_Key{Key: "orders/none"}})
		if err != nil || absent.GetOk() || absent.GetFence() != "" {
			t.Fatalf("absent: %v %v", absent, err)
		}
	})

	t.Run("is locked", func(t *testing.T) {
		for key, want := range map[string]bool{"orders/held": true, "orders/none": false} {
			r, err := g.client.IsLocked(admin, &fencegatev1.IsLockedRequest{Key: key})
			if err != nil || r.GetLocked() != want {
				t.Errorf("%s: %v %v, want %v", key, r, err, want)
			}
		}
	})

	t.Run("extend then release", func(t *testing.T) {
		a, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "orders/er", TtlMs: proto.Int64(5_000)})
		if err != nil || !a.GetOk() {
			t.Fatal(a, err)
		}
		ex, err := g.client.Extend(admin, &fencegatev1.ExtendRequest{LockId: a.GetLockId(), TtlMs: proto.Int64(90_000)})
		if err != nil || !ex.GetOk() || ex.GetExpiresAtMs() < time.Now().UnixMilli()+85_000 {
			t.Fatalf("extend: %v %v", ex, err)
		}
		rel, err := g.client.Release(admin, &fencegatev1.ReleaseRequest{LockId: a.GetLockId()})
		if err != nil || !rel.GetOk() {
			t.Fatalf("release: %v %v", rel, err)
		}
		rel, err = g.client.Release(admin, &fencegatev1.ReleaseRequest{LockId: a.GetLockId()})
		if err != nil || rel.GetOk() {
			t.Fatalf("second release: %v %v, want ok=false", rel, err)
		}
		ex, err = g.client.Extend(admin, &fencegatev1.ExtendRequest{LockId: a.GetLockId(), TtlMs: proto.Int64(1000)})
		if err != nil || ex.GetOk() {
			t.Fatalf("extend released: %v %v, want ok=false", ex, err)
		}
	})

	errCases := []struct {
		name     string
		call     func() error
		code     codes.Code
		lockCode lockstore.Code
	}{
		{"no token", func() error {
			_, err := g.client.IsLocked(context.Background(), &fencegatev1.IsLockedRequest{Key: "orders/held"})
			return err
		}, codes.Unauthenticated, lockstore.AuthFailed},
		{"unknown token", func() error {
			_, err := g.client.IsLocked(bearer(unknownTok), &fencegatev1.IsLockedRequest{Key: "orders/held"})
			return err
		}, codes.Unauthenticated, lockstore.AuthFailed},
		{"two authorization values", func() error {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+unknownTok, "authorization", "Bearer "+adminToken)
			_, err := g.client.IsLocked(ctx, &fencegatev1.IsLockedRequest{Key: "orders/held"})
			return err
		}, codes.Unauthenticated, lockstore.AuthFailed},
		{"key outside the token's prefixes", func() error {
			_, err := g.client.Acquire(bearer(ordersToken), &fencegatev1.AcquireRequest{Key: "billing/1"})
			return err
		}, codes.PermissionDenied, lockstore.AuthFailed},
		{"operation outside the token's scope", func() error {
			_, err := g.client.Acquire(bearer(readerToken), &fencegatev1.AcquireRequest{Key: "orders/r"})
			return err
		}, codes.PermissionDenied, lockstore.AuthFailed},
		{"lookup by key outside the prefixes", func() error {
			_, err := g.client.Lookup(bearer(ordersToken), &fencegatev1.LookupRequest{Target: &fencegatev1.LookupRequest_Key{Key: "billing/1"}})
			return err
		}, codes.PermissionDenied, lockstore.AuthFailed},
		{"ttl zero", func() error {
			_, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "orders/t", TtlMs: proto.Int64(0)})
			return err
		}, codes.InvalidArgument, lockstore.InvalidArgument},
		{"wait over the cap", func() error {
			_, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "orders/t", WaitMs: proto.Int64(60_000)})
			return err
		}, codes.InvalidArgument, lockstore.InvalidArgument},
		{"empty key", func() error {
			_, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{})
			return err
		}, codes.InvalidArgument, lockstore.InvalidArgument},
		{"bad lockId", func() error {
			_, err := g.client.Release(admin, &fencegatev1.ReleaseRequest{LockId: "nope"})
			return err
		}, codes.InvalidArgument, lockstore.InvalidArgument},
		{"extend without ttl", func() error {
			_, err := g.client.Extend(admin, &fencegatev1.ExtendRequest{LockId: held.GetLockId()})
			return err
		}, codes.InvalidArgument, lockstore.InvalidArgument},
		{"lookup with neither", func() error {
			_, err := g.client.Lookup(admin, &fencegatev1.LookupRequest{})
			return err
		}, codes.InvalidArgument, lockstore.InvalidArgument},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) { wantStatus(t, c.call(), c.code, c.lockCode) })
	}

	t.Run("release by lockId needs only the operation", func(t *testing.T) {
		a, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "billing/x"})
		if err != nil || !a.GetOk() {
			t.Fatal(a, err)
		}
		r, err := g.client.Release(bearer(ordersToken), &fencegatev1.ReleaseRequest{LockId: a.GetLockId()})
		if err != nil || !r.GetOk() {
			t.Fatalf("%v %v", r, err)
		}
	})

	t.Run("server-wide interceptor still runs", func(t *testing.T) {
		if g.outer.Load() == 0 {
			t.Error("the server's own interceptor was bypassed")
		}
	})

	t.Run("reflection lists the service", func(t *testing.T) {
		stream, err := reflectionpb.NewServerReflectionClient(g.conn).ServerReflectionInfo(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		if !slices.Contains(names, "fencegate.v1.Locks") {
			t.Errorf("services %v", names)
		}
		_ = stream.CloseSend()
	})

	t.Run("metrics and logs", func(t *testing.T) {
		if got := g.counter(t, "acquire", "fail"); got < 2 {
			t.Errorf("acquire fail = %v, want >= 2", got)
		}
		if got := g.counter(t, "status", "AuthFailed"); got < 3 {
			t.Errorf("status AuthFailed = %v, want >= 3", got)
		}
		logs := g.logs.String()
		if !strings.Contains(logs, `"method":"/fencegate.v1.Locks/Acquire"`) || !strings.Contains(logs, `"token":"admin"`) {
			t.Errorf("gRPC access log missing:\n%s", logs)
		}
		assertNoSecrets(t, logs, adminToken, ordersToken, readerToken, unknownTok, held.GetLockId(), "orders/held")
	})
}

func TestGRPCWaitSucceeds(t *testing.T) {
	g := newGRPCEnv(t, locktest.OpenBolt(t), nil)
	admin := bearer(adminToken)
	a, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "jobs/g"})
	if err != nil || !a.GetOk() {
		t.Fatal(a, err)
	}
	done := make(chan error, 1)
	go func() {
		time.Sleep(250 * time.Millisecond)
		_, err := g.client.Release(admin, &fencegatev1.ReleaseRequest{LockId: a.GetLockId()})
		done <- err
	}()
	r, err := g.client.Acquire(admin, &fencegatev1.AcquireRequest{Key: "jobs/g", WaitMs: proto.Int64(4000)})
	if rerr := <-done; rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil || !r.GetOk() || r.GetFence() <= a.GetFence() {
		t.Fatalf("%v %v (first fence %s)", r, err, a.GetFence())
	}
}

func TestGRPCClientDeadlineEndsWait(t *testing.T) {
	g := newGRPCEnv(t, locktest.OpenBolt(t), nil)
	if _, err := g.client.Acquire(bearer(adminToken), &fencegatev1.AcquireRequest{Key: "jobs/d"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bearer(adminToken), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := g.client.Acquire(ctx, &fencegatev1.AcquireRequest{Key: "jobs/d", WaitMs: proto.Int64(4000)})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("error %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("returned after %v", el)
	}
}
