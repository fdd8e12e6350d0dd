package lockserver_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/internal/tracing"
)

// TestTracingLockSpans: each lock call over HTTP is one
// fencegate.lock.<op> server span under the caller's traceparent, with the
// operation, transport and result; contention, a refused token and a bad
// request are outcomes, only a 5xx (the store down) marks the span an
// error. No attribute carries the key, lockId or token. (gRPC, and the
// OTLP export from the binary: e2e/tracing_test.go.)
func TestTracingLockSpans(t *testing.T) {
	exp := testutil.RecordSpans(t)

	store := locktest.OpenBolt(t)
	e := newEnv(t, store, nil)
	const key = "orders/sekrit-7"
	n := 0
	// call sends body with a fresh traceparent and returns the span of
	// that trace.
	call := func(path, token, body string) sdktrace.ReadOnlySpan {
		t.Helper()
		n++
		tid := fmt.Sprintf("%032x", 0xfe00+n)
		req, _ := http.NewRequest(http.MethodPost, e.http.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("traceparent", "00-"+tid+"-00f067aa0ba902b7-01")
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		for _, s := range exp.GetSpans().Snapshots() {
			if s.SpanContext().TraceID().String() == tid {
				if s.Parent().SpanID().String() != "00f067aa0ba902b7" || !s.Parent().IsRemote() || s.SpanKind() != trace.SpanKindServer {
					t.Errorf("%s: parent %v kind %v, want the caller's span, server", s.Name(), s.Parent(), s.SpanKind())
				}
				return s
			}
		}
		t.Fatalf("%s: no span in trace %s", path, tid)
		return nil
	}
	lockID, _ := e.acquire(t, key, 60000)
	secrets := []string{key, lockID, adminToken, ordersToken, unknownTok}

	for _, tc := range []struct {
		name, path, token, body string
		op, result              string
		isErr                   bool
	}{
		{"contention", "/v1/locks/acquire", adminToken, `{"key":"` + key + `"}`, "acquire", "fail", false},
		{"refused token", "/v1/locks/release", unknownTok, `{"lockId":"` + lockID + `"}`, "release", "AuthFailed", false},
		{"bad request", "/v1/locks/extend", ordersToken, `{"lockId":"` + lockID + `"}`, "extend", "InvalidArgument", false},
		{"ok", "/v1/locks/release", ordersToken, `{"lockId":"` + lockID + `"}`, "release", "ok", false},
		{"store down", "/v1/locks/acquire", adminToken, `{"key":"` + key + `"}`, "acquire", "ServiceUnavailable", true},
	} {
		if tc.name == "store down" {
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
		}
		s := call(tc.path, tc.token, tc.body)
		got := map[string]string{}
		for _, kv := range s.Attributes() {
			got[string(kv.Key)] = kv.Value.String()
			for _, sec := range secrets {
				if strings.Contains(kv.Value.String(), sec) {
					t.Errorf("%s: attribute %s carries %q", tc.name, kv.Key, sec)
				}
			}
		}
		if s.Name() != tracing.SpanLockPrefix+tc.op || got["fencegate.op"] != tc.op || got["fencegate.result"] != tc.result || got["fencegate.transport"] != "http" {
			t.Errorf("%s: span %s %v, want %s%s op %s result %s transport http", tc.name, s.Name(), got, tracing.SpanLockPrefix, tc.op, tc.op, tc.result)
		}
		if (s.Status().Code == codes.Error) != tc.isErr {
			t.Errorf("%s: status %+v, want error %v", tc.name, s.Status(), tc.isErr)
		}
	}
}
