package lockstore

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAuditEventBounded: every string field of an event built from
// attacker-sized inputs comes out within its bound, cut on a character
// boundary and marked; short values pass unchanged.
func TestAuditEventBounded(t *testing.T) {
	big := strings.Repeat("é", 300_000) // 600 KB, two bytes a character
	e := AuditEvent{DecisionID: big, Source: big, Route: big, KeyHash: "h", KeyDigest: "d", Key: big,
		Presented: big, Current: big, Reason: big, Policy: big, Mode: big, Peer: big, Method: big, Path: big}.Bounded()
	for name, c := range map[string]struct {
		v string
		n int
	}{
		"DecisionID": {e.DecisionID, MaxAuditDecisionID}, "Source": {e.Source, MaxAuditSource}, "Route": {e.Route, MaxAuditRoute},
		"Key": {e.Key, MaxAuditKey}, "Presented": {e.Presented, MaxAuditPresented}, "Current": {e.Current, MaxAuditPresented},
		"Reason": {e.Reason, MaxAuditSource}, "Policy": {e.Policy, MaxAuditSource}, "Mode": {e.Mode, MaxAuditSource},
		"Peer": {e.Peer, MaxAuditPeer}, "Method": {e.Method, MaxAuditMethod}, "Path": {e.Path, MaxAuditPath},
	} {
		if len(c.v) > c.n || !utf8.ValidString(c.v) || !strings.HasSuffix(c.v, "…") {
			t.Errorf("%s: %d bytes (bound %d), valid UTF-8 %v, %q…", name, len(c.v), c.n, utf8.ValidString(c.v), c.v[:min(len(c.v), 12)])
		}
	}
	short := AuditEvent{Route: "orders", Peer: "10.0.0.1:5555", Method: "PUT", Presented: "000000000000042"}
	if got := short.Bounded(); got != short {
		t.Errorf("Bounded changed short values: %+v", got)
	}
}
