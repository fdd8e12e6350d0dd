package admission

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/promreg"
)

// Values of the decision label, beyond fencecheck's allow/deny/would-deny.
const (
	decisionAllow      = "allow"
	decisionDeny       = "deny"
	decisionWouldDeny  = "would-deny"
	decisionExempt     = "exempt"     // an exempt identity; no check
	decisionUngoverned = "ungoverned" // no opt-in, or a resource not configured
	decisionError      = "error"      // the review itself was unusable
)

// Values of the reason label for answers that are not fencecheck decisions.
const (
	reasonNone           = "none"
	reasonNotGoverned    = "not-governed"     // no annotations
	reasonOtherResource  = "other-resource"   // not in Options.Resources
	reasonOtherOperation = "other-operation"  // CONNECT
	reasonBadMethod      = "bad-method"       // not POST
	reasonBadContentType = "bad-content-type" // not application/json
	reasonTooLarge       = "too-large"        // over MaxBodyBytes
	reasonBadReview      = "bad-review"       // not JSON, wrong kind, no request or uid
	reasonBadObject      = "bad-object"       // object/oldObject not decodable
	reasonPanic          = "panic"
)

// operationUnknown labels answers given before the operation was known.
const operationUnknown = "unknown"

type metrics struct {
	reviews  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_admission_reviews_total",
			Help: "Admission reviews answered, by operation, decision (allow, deny, would-deny, exempt, ungoverned, error) and reason.",
		}, []string{"operation", "decision", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fencegate_admission_review_duration_seconds",
			Help: "Time to answer an admission review, body decoding and backend read included.",
			// The API server waits at most timeoutSeconds (≤ 5 s) for us.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"operation"}),
	}
	m.reviews = promreg.Shared(reg, m.reviews)
	m.duration = promreg.Shared(reg, m.duration)
	return m
}
