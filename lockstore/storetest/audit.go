package storetest

import (
	"reflect"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
)

// audit: every store keeps the audit trail. Events round-trip every field,
// come back newest first, and filter by key hash, time and limit.
func (s *suite) audit(t *testing.T) {
	st, _ := s.fresh(t)
	al, ok := st.(lockstore.AuditLog)
	if !ok {
		t.Fatalf("%T does not implement lockstore.AuditLog; every fencegate store must", st)
	}
	if evs, err := al.QueryAudit(ctx(t), lockstore.AuditQuery{}); err != nil || len(evs) != 0 {
		t.Fatalf("QueryAudit on a fresh namespace = %d events, %v; want none", len(evs), err)
	}
	if err := al.AppendAudit(ctx(t), nil); err != nil {
		t.Fatalf("AppendAudit(nil): %v", err)
	}

	ha, hb := lockstore.HashKey("audit-a"), lockstore.HashKey("audit-b")
	base := nowMs() - 60_000 // recent, well inside any retention age
	var all []lockstore.AuditEvent
	for i := range 6 {
		ev := lockstore.AuditEvent{
			TimeMs:     base + int64(i)*1000,
			DecisionID: "dec-" + string(rune('0'+i)),
			Source:     "authz-grpc",
			KeyHash:    ha,
			Reason:     "stale",
			Policy:     "holder",
			Mode:       "enforce",
		}
		if i%2 == 1 {
			ev.KeyHash = hb
			ev.Source = "admission"
			ev.Reason = "not-held"
		}
		if i == 3 {
			// Every optional field set once, to prove they round-trip.
			ev.Route = "orders-write"
			ev.Key = "audit-b"
			ev.Presented = "000000000000004"
			ev.Current = "000000000000007"
			ev.Peer = "10.0.0.7:51234"
			ev.Method = "PUT"
			ev.Path = "/orders/42"
			ev.Mode = "dry-run"
			ev.Policy = "latest"
		}
		all = append(all, ev)
	}
	// One batch of one, one of the rest, out of time order: the store
	// orders by event time, not by arrival.
	if err := al.AppendAudit(ctx(t), all[4:5]); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	rest := []lockstore.AuditEvent{all[2], all[0], all[5], all[1], all[3]}
	if err := al.AppendAudit(ctx(t), rest); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}

	newestFirst := func(idx ...int) []lockstore.AuditEvent {
		out := make([]lockstore.AuditEvent, 0, len(idx))
		for _, i := range idx {
			out = append(out, all[i])
		}
		return out
	}
	for _, c := range []struct {
		name string
		q    lockstore.AuditQuery
		want []lockstore.AuditEvent
	}{
		{"all", lockstore.AuditQuery{}, newestFirst(5, 4, 3, 2, 1, 0)},
		{"key-a", lockstore.AuditQuery{KeyHash: ha}, newestFirst(4, 2, 0)},
		{"key-b", lockstore.AuditQuery{KeyHash: hb}, newestFirst(5, 3, 1)},
		{"unknown-key", lockstore.AuditQuery{KeyHash: lockstore.HashKey("nobody")}, nil},
		{"since", lockstore.AuditQuery{SinceMs: base + 2500}, newestFirst(5, 4, 3)},
		{"since-future", lockstore.AuditQuery{SinceMs: nowMs() + 60_000}, nil},
		{"limit", lockstore.AuditQuery{Limit: 2}, newestFirst(5, 4)},
		{"key-since-limit", lockstore.AuditQuery{KeyHash: hb, SinceMs: base + 500, Limit: 2}, newestFirst(5, 3)},
		{"limit-above-count", lockstore.AuditQuery{Limit: 50}, newestFirst(5, 4, 3, 2, 1, 0)},
	} {
		got, err := al.QueryAudit(ctx(t), c.q)
		if err != nil {
			t.Errorf("QueryAudit(%s): %v", c.name, err)
			continue
		}
		if len(got) == 0 && len(c.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("QueryAudit(%s) =\n  %+v\nwant\n  %+v", c.name, got, c.want)
		}
	}
}
