package admission

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/fencegate/fencegate/internal/tracing"
)

// tracedReview runs Review inside a tracing.SpanAdmissionReview span, a
// child of the API server's trace context (kube-apiserver propagates W3C
// traceparent to webhooks when its tracing is on). The span says what was
// reviewed and the answer; the object's name, namespace and annotations
// (which hold the key and fence) stay out. The fence check, when one is
// made, is its child span.
func (h *Handler) tracedReview(r *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	ctx, span := tracing.Start(tracing.FromHTTP(r.Context(), r.Header), tracing.SpanAdmissionReview)
	resp := h.Review(ctx, req)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String(tracing.AttrAdmissionOperation, operationLabel(req.Operation)),
			attribute.String(tracing.AttrAdmissionResource, routeOf(req)),
			attribute.Bool(tracing.AttrAdmissionDryRun, req.DryRun != nil && *req.DryRun),
			attribute.Bool(tracing.AttrAdmissionAllowed, resp.Allowed),
		)
		if resp.Result != nil && resp.Result.Code != 0 {
			span.SetAttributes(attribute.Int(tracing.AttrStatus, int(resp.Result.Code)))
		}
	}
	span.End()
	return resp
}
