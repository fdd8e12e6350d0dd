package fencecheck

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

// stateStore serves a fixed KeyState (or error) from Inspect and counts the
// reads; the decision table below is about the policy, not a backend. The
// transports' tests run the same decisions against the real bolt store.
type stateStore struct {
	lockstore.Store // nil: any other method panics, proving Check uses only Inspect
	state           lockstore.KeyState
	err             error
	block           bool // block until ctx is done
	reads           atomic.Int32
	lastKey         atomic.Value
}

func (s *stateStore) Inspect(ctx context.Context, key string) (lockstore.KeyState, error) {
	s.reads.Add(1)
	s.lastKey.Store(key)
	if s.block {
		<-ctx.Done()
		return lockstore.KeyState{}, lockstore.ContextError(ctx, "inspect")
	}
	return s.state, s.err
}

// memLog is an in-memory AuditLog.
type memLog struct {
	mu     sync.Mutex
	events []lockstore.AuditEvent
	calls  int
	err    error
	block  chan struct{} // when non-nil, AppendAudit waits for it or ctx
}

func (l *memLog) AppendAudit(ctx context.Context, evs []lockstore.AuditEvent) error {
	if l.block != nil {
		select {
		case <-l.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.err != nil {
		return l.err
	}
	l.events = append(l.events, evs...)
	return nil
}

func (l *memLog) QueryAudit(context.Context, lockstore.AuditQuery) ([]lockstore.AuditEvent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]lockstore.AuditEvent(nil), l.events...), nil
}

func (l *memLog) snapshot() []lockstore.AuditEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]lockstore.AuditEvent(nil), l.events...)
}

const (
	f4 = "000000000000004"
	f5 = "000000000000005"
	f6 = "000000000000006"
)

var (
	idA = "AAAAAAAAAAAAAAAAAAAAAA"
	idB = "BBBBBBBBBBBBBBBBBBBBBB"
)

func live(fence, id string) lockstore.KeyState {
	return lockstore.KeyState{Live: &lockstore.Lock{LockID: id, Fence: fence, ExpiresAtMs: 2e12}, LatestFence: fence, NowMs: 1e12}
}

func expired(fence string) lockstore.KeyState {
	return lockstore.KeyState{LatestFence: fence, NowMs: 1e12}
}

func TestCheckDecisions(t *testing.T) {
	tests := []struct {
		name   string
		state  lockstore.KeyState
		req    Request
		reason Reason
		status int
		reads  int32
	}{
		{"read passes without fence", live(f5, idA), Request{Key: "k", Write: false}, "", 200, 0},
		{"policy off passes", live(f5, idA), Request{Key: "k", Write: true, Policy: PolicyOff}, "", 200, 0},
		{"missing", live(f5, idA), Request{Key: "k", Write: true}, ReasonMissing, 428, 0},
		{"malformed short", live(f5, idA), Request{Key: "k", Write: true, Fence: "5"}, ReasonMalformed, 400, 0},
		{"malformed sign", live(f5, idA), Request{Key: "k", Write: true, Fence: "+00000000000005"}, ReasonMalformed, 400, 0},
		{"malformed empty key", live(f5, idA), Request{Key: "", Write: true, Fence: f5}, ReasonMalformed, 400, 0},
		{"malformed long key", live(f5, idA), Request{Key: string(make([]byte, 513)), Write: true, Fence: f5}, ReasonMalformed, 400, 0},
		{"malformed lockId", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, LockID: "short"}, ReasonMalformed, 400, 0},
		{"ambiguous input", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, Ambiguous: true}, ReasonMalformed, 400, 0},
		{"ambiguous beats missing", live(f5, idA), Request{Key: "k", Write: true, Ambiguous: true}, ReasonMalformed, 400, 0},
		{"holder current", live(f5, idA), Request{Key: "k", Write: true, Fence: f5}, "", 200, 1},
		{"holder stale", live(f5, idA), Request{Key: "k", Write: true, Fence: f4}, ReasonStale, 409, 1},
		{"holder unknown", live(f5, idA), Request{Key: "k", Write: true, Fence: f6}, ReasonUnknown, 409, 1},
		{"never issued", lockstore.KeyState{}, Request{Key: "k", Write: true, Fence: f5}, ReasonUnknown, 409, 1},
		{"holder expired", expired(f5), Request{Key: "k", Write: true, Fence: f5}, ReasonNotHeld, 409, 1},
		{"latest expired passes", expired(f5), Request{Key: "k", Write: true, Fence: f5, Policy: PolicyLatest}, "", 200, 1},
		{"latest stale", expired(f5), Request{Key: "k", Write: true, Fence: f4, Policy: PolicyLatest}, ReasonStale, 409, 1},
		{"latest unknown", expired(f5), Request{Key: "k", Write: true, Fence: f6, Policy: PolicyLatest}, ReasonUnknown, 409, 1},
		{"lockId match", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, LockID: idA}, "", 200, 1},
		{"lockId mismatch", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, LockID: idB}, ReasonWrongOwner, 409, 1},
		{"lockId latest no live lock", expired(f5), Request{Key: "k", Write: true, Fence: f5, LockID: idA, Policy: PolicyLatest}, ReasonNotHeld, 409, 1},
		{"lockId latest match", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, LockID: idA, Policy: PolicyLatest}, "", 200, 1},
		{"stale wins over lockId", live(f5, idA), Request{Key: "k", Write: true, Fence: f4, LockID: idA}, ReasonStale, 409, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &stateStore{state: tc.state}
			c := New(st, Options{})
			d, err := c.Check(context.Background(), tc.req)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if d.Reason != tc.reason || d.Status != tc.status || d.Allowed != (tc.reason == "") {
				t.Fatalf("decision = %+v, want reason %q status %d", d, tc.reason, tc.status)
			}
			if got := st.reads.Load(); got != tc.reads {
				t.Fatalf("backend reads = %d, want %d", got, tc.reads)
			}
			if tc.reads > 0 && d.Current != tc.state.LatestFence {
				t.Fatalf("current = %q, want %q", d.Current, tc.state.LatestFence)
			}
			if tc.req.Write && tc.req.Policy != PolicyOff && d.DecisionID == "" {
				t.Fatal("write decision without a decision id")
			}
			if d.Presented != tc.req.Fence || d.Key != tc.req.Key {
				t.Fatalf("presented/key not echoed: %+v", d)
			}
		})
	}
}

