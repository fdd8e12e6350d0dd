package fencepolicy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/routes"
)

// gatewayAPITakes is an independent model of the Gateway API's HTTPRoute
// matching (the spec's text, not fencegate's code): a hostname is exact
// or "*." + a suffix of one or more labels, compared without the port and
// case-insensitively; PathPrefix matches whole segments and ignores the
// value's trailing "/"; Exact is the whole path; a method is exact; a
// rule without matches takes every request. Header and query matches are
// ignored here: they only narrow a route.
func gatewayAPITakes(hr *httpRoute, rule int, host, path, method string) bool {
	host = strings.ToLower(host)
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	hostOK := len(hr.Spec.Hostnames) == 0
	for _, h := range hr.Spec.Hostnames {
		h = strings.ToLower(h)
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			hostOK = hostOK || (strings.HasSuffix(host, suffix) && len(host) > len(suffix))
		} else {
			hostOK = hostOK || host == h
		}
	}
	if !hostOK {
		return false
	}
	p, _, _ := strings.Cut(path, "?")
	ms := hr.Spec.Rules[rule].Matches
	if len(ms) == 0 {
		return true
	}
	for _, m := range ms {
		if m.Method != "" && m.Method != method {
			continue
		}
		typ, v := "PathPrefix", "/"
		if m.Path != nil {
			typ, v = m.Path.Type, m.Path.Value
		}
		switch typ {
		case "Exact":
			if p == v {
				return true
			}
		case "PathPrefix":
			v = strings.TrimSuffix(v, "/")
			if v == "" || p == v || strings.HasPrefix(p, v+"/") {
				return true
			}
		}
	}
	return false
}

func mustRoute(t *testing.T, js string) *httpRoute {
	t.Helper()
	var hr httpRoute
	if err := json.Unmarshal([]byte(js), &hr); err != nil {
		t.Fatal(err)
	}
	return &hr
}

// TestEntriesCoverTheRoute: every request the model says the targeted
// rule takes is governed by one of the policy's entries in the table built
// from them (coverage by construction), for a corpus of spellings:
// trailing slashes, case, ports, methods, wildcard hosts. The broken
// derivation (entries from the policy alone: every path of any host) is
// caught by the converse check: a request another rule takes must not be
// the policy's when it is distinguishable by host, path and method.
func TestEntriesCoverTheRoute(t *testing.T) {
	hr := mustRoute(t, `{"metadata":{"name":"orders","namespace":"shop"},"spec":{
		"hostnames":["shop.example.com","*.shop.test"],
		"rules":[
			{"name":"write","matches":[{"path":{"type":"PathPrefix","value":"/orders/"}},{"path":{"type":"Exact","value":"/checkout"},"method":"POST"},{"path":{"type":"PathPrefix","value":"/orders"},"headers":[{"name":"x-v","value":"2"}]}]},
			{"name":"read","matches":[{"path":{"type":"Exact","value":"/health"}}]},
			{"name":"all"}
		]}}`)
	hosts := []string{"shop.example.com", "SHOP.example.com:8443", "a.shop.test", "a.b.shop.test", "shop.test", "other.example.com"}
	paths := []string{"/orders", "/orders/", "/orders/7", "/orders/7/items", "/ordersX", "/Orders/7", "/checkout", "/checkout/", "/health", "/", "/x"}
	methods := []string{"GET", "POST", "PUT", "DELETE", "PATCH"}
	for _, tc := range []struct {
		name   string
		broken bool
		rule   int
	}{{"rule write", false, 0}, {"rule all", false, 2}, {"broken: from the policy", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			tg := []target{{ref: TargetRef{Name: "orders"}, route: hr, rules: []int{tc.rule}}}
			var tbl *routes.Table
			if tc.broken {
				c := &Controller{opts: Options{brokenFromPolicy: true}}
				entries, err := c.derive(&FencePolicy{Metadata: objectMeta{Name: "p", Namespace: "shop"}}, tg)
				if err != nil {
					t.Fatal(err)
				}
				tbl, err = routes.Compile(entries, routes.Options{})
				if err != nil {
					t.Fatal(err)
				}
			} else {
				entries, err := deriveEntries("shop", "p", PolicySpec{Key: "orders/{2}"}, tg)
				if err != nil {
					t.Fatal(err)
				}
				if tbl, err = routes.Compile(entries, routes.Options{}); err != nil {
					t.Fatal(err)
				}
			}
			var missed, over []string
			for _, h := range hosts {
				for _, p := range paths {
					for _, m := range methods {
						e, err := tbl.Match(h, p, m)
						ours := err == nil && e != nil
						if gatewayAPITakes(hr, tc.rule, h, p, m) && !ours {
							missed = append(missed, m+" "+h+p)
						}
						// The converse: a request no match of the rule
						// takes, by host/path/method, is not the policy's
						// (the exceptions, wider on purpose: the
						// header-narrowed match is widened to its path, and
						// the table reads an Exact path's trailing-slash
						// spelling as the same path).
						widened := tc.rule == 0 && (p == "/orders" || strings.HasPrefix(p, "/orders/") || (p == "/checkout/" && m == "POST"))
						if ours && !gatewayAPITakes(hr, tc.rule, h, p, m) && !widened {
							over = append(over, m+" "+h+p)
						}
					}
				}
			}
			if len(missed) > 0 {
				t.Errorf("requests the route takes that no entry governs: %q", missed)
			}
			switch {
			case tc.broken && len(over) == 0:
				t.Error("the broken derivation was not caught")
			case !tc.broken && len(over) > 0:
				t.Errorf("entries govern requests the route does not take: %q", over)
			}
		})
	}
}

