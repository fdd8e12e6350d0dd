package routes

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
)

func entry(name string, hosts []string, typ, value string, methods ...string) config.Route {
	return config.Route{Name: name, Match: config.RouteMatch{Hosts: hosts, Path: config.RoutePath{Type: typ, Value: value}, Methods: methods}}
}

// TestMatchPrecedence: the Gateway API's order — exact host, then the
// longest wildcard, then none; Exact path, then Template (more literal
// segments first), then the longest prefix; a method match before none.
func TestMatchPrecedence(t *testing.T) {
	tbl, err := Compile([]config.Route{
		entry("catch-all", nil, "", ""),
		entry("orders-prefix", nil, PathPrefix, "/orders"),
		entry("orders-id", nil, PathTemplate, "/orders/{int}"),
		entry("orders-any", nil, PathTemplate, "/orders/*"),
		entry("orders-items", nil, PathTemplate, "/orders/{int}/items/*"),
		entry("orders-exact", nil, PathExact, "/orders/special"),
		entry("orders-delete", nil, PathTemplate, "/orders/{int}", "DELETE"),
		entry("wild", []string{"*.example.com"}, PathPrefix, "/"),
		entry("wild-api", []string{"*.api.example.com"}, PathPrefix, "/"),
		entry("api", []string{"api.example.com"}, PathPrefix, "/"),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, method, path, want string
	}{
		{"other", "PUT", "/x", "catch-all"},
		{"other", "PUT", "/orders", "orders-prefix"},
		{"other", "PUT", "/ordersX", "catch-all"},
		{"other", "PUT", "/orders/42", "orders-id"},
		{"other", "PUT", "/orders/42/", "orders-id"},
		{"other", "PUT", "/orders/042", "orders-any"}, // not a canonical int
		{"other", "PUT", "/orders/abc", "orders-any"},
		{"other", "PUT", "/orders/42/items/7", "orders-items"},
		{"other", "PUT", "/orders/42/items", "orders-prefix"},
		{"other", "PUT", "/orders/special", "orders-exact"},
		{"other", "DELETE", "/orders/42", "orders-delete"},
		{"other", "PUT", "/orders/42?x=1", "orders-id"},
		{"API.Example.com:8443", "PUT", "/orders/42", "api"},
		{"api.example.com.", "PUT", "/x", "api"},
		{"a.api.example.com", "PUT", "/orders/42", "wild-api"},
		{"b.example.com", "PUT", "/orders/42", "wild"},
		{"example.com", "PUT", "/orders/42", "orders-id"}, // a wildcard needs a label before
	} {
		e, err := tbl.Match(tc.host, tc.path, tc.method)
		if err != nil || e == nil || e.Name != tc.want {
			name := "<nil>"
			if e != nil {
				name = e.Name
			}
			t.Errorf("%s %s%s: %s %v, want %s", tc.method, tc.host, tc.path, name, err, tc.want)
		}
	}
}

// TestMatchRefusesPathsWithoutOneRoute: a path that is not canonical, or
// that an upstream reading it another way routes elsewhere, has no entry
// (writes are refused), and Refuse marks a write ambiguous (400). The
// broken variant matches on the exact reading alone: "/Orders/42" would
// reach the catch-all, checked under the client's own key, while a
// case-insensitive upstream serves it as /orders/42.
func TestMatchRefusesPathsWithoutOneRoute(t *testing.T) {
	for _, variant := range []struct {
		name   string
		o      Options
		broken bool
	}{
		{"correct", Options{}, false},
		{"broken: the exact reading alone", Options{skipFolds: true}, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			tbl, err := Compile([]config.Route{
				entry("catch-all", nil, "", ""),
				entry("orders", nil, PathTemplate, "/orders/{int}"),
				{Name: "reads-too", Methods: "*", Match: config.RouteMatch{Path: config.RoutePath{Type: PathExact, Value: "/all"}}},
			}, variant.o)
			if err != nil {
				t.Fatal(err)
			}
			caught := false
			for _, p := range []string{"/orders//42", "/orders/./42", "/x/../orders/42", "/orders/42;v=1", "/orders%2F42", "/Orders/42", "/orders./42", "/ｏrders/42", "/orders%252F42"} {
				e, err := tbl.Match("h", p, "PUT")
				if err == nil {
					if !variant.broken {
						t.Errorf("%s: matched %v, want refused", p, e.Name)
					}
					caught = true
					continue
				}
				if !errors.Is(err, fencecheck.ErrKeyPath) && !errors.Is(err, ErrAmbiguousPath) {
					t.Errorf("%s: %v", p, err)
				}
			}
			if variant.broken != caught {
				t.Errorf("broken=%v, caught=%v", variant.broken, caught)
			}
			in := func(m string) fencecheck.Input { return fencecheck.Input{Method: m, Path: "/x//y"} }
			if r := tbl.Refuse(in("PUT")); !r.Write || !r.Ambiguous {
				t.Errorf("refused PUT: %+v", r)
			}
			if r := tbl.Refuse(in("GET")); !r.Write {
				t.Errorf("refused GET: an entry counts GET as a write, so must the refusal: %+v", r)
			}
		})
	}
}

