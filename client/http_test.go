package client_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

// Tests of what only the HTTP client has: the audit trail and the fenced
// RoundTripper for protected APIs.

func newHTTPClient(t *testing.T, url, tok string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAuditQuery(t *testing.T) {
	g := gateway(t)
	now := time.Now().UnixMilli()
	evs := []lockstore.AuditEvent{
		{TimeMs: now - 2000, DecisionID: "d1", KeyHash: lockstore.HashKey("orders/1"), KeyDigest: lockstore.DigestKey("orders/1").String(), Reason: "stale", Policy: "holder", Mode: "enforce"},
		{TimeMs: now - 1000, DecisionID: "d2", KeyHash: lockstore.HashKey("orders/2"), KeyDigest: lockstore.DigestKey("orders/2").String(), Reason: "missing", Policy: "holder", Mode: "enforce"},
		{TimeMs: now, DecisionID: "d3", KeyHash: lockstore.HashKey("orders/1"), KeyDigest: lockstore.DigestKey("orders/1").String(), Reason: "unknown", Policy: "holder", Mode: "enforce"},
	}
	if err := g.store.(lockstore.AuditLog).AppendAudit(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	got, err := newHTTPClient(t, g.httpURL, token).Audit(context.Background(), client.AuditQuery{Key: "orders/1", Since: time.UnixMilli(now - 5000), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].DecisionID != "d3" || got[1].DecisionID != "d1" {
		t.Fatalf("audit for orders/1 = %+v, want d3 then d1", got)
	}
	_, err = newHTTPClient(t, g.httpURL, "orders").Audit(context.Background(), client.AuditQuery{Key: "orders/1"})
	if lockstore.CodeOf(err) != lockstore.AuthFailed {
		t.Fatalf("audit without the audit operation: %v, want AuthFailed", err)
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
	h := lock.Held{Key: "orders/5", LockID: "AAAAAAAAAAAAAAAAAAAAAA", Fence: "000000000000042"}

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

// TestNewKeepsConnectionsForConcurrentCallers: New's own HTTP client keeps
// enough idle connections that concurrent callers reuse them instead of
// opening one per request (http.DefaultTransport keeps 2 per host). A
// client on the default transport is the broken variant.
func TestNewKeepsConnectionsForConcurrentCallers(t *testing.T) {
	// Each round starts every worker at once and waits for all of them,
	// so that even a loaded machine has the round's requests in flight
	// together: the default transport keeps 2 of their connections and
	// dials again in the next round.
	const workers, rounds = 16, 40
	for _, tc := range []struct {
		name   string
		opts   []client.Option
		broken bool
	}{
		{"New", nil, false},
		{"default-transport", []client.Option{client.WithHTTPClient(&http.Client{})}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opened atomic.Int64
			g := gatewayWith(t, gatewayConfig{connState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					opened.Add(1)
				}
			}})
			c, err := client.New(g.httpURL, append([]client.Option{client.WithToken(token)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			for range rounds {
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						if _, err := c.IsLocked(context.Background(), "orders/1"); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
			}
			n := opened.Load()
			t.Logf("%d connections for %d requests from %d goroutines", n, workers*rounds, workers)
			if churn := n > 2*workers; churn != tc.broken {
				t.Errorf("%d connections opened for %d concurrent callers (churn %v, want %v)", n, workers, churn, tc.broken)
			}
		})
	}
}
