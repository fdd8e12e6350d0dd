package routes

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
)

// issue26Table is #26 item 2's table: writes need a signed proof, and a
// catch-all with policy off (docs/meshes.md's kind, for unfenced paths).
func issue26Table() []config.Route {
	return []config.Route{
		{Name: "signed", Match: config.RouteMatch{Methods: []string{"POST", "PUT", "PATCH", "DELETE"}}, Key: "k", Proof: "signed"},
		{Name: "open", Policy: "off"},
	}
}

// methodReq is a request as a transport hands it over: its method, one
// header, and its target.
type methodReq struct {
	method, header, value, target string
	unknown                       bool
}

func (r methodReq) input() fencecheck.Input {
	h := http.Header{}
	if r.header != "" {
		h.Set(r.header, r.value)
	}
	target := r.target
	if target == "" {
		target = "/orders/42"
	}
	return fencecheck.Input{Method: r.method, MethodUnknown: r.unknown, Path: target, Header: h.Get,
		Count: func(lc string) int { return len(h.Values(lc)) }}
}

func (r methodReq) String() string {
	s := r.method
	if r.unknown {
		s = "<unknown method>"
	}
	if r.header != "" {
		s += fmt.Sprintf(" [%s: %s]", r.header, r.value)
	}
	return s + " " + r.target
}

// governs is the entry that governs r ("refused" when the table routes it
// nowhere and Refuse denies it as an ambiguous write; "read" when Refuse
// passes it).
func governs(t *testing.T, tbl *Table, r methodReq) string {
	t.Helper()
	e, err := tbl.MatchRequest("api.example.com", r.input())
	switch {
	case err != nil:
		req := tbl.Refuse(r.input())
		if !errors.Is(err, ErrAmbiguousMethod) && !errors.Is(err, ErrAmbiguousPath) && !errors.Is(err, fencecheck.ErrKeyPath) {
			t.Fatalf("%s: unexpected error %v", r, err)
		}
		if req.Write && req.Ambiguous {
			return "refused"
		}
		return "read"
	case e == nil:
		return "<none>"
	}
	return e.Name
}

// TestMethodSpellingSelectsNoWeakerEntry: #26 item 2. A request whose
// method differs from an entry's only in case, or that carries a
// method-override header or _method parameter, is governed by the entry
// its canonical method (the upper-case override, or the method itself)
// selects, or refused (400): never by a weaker one. The broken variant
// matches the method as sent alone, as before: "delete" reached the
// policy-off catch-all (forward-auth 200, ext_proc continue) while Flask,
// Django and Symfony ran the DELETE.
func TestMethodSpellingSelectsNoWeakerEntry(t *testing.T) {
	cases := []struct {
		r    methodReq
		want string
	}{
		{methodReq{method: "DELETE"}, "signed"},
		{methodReq{method: "delete"}, "refused"},
		{methodReq{method: "Delete"}, "refused"},
		{methodReq{method: "pUT"}, "refused"},
		{methodReq{method: "GET"}, "open"},
		{methodReq{method: "PROPFIND"}, "open"},
		{methodReq{method: "GET", header: "X-HTTP-Method-Override", value: "DELETE"}, "refused"},
		{methodReq{method: "GET", header: "X-HTTP-Method", value: "delete"}, "refused"},
		{methodReq{method: "GET", header: "X-Method-Override", value: "PUT"}, "refused"},
		{methodReq{method: "HEAD", header: "X-HTTP-Method-Override", value: " patch "}, "refused"},
		{methodReq{method: "GET", header: "X-HTTP-Method-Override", value: "GET, DELETE"}, "refused"}, // two copies, comma-joined
		{methodReq{method: "GET", header: "X-HTTP-Method-Override", value: "GET"}, "open"},
		{methodReq{method: "POST", header: "X-HTTP-Method-Override", value: "DELETE"}, "signed"},
		{methodReq{method: "POST", target: "/orders/42?_method=DELETE"}, "signed"},
		{methodReq{method: "GET", target: "/orders/42?_method=DELETE"}, "refused"},
		{methodReq{method: "GET", target: "/orders/42?a=1&_METHOD=put"}, "refused"},
		{methodReq{method: "GET", target: "/orders/42?%5Fmethod=PUT"}, "refused"},
		{methodReq{method: "GET", target: "/orders/42?.method=PUT"}, "refused"}, // PHP reads ".method" as "_method"
		{methodReq{method: "GET", target: "/orders/42?x;_method=PUT"}, "refused"},
		{methodReq{method: "GET", target: "/orders/42?_methods=PUT"}, "open"},
		{methodReq{unknown: true}, "refused"},
	}
	for _, variant := range []struct {
		name   string
		o      Options
		broken bool
	}{
		{"correct", Options{}, false},
		{"broken: the method as sent alone", Options{exactMethods: true}, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			tbl, err := Compile(issue26Table(), variant.o)
			if err != nil {
				t.Fatal(err)
			}
			var wrong []string
			for _, tc := range cases {
				if got := governs(t, tbl, tc.r); got != tc.want {
					wrong = append(wrong, fmt.Sprintf("%s: governed by %s, want %s", tc.r, got, tc.want))
				}
			}
			// The property over every standard method and spelling: a
			// spelling is governed as the upper-case one is, or refused.
			for _, m := range append(fencecheck.StandardMethods, "PROPFIND") {
				canon := governs(t, tbl, methodReq{method: m})
				for _, sp := range []string{strings.ToLower(m), m[:1] + strings.ToLower(m[1:])} {
					if got := governs(t, tbl, methodReq{method: sp}); sp != m && got != canon && got != "refused" {
						wrong = append(wrong, fmt.Sprintf("%s: governed by %s, %s by %s", sp, got, m, canon))
					}
				}
			}
			switch {
			case variant.broken && len(wrong) == 0:
				t.Fatal("the broken variant passed: the test cannot tell")
			case !variant.broken:
				for _, w := range wrong {
					t.Error(w)
				}
			default:
				t.Logf("caught (%d): %s", len(wrong), wrong[0])
			}
		})
	}
}

