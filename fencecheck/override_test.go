package fencecheck

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fencewire"
)

func overrideInput(method, target string, hdr ...string) Input {
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Add(hdr[i], hdr[i+1])
	}
	return Input{Method: method, Path: target, Header: h.Get, Count: func(lc string) int { return len(h.Values(lc)) }}
}

func TestMethodReadings(t *testing.T) {
	for _, tc := range []struct {
		in   Input
		want []string
	}{
		{overrideInput("DELETE", "/a"), []string{"DELETE"}},
		{overrideInput("delete", "/a"), []string{"delete", "DELETE"}},
		{overrideInput("GET", "/a", "X-HTTP-Method-Override", "delete"), []string{"GET", "delete", "DELETE"}},
		{overrideInput("GET", "/a", "X-HTTP-Method", "PUT", "X-Method-Override", "PATCH"), []string{"GET", "PUT", "PATCH"}},
		{overrideInput("GET", "/a", "X-HTTP-Method-Override", "PUT, DELETE"), []string{"GET", "PUT", "DELETE"}},
		{overrideInput("POST", "/a?b=1&_method=delete"), []string{"POST", "delete", "DELETE"}},
		{overrideInput("POST", "/a?%5Fmethod=PUT;x"), []string{"POST", "PUT"}},
		{overrideInput("POST", "/a?_method%5B=PUT"), []string{"POST"}}, // not "_method"
		{overrideInput("POST", "/a?_method=PUT#x"), []string{"POST", "PUT"}},
		{overrideInput("POST", "/a#?_method=PUT"), []string{"POST"}},
		// CGI, WSGI and PHP read the underscore spelling as the same variable.
		{overrideInput("GET", "/a", "X_HTTP_METHOD_OVERRIDE", "DELETE"), []string{"GET", "DELETE"}},
		// Unreadable one way: read as every write method.
		{overrideInput("GET", "/a", "X-HTTP-Method-Override", "GET", "X-HTTP-Method-Override", "DELETE"), []string{"GET", "POST", "PUT", "PATCH", "DELETE"}},
		{overrideInput("GET", "/a?_method=A&_method=B&_method=C&_method=D&_method=E"), []string{"GET", "POST", "PUT", "PATCH", "DELETE"}},
		{overrideInput("GET", "/a", "X-HTTP-Method-Override", "a,b,c,d,e"), []string{"GET", "POST", "PUT", "PATCH", "DELETE"}},
	} {
		if got := tc.in.Methods(); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s: %q, want %q", tc.in.Method, tc.in.Path, got, tc.want)
		}
	}
}

// TestWriteUnderEveryReading: a request is a write when any reading of
// its method is one under the route's methods: "delete" wherever DELETE
// is, a GET asking to be run as a DELETE. The broken classification
// (the method as sent alone, before #26) misses the overrides.
// TestOverridesBounded: however many override values a request carries,
// it is read under a bounded number of readings (one 60 KiB target of
// `_method=` parameters made 8,937 readings, and seconds of CPU in the
// table's match, before the bound).
func TestOverridesBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("/a?")
	for i := range 8000 {
		fmt.Fprintf(&b, "_method=m%d&", i)
	}
	in := overrideInput("GET", b.String(), "X-HTTP-Method-Override", strings.Repeat("x,", 5000))
	if got := in.Methods(); len(got) > 2+2*maxOverrides {
		t.Fatalf("%d readings, want at most %d", len(got), 2+2*maxOverrides)
	}
}

func TestWriteUnderEveryReading(t *testing.T) {
	for _, spec := range []string{"", "POST,PUT,PATCH,DELETE", "DELETE", "*", "PUT,+PROPFIND"} {
		rt, err := CompileRoute(RouteSpec{Methods: spec, Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range append(StandardMethods, "PROPFIND") {
			for _, sp := range []string{m, strings.ToLower(m), m[:1] + strings.ToLower(m[1:])} {
				req, _ := rt.Request(overrideInput(sp, "/a"))
				if rt.Methods.IsWrite(m) && !req.Write {
					t.Errorf("methods %q: %s is a write, %s is not", spec, m, sp)
				}
			}
		}
	}
	rt, _ := CompileRoute(RouteSpec{Methods: "DELETE", Key: "k"})
	missed := 0
	for _, in := range []Input{
		overrideInput("GET", "/a", "X-HTTP-Method-Override", "DELETE"),
		overrideInput("GET", "/a", "X-HTTP-Method", "delete"),
		overrideInput("POST", "/a?_method=DELETE"),
	} {
		if req, _ := rt.Request(in); !req.Write {
			t.Errorf("%s %s with an override to DELETE: not a write", in.Method, in.Path)
		}
		if !rt.Methods.IsWrite(in.Method) {
			missed++ // the broken classification
		}
	}
	if missed == 0 {
		t.Fatal("the broken classification (the method as sent alone) missed nothing: the cases cannot tell")
	}
}

// TestCheckTarget: #26 item 3. A write whose target holds a raw '#', a
// space or a control byte is denied 400 malformed (Ambiguous) on every
// route; a read passes; an encoded "%23" is a key like any other.
func TestCheckTarget(t *testing.T) {
	for _, target := range []string{"/docs/a#b", "/docs/a?q=1#b", "/docs/a b", "/docs/a\tb", "/docs/a\x00", "/docs/a\x7f"} {
		if err := CheckTarget(target); !errors.Is(err, ErrTarget) || !errors.Is(err, ErrKeyPath) {
			t.Errorf("%q: %v, want ErrTarget", target, err)
		}
		for _, spec := range []RouteSpec{{Key: "docs/{2}"}, {}} {
			rt, _ := CompileRoute(spec)
			req, _ := rt.Request(overrideInput("PUT", target, fencewire.HeaderKey, "docs/a", fencewire.HeaderToken, "1"))
			if !req.Write || !req.Ambiguous {
				t.Errorf("PUT %q (key %q): write %v ambiguous %v, want refused 400", target, spec.Key, req.Write, req.Ambiguous)
			}
			if req, _ := rt.Request(overrideInput("GET", target)); req.Write || req.Ambiguous {
				t.Errorf("GET %q: refused, want a read", target)
			}
		}
	}
	for _, ok := range []string{"/docs/a%23b", "/docs/a?q=%23", "/docs/é", `/docs/a"b|c{d}`} {
		if err := CheckTarget(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	rt, _ := CompileRoute(RouteSpec{Key: "docs/{2}"})
	if req, err := rt.Request(overrideInput("PUT", "/docs/a%23b")); err != nil || req.Key != "docs/a#b" {
		t.Errorf("PUT /docs/a%%23b: key %q %v, want docs/a#b", req.Key, err)
	}
}
