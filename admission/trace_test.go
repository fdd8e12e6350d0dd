package admission_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/admission"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/tracing"
)

// TestTracingReviewSpan: a review is a fencegate.admission.review server
// span under the API server's traceparent, saying what was reviewed and
// the answer; its fence check is an internal child. Neither carries the
// object's name, namespace, key or fence. (The binary's OTLP export:
// e2e/tracing_test.go.)
func TestTracingReviewSpan(t *testing.T) {
	exp := testutil.RecordSpans(t)

	e := newEnv(t, admission.Options{}, nil)
	secrets := []string{testKey, staleFence, currentFence, "orders", "shop"}
	for _, tc := range []struct {
		fixture, dryRun string
	}{
		{"update-stale-dryrun", "true"},
		{"update-stale", "false"},
		{"create-current", "false"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			exp.Reset()
			const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			req := httptest.NewRequest(http.MethodPost, admission.Path, bytes.NewReader(fixture(t, tc.fixture)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
			rec := httptest.NewRecorder()
			e.h.ServeHTTP(rec, req)
			resp := decodeReview(t, rec, uidOf(t, fixture(t, tc.fixture)))

			spans := exp.GetSpans()
			if len(spans) != 2 {
				t.Fatalf("spans = %v, want the check and the review", spans)
			}
			check, review := spans[0], spans[1]
			if review.Name != tracing.SpanAdmissionReview || review.SpanKind != trace.SpanKindServer ||
				review.Parent.TraceID().String() != traceID || review.Parent.SpanID().String() != parentID {
				t.Errorf("review span %s kind %v parent %v, want %s, server, under the API server's span", review.Name, review.SpanKind, review.Parent, tracing.SpanAdmissionReview)
			}
			if check.Name != tracing.SpanCheck || check.SpanKind != trace.SpanKindInternal || check.Parent.SpanID() != review.SpanContext.SpanID() {
				t.Errorf("check span %s kind %v parent %v, want %s, internal, under the review", check.Name, check.SpanKind, check.Parent, tracing.SpanCheck)
			}
			got := map[string]string{}
			for _, s := range spans {
				for _, kv := range s.Attributes {
					got[s.Name+" "+string(kv.Key)] = kv.Value.String()
					for _, sec := range secrets {
						if strings.Contains(kv.Value.String(), sec) {
							t.Errorf("%s: attribute %s = %q carries %q", s.Name, kv.Key, kv.Value.String(), sec)
						}
					}
				}
			}
			want := map[string]string{
				"fencegate.admission.review fencegate.admission.operation": mustOp(t, tc.fixture),
				"fencegate.admission.review fencegate.admission.resource":  "configmaps",
				"fencegate.admission.review fencegate.admission.dry_run":   tc.dryRun,
				"fencegate.admission.review fencegate.admission.allowed":   strconv.FormatBool(resp.Allowed),
				"fencegate.check fencegate.source":                         "admission",
			}
			if !resp.Allowed {
				want["fencegate.admission.review fencegate.status"] = strconv.Itoa(int(resp.Result.Code))
				want["fencegate.check fencegate.decision"] = "deny"
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

func mustOp(t *testing.T, name string) string {
	t.Helper()
	if strings.HasPrefix(name, "create") {
		return "CREATE"
	}
	return "UPDATE"
}
