package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/lockstore"
)

// TestLockAPIGRPC walks docs/api.md's lock table over fencegate.v1.Locks on
// every store kind: contention and absence are reply fields, bad requests
// INVALID_ARGUMENT with the LockError code in a google.rpc.ErrorInfo.
func TestLockAPIGRPC(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			g := StartGateway(t, s.URL, "--authz-addr", "off")
			waitReady(t, g.URL())
			conn := dialGRPC(t, g.GRPC)
			c := fencegatev1.NewLocksClient(conn)

			t.Run("health", func(t *testing.T) {
				hc := healthpb.NewHealthClient(conn)
				// Health follows the store's readiness, checked in the
				// background: NOT_SERVING until the first check answers (a
				// cold emulator's first read is slow), then SERVING.
				for _, svc := range []string{"", "fencegate.v1.Locks"} {
					deadline := time.Now().Add(30 * time.Second)
					for {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
						cancel()
						if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
							break
						}
						if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING || time.Now().After(deadline) {
							t.Errorf("health %q = %v, %v; want NOT_SERVING then SERVING", svc, res.GetStatus(), err)
							break
						}
						time.Sleep(250 * time.Millisecond)
					}
				}
			})
			t.Run("lifecycle", func(t *testing.T) { testGRPCLifecycle(t, c) })
			t.Run("invalid arguments", func(t *testing.T) { testGRPCInvalid(t, c) })
			t.Run("wait", func(t *testing.T) { testGRPCWait(t, c) })
		})
	}
}

func testGRPCLifecycle(t *testing.T, c fencegatev1.LocksClient) {
	ctx := rpcCtx(t)
	key := "orders/" + randHex(6)

	a, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: key, TtlMs: proto.Int64(10000)})
	if err != nil || !a.GetOk() {
		t.Fatalf("Acquire = %v, %v", a, err)
	}
	if len(a.GetLockId()) != 22 || lockstore.ValidateLockID(a.GetLockId()) != nil || !fenceRE.MatchString(a.GetFence()) || a.GetExpiresAtMs() <= 0 {
		t.Fatalf("Acquire reply %v: want a 22-char lockId, a 15-digit fence and expiresAtMs", a)
	}
	if a.GetReason() != "" {
		t.Errorf("successful Acquire has reason %q", a.GetReason())
	}

	// Contention is a reply, not an error.
	b, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: key})
	if err != nil {
		t.Fatalf("contended Acquire returned an error: %v", err)
	}
	if b.GetOk() || b.GetReason() != "locked" || b.GetLockId() != "" || b.GetFence() != "" || b.GetExpiresAtMs() != 0 {
		t.Errorf("contended Acquire = %v, want ok=false reason=locked and nothing else", b)
	}

	if l, err := c.IsLocked(ctx, &fencegatev1.IsLockedRequest{Key: key}); err != nil || !l.GetLocked() {
		t.Errorf("IsLocked while held = %v, %v", l, err)
	}

	for name, req := range map[string]*fencegatev1.LookupRequest{
		"key":    {Target: &fencegatev1.LookupRequest_Key{Key: key}},
		"lockId": {Target: &fencegatev1.LookupRequest_LockId{LockId: a.GetLockId()}},
	} {
		l, err := c.Lookup(ctx, req)
		if err != nil || !l.GetOk() {
			t.Fatalf("Lookup by %s = %v, %v", name, l, err)
		}
		if l.GetKeyHash() != lockstore.HashKey(key) || l.GetLockIdHash() != lockstore.HashKey(a.GetLockId()) ||
			l.GetFence() != a.GetFence() || l.GetExpiresAtMs() != a.GetExpiresAtMs() ||
			l.GetAcquiredAtMs() <= 0 || l.GetAcquiredAtMs() > l.GetExpiresAtMs() {
			t.Errorf("Lookup by %s = %v (acquired %v)", name, l, a)
		}
		if s := l.String(); strings.Contains(s, key) || strings.Contains(s, a.GetLockId()) {
			t.Errorf("Lookup by %s reply carries the raw key or lockId: %s", name, s)
		}
	}

	e, err := c.Extend(ctx, &fencegatev1.ExtendRequest{LockId: a.GetLockId(), TtlMs: proto.Int64(20000)})
	if err != nil || !e.GetOk() || e.GetExpiresAtMs() <= a.GetExpiresAtMs() {
		t.Errorf("Extend = %v, %v; want ok and expiresAtMs past %d", e, err, a.GetExpiresAtMs())
	}

	if r, err := c.Release(ctx, &fencegatev1.ReleaseRequest{LockId: a.GetLockId()}); err != nil || !r.GetOk() {
		t.Fatalf("Release = %v, %v", r, err)
	}
	if r, err := c.Release(ctx, &fencegatev1.ReleaseRequest{LockId: a.GetLockId()}); err != nil || r.GetOk() {
		t.Errorf("second Release = %v, %v; want ok=false, no error", r, err)
	}
	if e, err := c.Extend(ctx, &fencegatev1.ExtendRequest{LockId: a.GetLockId(), TtlMs: proto.Int64(1000)}); err != nil || e.GetOk() || e.GetExpiresAtMs() != 0 {
		t.Errorf("Extend after release = %v, %v; want ok=false, no error", e, err)
	}
	if l, err := c.IsLocked(ctx, &fencegatev1.IsLockedRequest{Key: key}); err != nil || l.GetLocked() {
		t.Errorf("IsLocked after release = %v, %v", l, err)
	}
	if l, err := c.Lookup(ctx, &fencegatev1.LookupRequest{Target: &fencegatev1.LookupRequest_Key{Key: key}}); err != nil || l.GetOk() || l.GetFence() != "" {
		t.Errorf("Lookup after release = %v, %v; want ok=false and empty", l, err)
	}

	// Re-acquire: a strictly larger fence, over the same counter HTTP uses.
	a2, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: key})
	if err != nil || !a2.GetOk() || a2.GetFence() <= a.GetFence() {
		t.Errorf("re-Acquire = %v, %v; want a fence after %s", a2, err, a.GetFence())
	}
}

