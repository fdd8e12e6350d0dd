package lockstore

import "unicode/utf8"

// Bounds on the audit event's fields. Every field of an AuditEvent can come
// from a request a caller without a credential sent (a method name, a route
// header, X-Forwarded-For, an object name), so each is cut to a size that
// fits what it can honestly hold, where the event is made; Bounded applies
// them. A cut value ends in "…" (U+2026), so it cannot pass for a real one.
const (
	MaxAuditSource     = 32   // "authz-grpc", "proxy", …
	MaxAuditRoute      = 128  // a route's name
	MaxAuditPeer       = 128  // an IP address and port, or a Kubernetes user name
	MaxAuditMethod     = 32   // HTTP methods are short; unknown ones are writes anyway
	MaxAuditPath       = 1024 // a path (raw-key auditing only)
	MaxAuditPresented  = 32   // a fence is 15 digits; a malformed one is shown in part
	MaxAuditKey        = 2 * MaxKeyLengthBytes
	MaxAuditDecisionID = 32
)

// Bounded returns e with every string field cut to its bound.
func (e AuditEvent) Bounded() AuditEvent {
	e.DecisionID = Clip(e.DecisionID, MaxAuditDecisionID)
	e.Source = Clip(e.Source, MaxAuditSource)
	e.Route = Clip(e.Route, MaxAuditRoute)
	e.Key = Clip(e.Key, MaxAuditKey)
	e.Presented = Clip(e.Presented, MaxAuditPresented)
	e.Current = Clip(e.Current, MaxAuditPresented)
	e.Reason = Clip(e.Reason, MaxAuditSource)
	e.Policy = Clip(e.Policy, MaxAuditSource)
	e.Mode = Clip(e.Mode, MaxAuditSource)
	e.Peer = Clip(e.Peer, MaxAuditPeer)
	e.Method = Clip(e.Method, MaxAuditMethod)
	e.Path = Clip(e.Path, MaxAuditPath)
	return e
}

// Clip returns s if it is at most n bytes, else its longest prefix of whole
// UTF-8 characters that leaves room for "…" within n bytes, followed by "…".
// Invalid UTF-8 in a cut value is kept as it is up to the cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := max(n-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