// TestDeriveRefuses: what the table cannot express is an error, never a
// silently different entry.
func TestDeriveRefuses(t *testing.T) {
	for _, tc := range []struct{ name, route, want string }{
		{"regular expression", `{"metadata":{"name":"r"},"spec":{"rules":[{"matches":[{"path":{"type":"RegularExpression","value":"/a/.*"}}]}]}}`, "RegularExpression"},
		{"bad host", `{"metadata":{"name":"r"},"spec":{"hostnames":["a b"],"rules":[{}]}}`, "host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hr := mustRoute(t, tc.route)
			_, err := deriveEntries("ns", "p", PolicySpec{}, []target{{route: hr, rules: []int{0}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error naming %q, got %v", tc.want, err)
			}
		})
	}
	_, err := deriveEntries("ns", "p", PolicySpec{Key: "{1}{2}"}, []target{{route: mustRoute(t, `{"metadata":{"name":"r"},"spec":{"rules":[{}]}}`), rules: []int{0}}})
	if err == nil {
		t.Fatal("a key template admission cannot check ({1}{2}) compiled")
	}
}

// TestEffectiveHosts: a route's hostnames as its listeners admit them (the
// Gateway API's intersection rule).
func TestEffectiveHosts(t *testing.T) {
	str := func(s string) *string { return &s }
	gw := func(hostnames ...*string) map[string]*gateway {
		g := &gateway{}
		for i, h := range hostnames {
			g.Spec.Listeners = append(g.Spec.Listeners, struct {
				Name     string  `json:"name"`
				Hostname *string `json:"hostname,omitempty"`
				Port     int     `json:"port"`
			}{Name: fmt.Sprint("l", i), Hostname: h, Port: 80})
		}
		return map[string]*gateway{"shop/gw": g}
	}
	for _, tc := range []struct {
		name      string
		route     []string
		listeners map[string]*gateway
		want      []string
		ok        bool
	}{
		{"listener without hostname", []string{"a.example.com"}, gw(nil), []string{"a.example.com"}, true},
		{"route without hostnames", nil, gw(str("*.t.example.com")), []string{"*.t.example.com"}, true},
		{"neither", nil, gw(nil), nil, true},
		{"wildcard listener admits one", []string{"a.t.example.com", "shop.example.com"}, gw(str("*.t.example.com")), []string{"a.t.example.com"}, true},
		{"wildcard route, exact listener", []string{"*.example.com"}, gw(str("a.example.com")), []string{"a.example.com"}, true},
		{"nothing admitted", []string{"shop.example.com"}, gw(str("*.t.example.com")), nil, false},
		{"the suffix itself is not admitted", []string{"t.example.com"}, gw(str("*.t.example.com")), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hr := &httpRoute{}
			hr.Metadata.Namespace = "shop"
			hr.Spec.Hostnames = tc.route
			got, ok := effectiveHosts(hr, []parentRef{{Name: "gw"}}, tc.listeners)
			if ok != tc.ok || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
