package firestore

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

func auditEvent(timeMs int64, keyHash string, i int) lockstore.AuditEvent {
	return lockstore.AuditEvent{
		TimeMs: timeMs, DecisionID: fmt.Sprintf("dec-%d", i), Source: "authz-grpc",
		KeyHash: keyHash, Reason: "stale", Policy: "holder", Mode: "enforce",
	}
}

func auditCount(t *testing.T, s *Store) int64 {
	t.Helper()
	ar, err := s.audit.NewAggregationQuery().WithCount("n").Get(bg(t))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		N int64 `firestore:"n"`
	}
	if err := ar.DataTo(&c); err != nil {
		t.Fatal(err)
	}
	return c.N
}

// TestAuditMaxEvents: appends beyond MaxEvents trim the oldest events, in
// the collection itself, not just in query results.
func TestAuditMaxEvents(t *testing.T) {
	t.Parallel()
	cfg := nsConfig(t, uniqueNS(t))
	cfg.AuditRetention = lockstore.AuditRetention{MaxEvents: 5}
	s := openStore(t, cfg)
	h := lockstore.HashKey("k")
	base := time.Now().UnixMilli() - 10_000
	for i := range 8 {
		if err := s.AppendAudit(bg(t), []lockstore.AuditEvent{auditEvent(base+int64(i), h, i)}); err != nil {
			t.Fatalf("AppendAudit #%d: %v", i, err)
		}
	}
	if n := auditCount(t, s); n != 5 {
		t.Fatalf("audit collection holds %d events, want MaxEvents=5", n)
	}
	got, err := s.QueryAudit(bg(t), lockstore.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].DecisionID != "dec-7" || got[4].DecisionID != "dec-3" {
		t.Fatalf("kept %v, want dec-7..dec-3 newest first", decisionIDs(got))
	}

	// One batch larger than MaxEvents keeps only its newest MaxEvents.
	var batch []lockstore.AuditEvent
	for i := 10; i < 17; i++ {
		batch = append(batch, auditEvent(base+int64(i), h, i))
	}
	if err := s.AppendAudit(bg(t), batch); err != nil {
		t.Fatal(err)
	}
	got, err = s.QueryAudit(bg(t), lockstore.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if n := auditCount(t, s); n != 5 || len(got) != 5 || got[0].DecisionID != "dec-16" || got[4].DecisionID != "dec-12" {
		t.Fatalf("after an oversized batch: %d stored, query %v; want dec-16..dec-12", n, decisionIDs(got))
	}
}

// TestAuditMaxAge: events past MaxAge are dropped on append, trimmed from
// the collection, and never returned by a query even before trimming.
func TestAuditMaxAge(t *testing.T) {
	t.Parallel()
	clk := testutil.NewClock(time.Now())
	cfg := nsConfig(t, uniqueNS(t))
	cfg.Now = clk.Now
	cfg.AuditRetention = lockstore.AuditRetention{MaxAge: time.Hour}
	s := openStore(t, cfg)
	h := lockstore.HashKey("k")
	now := clk.Now().UnixMilli()

	if err := s.AppendAudit(bg(t), []lockstore.AuditEvent{
		auditEvent(now-2*time.Hour.Milliseconds(), h, 0), // already too old: dropped
		auditEvent(now-30*time.Minute.Milliseconds(), h, 1),
		auditEvent(now-time.Minute.Milliseconds(), h, 2),
	}); err != nil {
		t.Fatal(err)
	}
	if n := auditCount(t, s); n != 2 {
		t.Fatalf("stored %d events, want 2 (the 2h-old one dropped)", n)
	}
	// 45 minutes later dec-1 is 75 minutes old: hidden at once...
	clk.Advance(45 * time.Minute)
	got, err := s.QueryAudit(bg(t), lockstore.AuditQuery{})
	if err != nil || len(got) != 1 || got[0].DecisionID != "dec-2" {
		t.Fatalf("QueryAudit after aging = %v, %v; want only dec-2", decisionIDs(got), err)
	}
	// ...and deleted by the next append's trim.
	if err := s.AppendAudit(bg(t), []lockstore.AuditEvent{auditEvent(clk.Now().UnixMilli(), h, 3)}); err != nil {
		t.Fatal(err)
	}
	if n := auditCount(t, s); n != 2 {
		t.Fatalf("after trim the collection holds %d events, want 2 (dec-2, dec-3)", n)
	}
}

// TestAuditQueryLimits: limits are clamped to the contract's bounds.
func TestAuditQueryLimits(t *testing.T) {
	t.Parallel()
	s := openStore(t, nsConfig(t, uniqueNS(t)))
	h := lockstore.HashKey("k")
	base := time.Now().UnixMilli() - 10*60_000
	var evs []lockstore.AuditEvent
	for i := range lockstore.DefaultAuditLimit + 5 {
		evs = append(evs, auditEvent(base+int64(i), h, i))
	}
	if err := s.AppendAudit(bg(t), evs); err != nil {
		t.Fatal(err)
	}
	got, err := s.QueryAudit(bg(t), lockstore.AuditQuery{})
	if err != nil || len(got) != lockstore.DefaultAuditLimit {
		t.Fatalf("default limit: %d events, %v; want %d", len(got), err, lockstore.DefaultAuditLimit)
	}
	got, err = s.QueryAudit(bg(t), lockstore.AuditQuery{Limit: lockstore.MaxAuditLimit + 1})
	if err != nil || len(got) != len(evs) {
		t.Fatalf("over-max limit: %d events, %v; want all %d", len(got), err, len(evs))
	}
	for i := 1; i < len(got); i++ {
		if got[i].TimeMs > got[i-1].TimeMs {
			t.Fatalf("not newest first at %d", i)
		}
	}
}

func decisionIDs(evs []lockstore.AuditEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.DecisionID
	}
	return out
}