// TestEntryMethodsUpperCase: an entry's methods are matched in upper case
// (a request's readings include its upper-case spelling), so an entry
// listing "delete" and one listing "DELETE" cannot be told apart.
func TestEntryMethodsUpperCase(t *testing.T) {
	tbl, err := Compile([]config.Route{
		{Name: "del", Match: config.RouteMatch{Methods: []string{"delete"}}, Key: "k"},
		{Name: "rest", Key: "k"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := governs(t, tbl, methodReq{method: "DELETE"}); got != "del" {
		t.Errorf("DELETE: %s, want del", got)
	}
	if _, err := Compile([]config.Route{
		{Name: "a", Match: config.RouteMatch{Methods: []string{"delete"}}, Key: "k"},
		{Name: "b", Match: config.RouteMatch{Methods: []string{"DELETE"}}, Key: "k"},
	}, Options{}); err == nil || !strings.Contains(err.Error(), "no request can tell them apart") {
		t.Errorf("delete and DELETE: %v, want refused as indistinguishable", err)
	}
}

// TestRawHashRefused: #26 item 3 at the table. A target with a raw '#'
// (or a space, a control byte) is routed nowhere: a write is refused 400,
// a read passes. The broken variant cut the path at '#' and routed
// "/orders/42#x" as /orders/42 while Go's server hands the upstream the
// whole "/orders/42#x".
func TestRawHashRefused(t *testing.T) {
	entries := []config.Route{{Name: "orders", Match: config.RouteMatch{Path: config.RoutePath{Type: PathTemplate, Value: "/docs/*"}}, Key: "docs/{2}"}}
	for _, variant := range []struct {
		name   string
		o      Options
		broken bool
	}{
		{"correct", Options{}, false},
		{"broken: cut at '#'", Options{skipTarget: true}, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			tbl, err := Compile(entries, variant.o)
			if err != nil {
				t.Fatal(err)
			}
			var wrong []string
			for _, target := range []string{"/docs/a#b", "/docs/a?x=1#b", "/docs/a\x01", "/docs/a\x7f", "/docs/a b"} {
				if got := governs(t, tbl, methodReq{method: "PUT", target: target}); got != "refused" {
					wrong = append(wrong, fmt.Sprintf("PUT %q: %s, want refused", target, got))
				}
				if got := governs(t, tbl, methodReq{method: "GET", target: target}); got != "read" && !variant.broken {
					t.Errorf("GET %q: %s, want read", target, got)
				}
			}
			if got := governs(t, tbl, methodReq{method: "PUT", target: "/docs/a%23b"}); got != "orders" {
				t.Errorf("PUT /docs/a%%23b: %s, want orders", got)
			}
			if variant.broken != (len(wrong) > 0) {
				t.Fatalf("broken=%v, wrong: %v", variant.broken, wrong)
			}
		})
	}
}
