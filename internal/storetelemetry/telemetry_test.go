package storetelemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/storetelemetry"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

// eventSink collects events delivered by the decorator.
type eventSink struct {
	mu  sync.Mutex
	evs []storetelemetry.LockEvent
}

func (s *eventSink) on(e storetelemetry.LockEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, e)
}

func (s *eventSink) events() []storetelemetry.LockEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storetelemetry.LockEvent(nil), s.evs...)
}

var discardLogger = slog.New(slog.DiscardHandler)

func TestTelemetryEvents(t *testing.T) {
	ctx := context.Background()
	sink := &eventSink{}
	s := storetelemetry.WithTelemetry(newMemStore(), storetelemetry.TelemetryOptions{OnEvent: sink.on, Logger: discardLogger})

	const key = "resource:123"
	a, _ := s.Acquire(ctx, key, time.Second)
	_, _ = s.Acquire(ctx, key, time.Second) // contention
	_, _ = s.IsLocked(ctx, key)
	_, _ = s.LookupKey(ctx, key)
	_, _ = s.LookupLockID(ctx, a.LockID)
	_, _ = s.Extend(ctx, a.LockID, time.Second)
	_, _ = s.Release(ctx, a.LockID)
	_, _ = s.Release(ctx, a.LockID) // already gone
	_, _ = s.Extend(ctx, a.LockID, time.Second)
	_, _ = s.IsLocked(ctx, key)
	_, _ = s.LookupKey(ctx, key)
	_, _ = s.Acquire(ctx, "", time.Second) // InvalidArgument from the store
	if err := s.Close(); err != nil {      // delivers what is queued
		t.Fatal(err)
	}

	kh, lh := lockstore.HashKey(key), lockstore.HashKey(a.LockID)
	want := []storetelemetry.LockEvent{
		{Type: storetelemetry.EventAcquire, KeyHash: kh, LockIDHash: lh, Result: storetelemetry.ResultOK},
		{Type: storetelemetry.EventAcquire, KeyHash: kh, Result: storetelemetry.ResultFail, Reason: lockstore.ReasonLocked},
		{Type: storetelemetry.EventIsLocked, KeyHash: kh, Result: storetelemetry.ResultOK},
		{Type: storetelemetry.EventLookup, KeyHash: kh, Result: storetelemetry.ResultOK},
		{Type: storetelemetry.EventLookup, LockIDHash: lh, Result: storetelemetry.ResultOK},
		{Type: storetelemetry.EventExtend, LockIDHash: lh, Result: storetelemetry.ResultOK},
		{Type: storetelemetry.EventRelease, LockIDHash: lh, Result: storetelemetry.ResultOK},
		{Type: storetelemetry.EventRelease, LockIDHash: lh, Result: storetelemetry.ResultFail, Reason: lockstore.DetailNotFound},
		{Type: storetelemetry.EventExtend, LockIDHash: lh, Result: storetelemetry.ResultFail, Reason: lockstore.DetailNotFound},
		{Type: storetelemetry.EventIsLocked, KeyHash: kh, Result: storetelemetry.ResultFail},
		{Type: storetelemetry.EventLookup, KeyHash: kh, Result: storetelemetry.ResultFail},
		{Type: storetelemetry.EventAcquire, Result: storetelemetry.ResultFail, Code: lockstore.InvalidArgument},
		// Inspect emits nothing.
	}
	got := sink.events()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g := got[i]
		g.Duration = 0
		if g != want[i] {
			t.Errorf("event %d\n got %+v\nwant %+v", i, g, want[i])
		}
		if strings.Contains(g.Key+g.LockID, key) || g.LockID != "" {
			t.Errorf("event %d carries raw values without IncludeRaw", i)
		}
	}
}

