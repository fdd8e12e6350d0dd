package lockserver_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
)

// cannedStore answers Acquire and Release at once (every other method is
// the nil embedded interface's: not called here), so BenchmarkHandlerCycle
// measures the lock API's own work per request — middleware, auth,
// decoding, metrics, tracing hooks, the reply — without a store or a
// network (bench/results/2026-11-27-profiles.md).
type cannedStore struct{ lockstore.Store }

func (cannedStore) Acquire(context.Context, string, time.Duration) (lockstore.AcquireResult, error) {
	return lockstore.AcquireResult{OK: true, LockID: "AAAAAAAAAAAAAAAAAAAAAA", Fence: "000000000000001", ExpiresAtMs: 4102444800000}, nil
}

func (cannedStore) Capabilities() lockstore.Capabilities {
	return lockstore.Capabilities{Backend: "canned"}
}

func (cannedStore) Release(context.Context, string) (lockstore.ReleaseResult, error) {
	return lockstore.ReleaseResult{OK: true}, nil
}

var infoDiscard = slog.New(slog.NewJSONHandler(io.Discard, nil))

// BenchmarkHandlerCycle: acquire + release through lockserver.Server's HTTP
// handler, in memory, auth on, logs off.
//
//	go test -run '^$' -bench HandlerCycle -benchmem -count 6 ./lockserver/
func BenchmarkHandlerCycle(b *testing.B) {
	// JSON logs at info, as a deployment has them (the default access log
	// writes no line for a successful request).
	srv, err := lockserver.New(lockserver.Options{Store: cannedStore{}, Auth: testAuthenticator(b), Logger: infoDiscard})
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	acquire := []byte(`{"key":"bench/k","ttlMs":30000}`)
	release := []byte(`{"lockId":"AAAAAAAAAAAAAAAAAAAAAA"}`)
	serve := func(path string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", jsonCT)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%s: status %d: %s", path, w.Code, w.Body)
		}
	}
	for b.Loop() {
		serve("/v1/locks/acquire", acquire)
		serve("/v1/locks/release", release)
	}
}
