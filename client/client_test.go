package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

const token = "fg_test_token"

// gateway serves the real lock API over a real bolt store.
func gateway(t *testing.T) (*httptest.Server, lockstore.Store) {
	t.Helper()
	store, err := bolt.Open(context.Background(), bolt.Config{Path: filepath.Join(t.TempDir(), "fg.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	auth, err := api.NewAuthenticator([]api.Token{
		{Name: "all", SHA256: api.HashToken(token), Operations: []string{"*"}},
		{Name: "orders-only", SHA256: api.HashToken("orders"), Prefixes: []string{"orders/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: store, Audit: store, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts, store
}

func newClient(t *testing.T, url, tok string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLifecycle(t *testing.T) {
	ts, _ := gateway(t)
	c := newClient(t, ts.URL, token)
	ctx := context.Background()

	r, err := c.Acquire(ctx, "orders/1", 5*time.Second)
	if err != nil || !r.OK || len(r.LockID) != 22 || !lockstore.ValidFence(r.Fence) || r.ExpiresAtMs == 0 {
		t.Fatalf("acquire: %+v %v", r, err)
	}
	busy, err := c.Acquire(ctx, "orders/1", 0)
	if err != nil || busy.OK || busy.Reason != lockstore.ReasonLocked {
		t.Fatalf("second acquire: %+v %v", busy, err)
	}
	if locked, err := c.IsLocked(ctx, "orders/1"); err != nil || !locked {
		t.Fatalf("IsLocked = %v %v", locked, err)
	}
	info, err := c.LookupKey(ctx, "orders/1")
	if err != nil || info == nil || info.Fence != r.Fence || info.KeyHash != lockstore.HashKey("orders/1") || info.LockIDHash != lockstore.HashKey(r.LockID) {
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
	if locked, err := c.IsLocked(ctx, "orders/1"); err != nil || locked {
		t.Fatalf("IsLocked after release = %v %v", locked, err)
	}
	again, err := c.Acquire(ctx, "orders/1", time.Second)
	if err != nil || !again.OK || again.Fence <= r.Fence {
		t.Fatalf("re-acquire: %+v %v, want a fence above %s", again, err, r.Fence)
	}
}

func TestAcquireWaitGetsTheLockWhenReleased(t *testing.T) {
	ts, store := gateway(t)
	c := newClient(t, ts.URL, token)
	held, err := store.Acquire(context.Background(), "orders/2", time.Minute)
	if err != nil || !held.OK {
		t.Fatal(held, err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = store.Release(context.Background(), held.LockID)
	}()
	start := time.Now()
	r, err := c.AcquireWait(context.Background(), "orders/2", time.Second, 5*time.Second)
	if err != nil || !r.OK || r.Fence <= held.Fence {
		t.Fatalf("AcquireWait: %+v %v", r, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("got the lock after %s, before the holder released", d)
	}
}

func TestErrorsCarryTheServersCode(t *testing.T) {
	ts, _ := gateway(t)
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		want lockstore.Code
	}{
		{"no token", func() error { _, err := newClient(t, ts.URL, "").Acquire(ctx, "orders/1", 0); return err }, lockstore.AuthFailed},
		{"wrong token", func() error { _, err := newClient(t, ts.URL, "nope").IsLocked(ctx, "orders/1"); return err }, lockstore.AuthFailed},
		{"outside prefix", func() error { _, err := newClient(t, ts.URL, "orders").Acquire(ctx, "billing/1", 0); return err }, lockstore.AuthFailed},
		{"audit not granted", func() error {
			_, err := newClient(t, ts.URL, "orders").Audit(ctx, client.AuditQuery{Key: "orders/1"})
			return err
		}, lockstore.AuthFailed},
		{"key too long", func() error {
			_, err := newClient(t, ts.URL, token).Acquire(ctx, strings.Repeat("k", 600), 0)
			return err
		}, lockstore.InvalidArgument},
		{"bad lockId is refused before any I/O", func() error {
			_, err := newClient(t, "http://127.0.0.1:1", token).Release(ctx, "not-a-lock-id")
			return err
		}, lockstore.InvalidArgument},
		{"bad ttl is refused before any I/O", func() error {
			_, err := newClient(t, "http://127.0.0.1:1", token).Acquire(ctx, "k", time.Microsecond)
			return err
		}, lockstore.InvalidArgument},
		{"gateway unreachable", func() error { _, err := newClient(t, "http://127.0.0.1:1", token).IsLocked(ctx, "k"); return err }, lockstore.ServiceUnavailable},
		{"cancelled", func() error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err := newClient(t, ts.URL, token).IsLocked(cctx, "k")
			return err
		}, lockstore.Aborted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var le *lockstore.Error
			if !errors.As(err, &le) || le.Code != tc.want {
				t.Fatalf("err = %v, want a *lockstore.Error with code %s", err, tc.want)
			}
		})
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://h", "http://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

func TestAuditQuery(t *testing.T) {
	ts, store := gateway(t)
	now := time.Now().UnixMilli()
	evs := []lockstore.AuditEvent{
		{TimeMs: now - 2000, DecisionID: "d1", KeyHash: lockstore.HashKey("orders/1"), KeyDigest: lockstore.KeyDigest("orders/1"), Reason: "stale", Policy: "holder", Mode: "enforce"},
		{TimeMs: now - 1000, DecisionID: "d2", KeyHash: lockstore.HashKey("orders/2"), KeyDigest: lockstore.KeyDigest("orders/2"), Reason: "missing", Policy: "holder", Mode: "enforce"},
		{TimeMs: now, DecisionID: "d3", KeyHash: lockstore.HashKey("orders/1"), KeyDigest: lockstore.KeyDigest("orders/1"), Reason: "unknown", Policy: "holder", Mode: "enforce"},
	}
	if err := store.(lockstore.AuditLog).AppendAudit(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	got, err := newClient(t, ts.URL, token).Audit(context.Background(), client.AuditQuery{Key: "orders/1", Since: time.UnixMilli(now - 5000), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].DecisionID != "d3" || got[1].DecisionID != "d1" {
		t.Fatalf("audit for orders/1 = %+v, want d3 then d1", got)
	}
}

// TestLockOverTheNetworkOutlivesItsTTL: lockstore.Lock with auto-extend,
// run through the client, keeps a 600 ms lock for 2 s, and nobody else can
// take it meanwhile.
func TestLockOverTheNetworkOutlivesItsTTL(t *testing.T) {
	ts, _ := gateway(t)
	c := newClient(t, ts.URL, token)
	ctx := context.Background()
	var fence string
	err := c.Lock(ctx, "orders/3", func(ctx context.Context, h lockstore.Held) error {
		fence = h.Fence
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if r, err := c.Acquire(ctx, "orders/3", time.Second); err != nil || r.OK {
				return errors.New("someone else got the lock while it was held")
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}, lockstore.WithTTL(600*time.Millisecond), lockstore.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	if locked, _ := c.IsLocked(ctx, "orders/3"); locked {
		t.Fatal("Lock did not release")
	}
	if !lockstore.ValidFence(fence) {
		t.Fatalf("fence %q", fence)
	}
}

// TestLockLostCancelsTheWork: when the lock is released behind the
// holder's back, the next extend fails and fn's context ends with
// ErrLockLost.
func TestLockLostCancelsTheWork(t *testing.T) {
	ts, store := gateway(t)
	c := newClient(t, ts.URL, token)
	start := time.Now()
	err := c.Lock(context.Background(), "orders/4", func(ctx context.Context, h lockstore.Held) error {
		if _, err := store.Release(context.Background(), h.LockID); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Second):
			return errors.New("still running 5 s after the lock was lost")
		}
	}, lockstore.WithTTL(time.Second), lockstore.WithAutoExtend())
	if !errors.Is(err, lockstore.ErrLockLost) {
		t.Fatalf("err = %v, want ErrLockLost", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the loss was noticed after %s; the TTL was 1 s", d)
	}
}

// recordingRT records the requests the Transport sends.
type recordingRT struct {
	mu   sync.Mutex
	seen []http.Header
}

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req.Header.Clone())
	r.mu.Unlock()
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

func TestTransportStampsFenceHeaders(t *testing.T) {
	rt := &recordingRT{}
	tr := client.NewTransport(rt)
	h := lockstore.Held{Key: "orders/5", LockID: "AAAAAAAAAAAAAAAAAAAAAA", Fence: "000000000000042"}

	send := func(ctx context.Context, tr http.RoundTripper) (*http.Request, http.Header) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://api/orders/5", nil)
		req.Header.Set(client.HeaderLockID, "client-supplied")
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return req, rt.seen[len(rt.seen)-1]
	}

	req, got := send(client.WithFence(context.Background(), h), tr)
	if got.Get("X-Fence-Key") != "orders/5" || got.Get("X-Fence-Token") != "000000000000042" || got.Get(client.HeaderLockID) != "" {
		t.Fatalf("WithFence: sent %v", got)
	}
	if req.Header.Get("X-Fence-Token") != "" {
		t.Fatal("the caller's request was modified (RoundTrippers must clone)")
	}
	_, got = send(client.WithFenceProof(context.Background(), h), tr)
	if got.Get(client.HeaderLockID) != h.LockID {
		t.Fatalf("WithFenceProof: sent %v", got)
	}
	_, got = send(context.Background(), tr)
	if got.Get("X-Fence-Token") != "" || got.Get(client.HeaderLockID) != "client-supplied" {
		t.Fatalf("no fence: the request must go unchanged, sent %v", got)
	}
	static := &client.Transport{Base: rt, Static: &client.Fence{Key: "k", Token: "000000000000007"}}
	_, got = send(context.Background(), static)
	if got.Get("X-Fence-Key") != "k" || got.Get("X-Fence-Token") != "000000000000007" {
		t.Fatalf("static: sent %v", got)
	}
}