func TestTelemetryIncludeRaw(t *testing.T) {
	ctx := context.Background()
	sink := &eventSink{}
	var askedWithRaw bool
	s := storetelemetry.WithTelemetry(newMemStore(), storetelemetry.TelemetryOptions{OnEvent: sink.on, Logger: discardLogger,
		IncludeRaw: func(e storetelemetry.LockEvent) bool {
			if e.Key != "" || e.LockID != "" {
				askedWithRaw = true
			}
			return e.Type == storetelemetry.EventAcquire
		}})
	a, _ := s.Acquire(ctx, "orders/42", time.Second)
	_, _ = s.Acquire(ctx, "svc/api-token", time.Second)
	_, _ = s.Release(ctx, a.LockID)
	_ = s.Close()
	ev := sink.events()
	if len(ev) != 3 {
		t.Fatalf("%d events", len(ev))
	}
	if ev[0].Key != "orders/42" || ev[0].LockID != a.LockID {
		t.Errorf("allowed event lacks raw values: %+v", ev[0])
	}
	if ev[1].Key != "" || ev[1].KeyHash != lockstore.HashKey("svc/api-token") {
		t.Errorf("a secret-looking key was emitted raw: %+v", ev[1])
	}
	if ev[2].LockID != "" {
		t.Errorf("the predicate said no, yet the lockId is raw: %+v", ev[2])
	}
	if askedWithRaw {
		t.Error("the IncludeRaw predicate saw raw values")
	}
}

