package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

// The tests in this file are the behaviour both clients share. Each runs
// against the HTTP client and the gRPC client (forEachKind) talking to the
// same real lockserver.Server, with the same expectations.

func TestLifecycle(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		g := gateway(t)
		c := k.client(t, k.addr(g), token)
		ctx := context.Background()

		r, err := c.Acquire(ctx, "orders/1", 5*time.Second)
		if err != nil || !r.OK || len(r.LockID) != 22 || !lockstore.ValidFence(r.Fence) || r.ExpiresAtMs == 0 {
			t.Fatalf("acquire: %+v %v", r, err)
		}
		busy, err := c.Acquire(ctx, "orders/1", 0)
		if err != nil || busy.OK || busy.Reason != lockstore.ReasonLocked || busy.LockID != "" {
			t.Fatalf("second acquire: %+v %v", busy, err)
		}
		if locked, err := c.IsLocked(ctx, "orders/1"); err != nil || !locked {
			t.Fatalf("IsLocked = %v %v", locked, err)
		}
		info, err := c.LookupKey(ctx, "orders/1")
		if err != nil || info == nil || info.Fence != r.Fence || info.KeyHash != lockstore.HashKey("orders/1") ||
			info.LockIDHash != lockstore.HashKey(r.LockID) || info.ExpiresAtMs != r.ExpiresAtMs || info.AcquiredAtMs == 0 {
			t.Fatalf("LookupKey = %+v %v", info, err)
		}
		if byID, err := c.LookupLockID(ctx, r.LockID); err != nil || byID == nil || *byID != *info {
			t.Fatalf("LookupLockID = %+v %v", byID, err)
		}
		ext, err := c.Extend(ctx, r.LockID, 10*time.Second)
		if err != nil || !ext.OK || ext.ExpiresAtMs <= r.ExpiresAtMs {
			t.Fatalf("extend: %+v %v (acquired with expiry %d)", ext, err, r.ExpiresAtMs)
		}
		if rel, err := c.Release(ctx, r.LockID); err != nil || !rel.OK {
			t.Fatalf("release: %+v %v", rel, err)
		}
		if rel, err := c.Release(ctx, r.LockID); err != nil || rel.OK {
			t.Fatalf("second release must be OK=false without error: %+v %v", rel, err)
		}
		if ext, err := c.Extend(ctx, r.LockID, time.Second); err != nil || ext.OK {
			t.Fatalf("extend after release: %+v %v", ext, err)
		}
		if info, err := c.LookupKey(ctx, "orders/1"); err != nil || info != nil {
			t.Fatalf("lookup after release = %+v %v", info, err)
		}
		if info, err := c.LookupLockID(ctx, r.LockID); err != nil || info != nil {
			t.Fatalf("lookup by lockId after release = %+v %v", info, err)
		}
		if locked, err := c.IsLocked(ctx, "orders/1"); err != nil || locked {
			t.Fatalf("IsLocked after release = %v %v", locked, err)
		}
		again, err := c.Acquire(ctx, "orders/1", time.Second)
		if err != nil || !again.OK || again.Fence <= r.Fence {
			t.Fatalf("re-acquire: %+v %v, want a fence above %s", again, err, r.Fence)
		}
	})
}

// TestBothClientsShareOneGateway: a lock taken over one transport is the
// same lock over the other.
func TestBothClientsShareOneGateway(t *testing.T) {
	g := gateway(t)
	httpc := kinds[0].client(t, kinds[0].addr(g), token)
	grpcc := kinds[1].client(t, kinds[1].addr(g), token)
	ctx := context.Background()
	r, err := grpcc.Acquire(ctx, "orders/9", time.Minute)
	if err != nil || !r.OK {
		t.Fatal(r, err)
	}
	if busy, err := httpc.Acquire(ctx, "orders/9", 0); err != nil || busy.OK {
		t.Fatalf("HTTP acquire of a lock held over gRPC: %+v %v", busy, err)
	}
	if rel, err := httpc.Release(ctx, r.LockID); err != nil || !rel.OK {
		t.Fatalf("HTTP release of a gRPC lockId: %+v %v", rel, err)
	}
	if locked, err := grpcc.IsLocked(ctx, "orders/9"); err != nil || locked {
		t.Fatalf("IsLocked over gRPC after the HTTP release = %v %v", locked, err)
	}
}

func TestAcquireWaitGetsTheLockWhenReleased(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		g := gateway(t)
		c := k.client(t, k.addr(g), token)
		held, err := g.store.Acquire(context.Background(), "orders/2", time.Minute)
		if err != nil || !held.OK {
			t.Fatal(held, err)
		}
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(300 * time.Millisecond)
			_, _ = g.store.Release(context.Background(), held.LockID)
		}()
		defer func() { <-released }()
		start := time.Now()
		r, err := c.AcquireWait(context.Background(), "orders/2", time.Second, 5*time.Second)
		if err != nil || !r.OK || r.Fence <= held.Fence {
			t.Fatalf("AcquireWait: %+v %v", r, err)
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Fatalf("got the lock after %s, before the holder released", d)
		}
	})
}

