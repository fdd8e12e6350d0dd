package routes

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// TestPathsOverlapIsSound: pathsOverlap says true for every pair of path
// matches some concrete path matches both of (enumerated), so HostChoices
// misses no pair; a variant that compares the matches as written (the
// broken variant) misses overlaps and is caught.
func TestPathsOverlapIsSound(t *testing.T) {
	var pms []pathMatch
	for _, m := range []config.RoutePath{
		{}, {Value: "/orders"}, {Value: "/orders/42"}, {Type: PathExact, Value: "/orders"}, {Type: PathExact, Value: "/orders/42"},
		{Type: PathExact, Value: "/"}, {Type: PathTemplate, Value: "/orders/{int}"}, {Type: PathTemplate, Value: "/orders/*"},
		{Type: PathTemplate, Value: "/orders/{int}/items/*"}, {Type: PathTemplate, Value: "/*/42"}, {Type: PathTemplate, Value: "/{uuid}"},
		{Value: "/ord"}, {Value: "/items"}, {Type: PathTemplate, Value: "/items/{int}"},
	} {
		pm, err := parsePathMatch(m)
		if err != nil {
			t.Fatal(err)
		}
		pms = append(pms, pm)
	}
	paths := []string{"", "/orders", "/orders/42", "/orders/x", "/orders/42/items/7", "/orders/42/items", "/x/42",
		"/6f1c2a9e-3b4d-4c5e-8f90-1a2b3c4d5e6f", "/ord", "/ordersx", "/items/7", "/items", "/orders/42/x"}
	matches := func(pm *pathMatch, p string) bool {
		var segs []string
		if p != "" {
			segs = strings.Split(p[1:], "/")
		}
		ok, _ := pm.matches(-1, p, segs)
		return ok
	}
	asWritten := func(a, b *pathMatch) bool { return a.typ == b.typ && a.value == b.value }
	for _, tc := range []struct {
		name    string
		overlap func(a, b *pathMatch) bool
		correct bool
	}{{"pathsOverlap", pathsOverlap, true}, {"as written (broken)", asWritten, false}} {
		missed, pairs := 0, 0
		for i := range pms {
			for j := range pms {
				both := false
				for _, p := range paths {
					both = both || (matches(&pms[i], p) && matches(&pms[j], p))
				}
				if both {
					pairs++
					if !tc.overlap(&pms[i], &pms[j]) {
						missed++
					}
				}
			}
		}
		if tc.correct && missed > 0 {
			t.Errorf("%s: %d of %d overlapping pairs missed", tc.name, missed, pairs)
		}
		if !tc.correct && missed == 0 {
			t.Errorf("%s: the broken overlap was not caught", tc.name)
		}
	}
}

// TestHostChoices: a host-scoped entry beside a host-less one (or one on
// another host) that governs the same paths with other options is listed;
// the same options, disjoint paths or disjoint methods are not.
func TestHostChoices(t *testing.T) {
	strict := config.Route{Name: "strict", Match: config.RouteMatch{Hosts: []string{"api.example.com"}, Path: config.RoutePath{Type: PathTemplate, Value: "/orders/{int}"}},
		Key: "orders/{2:int}", Proof: "signed"}
	for _, tc := range []struct {
		name          string
		other         config.Route
		strictMethods []string
		want          int
	}{
		{"host-less, policy off", config.Route{Name: "open", Match: config.RouteMatch{Path: config.RoutePath{Value: "/"}}, Policy: "off"}, nil, 1},
		{"another host, no proof", config.Route{Name: "b", Match: config.RouteMatch{Hosts: []string{"b.example.com"}, Path: config.RoutePath{Value: "/orders"}}, Key: "orders/{2:int}"}, nil, 1},
		{"host-less, the same options", config.Route{Name: "same", Match: config.RouteMatch{Path: config.RoutePath{Type: PathTemplate, Value: "/orders/*"}}, Key: "orders/{2:int}", Proof: "signed"}, nil, 0},
		{"host-less, other paths", config.Route{Name: "items", Match: config.RouteMatch{Path: config.RoutePath{Value: "/items"}}, Policy: "off"}, nil, 0},
		{"host-less, other methods", config.Route{Name: "get", Match: config.RouteMatch{Path: config.RoutePath{Value: "/"}, Methods: []string{"GET"}}, Policy: "off"}, []string{"PUT"}, 0},
	} {
		s := strict
		s.Match.Methods = tc.strictMethods
		tbl, err := Compile([]config.Route{s, tc.other}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := HostChoices(tbl); len(got) != tc.want {
			t.Errorf("%s: %q, want %d", tc.name, got, tc.want)
		}
	}
	tbl, _ := Compile([]config.Route{{Name: "a", Match: config.RouteMatch{Path: config.RoutePath{Value: "/a"}}, Key: "a"}}, Options{})
	if got := HostChoices(tbl); got != nil {
		t.Errorf("a table naming no host: %q", got)
	}
}