func TestTelemetrySlowAndPanickingCallbacks(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var mu sync.Mutex
	delivered := 0
	deliveredIs := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return delivered == n }
	}
	inner := newMemStore()
	s := storetelemetry.WithTelemetry(inner, storetelemetry.TelemetryOptions{QueueSize: 2, Logger: discardLogger, OnEvent: func(e storetelemetry.LockEvent) {
		if e.Type == storetelemetry.EventIsLocked {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release // a callback stuck on a slow sink
		}
		mu.Lock()
		delivered++
		mu.Unlock()
		if e.Type == storetelemetry.EventLookup {
			panic("callback bug")
		}
	}})
	var stats storetelemetry.TelemetryStats = s

	// The first event occupies the worker; the next two fill the queue
	// and the other seven are dropped, while every operation returns at
	// once.
	start := time.Now()
	if _, err := s.IsLocked(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	<-entered
	for range 9 {
		if _, err := s.IsLocked(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("10 operations took %v behind a stuck callback", el)
	}
	if d := stats.DroppedEvents(); d != 7 {
		t.Errorf("dropped %d events, want 7 (1 in the callback, 2 queued)", d)
	}
	close(release)
	testutil.WaitFor(t, 5*time.Second, "3 events delivered", deliveredIs(3))

	// A panicking callback neither affects the operation nor stops the
	// worker: the events after it are still delivered.
	for i := range 3 {
		if _, err := s.LookupKey(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 5*time.Second, "the next event delivered", deliveredIs(4+i))
	}
	if _, err := s.Acquire(ctx, "k", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !deliveredIs(7)() {
		t.Errorf("delivered %d events, want 7: Close must deliver what is queued", delivered)
	}
	// Close is idempotent, leaves the inner store to its owner, and later events are
	// counted as dropped instead of panicking on a closed queue.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := stats.DroppedEvents()
	_, _ = s.IsLocked(ctx, "k")
	if stats.DroppedEvents() != before+1 {
		t.Error("an event after Close was not counted as dropped")
	}
	if inner.Closed() != 0 {
		t.Errorf("inner closed %d times: the decorator's Close must not close what it wraps", inner.Closed())
	}
}

// TestTelemetryKeepsOptionalInterfaces: the decorator wraps only the lock
// operations; every optional capability of the store under it is found
// with As, whatever the combination (the hand-built variants this
// replaced passed AuditLog and HeldCounter through but dropped LockLister
// and BarrierSweeper).
func TestTelemetryKeepsOptionalInterfaces(t *testing.T) {
	ctx := context.Background()
	on := func(storetelemetry.LockEvent) {}
	cases := []struct {
		name           string
		inner          lockstore.Store
		audit, counter bool
	}{
		{"plain", newMemStore(), false, false},
		{"audit", &auditMemStore{memStore: newMemStore()}, true, false},
		{"counter", counterMemStore{newMemStore()}, false, true},
		{"both", fullMemStore{&auditMemStore{memStore: newMemStore()}}, true, true},
	}
	for _, c := range cases {
		s := storetelemetry.WithTelemetry(c.inner, storetelemetry.TelemetryOptions{OnEvent: on})
		al, isAudit := lockstore.As[lockstore.AuditLog](s)
		hc, isCounter := lockstore.As[lockstore.HeldCounter](s)
		if isAudit != c.audit || isCounter != c.counter {
			t.Errorf("%s: AuditLog %v (want %v), HeldCounter %v (want %v)", c.name, isAudit, c.audit, isCounter, c.counter)
		}
		if isAudit {
			if err := al.AppendAudit(ctx, []lockstore.AuditEvent{{Reason: "stale"}}); err != nil {
				t.Error(err)
			}
			if ev, err := al.QueryAudit(ctx, lockstore.AuditQuery{}); err != nil || len(ev) != 1 {
				t.Errorf("%s: QueryAudit = %v, %v", c.name, ev, err)
			}
		}
		if isCounter {
			if n, err := hc.CountHeld(ctx); n != 7 || err != nil {
				t.Errorf("%s: CountHeld = %d, %v", c.name, n, err)
			}
		}
		d, okD := lockstore.As[lockstore.Describer](s)
		p, okP := lockstore.As[lockstore.Pinger](s)
		if !okD || !okP || d.Capabilities().Backend != "mem" || p.Ping(ctx) != nil {
			t.Errorf("%s: Capabilities/Ping not reachable", c.name)
		}
		if st, ok := lockstore.As[lockstore.Store](s); !ok || st != c.inner {
			t.Errorf("%s: As[Store] does not reach the inner store", c.name)
		}
		if l, ok := lockstore.As[lockstore.Locks](s); !ok || l != lockstore.Locks(s) {
			t.Errorf("%s: As[Locks] does not answer the decorator itself first", c.name)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
	// Without a callback the decorator passes calls through.
	inner := newMemStore()
	s := storetelemetry.WithTelemetry(inner, storetelemetry.TelemetryOptions{})
	if r, err := s.Acquire(ctx, "k", time.Second); err != nil || !r.OK {
		t.Errorf("nil OnEvent: Acquire = %+v, %v", r, err)
	}
	if err := s.Close(); err != nil || s.DroppedEvents() != 0 {
		t.Errorf("nil OnEvent: Close = %v, dropped %d", err, s.DroppedEvents())
	}
}

func TestTelemetryErrorEvents(t *testing.T) {
	ctx := context.Background()
	inner := newMemStore()
	inner.OnExtend = func(context.Context, int, string) (lockstore.ExtendResult, error, bool) {
		return lockstore.ExtendResult{}, &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: "extend"}, true
	}
	sink := &eventSink{}
	s := storetelemetry.WithTelemetry(inner, storetelemetry.TelemetryOptions{OnEvent: sink.on})
	id := "AAAAAAAAAAAAAAAAAAAAAA"
	if _, err := s.Extend(ctx, id, time.Second); lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
		t.Fatalf("error not passed through: %v", err)
	}
	_ = s.Close()
	ev := sink.events()
	if len(ev) != 1 || ev[0].Result != storetelemetry.ResultFail || ev[0].Code != lockstore.ServiceUnavailable || ev[0].Reason != "" ||
		ev[0].LockIDHash != lockstore.HashKey(id) {
		t.Errorf("events %+v", ev)
	}
}

// BenchmarkTelemetryOverhead measures what the decorator adds to an
// operation's path (enqueue only; hashing happens on the worker).
func BenchmarkTelemetryOverhead(b *testing.B) {
	ctx := context.Background()
	for _, decorated := range []bool{false, true} {
		name := "bare"
		var s lockstore.Locks = newMemStore()
		closeS := func() {}
		if decorated {
			name = "telemetry"
			d := storetelemetry.WithTelemetry(s, storetelemetry.TelemetryOptions{OnEvent: func(storetelemetry.LockEvent) {}, QueueSize: 1 << 16})
			s, closeS = d, func() { _ = d.Close() }
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_, _ = s.IsLocked(ctx, "resource:123")
			}
		})
		closeS()
	}
}

// ExampleWithTelemetry counts failed releases by the backend's reason
// ("expired" vs "not-found"), which a program using lockstore as a library
// can export as a metric: many "expired" means locks outlive their TTL.
func ExampleWithTelemetry() {
	var mu sync.Mutex
	failed := map[string]int{}
	s := storetelemetry.WithTelemetry(newMemStore(), storetelemetry.TelemetryOptions{OnEvent: func(e storetelemetry.LockEvent) {
		if e.Type == "release" && e.Result == "fail" {
			mu.Lock()
			failed[e.Reason]++
			mu.Unlock()
		}
	}})
	ctx := context.Background()
	r, _ := s.Acquire(ctx, "orders/42", time.Minute)
	_, _ = s.Release(ctx, r.LockID)
	_, _ = s.Release(ctx, r.LockID) // already released: fails
	_ = s.Close()                   // delivers the queued events first
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(failed["not-found"]+failed["expired"], "failed release")
	// Output: 1 failed release
}
