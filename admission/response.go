package admission

import (
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/fencecheck"
)

// StatusReasonPreconditionRequired is status.reason of a 428 denial;
// metav1 has no constant for 428.
const StatusReasonPreconditionRequired metav1.StatusReason = "PreconditionRequired"

// Allowed returns a response admitting the request uid.
func Allowed(uid types.UID) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: uid, Allowed: true}
}

// Denied returns a response refusing the request uid with the HTTP-style
// code, reason and message the API server hands back to the client.
func Denied(uid types.UID, code int32, reason metav1.StatusReason, message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		UID:     uid,
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    code,
			Reason:  reason,
			Message: message,
		},
	}
}

// statusReason maps a denial's HTTP status to a Kubernetes StatusReason, so
// that client libraries' apierrors.IsConflict and friends work on it.
func statusReason(code int) metav1.StatusReason {
	switch code {
	case http.StatusConflict:
		return metav1.StatusReasonConflict
	case http.StatusPreconditionRequired:
		return StatusReasonPreconditionRequired
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	default:
		return metav1.StatusReasonInternalError
	}
}

// denial turns a negative decision into the response, naming the key and
// both fences so that whoever reads kubectl's error knows what to fix.
func denial(uid types.UID, d fencecheck.Decision, names Annotations) *admissionv1.AdmissionResponse {
	resp := Denied(uid, int32(d.Status), statusReason(d.Status), describe(d, names))
	resp.Result.Details = &metav1.StatusDetails{
		Causes: []metav1.StatusCause{{
			Type:    metav1.CauseType("fencegate.io/" + string(d.Reason)),
			Message: string(d.Reason),
			Field:   "metadata.annotations[" + names.Fence + "]",
		}},
	}
	return resp
}

// describe renders a (would-)denial as one sentence.
func describe(d fencecheck.Decision, names Annotations) string {
	presented, current := orNone(d.Presented), orNone(d.Current)
	var what string
	switch d.Reason {
	case fencecheck.ReasonMissing:
		what = fmt.Sprintf("no fence (annotation %s) for key %q", names.Fence, d.Key)
	case fencecheck.ReasonMalformed:
		if d.Key == "" {
			what = fmt.Sprintf("a fence but no key (annotation %s)", names.Key)
		} else {
			what = fmt.Sprintf("malformed fence or key (a fence is 15 digits) for key %q", d.Key)
		}
	case fencecheck.ReasonStale:
		what = fmt.Sprintf("stale fence for key %q: a newer fence has been issued", d.Key)
	case fencecheck.ReasonNotHeld:
		what = fmt.Sprintf("fence for key %q is not held by a live lock", d.Key)
	case fencecheck.ReasonUnknown:
		what = fmt.Sprintf("fence for key %q was never issued", d.Key)
	case fencecheck.ReasonUnavailable:
		what = fmt.Sprintf("could not check the fence for key %q (lock backend unavailable; failing closed)", d.Key)
	default:
		what = fmt.Sprintf("fence refused for key %q", d.Key)
	}
	return fmt.Sprintf("fencegate: %s: presented %s, current %s (reason %s, decision %s)",
		what, presented, current, d.Reason, orNone(d.DecisionID))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
