package fencepolicy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// istioSendsModel is an independent model of an AuthorizationPolicy
// operation's matching (Istio's documented semantics, not our code): a
// rule sends the request when every field it sets matches; hosts compare
// the Host header as sent, port included, case-insensitively, with
// "abc*", "*abc" or "*" patterns; paths and methods compare exactly
// (case-sensitively) with the same patterns.
func istioSendsModel(t *testing.T, spec map[string]any, host, path, method string) bool {
	t.Helper()
	b, _ := json.Marshal(spec)
	var s struct {
		Rules []struct {
			To []struct {
				Operation map[string][]string `json:"operation"`
			} `json:"to"`
			When []json.RawMessage `json:"when"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	match := func(pats []string, v string, fold bool) bool {
		for _, p := range pats {
			if fold {
				p, v = strings.ToLower(p), strings.ToLower(v)
			}
			switch {
			case p == "*":
				if v != "" {
					return true
				}
			case strings.HasSuffix(p, "*"):
				if strings.HasPrefix(v, p[:len(p)-1]) {
					return true
				}
			case strings.HasPrefix(p, "*"):
				if strings.HasSuffix(v, p[1:]) {
					return true
				}
			case p == v:
				return true
			}
		}
		return false
	}
	for _, r := range s.Rules {
		if len(r.When) > 0 {
			continue // no header carried in these requests
		}
		for _, to := range r.To {
			op := to.Operation
			ok := true
			for field, v := range map[string]string{"hosts": host, "paths": path, "methods": method} {
				if pats, set := op[field]; set && !match(pats, v, field == "hosts") {
					ok = false
				}
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// TestIstioChildSendsEverySpelling: the AuthorizationPolicy of an entry
// that lists a method, on a wildcard host, sends every spelling fencegate
// would govern: the method in lower case, a GET that may carry a
// method-override header (Istio cannot see the override; fencegate can),
// and the Host with a port. The old shape (methods: [DELETE], hosts
// "*.example.com") is run through the same model and must be caught.
func TestIstioChildSendsEverySpelling(t *testing.T) {
	c := &Controller{opts: Options{IstioProvider: "fencegate"}}
	p := &FencePolicy{Metadata: objectMeta{Name: "p", Namespace: "shop", UID: "u"}}
	entries := []config.Route{
		{Name: "wild", Match: config.RouteMatch{Hosts: []string{"*.example.com"}, Path: config.RoutePath{Type: config.RoutePathPrefix, Value: "/items"}, Methods: []string{"DELETE"}}},
		{Name: "exact", Match: config.RouteMatch{Hosts: []string{"shop.example.org"}, Path: config.RoutePath{Type: config.RoutePathExact, Value: "/cart"}, Methods: []string{"POST"}}},
	}
	ch, err := c.istioChild(p, "mesh", entries)
	if err != nil {
		t.Fatal(err)
	}
	spec := ch.obj["spec"].(map[string]any)
	old := map[string]any{"rules": []any{
		map[string]any{"to": []any{map[string]any{"operation": map[string]any{"hosts": []any{"*.example.com", "*.example.com."}, "paths": []any{"/items", "/items/*"}, "methods": []any{"DELETE"}}}}},
	}}
	requests := []struct{ host, path, method string }{
		{"a.example.com", "/items/1", "DELETE"},
		{"a.example.com", "/items/1", "delete"},
		{"a.example.com", "/items/1", "GET"}, // X-HTTP-Method-Override: DELETE
		{"a.example.com:8443", "/items/1", "DELETE"},
		{"A.Example.com:443", "/items", "DELETE"},
		{"shop.example.org", "/cart", "post"},
		{"shop.example.org:8080", "/cart", "GET"}, // X-Method-Override: POST
	}
	for _, r := range requests {
		if !istioSendsModel(t, spec, r.host, r.path, r.method) {
			t.Errorf("%s %s%s is not sent to fencegate: %s", r.method, r.host, r.path, toJSON(spec))
		}
	}
	missed := 0
	for _, r := range requests[:5] {
		if !istioSendsModel(t, old, r.host, r.path, r.method) {
			missed++
		}
	}
	if missed == 0 {
		t.Fatal("the model does not catch the old rule shape (methods and a wildcard host)")
	}
	if strings.Contains(toJSON(spec), `"methods"`) {
		t.Errorf("a rule restricts by method: %s", toJSON(spec))
	}
}