// TestErrorsCarryTheServersCode: every failure is a *lockstore.Error with
// the same code over both transports, and its cause keeps the transport's
// own answer (401/UNAUTHENTICATED vs 403/PERMISSION_DENIED).
func TestErrorsCarryTheServersCode(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		g := gateway(t)
		ctx := context.Background()
		addr := k.addr(g)
		unreachable := k.hostPort("127.0.0.1:1")
		grpc := k.name == "grpc"
		pick := func(http, grpcStatus string) string {
			if grpc {
				return grpcStatus
			}
			return http
		}
		cases := []struct {
			name   string
			call   func(t *testing.T) error
			want   lockstore.Code
			status string // the transport's own answer in the cause, "" for none
		}{
			{"no token", func(t *testing.T) error {
				_, err := k.client(t, addr, "").Acquire(ctx, "orders/1", 0)
				return err
			}, lockstore.AuthFailed, pick("401", "Unauthenticated")},
			{"wrong token", func(t *testing.T) error {
				_, err := k.client(t, addr, "nope").IsLocked(ctx, "orders/1")
				return err
			}, lockstore.AuthFailed, pick("401", "Unauthenticated")},
			{"outside prefix", func(t *testing.T) error {
				_, err := k.client(t, addr, "orders").Acquire(ctx, "billing/1", 0)
				return err
			}, lockstore.AuthFailed, pick("403", "PermissionDenied")},
			{"lookup outside prefix", func(t *testing.T) error {
				_, err := k.client(t, addr, "orders").LookupKey(ctx, "billing/1")
				return err
			}, lockstore.AuthFailed, pick("403", "PermissionDenied")},
			{"key too long", func(t *testing.T) error {
				_, err := k.client(t, addr, token).Acquire(ctx, strings.Repeat("k", 600), 0)
				return err
			}, lockstore.InvalidArgument, pick("400", "InvalidArgument")},
			{"empty key", func(t *testing.T) error {
				_, err := k.client(t, addr, token).IsLocked(ctx, "")
				return err
			}, lockstore.InvalidArgument, pick("400", "InvalidArgument")},
			{"wait over the server's cap", func(t *testing.T) error {
				_, err := k.client(t, addr, token).AcquireWait(ctx, "orders/1", 0, time.Hour)
				return err
			}, lockstore.InvalidArgument, pick("400", "InvalidArgument")},
			{"bad lockId is refused before any I/O", func(t *testing.T) error {
				_, err := k.client(t, unreachable, token).Release(ctx, "not-a-lock-id")
				return err
			}, lockstore.InvalidArgument, ""},
			{"bad lockId in lookup is refused before any I/O", func(t *testing.T) error {
				_, err := k.client(t, unreachable, token).LookupLockID(ctx, "not-a-lock-id")
				return err
			}, lockstore.InvalidArgument, ""},
			{"bad ttl is refused before any I/O", func(t *testing.T) error {
				_, err := k.client(t, unreachable, token).Acquire(ctx, "k", time.Microsecond)
				return err
			}, lockstore.InvalidArgument, ""},
			{"extend without a ttl is refused before any I/O", func(t *testing.T) error {
				_, err := k.client(t, unreachable, token).Extend(ctx, "AAAAAAAAAAAAAAAAAAAAAA", 0)
				return err
			}, lockstore.InvalidArgument, ""},
			{"gateway unreachable", func(t *testing.T) error {
				_, err := k.client(t, unreachable, token).IsLocked(ctx, "k")
				return err
			}, lockstore.ServiceUnavailable, pick("", "Unavailable")},
			{"cancelled", func(t *testing.T) error {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				_, err := k.client(t, addr, token).IsLocked(cctx, "k")
				return err
			}, lockstore.Aborted, pick("", "Canceled")},
			{"deadline while the gateway waits for the lock", func(t *testing.T) error {
				if r, err := g.store.Acquire(ctx, "orders/busy", time.Minute); err != nil || !r.OK {
					t.Fatal(r, err)
				}
				dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				_, err := k.client(t, addr, token).AcquireWait(dctx, "orders/busy", 0, 10*time.Second)
				return err
			}, lockstore.NetworkTimeout, pick("", "DeadlineExceeded")},
			{"WithTimeout against a gateway that hangs", func(t *testing.T) error {
				_, err := k.client(t, k.hostPort(silentListener(t)), token, client.WithTimeout(300*time.Millisecond)).IsLocked(ctx, "k")
				return err
			}, lockstore.NetworkTimeout, pick("", "DeadlineExceeded")},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.call(t)
				var le *lockstore.Error
				if !errors.As(err, &le) || le.Code != tc.want || lockstore.CodeOf(err) != tc.want {
					t.Fatalf("err = %v, want a *lockstore.Error with code %s", err, tc.want)
				}
				if got := k.status(err); got != tc.status {
					t.Errorf("transport status in the cause = %q, want %q (err %v)", got, tc.status, err)
				}
				if le.Op == "" {
					t.Errorf("err %v names no operation", err)
				}
			})
		}
	})
}

