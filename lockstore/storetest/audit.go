package storetest

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// HashKeyCollision is two keys with one lockstore.HashKey, found by lattice
// reduction over the three polynomial hashes (30 UTF-16 units differing by
// at most 1 each): the first is under the prefix "a/", the second under
// "b/". Tests use it to show that no audit scope rests on HashKey.
var HashKeyCollision = [2]string{"a/vhdtim3.lmlmmmnnnmllmmnmmnll", "b/victim2-mmmmmmmmmmmmmmmmmmmm"}

// audit: every store keeps the audit trail. Events round-trip every field,
// come back newest first, and filter by key (its digest, never its hash),
// time and limit.
func (s *suite) audit(t *caseT) {
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
	da, db := lockstore.DigestKey("audit-a").String(), lockstore.DigestKey("audit-b").String()
	base := t.nowMs() - 60_000 // recent, well inside any retention age
	var all []lockstore.AuditEvent
	for i := range 6 {
		ev := lockstore.AuditEvent{
			TimeMs:     base + int64(i)*1000,
			DecisionID: "dec-" + string(rune('0'+i)),
			Source:     "authz-grpc",
			KeyHash:    ha,
			KeyDigest:  da,
			Reason:     "stale",
			Policy:     "holder",
			Mode:       "enforce",
		}
		if i%2 == 1 {
			ev.KeyHash, ev.KeyDigest = hb, db
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
	// Two keys with one keyHash (a real collision): a key filter returns
	// each key's events only, never the other's.
	crafted, victim := HashKeyCollision[0], HashKeyCollision[1]
	if lockstore.HashKey(crafted) != lockstore.HashKey(victim) {
		t.Fatalf("HashKeyCollision is not a collision: %s != %s", lockstore.HashKey(crafted), lockstore.HashKey(victim))
	}
	all = append(all, lockstore.AuditEvent{TimeMs: base + 6000, DecisionID: "dec-victim", Source: "authz-http",
		KeyHash: lockstore.HashKey(victim), KeyDigest: lockstore.DigestKey(victim).String(), Reason: "stale", Policy: "holder", Mode: "enforce"})
	// An input-class event (reason malformed), stored apart from the
	// decision events by stores that split retention, comes back merged.
	input := lockstore.AuditEvent{TimeMs: base + 2200, DecisionID: "dec-input", Source: "authz-http",
		KeyHash: hb, KeyDigest: db, Reason: "malformed", Policy: "holder", Mode: "enforce"}
	all = append(all, input)
	// One batch of one, one of the rest, out of time order: the store
	// orders by event time, not by arrival.
	if err := al.AppendAudit(ctx(t), all[4:5]); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	all = append(all, lockstore.AuditEvent{TimeMs: base + 500, DecisionID: "dec-crafted", Source: "authz-http",
		KeyHash: lockstore.HashKey(crafted), KeyDigest: lockstore.DigestKey(crafted).String(), Reason: "unknown", Policy: "holder", Mode: "enforce"})
	rest := []lockstore.AuditEvent{all[2], all[0], all[7], all[5], all[6], all[8], all[1], all[3]}
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
		{"all", lockstore.AuditQuery{}, newestFirst(6, 5, 4, 3, 7, 2, 1, 8, 0)},
		{"key-a", lockstore.AuditQuery{Key: "audit-a"}, newestFirst(4, 2, 0)},
		{"key-b", lockstore.AuditQuery{Key: "audit-b"}, newestFirst(5, 3, 7, 1)},
		{"collision-victim", lockstore.AuditQuery{Key: victim}, newestFirst(6)},
		{"collision-crafted", lockstore.AuditQuery{Key: crafted}, newestFirst(8)},
		{"unknown-key", lockstore.AuditQuery{Key: "nobody"}, nil},
		{"since", lockstore.AuditQuery{SinceMs: base + 2500}, newestFirst(6, 5, 4, 3)},
		{"since-future", lockstore.AuditQuery{SinceMs: t.nowMs() + 60_000}, nil},
		{"limit", lockstore.AuditQuery{Limit: 2}, newestFirst(6, 5)},
		{"key-since-limit", lockstore.AuditQuery{Key: "audit-b", SinceMs: base + 500, Limit: 2}, newestFirst(5, 3)},
		{"key-since-input", lockstore.AuditQuery{Key: "audit-b", SinceMs: base + 2100, Limit: 2}, newestFirst(5, 3)},
		{"key-since-input-limit", lockstore.AuditQuery{Key: "audit-b", SinceMs: base + 1500, Limit: 3}, newestFirst(5, 3, 7)},
		{"limit-above-count", lockstore.AuditQuery{Limit: 50}, newestFirst(6, 5, 4, 3, 7, 2, 1, 8, 0)},
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

// auditRetention: input events (missing, malformed, bad-proof: anyone can
// send them) are kept within their own budget and never evict a decision event. A
// flood of 300 input events, in the batches the auditor writes, leaves the
// one stale event in place, and the newest input events are kept.
func (s *suite) auditRetention(t *caseT) {
	ns := newNS(t)
	st := s.openWith(t, ns, Options{AuditRetention: lockstore.AuditRetention{MaxEvents: 20, MaxInputEvents: 20, MaxAge: time.Hour}})
	al, ok := st.(lockstore.AuditLog)
	if !ok {
		t.Fatalf("%T does not implement lockstore.AuditLog; every fencegate store must", st)
	}
	base := t.nowMs() - 60_000
	victim := lockstore.AuditEvent{TimeMs: base, DecisionID: "real-stale", Source: "authz-grpc",
		KeyHash: lockstore.HashKey("orders/42"), KeyDigest: lockstore.DigestKey("orders/42").String(),
		Presented: "000000000000003", Current: "000000000000004", Reason: "stale", Policy: "holder", Mode: "enforce"}
	if err := al.AppendAudit(ctx(t), []lockstore.AuditEvent{victim}); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	const flood, batch = 300, 50
	for i := 0; i < flood; i += batch {
		evs := make([]lockstore.AuditEvent, 0, batch)
		for j := i; j < i+batch; j++ {
			// Denials decided from the request alone: no fence, a
			// malformed one, a bad proof.
			reason := []string{"missing", "malformed", "bad-proof"}[j%3]
			evs = append(evs, lockstore.AuditEvent{TimeMs: base + 1 + int64(j), DecisionID: fmt.Sprintf("junk-%d", j),
				Source: "authz-http", KeyHash: lockstore.HashKey("x"), KeyDigest: lockstore.DigestKey("x").String(),
				Reason: reason, Policy: "holder", Mode: "enforce"})
		}
		if err := al.AppendAudit(ctx(t), evs); err != nil {
			t.Fatalf("AppendAudit(flood): %v", err)
		}
	}
	got, err := al.QueryAudit(ctx(t), lockstore.AuditQuery{Key: "orders/42"})
	if err != nil {
		t.Fatalf("QueryAudit: %v", err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], victim) {
		t.Errorf("after %d input events, the stale event's query = %+v; want it kept", flood, got)
	}
	all, err := al.QueryAudit(ctx(t), lockstore.AuditQuery{Limit: lockstore.MaxAuditLimit})
	if err != nil {
		t.Fatalf("QueryAudit: %v", err)
	}
	if len(all) == 0 || all[0].DecisionID != fmt.Sprintf("junk-%d", flood-1) {
		t.Errorf("newest event = %+v; want the newest input event junk-%d", all[:min(len(all), 1)], flood-1)
	}
	if !slices.ContainsFunc(all, func(e lockstore.AuditEvent) bool { return e.DecisionID == victim.DecisionID }) {
		t.Error("the unfiltered query lost the stale event")
	}
}
