package lockserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
)

// The lock API's cost over the store it fronts: one acquire+release cycle
// in-process, over HTTP/JSON and over gRPC, on the same bolt store.

func BenchmarkCycleStore(b *testing.B) {
	store := locktest.OpenBolt(b)
	ctx := context.Background()
	for b.Loop() {
		r, err := store.Acquire(ctx, "bench/k", 30*time.Second)
		if err != nil || !r.OK {
			b.Fatal(r, err)
		}
		if _, err := store.Release(ctx, r.LockID); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCycleHTTP(b *testing.B) {
	e := newEnv(b, locktest.OpenBolt(b), func(o *lockserver.Options) { o.Logger = quiet })
	client := e.http.Client()
	send := func(path, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, e.http.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", jsonCT)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		return resp
	}
	for b.Loop() {
		resp := send("/v1/locks/acquire", `{"key":"bench/k"}`)
		var out struct {
			LockID string `json:"lockId"`
		}
		decodeB(b, resp, &out)
		resp = send("/v1/locks/release", `{"lockId":"`+out.LockID+`"}`)
		decodeB(b, resp, &struct {
			OK bool `json:"ok"`
		}{})
	}
}

func BenchmarkCycleGRPC(b *testing.B) {
	g := newGRPCEnv(b, locktest.OpenBolt(b), func(o *lockserver.Options) { o.Logger = quiet })
	ctx := bearer(adminToken)
	for b.Loop() {
		r, err := g.client.Acquire(ctx, &fencegatev1.AcquireRequest{Key: "bench/k"})
		if err != nil || !r.GetOk() {
			b.Fatal(r, err)
		}
		if _, err := g.client.Release(ctx, &fencegatev1.ReleaseRequest{LockId: r.GetLockId()}); err != nil {
			b.Fatal(err)
		}
	}
}

// quiet drops logs, so the benchmarks measure the API, not log encoding.
var quiet = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))

func decodeB(b *testing.B, resp *http.Response, v any) {
	b.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		b.Fatal(err)
	}
}
