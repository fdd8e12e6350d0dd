package fencecheck

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/fencegate/fencegate/internal/tracing"
)

// tracedCheck runs check inside a tracing.SpanCheck span (a child of the
// transport's trace context in ctx). The span carries the decision, never
// the key, fence or lockId: a span leaves the process. The span's duration
// is the check's latency, backend read included.
func (c *Checker) tracedCheck(ctx context.Context, r Request) (Decision, error) {
	ctx, span := tracing.Start(ctx, tracing.SpanCheck)
	d, err := c.check(ctx, r)
	if span.IsRecording() { // tracing off: no attribute is built
		span.SetAttributes(checkAttributes(r, d)...)
		if err != nil {
			// The reason, not err's text: the cause is for the logs.
			span.SetStatus(codes.Error, string(ReasonUnavailable))
		}
	}
	span.End()
	return d, err
}

// checkAttributes describes a decision for its span.
func checkAttributes(r Request, d Decision) []attribute.KeyValue {
	decision := decisionAllow
	switch {
	case !d.Allowed:
		decision = decisionDeny
	case d.WouldDeny:
		decision = decisionWouldDeny
	}
	as := []attribute.KeyValue{
		attribute.String(tracing.AttrDecision, decision),
		attribute.String(tracing.AttrPolicy, policyLabel(d.Policy)),
		attribute.String(tracing.AttrMode, modeLabel(d.Mode)),
		attribute.Int(tracing.AttrStatus, d.Status),
		attribute.Bool(tracing.AttrWrite, r.Write),
	}
	if r.Source != "" {
		as = append(as, attribute.String(tracing.AttrSource, r.Source))
	}
	if d.Reason != "" {
		as = append(as, attribute.String(tracing.AttrReason, string(d.Reason)))
	}
	if d.DecisionID != "" {
		as = append(as, attribute.String(tracing.AttrDecisionID, d.DecisionID))
	}
	if r.Route != "" {
		as = append(as, attribute.String(tracing.AttrRoute, r.Route))
	}
	return as
}

// policyLabel bounds the policy attribute to the known policies: a route
// whose policy does not parse keeps its raw string in the Decision, and
// that string may be anything a client managed to send.
func policyLabel(p Policy) string {
	switch p {
	case PolicyHolder, PolicyLatest, PolicyOff:
		return string(p)
	}
	return "invalid"
}
