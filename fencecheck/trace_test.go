package fencecheck

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/tracing"
	"github.com/fencegate/fencegate/lockstore"
)

// TestTracingCheckSpan: each check is one fencegate.check span with the
// decision's attributes; a check that could not decide is an Error span
// whose description is the reason, not the backend's error text; an
// unparsable policy is not echoed; a check under a span of this process
// is its internal child. No attribute carries the key, fence or lockId.
func TestTracingCheckSpan(t *testing.T) {
	exp := testutil.RecordSpans(t)
	const key = "orders/sekrit-42"
	secrets := []string{key, f5, f6, idA, "connection refused"}
	down := &stateStore{err: lockstore.Errorf(lockstore.ServiceUnavailable, "inspect", "connection refused")}
	held := &stateStore{state: live(f6, idA)}
	for _, tc := range []struct {
		name   string
		store  *stateStore
		req    Request
		attrs  map[string]string
		absent []string
		err    bool
	}{
		{"allow", held, Request{Key: key, Fence: f6, LockID: idA, Write: true, Route: "orders", Source: "authz-http"},
			map[string]string{"fencegate.decision": "allow", "fencegate.policy": "holder", "fencegate.mode": "enforce",
				"fencegate.status": "200", "fencegate.write": "true", "fencegate.route": "orders", "fencegate.source": "authz-http"},
			[]string{"fencegate.reason"}, false},
		{"stale", held, Request{Key: key, Fence: f5, Write: true, Policy: PolicyLatest},
			map[string]string{"fencegate.decision": "deny", "fencegate.reason": "stale", "fencegate.policy": "latest", "fencegate.status": "409"},
			[]string{"fencegate.route"}, false},
		{"would-deny", held, Request{Key: key, Fence: f5, Write: true, Mode: ModeDryRun},
			map[string]string{"fencegate.decision": "would-deny", "fencegate.reason": "stale", "fencegate.mode": "dry-run", "fencegate.status": "200"},
			nil, false},
		{"unavailable", down, Request{Key: key, Fence: f5, Write: true},
			map[string]string{"fencegate.decision": "deny", "fencegate.reason": "unavailable", "fencegate.status": "503"},
			nil, true},
		{"read with a bad policy", held, Request{Key: key, Write: false, Policy: Policy(key)},
			map[string]string{"fencegate.decision": "allow", "fencegate.policy": "invalid", "fencegate.write": "false"},
			[]string{"fencegate.decision_id"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp.Reset()
			if _, err := New(tc.store, Options{}).Check(context.Background(), tc.req); (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			spans := exp.GetSpans()
			if len(spans) != 1 || spans[0].Name != tracing.SpanCheck || spans[0].SpanKind != trace.SpanKindServer {
				t.Fatalf("spans = %v, want one server span %s", spans, tracing.SpanCheck)
			}
			s := spans[0]
			got := map[string]string{}
			for _, kv := range s.Attributes {
				got[string(kv.Key)] = kv.Value.String()
				for _, sec := range secrets {
					if strings.Contains(kv.Value.String(), sec) {
						t.Errorf("attribute %s = %q carries %q", kv.Key, kv.Value.String(), sec)
					}
				}
			}
			for k, v := range tc.attrs {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			for _, k := range tc.absent {
				if _, ok := got[k]; ok {
					t.Errorf("%s set (%q), want absent", k, got[k])
				}
			}
			if tc.err != (s.Status.Code == codes.Error) || (tc.err && s.Status.Description != "unavailable") {
				t.Errorf("status = %+v, want error %v with description unavailable", s.Status, tc.err)
			}
			if len(s.Events) != 0 {
				t.Errorf("events %v, want none (an error's text stays in the logs)", s.Events)
			}
		})
	}

	t.Run("child", func(t *testing.T) {
		exp.Reset()
		ctx, parent := otel.Tracer("test").Start(context.Background(), "review")
		_, _ = New(held, Options{}).Check(ctx, Request{Key: key, Fence: f6, Write: true})
		parent.End()
		spans := exp.GetSpans()
		if len(spans) != 2 || spans[0].SpanKind != trace.SpanKindInternal || spans[0].Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("spans = %v, want the check as the review's internal child", spans)
		}
	})
}
