package mesh_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/mesh"
	"github.com/fencegate/fencegate/e2e/kube"
)

// governed are paths each entry governs (as fencegate's matching reads its
// path), and paths it does not.
var pathCases = []struct {
	path         config.RoutePath
	governed     []string
	not          []string // an exact mesh match must not take these (Gateway API, Contour)
	istioCovered []string // Istio's wider pattern may take these too
}{
	{config.RoutePath{Type: "PathPrefix", Value: "/orders"},
		[]string{"/orders", "/orders/", "/orders/42", "/orders/42/items/7"}, []string{"/ordersX", "/order", "/"}, nil},
	{config.RoutePath{Value: "/orders/"}, // PathPrefix is the default type
		[]string{"/orders", "/orders/42"}, []string{"/ordersX"}, nil},
	{config.RoutePath{Type: "Exact", Value: "/checkout"},
		[]string{"/checkout"}, []string{"/checkout/x", "/checkoutX"}, nil},
	{config.RoutePath{Type: "Template", Value: "/orders/{int}"},
		[]string{"/orders/0", "/orders/42", "/orders/123456789012345678"}, []string{"/orders", "/orders/42/items"}, []string{"/orders/abc"}},
	{config.RoutePath{Type: "Template", Value: "/orders/{int}/items/*"},
		[]string{"/orders/42/items/7", "/orders/1/items/a-b"}, []string{"/orders/42/items", "/orders/42/items/7/x"}, nil},
	{config.RoutePath{Type: "Template", Value: "/{uuid}/doc"},
		[]string{"/6f1c2a9e-3b4d-4c5e-8f90-1a2b3c4d5e6f/doc"}, []string{"/x/doc"}, nil},
	{config.RoutePath{Type: "Template", Value: "/a/b"},
		[]string{"/a/b"}, []string{"/a/b/c"}, nil},
	{config.RoutePath{}, // every path
		[]string{"/", "/anything/at/all"}, nil, nil},
}

// gatewayMatch is the Gateway API's path match as Envoy Gateway applies
// it: Exact, segment-wise PathPrefix, RE2 over the whole path.
func gatewayMatch(typ, value, path string) bool {
	switch typ {
	case "Exact":
		return path == value
	case "PathPrefix":
		v := strings.TrimSuffix(value, "/")
		return path == v || strings.HasPrefix(path, v+"/") || value == "/"
	case "RegularExpression":
		return regexp.MustCompile("^(?:" + value + ")$").MatchString(path)
	}
	return false
}

// TestGatewayPathsMatchTheEntry: the HTTPRoute match of each entry takes
// every path the entry governs and none of the paths next to it (the
// SecurityPolicy names the entry, so a wider match would apply it to a
// request it does not govern). A broken regex ({int} as one digit) is
// caught.
func TestGatewayPathsMatchTheEntry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mangle  func(string) string
		correct bool
	}{
		{"GatewayPath", func(s string) string { return s }, true},
		{"{int} as one digit", func(s string) string { return strings.ReplaceAll(s, "[0-9]+", "[0-9]") }, false},
		{"any one segment as anything", func(s string) string { return strings.ReplaceAll(s, "[^/]+", ".*") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var problems []string
			for _, c := range pathCases {
				m, err := mesh.GatewayPath(c.path)
				if err != nil {
					t.Fatal(err)
				}
				if m.Type == "RegularExpression" {
					m.Value = tc.mangle(m.Value)
				}
				for _, p := range c.governed {
					if !gatewayMatch(m.Type, m.Value, p) {
						problems = append(problems, fmt.Sprintf("%v: %s %s misses %s", c.path, m.Type, m.Value, p))
					}
				}
				for _, p := range c.not {
					if gatewayMatch(m.Type, m.Value, p) {
						problems = append(problems, fmt.Sprintf("%v: %s %s takes %s", c.path, m.Type, m.Value, p))
					}
				}
			}
			if tc.correct && len(problems) > 0 {
				t.Fatal(strings.Join(problems, "\n"))
			}
			if !tc.correct && len(problems) == 0 {
				t.Fatal("the broken regex was not caught")
			}
		})
	}
}

// contourMatch is an HTTPProxy path condition as Envoy applies it: a
// string prefix, an exact path, RE2 over the whole path.
func contourMatch(kind, value, path string) bool {
	switch kind {
	case "prefix":
		return strings.HasPrefix(path, value)
	case "exact":
		return path == value
	case "regex":
		return regexp.MustCompile("^(?:" + value + ")$").MatchString(path)
	}
	return false
}