func TestCheckDryRunAndWarn(t *testing.T) {
	for _, mode := range []Mode{ModeDryRun, ModeWarn} {
		t.Run(string(mode), func(t *testing.T) {
			log := &memLog{}
			a := NewAuditor(log, AuditorOptions{FlushInterval: 10 * time.Millisecond})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go a.Run(ctx)
			c := New(&stateStore{state: live(f5, idA)}, Options{Audit: a})
			d, err := c.Check(ctx, Request{Key: "k", Write: true, Fence: f4, Mode: mode, Source: "test"})
			if err != nil || !d.Allowed || !d.WouldDeny || d.Reason != ReasonStale || d.Status != 200 || d.Mode != mode {
				t.Fatalf("decision = %+v, %v", d, err)
			}
			d, err = c.Check(ctx, Request{Key: "k", Write: true, Fence: f5, Mode: mode})
			if err != nil || !d.Allowed || d.WouldDeny || d.Reason != "" {
				t.Fatalf("positive decision = %+v, %v", d, err)
			}
			_ = a.Close()
			evs := log.snapshot()
			if len(evs) != 1 || evs[0].Mode != string(mode) || evs[0].Reason != "stale" {
				t.Fatalf("audit = %+v, want one %s stale event", evs, mode)
			}
		})
	}
}

func TestCheckUnavailable(t *testing.T) {
	down := &stateStore{err: lockstore.Errorf(lockstore.ServiceUnavailable, "inspect", "connection refused")}
	c := New(down, Options{})
	d, err := c.Check(context.Background(), Request{Key: "k", Write: true, Fence: f5})
	if err == nil || lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
		t.Fatalf("err = %v, want ServiceUnavailable wrapped", err)
	}
	if d.Allowed || d.Reason != ReasonUnavailable || d.Status != 503 || d.DecisionID == "" {
		t.Fatalf("decision = %+v", d)
	}

	// Dry-run never blocks traffic, not even when the backend is down.
	d, err = c.Check(context.Background(), Request{Key: "k", Write: true, Fence: f5, Mode: ModeDryRun})
	if err != nil || !d.Allowed || !d.WouldDeny || d.Reason != ReasonUnavailable {
		t.Fatalf("dry-run decision = %+v, %v", d, err)
	}
}