// TestCompileRefusesIndistinguishableEntries: two entries no request can
// tell apart are refused; the broken variant keeps them (the first in the
// file would silently win).
func TestCompileRefusesIndistinguishableEntries(t *testing.T) {
	pairs := [][2]config.Route{
		{entry("a", []string{"x.example"}, PathPrefix, "/orders"), entry("b", []string{"x.example", "y.example"}, PathPrefix, "/orders/")},
		{entry("a", nil, PathPrefix, "/Pay"), entry("b", nil, PathPrefix, "/pay")},
		{entry("a", nil, PathTemplate, "/g/{int}/*"), entry("b", nil, PathTemplate, "/g/*/{int}")},
		{entry("a", nil, PathExact, "/h", "PUT", "POST"), entry("b", nil, PathExact, "/h", "POST")},
	}
	for _, variant := range []struct {
		name   string
		o      Options
		broken bool
	}{{"correct", Options{}, false}, {"broken: overlaps kept", Options{skipOverlap: true}, true}} {
		t.Run(variant.name, func(t *testing.T) {
			for _, p := range pairs {
				_, err := Compile(p[:], variant.o)
				if (err == nil) != variant.broken {
					t.Errorf("%s / %s: %v", p[0].Match.Path.Value, p[1].Match.Path.Value, err)
				}
			}
		})
	}
}

// TestCompileReportsEveryProblem: every entry's problems at once, each
// naming its entry; entries no request can tell apart are refused.
func TestCompileReportsEveryProblem(t *testing.T) {
	_, err := Compile([]config.Route{
		{Name: "", Policy: "newest"},
		{Name: "b", Key: "b/{0}", Match: config.RouteMatch{Path: config.RoutePath{Type: "Regex", Value: "/b"}}},
		{Name: "c", Match: config.RouteMatch{Hosts: []string{"https://x"}, Path: config.RoutePath{Value: "/c//d"}}},
		{Name: "d", Upstream: "ftp://x"},
		entry("e1", []string{"a.example", "b.example"}, PathPrefix, "/orders"),
		entry("e2", []string{"b.example"}, PathPrefix, "/orders/"),
		entry("f1", nil, PathPrefix, "/Pay"),
		entry("f2", nil, PathPrefix, "/pay"),
		entry("g1", nil, PathTemplate, "/g/{int}/*"),
		entry("g2", nil, PathTemplate, "/g/*/{int}"),
		entry("h1", nil, PathExact, "/h", "PUT", "POST"),
		entry("h2", nil, PathExact, "/h", "POST"),
		entry("i1", nil, PathExact, "/i", "PUT"),
		entry("i2", nil, PathExact, "/i", "POST"), // methods disjoint: fine
		entry("i1", nil, PathExact, "/j"),
	}, Options{})
	if err == nil {
		t.Fatal("compiled")
	}
	for _, want := range []string{
		"routes[0]: name: required", "newest", "routes[1] (b):", "segment number", `"Regex"`,
		"routes[2] (c): match.hosts", "routes[2] (c): match.path.value", "routes[3] (d): upstream",
		`routes "e1" and "e2"`, `routes "f1" and "f2"`, "case-insensitive", `routes "g1" and "g2"`, `routes "h1" and "h2"`,
		`name "i1" is used`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), `"i2"`) {
		t.Errorf("disjoint methods refused:\n%v", err)
	}
}

// TestHashAndNamed: the hash follows the content; Named finds an entry.
func TestHashAndNamed(t *testing.T) {
	a, _ := Compile([]config.Route{entry("a", nil, "", "/a")}, Options{})
	b, _ := Compile([]config.Route{entry("a", nil, "", "/b")}, Options{})
	c, _ := Compile([]config.Route{entry("a", nil, "", "/a")}, Options{Unmatched: UnmatchedDefaults})
	if a.Hash() == b.Hash() || a.Hash() == c.Hash() || len(a.Hash()) != 16 {
		t.Errorf("hashes %s %s %s", a.Hash(), b.Hash(), c.Hash())
	}
	if a.Named("a") == nil || a.Named("b") != nil || a.Len() != 1 {
		t.Error("Named/Len")
	}
	var none *Table
	if none.Named("a") != nil || none.Len() != 0 {
		t.Error("nil table")
	}
	if e, err := none.Match("h", "/a", "PUT"); e != nil || err != nil {
		t.Error("nil table matched")
	}
}

// TestEntryKeyFromTemplate: an entry's key comes from its template over
// the path, never from the client's x-fence-key.
func TestEntryKeyFromTemplate(t *testing.T) {
	tbl, err := Compile([]config.Route{{Name: "orders", Key: "orders/{2:int}", Proof: "signed",
		Match: config.RouteMatch{Path: config.RoutePath{Type: PathTemplate, Value: "/orders/{int}"}}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := tbl.Match("api.example.com", "/orders/42", "PUT")
	h := map[string]string{"x-fence-key": "payments/1", "x-fence-token": "000000000000001"}
	req, err := e.Route.Request(fencecheck.Input{Method: "PUT", Path: "/orders/42",
		Header: func(lc string) string { return h[lc] }, Count: func(string) int { return 1 }})
	if err != nil || req.Key != "orders/42" || req.ProofMode != fencecheck.ProofSigned || !req.Write {
		t.Fatalf("%+v %v", req, err)
	}
}