// TestContourPathsMatchTheEntry: each HTTPProxy route's path condition
// takes every path its entry governs and none next to it (the route names
// the entry). Contour's own prefix condition, which takes "/ordersX" for
// "/orders", is caught.
func TestContourPathsMatchTheEntry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fn      func(config.RoutePath) (string, string, error)
		correct bool
	}{
		{"ContourPath", mesh.ContourPath, true},
		{"string prefix", func(p config.RoutePath) (string, string, error) {
			if p.Type == "" || p.Type == "PathPrefix" {
				return "prefix", strings.TrimSuffix(p.Value, "/"), nil
			}
			return mesh.ContourPath(p)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var problems []string
			for _, c := range pathCases {
				kind, value, err := tc.fn(c.path)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range c.governed {
					if !contourMatch(kind, value, p) {
						problems = append(problems, fmt.Sprintf("%v: %s %s misses %s", c.path, kind, value, p))
					}
				}
				for _, p := range c.not {
					if contourMatch(kind, value, p) {
						problems = append(problems, fmt.Sprintf("%v: %s %s takes %s", c.path, kind, value, p))
					}
				}
			}
			if tc.correct && len(problems) > 0 {
				t.Fatal(strings.Join(problems, "\n"))
			}
			if !tc.correct && len(problems) == 0 {
				t.Fatal("the broken condition was not caught")
			}
		})
	}
}

// TestRefusesWhatNoMeshExpresses: the generators refuse a table they
// cannot cover faithfully, naming the entry, and emit nothing.
func TestRefusesWhatNoMeshExpresses(t *testing.T) {
	ok := config.Route{Name: "ok", Match: config.RouteMatch{Path: config.RoutePath{Value: "/ok"}}}
	for _, tc := range []struct {
		name   string
		routes []config.Route
		want   string
	}{
		{"empty table", nil, "empty"},
		{"no name", []config.Route{{Match: ok.Match}}, "no name"},
		{"name not a DNS label", []config.Route{{Name: "Orders_Write", Match: ok.Match}}, "DNS label"},
		{"duplicate", []config.Route{ok, ok}, "duplicate"},
		{"barrier", []config.Route{{Name: "w", Barrier: true, Match: ok.Match}}, "barrier"},
		{"unknown path type", []config.Route{{Name: "p", Match: config.RouteMatch{Path: config.RoutePath{Type: "Regex", Value: "/x"}}}}, "path type"},
		{"placeholder in a prefix", []config.Route{{Name: "p", Match: config.RouteMatch{Path: config.RoutePath{Value: "/orders/{int}"}}}}, "only Template"},
		{"unknown placeholder", []config.Route{{Name: "p", Match: config.RouteMatch{Path: config.RoutePath{Type: "Template", Value: "/o/{float}"}}}}, "only Template"},
		{"relative path", []config.Route{{Name: "p", Match: config.RouteMatch{Path: config.RoutePath{Value: "orders"}}}}, "absolute"},
		{"exact without value", []config.Route{{Name: "p", Match: config.RouteMatch{Path: config.RoutePath{Type: "Exact"}}}}, "needs a value"},
		{"host with port", []config.Route{{Name: "h", Match: config.RouteMatch{Hosts: []string{"api.example.com:8443"}}}}, "without a port"},
		{"inner wildcard host", []config.Route{{Name: "h", Match: config.RouteMatch{Hosts: []string{"api.*.com"}}}}, "wildcard"},
		{"lower-case method", []config.Route{{Name: "m", Match: config.RouteMatch{Methods: []string{"post"}}}}, "upper-case"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for gen, fn := range map[string]func([]config.Route, mesh.Options) ([]byte, error){
				"Istio": mesh.Istio, "GatewayAPI": mesh.GatewayAPI, "EnvoyGateway": mesh.EnvoyGateway, "Contour": mesh.Contour,
			} {
				out, err := fn(tc.routes, mesh.Options{Host: "api.example.com"})
				if err == nil || !strings.Contains(err.Error(), tc.want) || out != nil {
					t.Errorf("%s: %v (output %d bytes); want an error naming %q", gen, err, len(out), tc.want)
				}
			}
		})
	}
	if _, err := mesh.Contour([]config.Route{ok}, mesh.Options{}); err == nil || !strings.Contains(err.Error(), "names no host") {
		t.Errorf("Contour without a virtual host for a host-less entry: %v", err)
	}
}

// TestIstioPolicyNamesItsProvider: Istio's CRD accepts action CUSTOM
// without a provider (only istiod's validating webhook refuses it, and a
// dry run against the CRDs alone passes it: checked), so the generator
// must never emit one; an empty Options.Provider is "fencegate".
func TestIstioPolicyNamesItsProvider(t *testing.T) {
	routes := []config.Route{{Name: "a", Match: config.RouteMatch{Path: config.RoutePath{Value: "/a"}}}}
	for _, provider := range []string{"", "fence-authz"} {
		out, err := mesh.Istio(routes, mesh.Options{Provider: provider})
		if err != nil {
			t.Fatal(err)
		}
		docs, err := kube.YAMLDocs(out)
		if err != nil {
			t.Fatal(err)
		}
		want := provider
		if want == "" {
			want = "fencegate"
		}
		spec, _ := docs[0]["spec"].(map[string]any)
		p, _ := spec["provider"].(map[string]any)
		if docs[0]["kind"] != "AuthorizationPolicy" || spec["action"] != "CUSTOM" || p["name"] != want {
			t.Errorf("Provider %q: kind %v, action %v, provider %v; want CUSTOM with provider %q", provider, docs[0]["kind"], spec["action"], p, want)
		}
	}
}
