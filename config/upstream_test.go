package config

import "testing"

// TestUpstreamEntriesMatchAsAnyEntry: since the proxy matches with the
// table's own matcher (#27), an entry with an upstream may name hosts,
// methods and any path type, and proxy.routes still load as entries of
// the table; the proxy-only options stay refused without an upstream.
func TestUpstreamEntriesMatchAsAnyEntry(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		ok        bool
	}{
		{"hosts, methods, Exact", "routes:\n  - {name: a, upstream: 'http://u', match: {hosts: [api.example.com], methods: [PUT], path: {type: Exact, value: /o}}}\n", true},
		{"Template", "routes:\n  - {name: a, upstream: 'http://u', key: 'o/{2:int}', match: {path: {type: Template, value: '/o/{int}'}}}\n", true},
		{"proxy.routes", "proxy:\n  routes:\n    - {prefix: /o, upstream: 'http://u'}\n", true},
		{"preserveHost without upstream", "routes:\n  - {name: a, preserveHost: true}\n", false},
	} {
		c := Default()
		if err := c.LoadBytes("t.yaml", []byte(tc.doc)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := c.ValidateRoutes(); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if tc.name == "proxy.routes" {
			if rt := c.RouteTable(); len(rt) != 1 || rt[0].Name != "proxy:/o" || rt[0].Match.Path.Value != "/o" || rt[0].Upstream != "http://u" {
				t.Errorf("proxy.routes as a table entry: %+v", rt)
			}
		}
	}
}
