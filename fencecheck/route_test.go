package fencecheck

import (
	"errors"
	"strings"
	"testing"
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
