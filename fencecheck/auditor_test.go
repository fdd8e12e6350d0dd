package fencecheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/lockstore"
)

func ev(i int) lockstore.AuditEvent {
	return lockstore.AuditEvent{TimeMs: int64(i), DecisionID: "d", Reason: "stale"}
}

// A sink that hangs must not slow checks: Record stays non-blocking, the
// overflow is dropped and counted, and Close still returns (bounded by the
// write timeout).
func TestAuditorBlockingSinkNeverSlowsChecks(t *testing.T) {
	sink := &memLog{block: make(chan struct{})}
	reg := prometheus.NewRegistry()
	a := NewAuditor(sink, AuditorOptions{QueueSize: 8, BatchSize: 2, FlushInterval: time.Millisecond,
		WriteTimeout: 200 * time.Millisecond, Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()

	const n = 2000
	checks := func(c *Checker) time.Duration {
		start := time.Now()
		for range n {
			if d, _ := c.Check(ctx, Request{Key: "k", Write: true, Fence: f4}); d.Allowed {
				t.Fatal("stale write allowed")
			}
		}
		return time.Since(start)
	}
	// The same checks without an auditor, in the same run, are the
	// baseline: the machine's load cancels out. A Record that blocked
	// would wait for the sink's 200 ms write timeout about every other
	// event (minutes for n checks), far beyond the bound.
	base := checks(New(&stateStore{state: live(f5, idA)}, Options{}))
	el := checks(New(&stateStore{state: live(f5, idA)}, Options{Audit: a}))
	if limit := 4*base + 2*time.Second; el > limit {
		t.Fatalf("%d checks with a hung audit sink took %v (without an auditor %v; limit %v)", n, el, base, limit)
	}
	t.Logf("%d checks: %v without an auditor, %v with a hung sink", n, base, el)
	dropped := testutil.ToFloat64(a.dropped.WithLabelValues(dropQueueFull, "decision"))
	// The queue (8) and one batch (2) absorb events; each time a write
	// times out (200 ms) another batch drains. Everything else is dropped.
	if absorbed := 10 + 2*(int(el/(200*time.Millisecond))+1); dropped < float64(n-absorbed) {
		t.Fatalf("queue-full drops = %v, want ≥ %d", dropped, n-absorbed)
	}
	closeStart := time.Now()
	_ = a.Close()
	if el := time.Since(closeStart); el > 5*time.Second {
		t.Fatalf("Close took %v with a hung sink", el)
	}
	if err := <-runDone; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if testutil.ToFloat64(a.dropped.WithLabelValues(dropWriteFailed, "decision")) == 0 {
		t.Fatal("timed-out writes not counted as dropped")
	}
	if n, err := testutil.GatherAndCount(reg, "fencegate_audit_dropped_total"); err != nil || n == 0 {
		t.Fatalf("fencegate_audit_dropped_total not registered: %d %v", n, err)
	}
}

func TestAuditorBatches(t *testing.T) {
	sink := &memLog{}
	a := NewAuditor(sink, AuditorOptions{BatchSize: 10, FlushInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	for i := range 25 {
		a.Record(ev(i))
	}
	// Two full batches are written without waiting for the interval.
	deadline := time.Now().Add(10 * time.Second) // generous: a loaded CI machine
	for len(sink.snapshot()) < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("full batches not written: %d events", len(sink.snapshot()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel() // the remainder is flushed on the way out
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	evs := sink.snapshot()
	if len(evs) != 25 {
		t.Fatalf("%d events, want 25", len(evs))
	}
	for i, e := range evs {
		if e.TimeMs != int64(i) {
			t.Fatalf("event %d out of order: %+v", i, e)
		}
	}
	if sink.calls != 3 {
		t.Fatalf("%d writes, want 3 (10+10+5)", sink.calls)
	}
	if err := a.Run(context.Background()); !errors.Is(err, ErrAuditorRunning) && !errors.Is(err, ErrAuditorClosed) {
		t.Fatalf("second Run: %v", err)
	}
}

func TestAuditorFlushInterval(t *testing.T) {
	sink := &memLog{}
	a := NewAuditor(sink, AuditorOptions{FlushInterval: 20 * time.Millisecond})
	go a.Run(context.Background())
	defer a.Close()
	a.Record(ev(1))
	deadline := time.Now().Add(10 * time.Second) // generous: a loaded CI machine
	for len(sink.snapshot()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a lone event was not flushed by the interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAuditorFailingSink(t *testing.T) {
	sink := &memLog{err: lockstore.Errorf(lockstore.ServiceUnavailable, "audit", "down")}
	a := NewAuditor(sink, AuditorOptions{})
	for i := range 5 {
		a.Record(ev(i))
	}
	_ = a.Close() // never ran: Close flushes itself
	if got := testutil.ToFloat64(a.dropped.WithLabelValues(dropWriteFailed, "decision")); got != 5 {
		t.Fatalf("write-failed drops = %v, want 5", got)
	}
	a.Record(ev(9))
	if got := testutil.ToFloat64(a.dropped.WithLabelValues(dropClosed, "decision")); got != 1 {
		t.Fatalf("closed drops = %v, want 1", got)
	}
	if err := a.Run(context.Background()); !errors.Is(err, ErrAuditorClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	_ = a.Close() // idempotent
}

func TestAuditorCloseWithoutRunFlushes(t *testing.T) {
	sink := &memLog{}
	a := NewAuditor(sink, AuditorOptions{BatchSize: 2})
	for i := range 5 {
		a.Record(ev(i))
	}
	_ = a.Close()
	if got := len(sink.snapshot()); got != 5 {
		t.Fatalf("%d events flushed, want 5", got)
	}
}

// TestAuditorInputFloodKeepsDecisions: a flood of input-class denials
// (missing, malformed) while the sink is stalled fills only the input
// queue; a stale event recorded after it is still queued and written, and
// the input drops are counted under class "input".
func TestAuditorInputFloodKeepsDecisions(t *testing.T) {
	release := make(chan struct{})
	sink := &memLog{block: release}
	reg := prometheus.NewRegistry()
	a := NewAuditor(sink, AuditorOptions{QueueSize: 8, BatchSize: 4, FlushInterval: time.Hour,
		WriteTimeout: time.Minute, Registerer: reg})
	for i := range 1000 {
		reason := "missing"
		if i%2 == 1 {
			reason = "malformed"
		}
		a.Record(lockstore.AuditEvent{TimeMs: int64(i), DecisionID: "junk", Reason: reason})
	}
	a.Record(lockstore.AuditEvent{TimeMs: 5000, DecisionID: "real", Reason: "stale"})
	close(release)
	_ = a.Close() // never ran: Close flushes what is queued
	found := false
	for _, e := range sink.snapshot() {
		found = found || e.DecisionID == "real"
	}
	if !found {
		t.Fatal("the stale event was crowded out of the queue by input events")
	}
	if got := testutil.ToFloat64(a.dropped.WithLabelValues(dropQueueFull, "input")); got != 1000-8 {
		t.Fatalf("input queue-full drops = %v, want %d", got, 1000-8)
	}
	if got := testutil.ToFloat64(a.dropped.WithLabelValues(dropQueueFull, "decision")); got != 0 {
		t.Fatalf("decision queue-full drops = %v, want 0", got)
	}
}
