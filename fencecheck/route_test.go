package fencecheck

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lockstore"
)

// TestCompileRoute: every option is parsed once; options that do not
// parse are all listed, and the route still fails closed as they ask.
func TestCompileRoute(t *testing.T) {
	rt, err := CompileRoute(RouteSpec{Name: "r", Key: "orders/{2:int}", FenceHeader: "X-Fence", Policy: "LATEST", Mode: "dryrun", Proof: "lock-id", Methods: "PUT"})
	if err != nil || rt.Policy != PolicyLatest || rt.Mode != ModeDryRun || rt.Proof != ProofLockID || rt.FenceHeader != "x-fence" ||
		rt.Key.String() != "orders/{2:int}" || rt.KeyHeader != "" || !rt.Methods.IsWrite("PUT") || rt.Methods.IsWrite("POST") {
		t.Fatalf("%+v %v", rt, err)
	}
	rt, err = CompileRoute(RouteSpec{Policy: "newest", Mode: "loud", Proof: "maybe", Methods: "PUTT", FenceHeader: "a b", Key: "x/{0}"})
	for _, want := range []string{"newest", "loud", "maybe", "PUTT", `"a b"`, "segment number"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if !errors.Is(err, ErrRouteOption) || !errors.Is(err, ErrBadTemplate) {
		t.Errorf("error wraps: %v", err)
	}
	h := func(string) string { return "" }
	one := func(string) int { return 1 }
	req, kerr := rt.Request(Input{Method: "GET", Path: "/x/1", Header: h, Count: one})
	if !req.Write || req.RouteError == nil || !req.Ambiguous || !errors.Is(kerr, ErrBadTemplate) {
		t.Errorf("a route that does not compile: every method a write, failing closed: %+v %v", req, kerr)
	}
}

// TestRouteRequest: the one place the check's inputs are read.
func TestRouteRequest(t *testing.T) {
	hdr := map[string][]string{"x-fence-token": {"000000000000007"}, "x-fence-key": {"a,b"}, "x-fence-lock-id": {"l1", "l2"}}
	in := Input{Method: "PUT", Path: "/orders/42?x=1", Source: "s", Peer: "p",
		Header: func(lc string) string {
			if v := hdr[lc]; len(v) > 0 {
				return v[0]
			}
			return ""
		},
		Count: func(lc string) int { return len(hdr[lc]) }}
	byHeader, _ := CompileRoute(RouteSpec{Name: "h"})
	req, _ := byHeader.Request(in)
	if req.Key != "a,b" || req.Fence != "000000000000007" || !req.Ambiguous || req.Path != "/orders/42" || req.Route != "h" {
		t.Errorf("by header: %+v", req)
	}
	delete(hdr, "x-fence-lock-id")
	if req, _ = byHeader.Request(in); req.Ambiguous {
		t.Errorf("a comma in a key from a transport that keeps copies apart: %+v", req)
	}
	in.CommaJoined = true
	if req, _ = byHeader.Request(in); !req.Ambiguous {
		t.Errorf("a comma in a key from a transport that joins copies: %+v", req)
	}
	tpl, _ := CompileRoute(RouteSpec{Key: "orders/{2:int}", Barrier: true})
	if req, _ = tpl.Request(in); req.Key != "orders/42" || req.RouteError != ErrBarrierUnsupported {
		t.Errorf("template, barrier on an edge that cannot finish: %+v", req)
	}
	in.CanFinish = true
	if req, _ = tpl.Request(in); req.RouteError != ErrUntrustedBarrier {
		t.Errorf("barrier from an untrusted caller: %+v", req)
	}
	in.Trusted = true
	if req, _ = tpl.Request(in); req.RouteError != nil || !req.Barrier {
		t.Errorf("barrier: %+v", req)
	}
	in.Path = "/orders/042"
	if req, err := tpl.Request(in); !req.Ambiguous || !errors.Is(err, ErrKeyPath) {
		t.Errorf("non-canonical id: %+v %v", req, err)
	}
}

// hdrInput is an Input reading headers from a map (one copy each).
func hdrInput(method, path string, hdr map[string]string) Input {
	return Input{Method: method, Path: path, Source: "s", Peer: "10.0.0.1:1",
		Header: func(lc string) string { return hdr[lc] },
		Count: func(lc string) int {
			if _, ok := hdr[lc]; ok {
				return 1
			}
			return 0
		}}
}

// TestCompiledRequestDecidesAsParsed: a Request built by a compiled route
// (its options taken as compiled, nothing parsed) is decided exactly as
// the same options written by hand, in any spelling, are (parsed per
// check), for every policy, mode and proof against every lock state.
func TestCompiledRequestDecidesAsParsed(t *testing.T) {
	states := map[string]lockstore.KeyState{
		"held":    {LatestFence: f5, Live: &lockstore.Lock{Fence: f5, LockID: idA}},
		"expired": {LatestFence: f5},
		"newer":   {LatestFence: "000000000000006"},
	}
	spell := map[string]string{"holder": "Holder", "latest": " LATEST", "off": "OFF", "enforce": "ENFORCE", "dry-run": "dryrun",
		"warn": "Warn", "none": "", "lockId": "lock_id"}
	for sname, st := range states {
		for _, pol := range []string{"holder", "latest", "off"} {
			for _, mode := range []string{"enforce", "dry-run", "warn"} {
				for _, proof := range []string{"none", "lockId"} {
					rt, err := CompileRoute(RouteSpec{Name: "r", Policy: spell[pol], Mode: spell[mode], Proof: spell[proof]})
					if err != nil {
						t.Fatal(err)
					}
					c := New(&stateStore{state: st}, Options{})
					compiled, _ := rt.Request(hdrInput("PUT", "/x", map[string]string{fencewire.HeaderKey: "k", fencewire.HeaderToken: f5, fencewire.HeaderLockID: idA}))
					byHand := Request{Key: "k", Fence: f5, LockID: idA, Write: true, Policy: Policy(spell[pol]), Mode: Mode(spell[mode]),
						ProofMode: ProofMode(spell[proof]), Route: "r", Source: "s", Peer: "10.0.0.1:1", Method: "PUT", Path: "/x"}
					dc, errC := c.Check(context.Background(), compiled)
					dh, errH := c.Check(context.Background(), byHand)
					dc.DecisionID, dh.DecisionID = "", ""
					if dc != dh || (errC == nil) != (errH == nil) {
						t.Errorf("%s/%s/%s/%s: compiled %+v %v; by hand %+v %v", sname, pol, mode, proof, dc, errC, dh, errH)
					}
				}
			}
		}
	}
}

// TestCompiledRequestChangedAfter: the check takes a compiled Request's
// options as its route compiled them only while the Request still says
// so. Changed after it was built, they are parsed: one that does not parse
// fails the write closed, a valid one is what applies. The broken variant
// (the route's values whatever the fields say) is caught.
func TestCompiledRequestChangedAfter(t *testing.T) {
	rt, _ := CompileRoute(RouteSpec{Name: "r", Proof: "lockId"})
	st := lockstore.KeyState{LatestFence: f5, Live: &lockstore.Lock{Fence: f5, LockID: idA}}
	in := hdrInput("PUT", "/x", map[string]string{fencewire.HeaderKey: "k", fencewire.HeaderToken: f5})
	for _, broken := range []bool{false, true} {
		c := New(&stateStore{state: st}, Options{})
		c.trustRoute = broken
		caught := false
		for _, tc := range []struct {
			name   string
			change func(*Request)
			status int
		}{
			{"as compiled: the lockId is required", func(*Request) {}, http.StatusForbidden},
			{"policy that does not parse", func(r *Request) { r.Policy = "newest" }, http.StatusServiceUnavailable},
			{"proof that does not parse", func(r *Request) { r.ProofMode = "maybe" }, http.StatusServiceUnavailable},
			{"proof none", func(r *Request) { r.ProofMode = ProofNone }, http.StatusOK},
		} {
			req, _ := rt.Request(in)
			tc.change(&req)
			d, _ := c.Check(context.Background(), req)
			if d.Status != tc.status {
				caught = true
				if !broken {
					t.Errorf("%s: status %d, want %d", tc.name, d.Status, tc.status)
				}
			}
		}
		if broken && !caught {
			t.Error("the broken variant (route values whatever the fields say) passed")
		}
	}
}

// TestRequestKeyNormalisedOnce: a transport that normalised the key
// (Request.NormalizeKey, for a credential's scope) hands the check its
// result, which the store reads (in NFC); a key changed after is
// normalised again, never checked under the old one. The broken variant
// (the kept form whatever the key) is caught.
func TestRequestKeyNormalisedOnce(t *testing.T) {
	st := &stateStore{state: lockstore.KeyState{LatestFence: f5}}
	for _, broken := range []bool{false, true} {
		c := New(st, Options{})
		c.trustRoute = broken
		req := Request{Key: "cafe\u0301", Fence: f5, Write: true, Policy: PolicyLatest}
		if nk, err := req.NormalizeKey(); err != nil || nk != "caf\u00e9" {
			t.Fatalf("NormalizeKey: %q %v", nk, err)
		}
		if d, _ := c.Check(context.Background(), req); !d.Allowed || st.lastKey.Load() != "caf\u00e9" || d.Key != "cafe\u0301" {
			t.Errorf("broken=%v: %+v, store read %q; want the NFC key read and the key as sent in the decision", broken, d, st.lastKey.Load())
		}
		req.Key = "other"
		_, _ = c.Check(context.Background(), req)
		if got := st.lastKey.Load(); got != "other" && !broken {
			t.Errorf("a key changed after NormalizeKey: the store read %q, want %q", got, "other")
		} else if got == "other" && broken {
			t.Error("the broken variant (the kept key whatever the key says) passed")
		}
	}
}

// TestRefuse: the Request of a request no one route governs. A write is
// denied 400 malformed without a store read, with a decision id and an
// audit event naming the route; a read passes; an unknown method is a
// write.
func TestRefuse(t *testing.T) {
	st := &stateStore{state: lockstore.KeyState{LatestFence: f5}}
	c := New(st, Options{})
	in := hdrInput("PUT", "/Orders/1?x=1", map[string]string{fencewire.HeaderKey: "k", fencewire.HeaderToken: f5})
	req := Refuse("orders", in, true)
	d, err := c.Check(context.Background(), req)
	if err != nil || d.Allowed || d.Reason != ReasonMalformed || d.DecisionID == "" || st.reads.Load() != 0 ||
		req.Route != "orders" || req.Path != "/Orders/1" || req.Key != "" || req.Fence != "" || d.Policy != PolicyHolder || d.Mode != ModeEnforce {
		t.Errorf("write: %+v %v, %d reads; request %+v", d, err, st.reads.Load(), req)
	}
	if d, err := c.Check(context.Background(), Refuse("", in, false)); err != nil || !d.Allowed {
		t.Errorf("read: %+v %v", d, err)
	}
	in.MethodUnknown = true
	if d, _ := c.Check(context.Background(), Refuse("", in, false)); d.Allowed {
		t.Errorf("unknown method: %+v", d)
	}
}

// TestWriteRequest: a write whose key and fence the transport read itself
// (admission) under the route's compiled policy and mode; a route whose
// key options do not parse denies it malformed, one that asks for the
// barrier fails closed (admission cannot report completion).
func TestWriteRequest(t *testing.T) {
	st := &stateStore{state: lockstore.KeyState{LatestFence: f5}}
	c := New(st, Options{})
	in := Input{Method: "UPDATE", Path: "/api/v1/configmaps/x", Source: "admission", Peer: "alice"}
	rt, _ := CompileRoute(RouteSpec{Policy: "latest", Mode: "warn"})
	req := rt.WriteRequest("k", f5, in)
	if d, err := c.Check(context.Background(), req); err != nil || !d.Allowed || d.WouldDeny || d.Policy != PolicyLatest || d.Mode != ModeWarn ||
		req.Path != in.Path || req.Method != "UPDATE" || req.Peer != "alice" || !req.Write {
		t.Errorf("latest/warn: %+v %v; request %+v", d, err, req)
	}
	bad, _ := CompileRoute(RouteSpec{Key: "x/{0}"})
	if d, _ := c.Check(context.Background(), bad.WriteRequest("k", f5, in)); d.Reason != ReasonMalformed {
		t.Errorf("a key option that does not parse: %+v", d)
	}
	barrier, _ := CompileRoute(RouteSpec{Barrier: true})
	if d, err := c.Check(context.Background(), barrier.WriteRequest("k", f5, in)); d.Status != http.StatusServiceUnavailable || !errors.Is(err, ErrBarrierUnsupported) {
		t.Errorf("barrier: %+v %v", d, err)
	}
}
