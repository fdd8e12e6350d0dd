package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// hangingStore never answers a lock operation until its context ends, like
// a frozen server or a client library that retries until cancelled.
type hangingStore struct{ lockstore.Store }

func (h hangingStore) Acquire(ctx context.Context, _ string, _ time.Duration) (lockstore.AcquireResult, error) {
	<-ctx.Done()
	return lockstore.AcquireResult{}, lockstore.ContextError(ctx, "acquire")
}

func (h hangingStore) Release(ctx context.Context, _ string) (lockstore.ReleaseResult, error) {
	<-ctx.Done()
	return lockstore.ReleaseResult{}, lockstore.ContextError(ctx, "release")
}

// TestStoreCallsAreBounded: a store that never answers costs a request
// OpTimeout, then 504 NetworkTimeout, instead of holding it forever.
func TestStoreCallsAreBounded(t *testing.T) {
	const bound = 300 * time.Millisecond
	e := newEnv(t, hangingStore{locktest.OpenBolt(t)}, func(o *api.Options) { o.OpTimeout = bound })
	for _, tc := range []struct {
		path string
		body any
	}{
		{"/v1/locks/acquire", map[string]any{"key": "orders/1"}},
		{"/v1/locks/acquire", map[string]any{"key": "orders/1", "waitMs": 2000}},
		{"/v1/locks/release", map[string]any{"lockId": "AAAAAAAAAAAAAAAAAAAAAA"}},
	} {
		start := time.Now()
		r := e.post(t, tc.path, adminToken, tc.body)
		took := time.Since(start)
		if r.status != http.StatusGatewayTimeout || r.errCode() != string(lockstore.NetworkTimeout) {
			t.Errorf("%s %v: %d %s, want 504 NetworkTimeout", tc.path, tc.body, r.status, r.body)
		}
		if took < bound || took > bound+2*time.Second {
			t.Errorf("%s %v answered after %s; the bound is %s", tc.path, tc.body, took, bound)
		}
	}
}