// TestWithTimeoutLeavesRoomForTheWait: AcquireWait's wait is added to
// WithTimeout, so a short timeout does not cut a longer wait short.
func TestWithTimeoutLeavesRoomForTheWait(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		g := gateway(t)
		c := k.client(t, k.addr(g), token, client.WithTimeout(200*time.Millisecond))
		held, err := g.store.Acquire(context.Background(), "orders/6", time.Minute)
		if err != nil || !held.OK {
			t.Fatal(held, err)
		}
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(500 * time.Millisecond)
			_, _ = g.store.Release(context.Background(), held.LockID)
		}()
		defer func() { <-released }()
		r, err := c.AcquireWait(context.Background(), "orders/6", time.Second, 10*time.Second)
		if err != nil || !r.OK {
			t.Fatalf("AcquireWait past WithTimeout: %+v %v", r, err)
		}
	})
}

// TestLockOverTheNetworkOutlivesItsTTL: lock.Lock with auto-extend,
// run through the client, keeps a 1.5 s lock for 4 s (so at least two
// extends were needed), and nobody else can take it meanwhile. The TTL
// leaves an extend 750 ms to land, ample on a loaded machine.
func TestLockOverTheNetworkOutlivesItsTTL(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		g := gateway(t)
		c := k.client(t, k.addr(g), token)
		other := k.client(t, k.addr(g), token)
		ctx := context.Background()
		var fence string
		err := c.Lock(ctx, "orders/3", func(ctx context.Context, h lock.Held) error {
			fence = h.Fence
			deadline := time.Now().Add(4 * time.Second)
			for time.Now().Before(deadline) {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				r, err := other.Acquire(ctx, "orders/3", time.Second)
				if err != nil {
					return err
				}
				if r.OK {
					return errors.New("someone else got the lock while it was held")
				}
				time.Sleep(200 * time.Millisecond)
			}
			return nil
		}, lock.WithTTL(1500*time.Millisecond), lock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		if locked, _ := c.IsLocked(ctx, "orders/3"); locked {
			t.Fatal("Lock did not release")
		}
		if !lockstore.ValidFence(fence) {
			t.Fatalf("fence %q", fence)
		}
	})
}

// TestLockLostCancelsTheWork: when another client releases the lock behind
// the holder's back, the next extend fails and fn's context ends with
// ErrLockLost.
func TestLockLostCancelsTheWork(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		g := gateway(t)
		c := k.client(t, k.addr(g), token)
		other := k.client(t, k.addr(g), token)
		start := time.Now()
		err := c.Lock(context.Background(), "orders/4", func(ctx context.Context, h lock.Held) error {
			if r, err := other.Release(context.Background(), h.LockID); err != nil || !r.OK {
				return errors.Join(errors.New("the other client could not release"), err)
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * time.Second):
				return errors.New("still running 10 s after the lock was lost")
			}
		}, lock.WithTTL(time.Second), lock.WithAutoExtend())
		if !errors.Is(err, lock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost", err)
		}
		// The first extend, at half the TTL, finds the lock gone; the bound
		// is generous for a loaded machine and still far below the 10 s an
		// unnoticed loss would take.
		if d := time.Since(start); d > 4*time.Second {
			t.Fatalf("the loss was noticed after %s; the TTL was 1 s", d)
		}
	})
}

// TestLockRetriesOnContention: Lock's retry policy runs over the network
// and ends in AcquisitionTimeout while another holder keeps the lock.
func TestLockRetriesOnContention(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		g := gateway(t)
		c := k.client(t, k.addr(g), token)
		if r, err := g.store.Acquire(context.Background(), "orders/7", time.Minute); err != nil || !r.OK {
			t.Fatal(r, err)
		}
		ran := false
		err := c.Lock(context.Background(), "orders/7", func(context.Context, lock.Held) error {
			ran = true
			return nil
		}, lock.WithRetry(lock.RetryPolicy{MaxRetries: 3, RetryDelay: 10 * time.Millisecond, Timeout: 5 * time.Second}))
		if ran || lockstore.CodeOf(err) != lockstore.AcquisitionTimeout {
			t.Fatalf("Lock on a held key: ran=%v err=%v, want AcquisitionTimeout", ran, err)
		}
	})
}