// TestCheckRefusedKey: a key the backend refuses as input (Redis's "id:"
// and "fence:" keys) is the client's fault: 400 malformed, no WARN, no
// error, audited in the input class. A backend InvalidArgument that is not
// about the input (a missing index) still fails closed as unavailable.
func TestCheckRefusedKey(t *testing.T) {
	var logs testutil.LogBuffer
	log := testutil.Logger(&logs, slog.LevelInfo)
	refusing := &stateStore{err: lockstore.BadInputf("keys starting \"id:\" are reserved")}
	sink := &memLog{}
	a := NewAuditor(sink, AuditorOptions{})
	c := New(refusing, Options{Logger: log, Audit: a})
	d, err := c.Check(context.Background(), Request{Key: "id:x", Write: true, Fence: f5})
	if err != nil || d.Allowed || d.Reason != ReasonMalformed || d.Status != 400 {
		t.Fatalf("refused key: decision %+v, err %v; want 400 malformed and no error", d, err)
	}
	if logs.String() != "" {
		t.Fatalf("a refused key logged at info or above: %s", logs.String())
	}
	_ = a.Close()
	if evs := sink.snapshot(); len(evs) != 1 || evs[0].Class() != lockstore.AuditInput {
		t.Fatalf("audit = %+v, want one input-class event", evs)
	}

	// The class is the error's property (BadInput), not its Op: a fault
	// that happens to name the op "validate" still fails closed.
	for _, fault := range []error{
		lockstore.Errorf(lockstore.InvalidArgument, "inspect", "FAILED_PRECONDITION: index missing"),
		lockstore.Errorf(lockstore.InvalidArgument, "validate", "server misconfigured"),
	} {
		c = New(&stateStore{err: fault}, Options{Logger: log})
		d, err = c.Check(context.Background(), Request{Key: "k", Write: true, Fence: f5})
		if err == nil || d.Allowed || d.Reason != ReasonUnavailable || d.Status != 503 {
			t.Fatalf("backend fault %v: decision %+v, err %v; want 503 unavailable with the error", fault, d, err)
		}
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Fatal("a backend fault was not logged at WARN")
	}
}

func TestCheckDeadline(t *testing.T) {
	const timeout = 80 * time.Millisecond
	c := New(&stateStore{block: true}, Options{Timeout: timeout})
	start := time.Now()
	d, err := c.Check(context.Background(), Request{Key: "k", Write: true, Fence: f5})
	elapsed := time.Since(start)
	if err == nil || d.Allowed || d.Status != 503 || d.Reason != ReasonUnavailable {
		t.Fatalf("decision = %+v, %v", d, err)
	}
	if lockstore.CodeOf(err) != lockstore.NetworkTimeout {
		t.Fatalf("code = %s, want NetworkTimeout", lockstore.CodeOf(err))
	}
	// Cut off at the deadline, not later: the bound leaves room for a
	// loaded CI machine under -race, and is still far below what a check
	// that ignored its deadline would take (the store blocks forever).
	if elapsed < timeout || elapsed > timeout+400*time.Millisecond {
		t.Fatalf("elapsed %v, want %v ≤ elapsed ≤ %v", elapsed, timeout, timeout+400*time.Millisecond)
	}
}

func TestCheckBadOptionsFailClosed(t *testing.T) {
	st := &stateStore{state: live(f5, idA)}
	c := New(st, Options{})
	for _, r := range []Request{
		{Key: "k", Write: true, Fence: f5, Policy: "newest"},
		{Key: "k", Write: true, Fence: f5, Mode: "loud"},
	} {
		d, err := c.Check(context.Background(), r)
		if err == nil || d.Allowed || d.Status != 503 {
			t.Fatalf("%+v: decision = %+v, %v; want fail-closed error", r, d, err)
		}
	}
	// A read passes even on a misconfigured route.
	if d, err := c.Check(context.Background(), Request{Key: "k", Policy: "newest"}); err != nil || !d.Allowed {
		t.Fatalf("read on bad route = %+v, %v", d, err)
	}
	if st.reads.Load() != 0 {
		t.Fatal("bad options read the backend")
	}
}

