package storetest

import (
	"context"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Malformed inputs every backend must reject with InvalidArgument.
var (
	badKeys = []struct{ name, key string }{
		{"empty", ""},
		{"513-bytes", strings.Repeat("k", 513)},
		{"513-bytes-3-byte-runes", strings.Repeat("\u20ac", 171)},
		{"invalid-utf8", "key\xff"},
	}
	badLockIDs = []struct{ name, id string }{
		{"empty", ""},
		{"21-chars", strings.Repeat("A", 21)},
		{"23-chars", strings.Repeat("A", 23)},
		{"plus", strings.Repeat("A", 21) + "+"},
		{"slash", "/" + strings.Repeat("A", 21)},
		{"padding", strings.Repeat("A", 20) + "=="},
		{"space", strings.Repeat("A", 10) + " " + strings.Repeat("A", 11)},
		{"newline", strings.Repeat("A", 21) + "\n"},
		{"tab", "\t" + strings.Repeat("A", 21)},
		{"colon", strings.Repeat("A", 21) + ":"},
		// U+0410 CYRILLIC CAPITAL A is two bytes: 20 ASCII + 1 look-alike is
		// 22 bytes, so only a per-byte check catches it.
		{"cyrillic-22-bytes", strings.Repeat("A", 20) + "\u0410"},
		{"cyrillic-22-runes", strings.Repeat("A", 21) + "\u0430"},
	}
	badTTLs = []struct {
		name string
		ttl  time.Duration
	}{
		{"zero", 0},
		{"negative", -time.Second},
		{"1ns", time.Nanosecond},
		{"500us", 500 * time.Microsecond},
		{"1.5ms", 1500 * time.Microsecond},
	}
)

// op is one store call under test, taking the context to use.
type op struct {
	name string
	do   func(ctx context.Context) error
}

// validation: malformed keys, lockIds and TTLs fail with InvalidArgument
// on every operation, before any I/O — proved by passing an already
// cancelled context, which an operation that reached the backend would
// report as Aborted — and leave no trace.
func (s *suite) validation(t *caseT) {
	st, _ := s.fresh(t)
	const goodKey = "valid"
	live := acquire(t, st, "live", 10*time.Second)

	var calls []op
	for _, k := range badKeys {
		calls = append(calls,
			op{"Acquire/key=" + k.name, func(c context.Context) error {
				r, err := st.Acquire(c, k.key, time.Second)
				if r.OK {
					t.Errorf("Acquire(key %s) OK=true", k.name)
				}
				return err
			}},
			op{"IsLocked/key=" + k.name, func(c context.Context) error { _, err := st.IsLocked(c, k.key); return err }},
			op{"LookupKey/key=" + k.name, func(c context.Context) error {
				li, err := st.LookupKey(c, k.key)
				if li != nil {
					t.Errorf("LookupKey(key %s) returned info", k.name)
				}
				return err
			}},
			op{"Inspect/key=" + k.name, func(c context.Context) error { _, err := st.Inspect(c, k.key); return err }},
		)
	}
	for _, l := range badLockIDs {
		calls = append(calls,
			op{"Release/lockId=" + l.name, func(c context.Context) error {
				r, err := st.Release(c, l.id)
				if r.OK {
					t.Errorf("Release(lockId %s) OK=true", l.name)
				}
				return err
			}},
			op{"Extend/lockId=" + l.name, func(c context.Context) error {
				r, err := st.Extend(c, l.id, time.Second)
				if r.OK {
					t.Errorf("Extend(lockId %s) OK=true", l.name)
				}
				return err
			}},
			op{"LookupLockID/lockId=" + l.name, func(c context.Context) error {
				li, err := st.LookupLockID(c, l.id)
				if li != nil {
					t.Errorf("LookupLockID(lockId %s) returned info", l.name)
				}
				return err
			}},
		)
	}
	for _, d := range badTTLs {
		calls = append(calls,
			op{"Acquire/ttl=" + d.name, func(c context.Context) error {
				r, err := st.Acquire(c, goodKey, d.ttl)
				if r.OK {
					t.Errorf("Acquire(ttl %s) OK=true", d.name)
				}
				return err
			}},
			op{"Extend/ttl=" + d.name, func(c context.Context) error {
				r, err := st.Extend(c, live.LockID, d.ttl)
				if r.OK {
					t.Errorf("Extend(ttl %s) OK=true", d.name)
				}
				return err
			}},
		)
	}

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, c := range calls {
		wantCode(t, c.name, c.do(ctx(t)), lockstore.InvalidArgument)
		wantCode(t, c.name+" (cancelled ctx: validation comes before I/O)", c.do(cancelled), lockstore.InvalidArgument)
	}

	// Nothing was written: the TTL-rejected key is free with no fence
	// issued, and the live lock kept its expiry.
	wantFree(t, st, goodKey, "")
	if ks := inspect(t, st, goodKey); ks.LatestFence != "" {
		t.Errorf("LatestFence after rejected acquires = %q, want \"\"", ks.LatestFence)
	}
	wantInfo(t, "LookupKey(live) after rejected extends", lookupKey(t, st, "live"), "live", live)
}

// contextErrors: an already cancelled context is Aborted and an already
// expired deadline is NetworkTimeout, on every operation, and neither
// changes anything.
func (s *suite) contextErrors(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "ctx"
	live := acquire(t, st, "live", 10*time.Second)

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()

	al, _ := st.(lockstore.AuditLog)
	ops := []op{
		{"Acquire", func(c context.Context) error {
			r, err := st.Acquire(c, key, time.Second)
			if r.OK {
				t.Error("Acquire with a dead context: OK=true")
			}
			return err
		}},
		{"Release", func(c context.Context) error {
			r, err := st.Release(c, live.LockID)
			if r.OK {
				t.Error("Release with a dead context: OK=true")
			}
			return err
		}},
		{"Extend", func(c context.Context) error {
			r, err := st.Extend(c, live.LockID, time.Hour)
			if r.OK {
				t.Error("Extend with a dead context: OK=true")
			}
			return err
		}},
		{"IsLocked", func(c context.Context) error { _, err := st.IsLocked(c, key); return err }},
		{"LookupKey", func(c context.Context) error { _, err := st.LookupKey(c, key); return err }},
		{"LookupLockID", func(c context.Context) error { _, err := st.LookupLockID(c, live.LockID); return err }},
		{"Inspect", func(c context.Context) error { _, err := st.Inspect(c, key); return err }},
	}
	if al != nil {
		ops = append(ops,
			op{"AppendAudit", func(c context.Context) error {
				return al.AppendAudit(c, []lockstore.AuditEvent{{TimeMs: t.nowMs(), KeyHash: lockstore.HashKey(key), Reason: "stale"}})
			}},
			op{"QueryAudit", func(c context.Context) error { _, err := al.QueryAudit(c, lockstore.AuditQuery{}); return err }},
		)
	}
	for _, o := range ops {
		wantCode(t, o.name+"(cancelled)", o.do(cancelled), lockstore.Aborted)
		wantCode(t, o.name+"(expired deadline)", o.do(expired), lockstore.NetworkTimeout)
	}

	wantFree(t, st, key, "")
	wantInfo(t, "LookupKey(live) after dead-context calls", lookupKey(t, st, "live"), "live", live)
	if al != nil {
		evs, err := al.QueryAudit(ctx(t), lockstore.AuditQuery{})
		if err != nil {
			t.Fatalf("QueryAudit: %v", err)
		}
		if len(evs) != 0 {
			t.Errorf("AppendAudit with a dead context stored %d events", len(evs))
		}
	}
	// The store still works after dead-context calls.
	r := acquire(t, st, key, time.Second)
	if r.Fence != fence(t, 1) {
		t.Errorf("first fence after dead-context acquires = %q, want %q", r.Fence, fence(t, 1))
	}
}