func testGRPCInvalid(t *testing.T, c fencegatev1.LocksClient) {
	ctx := rpcCtx(t)
	held, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: "invalid/" + randHex(6)})
	if err != nil || !held.GetOk() {
		t.Fatalf("Acquire = %v, %v", held, err)
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"empty key", func() error { _, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{}); return err }},
		{"ttl 0", func() error {
			_, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: "a", TtlMs: proto.Int64(0)})
			return err
		}},
		{"wait over the cap", func() error {
			_, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: "a", WaitMs: proto.Int64(30001)})
			return err
		}},
		{"bad lockId on release", func() error {
			_, err := c.Release(ctx, &fencegatev1.ReleaseRequest{LockId: "nope"})
			return err
		}},
		{"bad lockId on extend", func() error {
			_, err := c.Extend(ctx, &fencegatev1.ExtendRequest{LockId: "nope", TtlMs: proto.Int64(1000)})
			return err
		}},
		{"extend ttl 0", func() error {
			_, err := c.Extend(ctx, &fencegatev1.ExtendRequest{LockId: held.GetLockId(), TtlMs: proto.Int64(0)})
			return err
		}},
		{"lookup without target", func() error { _, err := c.Lookup(ctx, &fencegatev1.LookupRequest{}); return err }},
		{"lookup bad lockId", func() error {
			_, err := c.Lookup(ctx, &fencegatev1.LookupRequest{Target: &fencegatev1.LookupRequest_LockId{LockId: "x"}})
			return err
		}},
		{"isLocked empty key", func() error { _, err := c.IsLocked(ctx, &fencegatev1.IsLockedRequest{}); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantGRPCError(t, tc.call(), codes.InvalidArgument, lockstore.InvalidArgument)
		})
	}
}

func testGRPCWait(t *testing.T, c fencegatev1.LocksClient) {
	ctx := rpcCtx(t)
	key := "wait/" + randHex(6)
	first, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: key})
	if err != nil || !first.GetOk() {
		t.Fatalf("Acquire = %v, %v", first, err)
	}
	type result struct {
		r   *fencegatev1.AcquireResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: key, WaitMs: proto.Int64(5000)})
		done <- result{r, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if r, err := c.Release(ctx, &fencegatev1.ReleaseRequest{LockId: first.GetLockId()}); err != nil || !r.GetOk() {
		t.Fatalf("Release = %v, %v", r, err)
	}
	res := <-done
	if res.err != nil || !res.r.GetOk() || res.r.GetFence() <= first.GetFence() {
		t.Errorf("waiting Acquire = %v, %v; want ok with a fence after %s", res.r, res.err, first.GetFence())
	}
	// And one that runs out: ok=false after the wait.
	start := time.Now()
	r, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: key, WaitMs: proto.Int64(500)})
	if err != nil || r.GetOk() || r.GetReason() != "locked" || time.Since(start) < 400*time.Millisecond {
		t.Errorf("Acquire waiting 500ms on a held key = %v, %v after %v", r, err, time.Since(start))
	}
}

// --- gRPC helpers ---

// dialGRPC opens a plaintext connection to a gateway's gRPC listener.
func dialGRPC(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rpcCtx bounds a subtest's RPCs.
func rpcCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantGRPCError checks the status code and the google.rpc.ErrorInfo
// detail carrying the LockError code (docs/api.md, "Lock API over gRPC").
func wantGRPCError(t testing.TB, err error, code codes.Code, lockCode lockstore.Code) {
	t.Helper()
	st, ok := status.FromError(err)
	if err == nil || !ok {
		t.Fatalf("error = %v, want status %v", err, code)
	}
	if st.Code() != code {
		t.Errorf("status code = %v (%s), want %v", st.Code(), st.Message(), code)
	}
	var infos []*errdetails.ErrorInfo
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			infos = append(infos, info)
		}
	}
	if len(infos) != 1 || infos[0].GetReason() != string(lockCode) || infos[0].GetDomain() != "fencegate.io" {
		t.Errorf("status details %v, want one ErrorInfo{Reason: %s, Domain: fencegate.io}", st.Details(), lockCode)
	}
}