func TestCheckAuditEvents(t *testing.T) {
	for _, raw := range []bool{false, true} {
		log := &memLog{}
		a := NewAuditor(log, AuditorOptions{FlushInterval: time.Hour})
		ctx := context.Background()
		go a.Run(ctx)
		now := time.UnixMilli(1_700_000_000_123)
		c := New(&stateStore{state: live(f5, idA)}, Options{Audit: a, AuditRawKeys: raw, Now: func() time.Time { return now }})
		req := Request{Key: "orders/42", Write: true, Fence: f4, Route: "orders", Source: "authz-grpc",
			Peer: "10.0.0.1:5000", Method: "PUT", Path: "/orders/42"}
		d, _ := c.Check(ctx, req)
		_, _ = c.Check(ctx, Request{Key: "orders/42", Write: true, Fence: f4, SkipAudit: true})
		_, _ = c.Check(ctx, Request{Key: "orders/42", Write: true, Fence: f5}) // allowed: not audited
		_ = a.Close()
		evs := log.snapshot()
		if len(evs) != 1 {
			t.Fatalf("raw=%v: %d events, want 1 (SkipAudit and allows are not audited)", raw, len(evs))
		}
		want := lockstore.AuditEvent{TimeMs: now.UnixMilli(), DecisionID: d.DecisionID, Source: "authz-grpc", Route: "orders",
			KeyHash: lockstore.HashKey("orders/42"), KeyDigest: lockstore.DigestKey("orders/42").String(),
			Presented: f4, Current: f5, Reason: "stale", Policy: "holder",
			Mode: "enforce", Peer: "10.0.0.1:5000", Method: "PUT"}
		if raw {
			// On a template route the path IS the raw key, so it is
			// audited only when raw keys are.
			want.Key, want.Path = "orders/42", "/orders/42"
		}
		if evs[0] != want {
			t.Fatalf("event = %+v\nwant    %+v", evs[0], want)
		}
	}
}

func TestDecisionIDsUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := newDecisionID()
		if len(id) != 12 || seen[id] {
			t.Fatalf("id %q: bad length or duplicate", id)
		}
		seen[id] = true
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := &stateStore{state: live(f5, idA)}
	c := New(st, Options{Registerer: reg})
	c2 := New(st, Options{Registerer: reg}) // a second checker shares the series
	ctx := context.Background()
	_, _ = c.Check(ctx, Request{Key: "k", Write: true, Fence: f5})
	_, _ = c2.Check(ctx, Request{Key: "k", Write: true, Fence: f4})
	_, _ = c.Check(ctx, Request{Key: "k", Write: true, Fence: f4, Mode: ModeDryRun})
	m := c.m.decisions
	for _, tc := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"allow", "none", "enforce"}, 1},
		{[]string{"deny", "stale", "enforce"}, 1},
		{[]string{"would-deny", "stale", "dry-run"}, 1},
	} {
		if got := promtest.ToFloat64(m.WithLabelValues(tc.labels...)); got != tc.want {
			t.Errorf("%v = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if n, err := promtest.GatherAndCount(reg, "fencegate_authz_check_duration_seconds"); err != nil || n != 1 {
		t.Fatalf("duration histogram: %d, %v", n, err)
	}
}

func TestStatusOf(t *testing.T) {
	want := map[Reason]int{ReasonMissing: 428, ReasonMalformed: 400, ReasonStale: 409, ReasonNotHeld: 409,
		ReasonUnknown: 409, ReasonWrongOwner: 409, ReasonBadProof: 403, ReasonUnavailable: 503, ReasonDraining: 429,
		ReasonTooManyWrites: 429, "": 200}
	for r, s := range want {
		if got := StatusOf(r); got != s {
			t.Errorf("StatusOf(%q) = %d, want %d", r, got, s)
		}
	}
	if len(Reasons) != len(want)-1 { // every reason has its status above ("" is not a reason)
		t.Fatalf("Reasons has %d entries, the status table %d", len(Reasons), len(want)-1)
	}
}

// TestMetricsModeLabelBounded: a read on a route with an unreadable mode
// (which may be client-supplied, e.g. a forwarded header) must not mint a
// metric series per value: the mode label only ever takes the known modes.
func TestMetricsModeLabelBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := New(&stateStore{state: live(f5, idA)}, Options{Registerer: reg})
	ctx := context.Background()
	for _, mode := range []Mode{"attacker-1", "attacker-2", "DRY-RUN", "", "loud"} {
		if d, err := c.Check(ctx, Request{Key: "k", Mode: mode}); err != nil || !d.Allowed {
			t.Fatalf("read with mode %q: %+v %v", mode, d, err)
		}
	}
	_, _ = c.Check(ctx, Request{Key: "k", Write: true, Fence: f5, Mode: "attacker-3"}) // fails closed
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{string(ModeEnforce): true, string(ModeDryRun): true, string(ModeWarn): true}
	seen := 0
	for _, mf := range mfs {
		if mf.GetName() != "fencegate_authz_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "mode" {
					seen++
					if !known[lp.GetValue()] {
						t.Errorf("mode label %q: unbounded", lp.GetValue())
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no decision series gathered")
	}
	if got := promtest.ToFloat64(c.m.decisions.WithLabelValues("allow", "none", "enforce")); got != 4 {
		t.Errorf("reads counted under mode enforce = %v, want 4 (3 invalid modes and the default)", got)
	}
}

// TestCheckBoundsWhatItAudits: a tokenless request can put any size into
// the method, route name, peer (X-Forwarded-For), path or fence; the event
// it leaves, and every debug line, holds a bounded cut of each (the probe
// stored 1 MB events). An event built from the raw request is the broken
// variant: its size is the inputs'.
func TestCheckBoundsWhatItAudits(t *testing.T) {
	var logs testutil.LogBuffer
	log := testutil.Logger(&logs, slog.LevelDebug)
	sink := &memLog{}
	a := NewAuditor(sink, AuditorOptions{})
	c := New(&stateStore{state: lockstore.KeyState{LatestFence: f5}}, Options{Logger: log, Audit: a, AuditRawKeys: true})
	huge := strings.Repeat("A", 500<<10)
	r := Request{Key: "orders/1", Write: true, Fence: "9" + huge, Route: huge, Source: huge, Peer: huge, Method: huge, Path: "/" + huge}
	d, _ := c.Check(context.Background(), r)
	if d.Allowed || d.Reason != ReasonMalformed || len(d.Presented) > lockstore.MaxAuditPresented {
		t.Fatalf("decision %s, presented %d bytes; want malformed, presented bounded", d.Reason, len(d.Presented))
	}
	_ = a.Close()
	evs := sink.snapshot()
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	size := func(e lockstore.AuditEvent) int {
		b, _ := json.Marshal(e)
		return len(b)
	}
	if n := size(evs[0]); n > 4<<10 {
		t.Errorf("the stored event is %d bytes; every field has a bound, 4 KiB in all", n)
	}
	if broken := size(c.eventUnbounded(r, d)); broken < 500<<10 {
		t.Errorf("the broken variant's event is only %d bytes; the test would not catch it", broken)
	}
	if n := len(logs.String()); n > 8<<10 {
		t.Errorf("the check logged %d bytes for one request", n)
	}
}

// eventUnbounded is event without its bounds: the broken variant.
func (c *Checker) eventUnbounded(r Request, d Decision) lockstore.AuditEvent {
	ev := c.event(r, d)
	ev.Route, ev.Peer, ev.Method, ev.Path, ev.Presented = r.Route, r.Peer, r.Method, r.Path, r.Fence
	return ev
}

// TestRouteWarningsBounded: a caller that sends unparsable route options on
// every request (a 100 KiB fence_policy) gets its fail-closed 503 each
// time, but the warn lines are paced and each is cut: the log grows by a
// few KiB, not by the requests' size. Logging every one in full (the old
// line) is the broken variant: 200 requests would write 20 MB.
func TestRouteWarningsBounded(t *testing.T) {
	var logs testutil.LogBuffer
	log := testutil.Logger(&logs, nil)
	c := New(&stateStore{state: lockstore.KeyState{LatestFence: f5}}, Options{Logger: log})
	bad := Policy(strings.Repeat("x", 100<<10))
	start := time.Now()
	for range 200 {
		d, err := c.Check(context.Background(), Request{Key: "k", Write: true, Fence: f5, Policy: bad})
		if err == nil || d.Allowed || d.Status != 503 {
			t.Fatalf("unparsable policy: %+v, %v; want 503 with an error", d, err)
		}
	}
	out := logs.String()
	// The burst, then one a second: on a loaded machine (under -race) the
	// 200 requests can take a few seconds, each adding one line.
	took := time.Since(start)
	if n, most := strings.Count(out, "route options invalid"), routeWarnBurst+int(took.Seconds())+2; n > most {
		t.Errorf("%d warn lines for 200 requests in %v; want at most %d", n, took.Round(time.Millisecond), most)
	}
	if len(out) > 16<<10 {
		t.Errorf("the warnings took %d bytes", len(out))
	}
}
