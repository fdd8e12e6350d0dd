package lockserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/storetelemetry"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
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
	e := newEnv(t, hangingStore{locktest.OpenBolt(t)}, func(o *lockserver.Options) { o.OpTimeout = bound })
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

// opaqueLocks wraps lock operations without Unwrap: what every wrapper was
// before lockstore.As (the broken variant: it hides the store beneath).
type opaqueLocks struct{ lockstore.Locks }

// unwrappingLocks is a wrapper done right: it wraps the lock operations
// and unwraps to them, as the console's recorder does.
type unwrappingLocks struct{ lockstore.Locks }

func (u unwrappingLocks) Unwrap() any { return u.Locks }

// TestStoreCapabilitiesThroughWrappers: the API finds the store's
// HeldCounter (fencegate_locks_held) through the wrappers serve puts around
// the lock operations (telemetry, the recorder); a wrapper that hides it
// (the broken variant) loses the metric, which the test must see.
func TestStoreCapabilitiesThroughWrappers(t *testing.T) {
	st := locktest.OpenBolt(t)
	tel := storetelemetry.WithTelemetry(st, storetelemetry.TelemetryOptions{OnEvent: func(storetelemetry.LockEvent) {}})
	t.Cleanup(func() { _ = tel.Close() })
	for _, tc := range []struct {
		name    string
		locks   lockstore.Locks
		correct bool
	}{
		{"unwrapping", unwrappingLocks{tel}, true},
		{"opaque (broken)", opaqueLocks{tel}, false},
	} {
		reg := prometheus.NewRegistry()
		if _, err := lockserver.New(lockserver.Options{Store: tc.locks, Registerer: reg}); err != nil {
			t.Fatalf("%s: New: %v", tc.name, err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			found = found || mf.GetName() == "fencegate_locks_held"
		}
		if found != tc.correct {
			t.Errorf("%s: fencegate_locks_held registered = %v, want %v", tc.name, found, tc.correct)
		}
	}
}
